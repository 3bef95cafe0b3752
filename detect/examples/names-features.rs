//! The names tagger's training input: reads a labelled corpus (JSON Lines, one text a line
//! with its spans as character offsets, as `detect/train/names/corpus.py` and
//! `detect/bench/ner/generate.py` write them) and writes, for `train.py`:
//!
//! - `OUT.features`: each token's feature ids, `u32` little-endian, `NAME_FEATURES` a token;
//! - `OUT.labels`: each token's label, one byte (0 `O`, then `B` and `I` of `PERSON`,
//!   `LOCATION`, `ORGANIZATION`): `B` for the token a truth span starts in, `I` for the others
//!   it covers;
//! - `OUT.texts`: the number of tokens of each text, `u32` little-endian.
//!
//! ```sh
//! cargo run --release --example names-features -- corpus.jsonl OUT 65536
//! ```

use std::io::{BufRead, BufReader, BufWriter, Write};

use anyhow::{Context, bail};
use serde::Deserialize;

#[derive(Deserialize)]
struct Record {
    text: String,
    spans: Vec<Truth>,
}

#[derive(Deserialize)]
struct Truth {
    start: usize,
    end: usize,
    entity: String,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [corpus, out, buckets] = args.as_slice() else {
        bail!("usage: names-features CORPUS.jsonl OUT BUCKETS");
    };
    let buckets: usize = buckets.parse().context("BUCKETS is a number")?;
    let input = BufReader::new(std::fs::File::open(corpus).with_context(|| corpus.clone())?);
    let create = |ext: &str| -> anyhow::Result<BufWriter<std::fs::File>> {
        let path = format!("{out}.{ext}");
        Ok(BufWriter::new(std::fs::File::create(&path).context(path)?))
    };
    let (mut features_out, mut labels_out, mut texts_out) =
        (create("features")?, create("labels")?, create("texts")?);
    let (mut texts, mut tokens_total) = (0usize, 0usize);
    for (n, line) in input.lines().enumerate() {
        let record: Record =
            serde_json::from_str(&line?).with_context(|| format!("line {}", n + 1))?;
        // Character offsets to byte offsets.
        let mut bytes: Vec<usize> = record.text.char_indices().map(|(b, _)| b).collect();
        bytes.push(record.text.len());
        let (tokens, features) =
            atdp_detect::name_tagger_input(&record.text, buckets).map_err(anyhow::Error::msg)?;
        let mut labels = vec![0u8; tokens.len()];
        for truth in &record.spans {
            let kind = match truth.entity.as_str() {
                "PERSON" => 0,
                "LOCATION" => 1,
                "ORGANIZATION" => 2,
                other => bail!("line {}: entity {other}", n + 1),
            };
            let (Some(&start), Some(&end)) = (bytes.get(truth.start), bytes.get(truth.end)) else {
                bail!("line {}: span out of range", n + 1);
            };
            let mut first = true;
            for (i, (a, b)) in tokens.iter().enumerate() {
                if *a < end && *b > start {
                    labels[i] = 1 + 2 * kind + u8::from(!first);
                    first = false;
                }
            }
        }
        for id in &features {
            features_out.write_all(&id.to_le_bytes())?;
        }
        labels_out.write_all(&labels)?;
        texts_out.write_all(&(tokens.len() as u32).to_le_bytes())?;
        texts += 1;
        tokens_total += tokens.len();
    }
    features_out.flush()?;
    labels_out.flush()?;
    texts_out.flush()?;
    eprintln!(
        "names-features: {texts} texts, {tokens_total} tokens, {} features a token",
        atdp_detect::NAME_FEATURES
    );
    Ok(())
}
