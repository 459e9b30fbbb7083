//! The plan's YAML as a tree of nodes that remember where they were written.
//!
//! serde-saphyr parses the text; every node and key is read through
//! `serde_saphyr::Spanned`, so checks made long after parsing (a duplicate id,
//! a cycle, a budget above the pool) still point at the offending line. The
//! tree keeps scalars as YAML typed them, so `5.00` (a float) and `"5.00"` (a
//! string) stay distinguishable.

use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{DuplicateKeyPolicy, Location, MessageFormatter, Spanned};

/// The most YAML nodes (mappings, lists and scalars) a plan may have: room for
/// 100,000 tasks of up to 20 nodes each (`id`, `prompt`, a command and a gate
/// are about 15). The reader's own default, 250,000, refused plans of 25,000
/// one-line tasks; a cap remains so a runaway file fails fast instead of
/// filling memory.
pub(super) const MAX_PLAN_NODES: usize = 2_000_000;

/// The most parser events: every node, every end of a mapping or list, and
/// the aliases, with room to spare so the node cap is the one a plan meets.
const MAX_PLAN_EVENTS: usize = 2 * MAX_PLAN_NODES + 100_000;

/// Where a node starts in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mark {
    /// 1-based; 0 when the YAML reader gave no position.
    pub(super) line: u64,
    /// 1-based, in characters; 0 when unknown.
    pub(super) column: u64,
    /// The node's source bytes, where the reader knows them.
    bytes: Option<Range<usize>>,
}

impl Mark {
    fn from_location(location: &Location) -> Self {
        let span = location.span();
        let bytes = match (span.byte_offset(), span.byte_len()) {
            (Some(offset), Some(len)) => {
                let start = usize::try_from(offset).ok();
                let end = start.and_then(|start| start.checked_add(usize::try_from(len).ok()?));
                start.zip(end).map(|(start, end)| start..end)
            }
            _ => None,
        };
        Self {
            line: location.line(),
            column: location.column(),
            bytes,
        }
    }

    /// The node's text as written, if the reader recorded where it is.
    pub(super) fn source<'t>(&self, text: &'t str) -> Option<&'t str> {
        text.get(self.bytes.clone()?)
    }
}

/// A YAML node and where it starts.
#[derive(Debug, Clone)]
pub(super) struct Node {
    pub(super) kind: Kind,
    pub(super) mark: Mark,
}

/// A node's value, typed as YAML resolved it (YAML 1.2 booleans only).
#[derive(Debug, Clone)]
pub(super) enum Kind {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

/// One key and value of a mapping, in document order (duplicates kept, so
/// the plan reader can report them).
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) key: String,
    pub(super) key_mark: Mark,
    pub(super) value: Node,
}

/// Why the reader gave no tree.
#[derive(Debug, Clone)]
pub(super) enum LoadError {
    /// The text is not YAML: where, and the reader's message on one line.
    Syntax { mark: Mark, message: String },
    /// The document has more nodes than [`MAX_PLAN_NODES`].
    TooLarge { mark: Mark },
}

/// Parses one YAML document into a tree.
pub(super) fn load(text: &str) -> Result<Node, LoadError> {
    let options = serde_saphyr::options! {
        // `yes`, `no`, `on` and `off` stay strings.
        strict_booleans: true,
        // Reported by the plan reader, with the line of the first occurrence.
        duplicate_keys: DuplicateKeyPolicy::PassThrough,
        // A key written `~` is an unknown key, not a failure to read a string.
        null_as_string: true,
        emit_comments: false,
        budget: serde_saphyr::budget! {
            max_nodes: MAX_PLAN_NODES,
            max_events: MAX_PLAN_EVENTS,
        },
    };
    serde_saphyr::from_str_with_options::<Node>(text, options).map_err(|error| {
        let mark = error
            .location()
            .map_or(Mark::from_location(&Location::UNKNOWN), |location| {
                Mark::from_location(&location)
            });
        let error = error.without_snippet();
        if let serde_saphyr::Error::Budget {
            breach: BudgetBreach::Nodes { .. } | BudgetBreach::Events { .. },
            ..
        } = error
        {
            return LoadError::TooLarge { mark };
        }
        let message = serde_saphyr::UserMessageFormatter.format_message(error);
        LoadError::Syntax {
            mark,
            message: one_line(&message),
        }
    })
}

