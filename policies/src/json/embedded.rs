//! Masking the tree of JSON found inside a string, and writing it back when it changed.

use std::borrow::Cow;

use super::parse::Node;
use super::path::Path;
use super::{JsonMasker, Pass, deeper, escape, parts};
use crate::error::Result;

impl JsonMasker<'_> {
    /// Masks `node` in place, as `walk` masks a document; whether anything in it changed.
    pub(super) fn walk_node(
        &self,
        node: &mut Node<'_>,
        path: &Path<'_>,
        depth: usize,
        pass: &mut Pass,
    ) -> Result<bool> {
        match node {
            Node::String(text) => match self.mask_string(text, path, depth, pass, false)? {
                Some(masked) => {
                    *text = Cow::Owned(masked);
                    Ok(true)
                }
                None => Ok(false),
            },
            Node::Number(literal) => match self.mask_number(literal, path, pass)? {
                Some(masked) => {
                    *node = Node::String(Cow::Owned(masked));
                    Ok(true)
                }
                None => Ok(false),
            },
            Node::Array(items) => {
                let depth = deeper(depth)?;
                let mut changed = false;
                let mut index = 0;
                while let Some(rest) = items.get_mut(index..).filter(|r| !r.is_empty()) {
                    let run = parts::run_length(rest, parts::node_text);
                    if run >= 2 {
                        let run_items = rest.get_mut(..run).unwrap_or_default();
                        changed |= self.walk_node_run(run_items, path, index, depth, pass)?;
                        index += run;
                    } else {
                        if let Some(item) = rest.first_mut() {
                            let at = Path::Index(path, index);
                            changed |= self.walk_node(item, &at, depth, pass)?;
                        }
                        index += 1;
                    }
                }
                Ok(changed)
            }
            Node::Object(members) => self.walk_node_object(members, path, depth, pass, None),
            Node::Null | Node::Bool(_) => Ok(false),
        }
    }

    /// Walks an object one level below `depth`, as `walk_object` does; whether anything in it
    /// changed.
    pub(super) fn walk_node_object(
        &self,
        members: &mut [(Cow<'_, str>, Node<'_>)],
        path: &Path<'_>,
        depth: usize,
        pass: &mut Pass,
        part: Option<&str>,
    ) -> Result<bool> {
        let depth = deeper(depth)?;
        let keys = members.iter().map(|(key, _)| key.as_ref());
        let renamed = self.mask_keys(keys, path, depth, pass)?;
        let mut changed = !renamed.is_empty();
        for (index, name) in renamed {
            if let Some((key, _)) = members.get_mut(index) {
                *key = Cow::Owned(name);
            }
        }
        let names = members.iter().filter_map(|(key, value)| match value {
            Node::String(name) if key == "name" || key == "key" => Some(name.as_ref()),
            _ => None,
        });
        let pair = self.pair_context(names);
        for (key, value) in members.iter_mut() {
            let member = Path::Key(path, key);
            changed |= match value {
                Node::String(text) if part == Some(key.as_ref()) => {
                    match self.mask_string(text, &member, depth, pass, true)? {
                        Some(masked) => {
                            *text = Cow::Owned(masked);
                            true
                        }
                        None => false,
                    }
                }
                _ => match self.member_context(key, plain_node(value), pair) {
                    Some(word) => {
                        pass.context = Some(format!("{word}: "));
                        let walked = self.walk_node(value, &member, depth, pass);
                        pass.context = None;
                        walked?
                    }
                    None => self.walk_node(value, &member, depth, pass)?,
                },
            };
        }
        Ok(changed)
    }
}

/// Whether `node` is read after its key's context word: a string, a number, or an array of
/// them.
fn plain_node(node: &Node<'_>) -> bool {
    match node {
        Node::String(_) | Node::Number(_) => true,
        Node::Array(items) => items
            .iter()
            .all(|item| matches!(item, Node::String(_) | Node::Number(_))),
        _ => false,
    }
}

/// Appends `node` as compact JSON; numbers keep their literal text.
pub(super) fn write(node: &Node<'_>, out: &mut String) {
    match node {
        Node::Null => out.push_str("null"),
        Node::Bool(true) => out.push_str("true"),
        Node::Bool(false) => out.push_str("false"),
        Node::Number(literal) => out.push_str(literal),
        Node::String(text) => escape::write_string(text, out),
        Node::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Node::Object(members) => {
            out.push('{');
            for (index, (key, value)) in members.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                escape::write_string(key, out);
                out.push(':');
                write(value, out);
            }
            out.push('}');
        }
    }
}
