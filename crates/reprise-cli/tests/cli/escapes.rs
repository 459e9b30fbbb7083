//! A hostile agent against reprise's own git: what it writes into its
//! worktree's git linkage, config or object store never runs outside the
//! sandbox, never widens the next attempt's sandbox, and never changes what
//! the user's repository serves. And what the sandbox lets an agent write
//! besides its worktree (its CLI's own state) never reaches the key.

use super::worktrees::{git, git_env, outside_dir, task_json};
use super::*;

/// The agent's part: plants a git config that runs `payload` (a clean
/// filter, a textconv and an external diff, directly or through
/// `include.path`), makes every file use it, and points its worktree's git
/// linkage at that config, one way per variant. `$OUT` and `$KEY` are the
/// test's; the payload copies the key there and notes what ran it.
const LINKAGE_ATTACK: &str = r#"
variant=$1
REAL=$(git rev-parse --path-format=absolute --git-common-dir)
ADMIN=$(git rev-parse --path-format=absolute --git-dir)
E=$PWD/.evil
mkdir -p "$E/objects/info" "$E/refs/heads"
echo "$REAL/objects" > "$E/objects/info/alternates"
printf '#!/bin/sh\necho "$1" >> "%s/pwned"\ncat "%s" > "%s/stolen-key" 2>/dev/null\nexit 0\n' "$OUT" "$KEY" "$OUT" > "$E/payload"
chmod +x "$E/payload"
drivers="[filter \"pwn\"]
	clean = \"$E/payload filter-$variant; cat\"
	smudge = cat
	required = false
[diff \"pwn\"]
	textconv = \"$E/payload textconv-$variant; cat\"
[diff]
	external = \"$E/payload external-$variant\""
case "$variant" in
  include)
    printf '%s\n' "$drivers" > "$E/included.cfg"
    printf '[include]\n\tpath = %s\n' "$E/included.cfg" > "$E/config" ;;
  *)
    printf '%s\n' "$drivers" > "$E/config" ;;
esac
echo '* filter=pwn diff=pwn' > .gitattributes
case "$variant" in
  commondir|include)
    echo "$E" > "$ADMIN/commondir" ;;
  gitfile)
    cp "$ADMIN/HEAD" "$E/HEAD"
    cp "$ADMIN/index" "$E/index" 2>/dev/null
    printf 'gitdir: %s\n' "$E" > .git ;;
esac
echo "work of $variant" > work.txt
"#;

/// Runs a plan of hostile tasks (each `sh ATTACK ARGS`), with `OUT` (a
/// directory outside the project) and `KEY` (the audit key's path) in their
/// environment through the script, and returns the run's JSON.
fn hostile_run(env: &Env, script: &str, tasks: &[(&str, &str, u32)], out: &Path) -> Value {
    let attack = env.temp.path().join("attack.sh");
    fs::write(
        &attack,
        format!(
            "OUT='{}'\nKEY='{}'\n{script}",
            out.display(),
            env.key_path().display()
        ),
    )
    .unwrap();
    let mut plan = String::from(
        "version: 1\nname: hostile\ndefaults: { agent: command, timeout: 2m }\ntasks:\n",
    );
    for (id, arg, retries) in tasks {
        plan.push_str(&format!(
            "  - id: {id}\n    prompt: take over\n    max_retries: {retries}\n    command: [sh, {attack:?}, {arg}]\n",
            attack = attack.display().to_string()
        ));
    }
    fs::write(env.project().join("plan.yaml"), plan).unwrap();
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "stderr: {}",
        stderr(&output)
    );
    json_of(&output)
}

#[test]
fn a_config_the_agent_plants_through_its_git_linkage_never_runs_outside_the_sandbox() {
    let env = git_env();
    env.init();
    let out = outside_dir(&env, "out");
    let run = hostile_run(
        &env,
        LINKAGE_ATTACK,
        &[
            ("commondir", "commondir", 0),
            ("gitfile", "gitfile", 0),
            ("include", "include", 0),
        ],
        &out,
    );
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    // Everything reprise does with the results reads git: none of it may
    // run the agent's programs.
    for args in [
        vec!["diff", run_id.as_str(), "commondir"],
        vec!["diff", run_id.as_str(), "gitfile"],
        vec!["diff", run_id.as_str(), "include"],
        vec!["checkpoint", "list", "commondir", "--run", run_id.as_str()],
        vec!["clean", "--all"],
    ] {
        let _ = env.run(&args);
    }
    let ran = fs::read_to_string(out.join("pwned")).unwrap_or_default();
    assert_eq!(ran, "", "the agent's programs ran outside the sandbox");
    assert!(!out.join("stolen-key").exists(), "the key was read");
    // The work itself is delivered, as the files say (no filter applied).
    for task in ["commondir", "gitfile", "include"] {
        let status = task_json(&run, task);
        assert_eq!(status["state"], "passed", "{task}: {status}");
        let shown = git(
            &env,
            &["show", &format!("reprise/{run_id}/{task}:work.txt")],
        );
        assert_eq!(shown, format!("work of {task}"));
    }
}

