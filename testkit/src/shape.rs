//! The shape of a crate's code: which of its modules import which (`crate::…` and
//! `super::…` paths in the code that runs, not in tests or comments), and the groups of modules that import each other
//! in a cycle. A module in a cycle cannot be read, tested or moved on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module a source file is (`call`, `lake::files`, `detect::names` for
/// `detect/names/mod.rs`); `None` for the crate root, binaries and `tests` modules.
fn module_of(path: &Path, src: &Path) -> Option<String> {
    let relative = path.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    // A `tests` module (`#[cfg(test)] mod tests;` in its own file) is test code.
    if parts.last().is_some_and(|p| p == "tests") {
        return None;
    }
    match parts.as_slice() {
        [] => None,
        [name] if name == "lib" || name == "main" => None,
        parts => Some(parts.join("::")),
    }
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file that runs: everything before its first `#[cfg(test)]`, without
/// comment lines.
fn running_code(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `crate::` at the start of `rest` names: `a::b` for `crate::a::b`, and each
/// member of a group, `crate::{a, b::c}` or `crate::x::{y, z}`, nested groups included.
fn imported_paths(rest: &str) -> Vec<String> {
    let path: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
        .collect();
    let after = &rest[path.len()..];
    if !after.starts_with('{') {
        return vec![path];
    }
    // The group's text up to its closing brace, split at its top-level commas.
    let mut depth = 0;
    let mut members = Vec::new();
    let mut current = String::new();
    for c in after.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth > 1 {
                    current.push(c);
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    members.push(std::mem::take(&mut current));
                    break;
                }
                current.push(c);
            }
            ',' if depth == 1 => members.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    members
        .iter()
        .map(|m| m.trim())
        .filter(|m| !m.is_empty())
        .flat_map(imported_paths)
        .map(|m| format!("{path}{m}"))
        .collect()
}

/// Which module of the crate whose sources are in `src` imports which other.
pub fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f, src)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = module_of(file, src) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let code = running_code(&text);
        let mut paths = Vec::new();
        for (at, _) in code.match_indices("crate::") {
            paths.extend(imported_paths(&code[at + "crate::".len()..]));
        }
        // `super::…` names a module relative to this one's parent.
        for (at, _) in code.match_indices("super::") {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut rest = &code[at..];
            let mut base: Vec<&str> = from.split("::").collect();
            while let Some(next) = rest.strip_prefix("super::") {
                base.pop();
                rest = next;
            }
            let base = base.join("::");
            for path in imported_paths(rest) {
                paths.push(if base.is_empty() {
                    path
                } else {
                    format!("{base}::{path}")
                });
            }
        }
        for path in paths {
            let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
            // The longest prefix that is a module.
            while !parts.is_empty() && !modules.contains(&parts.join("::")) {
                parts.pop();
            }
            let to = parts.join("::");
            // A module may use its parents (`super` by another name).
            if !to.is_empty() && to != from && !from.starts_with(&format!("{to}::")) {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

/// The groups of modules that import each other in a cycle (the strongly connected parts
/// of the import graph with more than one module), each sorted, sorted.
pub fn import_cycles(src: &Path) -> Vec<Vec<String>> {
    let edges = imports(src);
    // Tarjan's algorithm.
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        groups: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let at = self.index.len();
            self.index.insert(node, at);
            self.low.insert(node, at);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.edges.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut group = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    group.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.groups.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.groups.sort();
    walk.groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("atdp-shape-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn groups_nested_paths_and_parents_are_read_as_rust_names_them() {
        let src = tree(
            "read",
            &[
                ("lib.rs", "mod a; mod b; mod c; mod d;"),
                ("a.rs", "use crate::{b::Thing, c::{self, Other}};"),
                ("b.rs", "// use crate::a;\nfn f() {}"),
                (
                    "c.rs",
                    "fn f() { crate::d::g() }\n#[cfg(test)]\nmod tests { use crate::a; }",
                ),
                ("d/mod.rs", "mod e;"),
                ("d/e.rs", "use crate::d::X; use crate::a::Y;"),
                ("d/tests.rs", "use crate::b::Z;"),
                ("d/f.rs", "use super::e::X; use super::super::b::Y;"),
            ],
        );
        let edges = imports(&src);
        let names = |m: &str| -> Vec<&str> {
            edges
                .get(m)
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect()
        };
        assert_eq!(names("a"), ["b", "c"]);
        assert!(names("b").is_empty(), "a comment is not an import");
        assert_eq!(names("c"), ["d"], "test code is not the crate's shape");
        assert_eq!(names("d::e"), ["a"], "a module may use its parent");
        assert!(names("d::tests").is_empty(), "a tests module is test code");
        assert_eq!(names("d::f"), ["b", "d::e"], "super names the parent");
        std::fs::remove_dir_all(src).unwrap();
    }

    #[test]
    fn modules_that_import_each_other_are_one_group() {
        let src = tree(
            "cycle",
            &[
                ("a.rs", "use crate::b::X;"),
                ("b.rs", "use crate::c::{Y};"),
                ("c.rs", "use crate::a::Z; use crate::d::W;"),
                ("d.rs", "use crate::e::V;"),
                ("e.rs", "use crate::d::U;"),
                ("f.rs", "use crate::a::T;"),
            ],
        );
        assert_eq!(
            import_cycles(&src),
            [vec!["a", "b", "c"], vec!["d", "e"]],
            "f uses the cycle without being in it"
        );
        std::fs::remove_dir_all(src).unwrap();
    }

    #[test]
    fn no_crate_has_an_import_cycle() {
        let root = crate::repo_root();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let members: Vec<&str> = manifest
            .lines()
            .find_map(|line| line.trim().strip_prefix("members = ["))
            .expect("the workspace names its members")
            .trim_end_matches(']')
            .split(',')
            .map(|m| m.trim().trim_matches('"'))
            .filter(|m| !m.is_empty())
            .collect();
        assert!(members.len() >= 10, "{members:?}");
        let mut found = Vec::new();
        for member in &members {
            let src = root.join(member).join("src");
            assert!(
                !imports(&src).is_empty() || *member == "testkit",
                "the scan found no imports in {member}"
            );
            for group in import_cycles(&src) {
                found.push((member.to_string(), group));
            }
        }
        found.sort();
        assert!(
            found.is_empty(),
            "import cycles (crate, modules): {found:?}"
        );
    }
}
