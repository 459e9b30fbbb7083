//! The grant a park binds (DESIGN.md section 9, issue 14 point 6): the
//! permissions the parked agent held, hashed so a resume can tell whether
//! they changed while it waited, and the rule for when a change refuses the
//! resume.
//!
//! A resumed agent carries on from a session that planned with the
//! permissions it had. If it comes back with fewer, its next step may be one
//! it can no longer take, mid-way through a change: so a resume whose
//! permissions narrowed is refused and a person decides. Narrowing means the
//! agent may do less than when it was parked:
//! - another agent (a session cannot move between CLIs);
//! - an allowed tool removed;
//! - an allowed path removed, or paths set where none were (none is
//!   everywhere);
//! - a smaller envelope, or an envelope where there was none.
//!
//! Containment is hashed (the grant names it) but a stricter containment is
//! not narrowing: it guards the machine, not the task, and refusing a resume
//! because the host was tightened would push people to loosen it. Widening
//! (a tool added, a larger envelope) is not refused either; the resume
//! records the new grant hash in its continuation.

use serde::{Deserialize, Serialize};

use crate::canonical::{EncodeError, to_canonical_vec};
use crate::digest::{Digest, tagged_sha256};
use crate::plan::{AgentKind, Plan, Task};

/// Domain tag of a grant hash.
pub const GRANT_TAG: &[u8] = b"reprise/grant/v1\n";
/// Version of the grant encoding that is hashed.
pub const GRANT_VERSION: u64 = 1;

/// What a task's agent is allowed, as the plan says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantSet {
    /// The agent kind (`claude`, `codex`, ...): the role.
    pub agent: String,
    /// Tools the agent may use without asking (Claude Code's
    /// `allowed_tools`, and the tools an ACP agent is allowed when it asks),
    /// sorted and without repeats; empty for other agents.
    pub allowed_tools: Vec<String>,
    /// Globs the agent may change, sorted and without repeats; empty is
    /// everywhere.
    pub allowed_paths: Vec<String>,
    /// `strict`, `required` or `off`.
    pub containment: String,
    /// The task's envelope; `None` reserves nothing.
    pub envelope_micro_usd: Option<u64>,
}

fn sorted(items: &[String]) -> Vec<String> {
    let mut items = items.to_vec();
    items.sort();
    items.dedup();
    items
}

/// The entry of `allowed_tools` that allows a tool an agent asks
/// permission for, given the names the request calls it by (an ACP
/// request's programmatic name, its kind such as `edit` or `execute`, its
/// title): the first entry equal to one of them, compared as written.
/// `None` means the request is rejected.
pub fn allowing_entry<'a>(allowed_tools: &'a [String], names: &[&str]) -> Option<&'a str> {
    allowed_tools
        .iter()
        .find(|entry| names.iter().any(|name| !name.is_empty() && name == entry))
        .map(String::as_str)
}

/// The grant of `task` under `plan`.
pub fn grant_of(task: &Task, plan: &Plan) -> GrantSet {
    let kind = task.agent.kind();
    let allowed_tools = match kind {
        AgentKind::Claude | AgentKind::Acp => plan
            .agent_settings(kind)
            .map(|settings| sorted(&settings.allowed_tools))
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    GrantSet {
        agent: kind.as_str().to_owned(),
        allowed_tools,
        allowed_paths: sorted(&task.allowed_paths),
        containment: task.containment.as_str().to_owned(),
        envelope_micro_usd: task.budget_micro_usd,
    }
}

/// What is hashed: the grant and what it is bound to.
#[derive(Serialize)]
struct Bound<'a> {
    v: u64,
    grant: &'a GrantSet,
    task_id: &'a str,
    run_id: &'a str,
    park: Digest,
}

/// The grant hash: SHA-256 under [`GRANT_TAG`] over the JCS encoding of
/// `{"v":1,"grant":SET,"task_id":..,"run_id":..,"park":HEX}`, the park
/// being the `task.suspend` row's event hash. Binding the task, run and
/// park keeps one park's grant from standing in for another's.
pub fn grant_hash(
    set: &GrantSet,
    task_id: &str,
    run_id: &str,
    park_row_hash: Digest,
) -> Result<Digest, EncodeError> {
    let bytes = to_canonical_vec(&Bound {
        v: GRANT_VERSION,
        grant: set,
        task_id,
        run_id,
        park: park_row_hash,
    })?;
    Ok(tagged_sha256(GRANT_TAG, &[&bytes]))
}

