//! How the RLS rule files are read (`parse.rs`, `parse_classes.rs`): [`Ctx`], the file an
//! error names, and the YAML node readers that say `file:line` and what was expected.

use super::yaml::{Node, Value};
use std::path::Path;

/// The context of errors: the file.
pub(super) struct Ctx<'a> {
    pub(super) file: &'a Path,
}

impl Ctx<'_> {
    pub(super) fn err(&self, line: usize, why: impl std::fmt::Display) -> String {
        format!("{}:{line}: {why}", self.file.display())
    }

    pub(super) fn map<'n>(&self, node: &'n Node, what: &str) -> Result<&'n [(Node, Node)], String> {
        match &node.value {
            Value::Map(pairs) => Ok(pairs),
            v => Err(self.err(
                node.line,
                format!("{what} must be a mapping, got {}", v.kind()),
            )),
        }
    }

    /// The mapping's keys as text, each checked against `allowed` and for duplicates.
    pub(super) fn fields<'n>(
        &self,
        node: &'n Node,
        what: &str,
        allowed: &[&str],
    ) -> Result<Vec<(&'n str, &'n Node, usize)>, String> {
        let mut out: Vec<(&str, &Node, usize)> = Vec::new();
        for (k, v) in self.map(node, what)? {
            let Value::Scalar { text, .. } = &k.value else {
                return Err(self.err(k.line, format!("{what}: keys must be strings")));
            };
            if !allowed.contains(&text.as_str()) {
                return Err(self.err(
                    k.line,
                    format!(
                        "unknown key {text:?} in {what} (allowed: {})",
                        allowed.join(", ")
                    ),
                ));
            }
            if out.iter().any(|(seen, _, _)| *seen == text) {
                return Err(self.err(k.line, format!("key {text:?} given twice in {what}")));
            }
            out.push((text, v, k.line));
        }
        Ok(out)
    }

    pub(super) fn string(&self, node: &Node, what: &str) -> Result<String, String> {
        match &node.value {
            Value::Scalar { text, .. } => Ok(text.clone()),
            Value::Null => Ok(String::new()),
            v => Err(self.err(
                node.line,
                format!("{what} must be a string, got {}", v.kind()),
            )),
        }
    }

    pub(super) fn bool(&self, node: &Node, what: &str) -> Result<bool, String> {
        match &node.value {
            Value::Scalar {
                text,
                quoted: false,
            } => match text.as_str() {
                "true" | "True" | "TRUE" => Ok(true),
                "false" | "False" | "FALSE" => Ok(false),
                _ => Err(self.err(
                    node.line,
                    format!("{what} must be true or false, got {text:?}"),
                )),
            },
            Value::Null => Ok(false),
            v => Err(self.err(
                node.line,
                format!("{what} must be true or false, got {}", v.kind()),
            )),
        }
    }

    pub(super) fn number<T: std::str::FromStr>(
        &self,
        node: &Node,
        what: &str,
        range: &str,
    ) -> Result<T, String> {
        match &node.value {
            Value::Scalar {
                text,
                quoted: false,
            } => text.parse().map_err(|_| {
                self.err(
                    node.line,
                    format!("{what} must be a whole number {range}, got {text:?}"),
                )
            }),
            Value::Scalar { text, .. } => Err(self.err(
                node.line,
                format!("{what} must be a number, got the string {text:?}"),
            )),
            v => Err(self.err(
                node.line,
                format!("{what} must be a number, got {}", v.kind()),
            )),
        }
    }

    pub(super) fn list<'n>(&self, node: &'n Node, what: &str) -> Result<&'n [Node], String> {
        match &node.value {
            Value::Seq(items) => Ok(items),
            Value::Null => Ok(&[]),
            v => Err(self.err(
                node.line,
                format!("{what} must be a list, got {}", v.kind()),
            )),
        }
    }
}
