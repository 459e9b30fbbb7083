//! Reading typed values out of the YAML tree, with errors that carry the
//! file, the position and the key path of the value at fault.
//!
//! These are the plan-independent halves of the reader: a mapping with its
//! keys checked, strings, integers in a range, choices, money and durations.
//! `parse` says which key holds which of them.

use std::time::Duration;

use crate::TaskId;

use super::duration::parse_duration;
use super::error::{PlanError, PlanErrorKind, closest};
use super::money::parse_micro_usd;
use super::yaml::{Entry, Kind, Mark, Node};

pub(super) type Result<T, E = PlanError> = std::result::Result<T, E>;

/// The plan's text and name, for error messages.
pub(super) struct Reader<'a> {
    pub(super) text: &'a str,
    pub(super) file: &'a str,
}

/// A mapping whose keys were checked against the accepted ones.
pub(super) struct Fields<'n> {
    pub(super) entries: &'n [Entry],
    pub(super) mark: &'n Mark,
    pub(super) path: String,
}

impl<'n> Fields<'n> {
    pub(super) fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|entry| entry.key == key)
            .map(|entry| &entry.value)
    }

    pub(super) fn path_of(&self, key: &str) -> String {
        child_path(&self.path, key)
    }
}

pub(super) fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

pub(super) fn item_path(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

impl Reader<'_> {
    pub(super) fn error(&self, mark: &Mark, path: &str, kind: PlanErrorKind) -> PlanError {
        PlanError::new(self.file, mark, path, kind)
    }

    // ---- keys -------------------------------------------------------------

    /// The mapping at `node`, refusing unknown and repeated keys.
    pub(super) fn fields<'n>(
        &self,
        node: &'n Node,
        path: &str,
        accepted: &'static [&'static str],
    ) -> Result<Fields<'n>> {
        let Kind::Map(entries) = &node.kind else {
            return Err(self.wrong_type(node, path, "a mapping"));
        };
        for (index, entry) in entries.iter().enumerate() {
            if !accepted.contains(&entry.key.as_str()) {
                return Err(self.error(
                    &entry.key_mark,
                    path,
                    PlanErrorKind::UnknownKey {
                        key: entry.key.clone(),
                        expected: accepted,
                        suggestion: closest(&entry.key, accepted),
                    },
                ));
            }
            if let Some(first) = entries[..index]
                .iter()
                .find(|earlier| earlier.key == entry.key)
            {
                return Err(self.error(
                    &entry.key_mark,
                    &child_path(path, &entry.key),
                    PlanErrorKind::DuplicateKey {
                        key: entry.key.clone(),
                        first_line: first.key_mark.line,
                    },
                ));
            }
        }
        Ok(Fields {
            entries,
            mark: &node.mark,
            path: path.to_owned(),
        })
    }

    /// The value of a key that must be present; a missing one points at the mapping.
    pub(super) fn required<'n>(
        &self,
        fields: &Fields<'n>,
        key: &str,
        hint: &'static str,
    ) -> Result<&'n Node> {
        fields.get(key).ok_or_else(|| {
            self.error(
                fields.mark,
                &fields.path_of(key),
                PlanErrorKind::MissingKey { hint },
            )
        })
    }

    // ---- values -----------------------------------------------------------

    pub(super) fn string(&self, node: &Node, path: &str) -> Result<String> {
        match &node.kind {
            Kind::Str(text) => Ok(text.clone()),
            _ => Err(self.wrong_type(node, path, "a string")),
        }
    }

    pub(super) fn non_empty_string(&self, node: &Node, path: &str) -> Result<String> {
        let text = self.string(node, path)?;
        if text.trim().is_empty() {
            return Err(self.error(&node.mark, path, PlanErrorKind::EmptyValue));
        }
        Ok(text)
    }

    pub(super) fn task_id(&self, node: &Node, path: &str) -> Result<TaskId> {
        let text = self.string(node, path)?;
        TaskId::parse(&text)
            .map_err(|reason| self.error(&node.mark, path, PlanErrorKind::InvalidTaskId { reason }))
    }

    pub(super) fn boolean(&self, node: &Node, path: &str) -> Result<bool> {
        match node.kind {
            Kind::Bool(value) => Ok(value),
            _ => Err(self.wrong_type(node, path, "true or false")),
        }
    }

    pub(super) fn integer<T>(&self, node: &Node, path: &str, min: T, max: T) -> Result<T>
    where
        T: Copy + Into<i128> + TryFrom<i128>,
    {
        let Kind::Int(value) = node.kind else {
            return Err(self.wrong_type(node, path, "an integer"));
        };
        let out_of_range = || {
            self.error(
                &node.mark,
                path,
                PlanErrorKind::OutOfRange {
                    value,
                    min: min.into(),
                    max: max.into(),
                },
            )
        };
        if value < min.into() || value > max.into() {
            return Err(out_of_range());
        }
        T::try_from(value).map_err(|_| out_of_range())
    }

    pub(super) fn seq<'n>(&self, node: &'n Node, path: &str, expected: &str) -> Result<&'n [Node]> {
        match &node.kind {
            Kind::Seq(items) => Ok(items),
            _ => Err(self.wrong_type(node, path, expected)),
        }
    }

    pub(super) fn choice<T: Copy>(
        &self,
        node: &Node,
        path: &str,
        noun: &'static str,
        names: &'static [&'static str],
        values: &[T],
    ) -> Result<T> {
        let Kind::Str(text) = &node.kind else {
            return Err(self.wrong_type(node, path, &format!("one of {}", names.join(", "))));
        };
        match names.iter().position(|name| name == text) {
            Some(index) => Ok(values[index]),
            None => Err(self.error(
                &node.mark,
                path,
                PlanErrorKind::UnknownValue {
                    noun,
                    found: text.clone(),
                    expected: names,
                    suggestion: closest(text, names),
                },
            )),
        }
    }

    /// A fraction from 0 to 1 (`0.5`, `1`), in basis points: plans may
    /// write a float, records never hold one.
    pub(super) fn fraction(&self, node: &Node, path: &str) -> Result<u32> {
        let value = match &node.kind {
            Kind::Float(value) => *value,
            Kind::Int(value) => *value as f64,
            _ => return Err(self.wrong_type(node, path, "a number from 0.0 to 1.0")),
        };
        if !(0.0..=1.0).contains(&value) {
            return Err(self.error(
                &node.mark,
                path,
                PlanErrorKind::OutOfRange {
                    value: value.round() as i128,
                    min: 0,
                    max: 1,
                },
            ));
        }
        Ok((value * 10_000.0).round() as u32)
    }

    pub(super) fn money(&self, node: &Node, path: &str) -> Result<u64> {
        match &node.kind {
            Kind::Str(text) => parse_micro_usd(text).map_err(|reason| {
                self.error(
                    &node.mark,
                    path,
                    PlanErrorKind::InvalidMoney {
                        text: text.clone(),
                        reason,
                    },
                )
            }),
            Kind::Int(_) | Kind::Float(_) => Err(self.error(
                &node.mark,
                path,
                PlanErrorKind::MoneyIsNumber {
                    text: self.number_text(node),
                },
            )),
            _ => Err(self.wrong_type(node, path, "a quoted decimal string like \"5.00\"")),
        }
    }

    pub(super) fn duration(&self, node: &Node, path: &str, zero_allowed: bool) -> Result<Duration> {
        match &node.kind {
            Kind::Str(text) => {
                let duration = parse_duration(text).map_err(|reason| {
                    self.error(
                        &node.mark,
                        path,
                        PlanErrorKind::InvalidDuration {
                            text: text.clone(),
                            reason,
                        },
                    )
                })?;
                if duration.is_zero() && !zero_allowed {
                    return Err(self.error(
                        &node.mark,
                        path,
                        PlanErrorKind::ZeroDuration { text: text.clone() },
                    ));
                }
                Ok(duration)
            }
            Kind::Int(_) | Kind::Float(_) => Err(self.error(
                &node.mark,
                path,
                PlanErrorKind::DurationIsNumber {
                    text: self.number_text(node),
                },
            )),
            _ => Err(self.wrong_type(node, path, "a duration like \"10m\"")),
        }
    }

    // ---- describing values ------------------------------------------------

    pub(super) fn wrong_type(&self, node: &Node, path: &str, expected: &str) -> PlanError {
        self.error(
            &node.mark,
            path,
            PlanErrorKind::WrongType {
                expected: expected.to_owned(),
                found: self.describe(node),
            },
        )
    }

    fn describe(&self, node: &Node) -> String {
        match &node.kind {
            Kind::Null => "nothing (null)".to_owned(),
            Kind::Bool(value) => format!("the boolean {value}"),
            Kind::Int(_) | Kind::Float(_) => format!("the number {}", self.number_text(node)),
            Kind::Str(text) => format!("the string {:?}", shorten(text)),
            Kind::Seq(_) => "a list".to_owned(),
            Kind::Map(_) => "a mapping".to_owned(),
        }
    }

    /// A number as written (`5.00`, not `5`), falling back to its value when
    /// it came through an alias or the reader has no source position.
    fn number_text(&self, node: &Node) -> String {
        let written = node
            .mark
            .source(self.text)
            .map(str::trim)
            .filter(|text| !text.is_empty() && !text.starts_with(['*', '&', '!']));
        match (written, &node.kind) {
            (Some(text), _) => shorten(text),
            (None, Kind::Int(value)) => value.to_string(),
            (None, Kind::Float(value)) => value.to_string(),
            (None, _) => String::new(),
        }
    }
}

/// At most 60 characters of `text`, marked when cut.
fn shorten(text: &str) -> String {
    const LIMIT: usize = 60;
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}
