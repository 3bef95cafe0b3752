//! `atdp-policy`: command-line access to the detectors.
//!
//! `atdp-policy scan` reads JSON Lines `{"id": …, "text": …}` on stdin and writes
//! `{"id": …, "spans": [{"start", "end", "entity", "score"}]}` with UTF-8 byte offsets.
//! A malformed line is reported on stderr with its line number and does not stop the rest.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use policies::{Scanner, builtin_entities};
use serde::Deserialize;

#[derive(Parser, Debug)]
#[command(
    name = "atdp-policy",
    version,
    about = "Detect personal data and secrets"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Scan JSON Lines {"id", "text"} from stdin; write {"id", "spans"} to stdout.
    Scan {
        /// Only these entity types (comma-separated), e.g. EMAIL_ADDRESS,US_SSN.
        #[arg(long, value_delimiter = ',')]
        entities: Option<Vec<String>>,
    },
    /// List the entity types the detectors report.
    Entities,
}

#[derive(Deserialize)]
struct Input {
    id: serde_json::Value,
    text: String,
}

fn scan(entities: Option<&[String]>) -> anyhow::Result<usize> {
    let scanner = Scanner::new(entities)?;
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut bad = 0;
    for (index, line) in stdin.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Input>(&line) {
            Ok(input) => {
                let spans = scanner.scan(&input.text);
                serde_json::to_writer(
                    &mut stdout,
                    &serde_json::json!({"id": input.id, "spans": spans}),
                )?;
                stdout.write_all(b"\n")?;
            }
            Err(error) => {
                bad += 1;
                // The error names the position, not the content (it may be personal data).
                eprintln!(
                    "atdp-policy: line {}: not a JSON object with \"id\" and \"text\" ({} at column {})",
                    index + 1,
                    error.classify_name(),
                    error.column()
                );
            }
        }
    }
    stdout.flush()?;
    Ok(bad)
}

trait Classify {
    fn classify_name(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "read error",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "wrong fields",
            serde_json::error::Category::Eof => "unexpected end",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Scan { entities } => scan(entities.as_deref()),
        Command::Entities => {
            for entity in builtin_entities() {
                println!("{entity}");
            }
            Ok(0)
        }
    };
    match outcome {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(error) => {
            eprintln!("atdp-policy: {error}");
            ExitCode::from(2)
        }
    }
}
