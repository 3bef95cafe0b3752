//! Masking the tree of JSON found inside a string, and writing it back when it changed.

use std::borrow::Cow;

use super::parse::Node;
use super::path::Path;
use super::{JsonMasker, Pass, deeper, escape};
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
            Node::String(text) => match self.mask_string(text, path, depth, pass)? {
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
                for (index, item) in items.iter_mut().enumerate() {
                    changed |= self.walk_node(item, &Path::Index(path, index), depth, pass)?;
                }
                Ok(changed)
            }
            Node::Object(members) => {
                let depth = deeper(depth)?;
                let keys = members.iter().map(|(key, _)| key.as_ref());
                let renamed = self.mask_keys(keys, path, depth, pass)?;
                let mut changed = !renamed.is_empty();
                for (index, name) in renamed {
                    if let Some((key, _)) = members.get_mut(index) {
                        *key = Cow::Owned(name);
                    }
                }
                for (key, value) in members.iter_mut() {
                    changed |= self.walk_node(value, &Path::Key(path, key), depth, pass)?;
                }
                Ok(changed)
            }
            Node::Null | Node::Bool(_) => Ok(false),
        }
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