/// The message with control characters escaped and the first letter lowercase,
/// so it fits the one-line error format.
fn one_line(message: &str) -> String {
    let mut line = String::with_capacity(message.len());
    for (index, c) in message.trim().chars().enumerate() {
        if c.is_control() {
            line.extend(c.escape_default());
        } else if index == 0 {
            line.extend(c.to_lowercase());
        } else {
            line.push(c);
        }
    }
    line
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<Kind>::deserialize(deserializer)?;
        Ok(Node {
            kind: spanned.value,
            mark: Mark::from_location(&spanned.referenced),
        })
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Kind, E> {
        Ok(Kind::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Kind, E> {
        Ok(Kind::Int(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Kind, E> {
        Ok(Kind::Int(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Kind, E> {
        Ok(Kind::Int(value))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Kind, E> {
        // Beyond i128 only the magnitude matters to the checks: it is out of range.
        Ok(Kind::Int(i128::try_from(value).unwrap_or(i128::MAX)))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Kind, E> {
        Ok(Kind::Float(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Kind, E> {
        Ok(Kind::Str(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Kind, E> {
        Ok(Kind::Str(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Kind, A::Error> {
        let mut nodes = Vec::new();
        while let Some(node) = items.next_element::<Node>()? {
            nodes.push(node);
        }
        Ok(Kind::Seq(nodes))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let value = map.next_value::<Node>()?;
            entries.push(Entry {
                key: key.value,
                key_mark: Mark::from_location(&key.referenced),
                value,
            });
        }
        Ok(Kind::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(node: &Node) -> &[Entry] {
        match &node.kind {
            Kind::Map(entries) => entries,
            other => panic!("expected a map, got {other:?}"),
        }
    }

    #[test]
    fn plan_yaml_nodes_keep_type_and_position() {
        let text = "a: 5.00\nb: \"5.00\"\nc: yes\nd:\n  - 1\n  - x\n";
        let root = load(text).unwrap();
        let entries = map(&root);
        assert_eq!(entries[0].key, "a");
        assert!(matches!(entries[0].value.kind, Kind::Float(_)));
        assert_eq!(entries[0].value.mark.source(text), Some("5.00"));
        assert_eq!(
            (entries[0].value.mark.line, entries[0].value.mark.column),
            (1, 4)
        );
        assert!(matches!(&entries[1].value.kind, Kind::Str(s) if s == "5.00"));
        assert!(matches!(&entries[2].value.kind, Kind::Str(s) if s == "yes"));
        let Kind::Seq(items) = &entries[3].value.kind else {
            panic!("expected a list")
        };
        assert!(matches!(items[0].kind, Kind::Int(1)));
        assert_eq!((items[1].mark.line, items[1].mark.column), (6, 5));
        assert_eq!(
            (entries[3].key_mark.line, entries[3].key_mark.column),
            (4, 1)
        );
    }

    #[test]
    fn plan_yaml_keeps_duplicate_keys_for_the_reader() {
        let root = load("a: 1\na: 2\n").unwrap();
        let keys: Vec<_> = map(&root).iter().map(|entry| entry.key.as_str()).collect();
        assert_eq!(keys, ["a", "a"]);
    }

    #[test]
    fn plan_yaml_syntax_errors_have_a_position_and_one_line() {
        let LoadError::Syntax { mark, message } = load("a: [1, 2\nb: 3\n").unwrap_err() else {
            panic!("expected a syntax error")
        };
        assert_eq!((mark.line, mark.column), (2, 2));
        assert!(!message.contains('\n'), "{message}");
        assert!(!message.is_empty());
    }
}
