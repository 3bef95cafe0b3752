//! The atdp data plane: a Pingora proxy that agents reach by changing only their `base_url`.
//!
//! Every model call (OpenAI chat and responses, Anthropic messages; streaming or not; with
//! tools) goes through the stages of [`stages`]: admitted (key, limits, back-pressure), read
//! once (a body two JSON readers could read differently is refused), routed, decided (Cedar
//! on the model dispatched and on everything the request offers that can act), masked for
//! what the upstream sees (by its trust level), placed in a trajectory, forwarded as the
//! proxy's own serialisation with an allow-list of headers, restored on the way back, and
//! recorded as an ATDP step in the lake, masked for storage. Refusals come from one table,
//! [`Refusal`]. See `docs/proxy.md` and `docs/security.md`.
//!
//! ```no_run
//! let raw = atdp_proxy::RawConfig::from_toml(r#"
//!     policy = "policies/examples/quickstart"
//!     [[upstream]]
//!     name = "openai"
//!     url = "https://api.openai.com"
//!     api_key_env = "OPENAI_API_KEY"
//! "#)?;
//! atdp_proxy::run(raw.validate()?)?;
//! # Ok::<(), atdp_proxy::Error>(())
//! ```

mod admin;
mod call;
mod config;
mod error;
mod grouping;
mod limits;
mod metrics;
mod models;
mod recorder;
mod refusal;
mod respond;
mod rewards;
mod server;
mod service;
mod stages;
mod state;
mod tls;
mod upstream;

/// The wire formats, from their own crate.
use atdp_wire as wire;

pub use config::{
    AuditMode, Config, Durability, Limits, OnBackpressure, RawConfig, RawRoute, RawUpstream, Trust,
};
pub use error::{Error, Result};
pub use refusal::Refusal;
pub use server::{Bound, run, run_with};
pub use state::load_keys;
pub use tls::{Certificates, TlsFiles};
pub use wire::{
    ApiFamily, ApiKind, RequestView, ResponseView, SseEvent, SseParser, SseRestorer,
    StreamAssembler, WireError, error_body, error_type, parse_json_body, parse_request,
    parse_response, restore_json,
};

#[cfg(test)]
mod tests {
    //! The crate's shape: its modules import each other without cycles, so that each stage
    //! can be read (and tested) on its own.

    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// The module a source file is: `call`, `stages::read`; `None` for the crate root and
    /// binaries.
    fn module_of(path: &Path, src: &Path) -> Option<String> {
        let relative = path.strip_prefix(src).ok()?;
        let parts: Vec<String> = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        match parts.as_slice() {
            [name] if name == "lib" => None,
            [first, ..] if first == "bin" => None,
            [folder, name] if name == "mod" => Some(folder.clone()),
            parts => Some(parts.join("::")),
        }
    }

    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn modules_import_each_other_without_cycles() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f, &src)).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let Some(from) = module_of(file, &src) else {
                continue;
            };
            let text = std::fs::read_to_string(file).unwrap();
            // Test code may reach anywhere, and comments name what they like; the shape is the
            // shape of the code that runs.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let text: String = code
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            for (at, _) in text.match_indices("crate::") {
                let rest: String = text[at + 7..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let mut path: Vec<&str> = rest.split("::").filter(|p| !p.is_empty()).collect();
                // The longest prefix that is a module.
                while !path.is_empty() && !modules.contains(&path.join("::")) {
                    path.pop();
                }
                let to = path.join("::");
                if !to.is_empty() && to != from && !from.starts_with(&format!("{to}::")) {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        assert!(
            edges.contains_key("call"),
            "the scan found no imports: {edges:?}"
        );
        // Depth-first search for a cycle.
        fn visit<'a>(
            node: &'a str,
            edges: &'a BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) {
            if let Some(at) = path.iter().position(|n| *n == node) {
                panic!("import cycle: {} -> {node}", path[at..].join(" -> "));
            }
            if done.contains(node) {
                return;
            }
            path.push(node);
            for next in edges.get(node).into_iter().flatten() {
                visit(next, edges, path, done);
            }
            path.pop();
            done.insert(node);
        }
        let mut done = BTreeSet::new();
        for node in edges.keys() {
            visit(node, &edges, &mut Vec::new(), &mut done);
        }
    }
}
