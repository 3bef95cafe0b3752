//! Paths of masked spans: `messages[1].content`, `metadata["user note"]`, and `#` for the step
//! into JSON inside a string (`…function.arguments#.email`).

use std::fmt::Write;

use super::escape;

/// Where a value sits, from the document's root. Built on the stack as the walk descends and
/// written out only when a span is found, so a walk that finds nothing allocates no path.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Path<'a> {
    /// The document itself.
    Root,
    /// The member of an object with this (masked) key.
    Key(&'a Path<'a>, &'a str),
    /// An item of an array.
    Index(&'a Path<'a>, usize),
    /// The JSON inside a string.
    Inside(&'a Path<'a>),
}

impl Path<'_> {
    /// The path as text.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match *self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.write(out);
                let plain =
                    !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if plain {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(key);
                } else {
                    out.push('[');
                    escape::write_string(key, out);
                    out.push(']');
                }
            }
            Path::Index(parent, index) => {
                parent.write(out);
                // Writing to a `String` cannot fail.
                let _ = write!(out, "[{index}]");
            }
            Path::Inside(parent) => {
                parent.write(out);
                out.push('#');
            }
        }
    }
}
