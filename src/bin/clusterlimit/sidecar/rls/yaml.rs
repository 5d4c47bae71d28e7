//! A YAML document as a tree whose every node knows its line, so that config errors can name
//! `file:line` (yaml-rust2's own `Yaml` drops the positions; its event parser keeps them).

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A node and the line (1-based) it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub line: usize,
    pub value: Value,
}

/// What a node holds. Scalars keep their text and whether they were quoted (a quoted `"1"`
/// is a string, a plain `1` may be a number).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Scalar { text: String, quoted: bool },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// What the value is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "nothing",
            Value::Scalar { .. } => "a scalar",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// Parses one YAML document (an empty file is `Null`). Errors carry the line.
pub fn parse(text: &str) -> Result<Node, (usize, String)> {
    let mut builder = Builder::default();
    Parser::new_from_str(text)
        .load(&mut builder, false)
        .map_err(|e| (e.marker().line(), e.info().to_string()))?;
    if let Some(e) = builder.error {
        return Err(e);
    }
    Ok(builder.done.unwrap_or(Node {
        line: 1,
        value: Value::Null,
    }))
}

/// An open sequence or mapping.
enum Frame {
    Seq(usize, Vec<Node>),
    /// The pairs so far and a key waiting for its value.
    Map(usize, Vec<(Node, Node)>, Option<Node>),
}

/// Builds the tree from the parser's events.
#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    done: Option<Node>,
    error: Option<(usize, String)>,
}

impl Builder {
    fn add(&mut self, node: Node) {
        match self.stack.last_mut() {
            None => {
                if self.done.is_none() {
                    self.done = Some(node);
                }
            }
            Some(Frame::Seq(_, items)) => items.push(node),
            Some(Frame::Map(_, pairs, key)) => match key.take() {
                None => *key = Some(node),
                Some(k) => pairs.push((k, node)),
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        match ev {
            Event::Scalar(text, style, _, _) => {
                let plain = style == TScalarStyle::Plain;
                let value = if plain && matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL")
                {
                    Value::Null
                } else {
                    Value::Scalar {
                        text,
                        quoted: !plain,
                    }
                };
                self.add(Node { line, value });
            }
            Event::SequenceStart(..) => self.stack.push(Frame::Seq(line, Vec::new())),
            Event::MappingStart(..) => self.stack.push(Frame::Map(line, Vec::new(), None)),
            Event::SequenceEnd | Event::MappingEnd => {
                let node = match self.stack.pop() {
                    Some(Frame::Seq(line, items)) => Node {
                        line,
                        value: Value::Seq(items),
                    },
                    Some(Frame::Map(line, pairs, _)) => Node {
                        line,
                        value: Value::Map(pairs),
                    },
                    None => return,
                };
                self.add(node);
            }
            Event::Alias(_) => {
                if self.error.is_none() {
                    self.error = Some((line, "YAML aliases are not supported".to_string()));
                }
                self.add(Node {
                    line,
                    value: Value::Null,
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_know_their_lines() {
        let doc = parse("domain: a\ndescriptors:\n  - key: k\n    value: \"1\"\n").unwrap();
        let Value::Map(pairs) = doc.value else {
            panic!("{doc:?}")
        };
        assert_eq!(pairs[0].0.line, 1);
        assert_eq!(pairs[1].0.line, 2);
        let Value::Seq(items) = &pairs[1].1.value else {
            panic!()
        };
        assert_eq!(items[0].line, 3);
        let Value::Map(inner) = &items[0].value else {
            panic!()
        };
        assert_eq!(inner[1].1.line, 4);
        assert_eq!(
            inner[1].1.value,
            Value::Scalar {
                text: "1".into(),
                quoted: true
            }
        );
        assert_eq!(parse("").unwrap().value, Value::Null);
        assert_eq!(parse("a: [\n").unwrap_err().0, 2);
        assert!(parse("a: &x 1\nb: *x\n").unwrap_err().1.contains("aliases"));
    }
}
