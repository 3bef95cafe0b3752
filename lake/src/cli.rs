//! What every atdp command line shares: the lake arguments, the log set-up and the exit
//! status of a failure.
//!
//! - `--lake URL` (`ATDP_LAKE`): a directory or an `s3://`, `gs://`, `az://` URL;
//!   `--lake-option KEY=VALUE` (repeatable; `ATDP_LAKE_OPTIONS`, comma-separated, read first)
//!   for the object store.
//! - Logs go to standard error, filtered by `RUST_LOG` (else the command's default); standard
//!   output is the command's own output.
//! - A failure prints `<command>: <error and its causes>` on standard error and exits with
//!   status 2; status 1 is kept for a check that ran and found a problem (a broken audit
//!   trail, a policy with errors).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use crate::error::Result;
use crate::tables::{Lake, parse_storage_options};

/// Exit status of a command that failed.
pub const EXIT_FAILURE: u8 = 2;

/// Exit status of a check that ran and found a problem.
pub const EXIT_PROBLEM_FOUND: u8 = 1;

/// `--lake` and `--lake-option`, for a command's `#[command(flatten)]`.
#[derive(clap::Args, Clone, Default)]
pub struct LakeArgs {
    /// The lake: a directory or a file://, s3://, gs://, az:// URL (default
    /// atdp-data/lake, or the command's own).
    #[arg(long, env = "ATDP_LAKE", global = true)]
    pub lake: Option<String>,
    /// Object-store option KEY=VALUE (repeatable), e.g. aws_endpoint=http://127.0.0.1:9000;
    /// also ATDP_LAKE_OPTIONS, comma-separated. See docs/lake.md.
    #[arg(
        long = "lake-option",
        alias = "storage-option",
        value_name = "KEY=VALUE",
        global = true
    )]
    pub lake_options: Vec<String>,
}

impl std::fmt::Debug for LakeArgs {
    /// The options' keys only: their values can be credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self
            .lake_options
            .iter()
            .map(|pair| pair.split_once('=').map_or("?", |(key, _)| key))
            .collect();
        f.debug_struct("LakeArgs")
            .field("lake", &self.lake)
            .field("lake_option_keys", &keys)
            .finish()
    }
}

impl LakeArgs {
    /// The default lake of the commands: `atdp-data/lake`.
    pub const DEFAULT: &'static str = "atdp-data/lake";

    /// The lake URL given, else `default`.
    pub fn url_or(&self, default: &str) -> String {
        self.lake.clone().unwrap_or_else(|| default.to_owned())
    }

    /// The lake URL given, else [`LakeArgs::DEFAULT`].
    pub fn url(&self) -> String {
        self.url_or(Self::DEFAULT)
    }

    /// The object-store options: `ATDP_LAKE_OPTIONS` first, then each `--lake-option`
    /// (a later one replaces an earlier one's key).
    pub fn options(&self) -> Result<HashMap<String, String>> {
        let from_env = match std::env::var("ATDP_LAKE_OPTIONS") {
            Ok(value) => value,
            Err(std::env::VarError::NotPresent) => String::new(),
            // Ignoring it would fall back to default credentials without a word.
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(crate::error::Error::Config(
                    "ATDP_LAKE_OPTIONS is not valid UTF-8".into(),
                ));
            }
        };
        parse_storage_options(
            from_env
                .split(',')
                .map(str::to_owned)
                .chain(self.lake_options.iter().cloned()),
        )
    }

    /// The lake at [`LakeArgs::url`] with [`LakeArgs::options`].
    pub fn open(&self) -> Result<Lake> {
        Lake::new(&self.url(), self.options()?)
    }
}

/// Logs to standard error, filtered by `RUST_LOG` or else `default` (an `EnvFilter`
/// directive such as `"warn,atdp_audit=info"`) with delta-rs's kernel (crate
/// `buoyant_kernel`) off: it logs an error each time a table with no commit yet is read.
pub fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{default},buoyant_kernel=off"))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// Prints `<command>: <error>` with its causes on standard error; the exit status of a
/// failure.
pub fn fail(command: &str, error: impl std::fmt::Display) -> ExitCode {
    eprintln!("{command}: {error:#}");
    ExitCode::from(EXIT_FAILURE)
}

/// Runs `main` on a multi-threaded tokio runtime; a failure to start the runtime or an
/// error from `main` goes through [`fail`].
pub fn run_async<F>(command: &str, main: F) -> ExitCode
where
    F: std::future::Future<Output = anyhow::Result<ExitCode>>,
{
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => match runtime.block_on(main) {
            Ok(code) => code,
            Err(error) => fail(command, format!("{error:#}")),
        },
        Err(error) => fail(command, format!("cannot start the runtime: {error}")),
    }
}
