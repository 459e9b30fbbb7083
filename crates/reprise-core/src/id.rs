//! Task ids and plan names: a strict pattern, refused rather than sanitised, because an id
//! names a directory and two ids must never share a journal.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest accepted task id, in bytes.
pub const TASK_ID_MAX_LEN: usize = 64;

/// A task id matching `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(String);

/// Why a string is not a task id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskIdError {
    #[error("task id is empty; use letters, digits, '.', '_' or '-'")]
    Empty,
    #[error("task id is {len} bytes long; the limit is {TASK_ID_MAX_LEN}")]
    TooLong { len: usize },
    #[error("task id {id:?} must start with a letter or digit")]
    BadFirst { id: String },
    #[error(
        "task id {id:?} contains {found:?}; only letters, digits, '.', '_' and '-' are allowed"
    )]
    BadChar { id: String, found: char },
    #[error("{raw:?} is not PLAN/TASK; name the plan, a slash, and the task id")]
    NotPlanTask { raw: String },
}

impl TaskId {
    /// Accepts `raw` only if it matches the pattern exactly.
    pub fn parse(raw: &str) -> Result<Self, TaskIdError> {
        let Some(first) = raw.chars().next() else {
            return Err(TaskIdError::Empty);
        };
        if raw.len() > TASK_ID_MAX_LEN {
            return Err(TaskIdError::TooLong { len: raw.len() });
        }
        if !first.is_ascii_alphanumeric() {
            return Err(TaskIdError::BadFirst { id: raw.to_owned() });
        }
        if let Some(found) = raw
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(TaskIdError::BadChar {
                id: raw.to_owned(),
                found,
            });
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A run id that is not `R-` and a ULID (26 Crockford base32 digits).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "run id {id:?} is not `R-` followed by a 26-character ULID; `reprise status` names the runs"
)]
pub struct RunIdError {
    pub id: String,
}

/// Checks that `raw` is a run id (`^R-[0-9A-HJKMNP-TV-Z]{26}$`) before it is
/// used to name a directory: a run id that could hold `/` or `..` would
/// reach outside `runs/`.
pub fn check_run_id(raw: &str) -> Result<(), RunIdError> {
    let valid = raw.strip_prefix("R-").is_some_and(|ulid| {
        ulid.len() == 26
            && ulid.bytes().all(|byte| {
                byte.is_ascii_digit()
                    || (byte.is_ascii_uppercase() && !matches!(byte, b'I' | b'L' | b'O' | b'U'))
            })
            && ulid.as_bytes()[0] <= b'7'
    });
    if valid {
        Ok(())
    } else {
        Err(RunIdError { id: raw.to_owned() })
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TaskId {
    type Err = TaskIdError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Self::parse(raw)
    }
}

impl Serialize for TaskId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// A plan's name, as it names the plan's directory in the state directory:
/// the same pattern as a task id, refused rather than sanitised, so two
/// plans never share a directory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlanId(String);

impl PlanId {
    /// Accepts `raw` only if it matches the task-id pattern exactly.
    pub fn parse(raw: &str) -> Result<Self, TaskIdError> {
        TaskId::parse(raw).map(|id| Self(id.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PlanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for PlanId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PlanId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// One task of one plan: what a journal, a spine, a seal and a worktree
/// belong to. Task ids are unique only within a plan.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskKey {
    pub plan: PlanId,
    pub task: TaskId,
}

impl TaskKey {
    pub fn new(plan: PlanId, task: TaskId) -> Self {
        Self { plan, task }
    }

    /// Parses `PLAN/TASK`.
    pub fn parse(raw: &str) -> Result<Self, TaskIdError> {
        let (plan, task) = raw
            .split_once('/')
            .ok_or_else(|| TaskIdError::NotPlanTask {
                raw: raw.to_owned(),
            })?;
        Ok(Self {
            plan: PlanId::parse(plan)?,
            task: TaskId::parse(task)?,
        })
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.plan, self.task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_r_and_a_ulid_and_nothing_else() {
        assert!(check_run_id("R-01JDZ3V6Q8M9K2N4P5R7S8T9VW").is_ok());
        for bad in [
            "",
            "R-",
            "../../../x",
            "R-../../../../../../../tmp/x",
            "R-01JDZ3V6Q8M9K2N4P5R7S8T9V",
            "R-01JDZ3V6Q8M9K2N4P5R7S8T9VWX",
            "R-01jdz3v6q8m9k2n4p5r7s8t9vw",
            "R-01JDZ3V6Q8M9K2N4P5R7S8T9VI",
            "R-81JDZ3V6Q8M9K2N4P5R7S8T9VW",
            "X-01JDZ3V6Q8M9K2N4P5R7S8T9VW",
        ] {
            assert!(check_run_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn accepts_the_pattern() {
        for ok in [
            "a",
            "A9",
            "add-greeting",
            "x.y_z-1",
            "0",
            &"a".repeat(64),
            "a..b",
        ] {
            assert_eq!(TaskId::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_everything_else() {
        assert_eq!(TaskId::parse(""), Err(TaskIdError::Empty));
        assert_eq!(
            TaskId::parse(&"a".repeat(65)),
            Err(TaskIdError::TooLong { len: 65 })
        );
        for bad in ["../x", ".x", "-x", "_x", ".."] {
            assert!(
                matches!(TaskId::parse(bad), Err(TaskIdError::BadFirst { .. })),
                "{bad}"
            );
        }
        for bad in ["a/b", "a b", "a\\b", "a\0", "é", "aé", "a\n", "a:b"] {
            assert!(TaskId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_task_key_is_plan_slash_task() {
        let key = TaskKey::parse("billing/add-tax").unwrap();
        assert_eq!(key.plan.as_str(), "billing");
        assert_eq!(key.task.as_str(), "add-tax");
        assert_eq!(key.to_string(), "billing/add-tax");
        for bad in ["add-tax", "a/b/c", "../x", "a/", "/b", "a b/c"] {
            assert!(TaskKey::parse(bad).is_err(), "{bad:?}");
        }
        assert!(PlanId::parse("my plan").is_err());
    }

    #[test]
    fn deserialising_applies_the_pattern() {
        assert!(serde_json::from_str::<TaskId>("\"../x\"").is_err());
        assert_eq!(
            serde_json::from_str::<TaskId>("\"ok-1\"").unwrap().as_str(),
            "ok-1"
        );
    }
}