/// The first permission `now` takes away from `parked`, named for a person;
/// `None` when the agent may still do everything it could when parked.
#[must_use]
pub fn narrowed(parked: &GrantSet, now: &GrantSet) -> Option<String> {
    if parked.agent != now.agent {
        return Some(format!("agent {} is now {}", parked.agent, now.agent));
    }
    if let Some(tool) = parked
        .allowed_tools
        .iter()
        .find(|tool| !now.allowed_tools.contains(tool))
    {
        return Some(format!("allowed tool {tool} was removed"));
    }
    if parked.allowed_paths.is_empty() && !now.allowed_paths.is_empty() {
        return Some(format!(
            "allowed paths were everywhere and are now {}",
            now.allowed_paths.join(", ")
        ));
    }
    if !now.allowed_paths.is_empty()
        && let Some(path) = parked
            .allowed_paths
            .iter()
            .find(|path| !now.allowed_paths.contains(path))
    {
        return Some(format!("allowed path {path} was removed"));
    }
    match (parked.envelope_micro_usd, now.envelope_micro_usd) {
        (None, Some(now)) => Some(format!(
            "the envelope was unbounded and is now {now} micro-usd"
        )),
        (Some(before), Some(now)) if now < before => Some(format!(
            "the envelope shrank from {before} to {now} micro-usd"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_allowed_only_by_an_entry_naming_it() {
        let allowed = vec!["edit".to_owned(), "write_file".to_owned()];
        assert_eq!(
            allowing_entry(&allowed, &["write_file", "edit"]),
            Some("edit")
        );
        assert_eq!(allowing_entry(&allowed, &["", "other", "WriteFile"]), None);
        assert_eq!(
            allowing_entry(&allowed, &["run_shell_command", "execute"]),
            None
        );
        assert_eq!(allowing_entry(&[], &["edit"]), None);
    }
    use crate::plan::parse_plan;

    fn set() -> GrantSet {
        GrantSet {
            agent: "claude".to_owned(),
            allowed_tools: vec!["Bash(git log:*)".to_owned(), "Edit".to_owned()],
            allowed_paths: vec!["src/**".to_owned()],
            containment: "strict".to_owned(),
            envelope_micro_usd: Some(500_000),
        }
    }

    #[test]
    fn the_hash_is_pinned_and_binds_task_run_and_park() {
        let park = tagged_sha256(b"test\n", &[b"park"]);
        let hash = grant_hash(&set(), "t", "R-1", park).unwrap();
        assert_eq!(
            hash.to_hex(),
            "d5596ef7c8eb517ed6101aef5d11c525ddcd1937fc9df40e6a09a8534dde6b79",
            "the grant encoding changed: bump GRANT_VERSION"
        );
        assert_ne!(grant_hash(&set(), "u", "R-1", park).unwrap(), hash);
        assert_ne!(grant_hash(&set(), "t", "R-2", park).unwrap(), hash);
        assert_ne!(grant_hash(&set(), "t", "R-1", Digest::ZERO).unwrap(), hash);
        let mut looser = set();
        looser.containment = "off".to_owned();
        assert_ne!(grant_hash(&looser, "t", "R-1", park).unwrap(), hash);
    }

    #[test]
    fn taking_anything_away_is_narrowing() {
        let parked = set();
        assert_eq!(narrowed(&parked, &parked), None);
        let mut other = set();
        other.agent = "codex".to_owned();
        assert_eq!(
            narrowed(&parked, &other).as_deref(),
            Some("agent claude is now codex")
        );
        let mut fewer = set();
        fewer.allowed_tools.pop();
        assert_eq!(
            narrowed(&parked, &fewer).as_deref(),
            Some("allowed tool Edit was removed")
        );
        let mut paths = set();
        paths.allowed_paths = vec!["docs/**".to_owned()];
        assert_eq!(
            narrowed(&parked, &paths).as_deref(),
            Some("allowed path src/** was removed")
        );
        let mut smaller = set();
        smaller.envelope_micro_usd = Some(1);
        assert!(narrowed(&parked, &smaller).unwrap().contains("shrank"));
        let mut everywhere = set();
        everywhere.allowed_paths.clear();
        assert!(
            narrowed(&everywhere, &parked)
                .unwrap()
                .contains("were everywhere")
        );
        let mut unbounded = set();
        unbounded.envelope_micro_usd = None;
        assert!(narrowed(&unbounded, &parked).unwrap().contains("unbounded"));
    }

    #[test]
    fn widening_and_stricter_containment_are_not_narrowing() {
        let parked = set();
        let mut wider = set();
        wider.allowed_tools.push("Write".to_owned());
        wider.allowed_paths.clear();
        wider.envelope_micro_usd = None;
        assert_eq!(narrowed(&parked, &wider), None);
        let mut off = set();
        off.containment = "off".to_owned();
        assert_eq!(narrowed(&off, &parked), None);
        let mut required = set();
        required.containment = "required".to_owned();
        assert_eq!(narrowed(&parked, &required), None);
    }

    #[test]
    fn the_grant_comes_from_the_plan() {
        let plan = parse_plan(
            "version: 1\nname: g\nagents:\n  claude:\n    allowed_tools: [Edit, Bash, Edit]\ntasks:\n  - id: a\n    prompt: p\n    agent: claude\n    budget_usd: \"0.50\"\n    allowed_paths: [src/**]\n  - id: b\n    prompt: p\n    agent: codex\n",
            "plan.yaml",
        )
        .unwrap();
        let claude = grant_of(&plan.tasks()[0], &plan);
        assert_eq!(claude.agent, "claude");
        assert_eq!(claude.allowed_tools, ["Bash", "Edit"]);
        assert_eq!(claude.allowed_paths, ["src/**"]);
        assert_eq!(claude.containment, "strict");
        assert_eq!(claude.envelope_micro_usd, Some(500_000));
        let codex = grant_of(&plan.tasks()[1], &plan);
        assert_eq!(codex.agent, "codex");
        assert!(codex.allowed_tools.is_empty());
        assert_eq!(codex.envelope_micro_usd, None);
    }
}