/// Attempt 1 points the worktree's `.git` at a directory outside it and
/// fails; attempt 2 tries to write there.
const WIDENING_ATTACK: &str = r#"
if [ "$REPRISE_ATTEMPT" = 1 ]; then
  printf 'gitdir: %s\n' "$OUT" > .git
  exit 1
fi
echo widened > "$OUT/widened" 2>/dev/null
echo done > done.txt
"#;

#[test]
fn a_rewritten_git_link_does_not_widen_the_next_attempts_sandbox() {
    let env = git_env();
    env.init();
    let out = outside_dir(&env, "out");
    let run = hostile_run(&env, WIDENING_ATTACK, &[("widen", "x", 1)], &out);
    assert_eq!(
        task_json(&run, "widen")["attempts"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{run}"
    );
    assert!(
        !out.join("widened").exists(),
        "attempt 2 wrote where attempt 1's .git pointed"
    );
}

/// Replaces the loose object of the committed `shop.py` with other bytes
/// under the same name, then commits its own work in its worktree.
const OBJECT_ATTACK: &str = r#"
REAL=$(git rev-parse --path-format=absolute --git-common-dir)
blob=$(git rev-parse HEAD:shop.py)
object="$REAL/objects/$(echo $blob | cut -c1-2)/$(echo $blob | cut -c3-)"
python3 -c 'import sys, zlib; body = b"price = 0  # backdoor\n"; sys.stdout.buffer.write(zlib.compress(b"blob %d\0" % len(body) + body))' > "$OUT/forged"
if rm -f "$object" 2>/dev/null && cp "$OUT/forged" "$object" 2>/dev/null; then
  echo replaced > "$OUT/replaced"
fi
echo "price = 12" > shop.py
git add shop.py && git -c user.name=a -c user.email=a@a commit -qm mine && git log --format=%s -1 > committed.txt
"#;

#[test]
fn an_agent_cannot_replace_an_object_of_the_users_store_but_can_still_commit() {
    let env = git_env();
    env.init();
    let out = outside_dir(&env, "out");
    let blob = git(&env, &["rev-parse", "HEAD:shop.py"]);
    let run = hostile_run(&env, OBJECT_ATTACK, &[("forge", "x", 0)], &out);
    let run_id = run["run_id"].as_str().unwrap();
    assert_eq!(task_json(&run, "forge")["state"], "passed", "{run}");
    assert!(
        !out.join("replaced").exists(),
        "the agent replaced an object of the user's store"
    );
    // The user's repository serves its own bytes.
    assert_eq!(git(&env, &["show", "HEAD:shop.py"]), "price = 10");
    assert_eq!(git(&env, &["cat-file", "-p", &blob]), "price = 10");
    git(&env, &["fsck", "--no-dangling"]);
    // The agent's own commit worked in its worktree, and its result holds
    // the work (the files, as reprise hashed them).
    let result = format!("reprise/{run_id}/forge");
    assert_eq!(
        git(&env, &["show", &format!("{result}:committed.txt")]),
        "mine"
    );
    assert_eq!(
        git(&env, &["show", &format!("{result}:shop.py")]),
        "price = 12"
    );
}

/// A plan that moves an agent CLI's config home (which the agent's sandbox
/// lets it write) onto the audit key's directory: refused before anything
/// runs, as an `allowed_paths` entry there is, so no agent can replace the
/// key through its own state.
#[test]
fn an_agent_cli_s_config_home_that_reaches_the_audit_key_is_refused_before_anything_runs() {
    let env = super::worktrees::git_env();
    let key_dir = env.temp.path().join("home/.local/state/reprise");
    let plan = super::worktrees::write_plan(
        &env,
        "homes",
        &format!(
            r#"
version: 1
name: homes
agents:
  claude: {{ env: {{ CLAUDE_CONFIG_DIR: "{}" }} }}
defaults: {{ agent: claude, timeout: 30s }}
tasks:
  - {{ id: t, prompt: p }}
"#,
            key_dir.display()
        ),
    );
    for args in [&["run", &plan, "--check"][..], &["run", &plan]] {
        let output = env.run(args);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains(&format!(
                "agents.claude: its own state {} is the audit key's directory",
                key_dir.display()
            )),
            "{}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("point its config home"),
            "{}",
            stderr(&output)
        );
        assert!(!env.project().join(".reprise").exists(), "nothing written");
    }
}
