//! Checks, against the real installed agent CLIs, that every option our
//! adapters put on a command line is still one the CLI documents in its
//! `--help`, and that the installed CLIs are the pinned versions. An option
//! that disappears from a CLI (renamed, dropped) fails here rather than at
//! the first real run.
//!
//! The CLIs are the ones `scripts/install-agent-clis` (run by
//! `./scripts/test`) puts in `<workspace>/.tools/node_modules/.bin`, or in
//! the directory `REPRISE_AGENT_CLIS_BIN` names. A missing CLI fails the
//! test: it is never skipped.
//!
//! Every invocation builder is run for each session mode its adapter
//! supports; each argument before `--` that starts with `-` (cut at `=`) is
//! an option that the help of the matching (sub)command must define.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process::{End, Invocation, Stdin, run_process};
use crate::request::tests::request;
use crate::request::{CancelToken, SessionMode};

/// The versions `.tools/package.json` pins.
const CLAUDE_VERSION: &str = "2.1.197";
const CODEX_VERSION: &str = "0.171.0";
const GEMINI_VERSION: &str = "0.61.0";

/// Bound on one `--help` or `--version`. Each takes well under a second,
/// gemini's about two (node startup); the margin is for a loaded machine
/// running the other tests in parallel.
const CLI_TIMEOUT: Duration = Duration::from_secs(15);

/// The deepest indentation of a line that defines options. The three CLIs
/// indent option lines by 2 or 6 spaces and wrapped descriptions by 10
/// (codex) or 40 (claude), so a flag merely mentioned in another option's
/// description does not count as documented.
const MAX_OPTION_INDENT: usize = 6;

const ID: &str = "0b7e6f2a-3c1d-4e5f-8a9b-0c1d2e3f4a5b";
const NEW_ID: &str = "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a";

/// Where the agent CLIs are installed.
fn bin_dir() -> PathBuf {
    match std::env::var_os("REPRISE_AGENT_CLIS_BIN") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/node_modules/.bin"),
    }
}

/// The installed `name` CLI; panics (fails the test) when it is missing.
fn cli(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "agent CLI `{name}` not found at {}: run ./scripts/test or scripts/install-agent-clis to install the pinned agent CLIs (or set REPRISE_AGENT_CLIS_BIN to a directory holding claude, codex and gemini)",
        path.display()
    );
    path
}

/// What `program args...` prints (stdout, then stderr: CLIs differ in
/// where help goes), run with stdin null in a fresh home, config and cwd so
/// the CLI touches nothing real. Fails unless it exits 0 in time.
fn output_of(program: &Path, args: &[&str]) -> String {
    let home = tempfile::tempdir().expect("temporary home");
    let root = home.path();
    let dirs = [
        ("HOME", root.to_path_buf()),
        ("CLAUDE_CONFIG_DIR", root.join("claude")),
        ("CODEX_HOME", root.join("codex")),
        ("GEMINI_CLI_HOME", root.join("gemini")),
        ("XDG_CONFIG_HOME", root.join("xdg/config")),
        ("XDG_CACHE_HOME", root.join("xdg/cache")),
        ("XDG_DATA_HOME", root.join("xdg/data")),
        ("XDG_STATE_HOME", root.join("xdg/state")),
    ];
    let mut env = Vec::new();
    for (key, dir) in dirs {
        std::fs::create_dir_all(&dir).expect("temporary config dir");
        env.push((key.to_string(), dir.to_string_lossy().into_owned()));
    }
    let invocation = Invocation {
        cli_prefixes: &[],
        provider: crate::network::Provider::Any,
        program: program.to_path_buf(),
        args: args.iter().map(|arg| arg.to_string()).collect(),
        env,
        stdin: Stdin::Null,
        prompt_arg: None,
        session_id: None,
    };
    let shown = format!("{} {}", program.display(), args.join(" "));
    let finished = run_process(
        &invocation,
        root,
        CLI_TIMEOUT,
        &CancelToken::new(),
        None,
        Default::default(),
    )
    .unwrap_or_else(|e| panic!("{shown}: cannot run: {e}"));
    let stdout = String::from_utf8_lossy(&finished.stdout);
    let stderr = String::from_utf8_lossy(&finished.stderr);
    assert_eq!(
        finished.end,
        End::Exited,
        "{shown}: did not finish within {CLI_TIMEOUT:?}"
    );
    assert_eq!(
        finished.exit_code, 0,
        "{shown}: exit {}\nstdout: {stdout}\nstderr: {stderr}",
        finished.exit_code
    );
    format!("{stdout}\n{stderr}")
}

/// The option names at the start of one help line: `  -c, --continue  Text`
/// gives `-c` and `--continue`, `  --allowedTools, --allowed-tools <tools...>`
/// both spellings, `      --json` one. A value placeholder (`<x>`, `[x]`,
/// `=x`) ends a name; the first word that is not an option ends the list.
/// Lines indented deeper than option lines (descriptions) give nothing.
fn option_names(line: &str) -> impl Iterator<Item = &str> {
    let body = line.trim_start_matches(' ');
    let head = if line.len() - body.len() <= MAX_OPTION_INDENT {
        body
    } else {
        ""
    };
    head.split_whitespace().map_while(|word| {
        let word = word.strip_suffix(',').unwrap_or(word);
        let name = word.find(['=', '<', '[']).map_or(word, |end| &word[..end]);
        is_option_name(name).then_some(name)
    })
}

/// `-x` or `--some-name`: dashes, then a letter or digit, then letters,
/// digits, `-` and `_`.
fn is_option_name(word: &str) -> bool {
    let body = word
        .strip_prefix("--")
        .or_else(|| word.strip_prefix('-'))
        .unwrap_or("");
    body.starts_with(|c: char| c.is_ascii_alphanumeric())
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Whether `help` defines the option `flag` (as a whole name on an option
/// line, not as a prefix of a longer name nor in some description).
fn documents(help: &str, flag: &str) -> bool {
    help.lines()
        .any(|line| option_names(line).any(|name| name == flag))
}

/// Whether `help` lists `name` in its `Commands:` section.
fn lists_command(help: &str, name: &str) -> bool {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .any(|line| line.split_whitespace().next() == Some(name))
}

/// The options in `args`: each argument before `--` that starts with `-`,
/// cut at `=` (`--prompt=P` is the option `--prompt`).
fn flags(args: &[String]) -> Vec<&str> {
    args.iter()
        .take_while(|arg| *arg != "--")
        .filter(|arg| arg.starts_with('-'))
        .map(|arg| arg.split_once('=').map_or(arg.as_str(), |(name, _)| name))
        .collect()
}

/// The options of `args` that `help` (of `command`) lacks, described; none
/// gives `None`.
fn undocumented(command: &str, help: &str, args: &[String]) -> Option<String> {
    let missing: Vec<&str> = flags(args)
        .into_iter()
        .filter(|flag| !documents(help, flag))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "`{command} --help` does not document {missing:?}, which the adapter passes in {args:?}"
        )
    })
}

/// Fails with every problem found, so one run names all missing options.
fn assert_no_problems(problems: &[String]) {
    assert!(problems.is_empty(), "{}", problems.join("; "));
}

fn assert_version(program: &Path, version: &str) {
    let out = output_of(program, &["--version"]);
    assert!(
        out.split_whitespace().any(|word| word == version),
        "{} --version printed {:?}, not the pinned {version}: run scripts/install-agent-clis",
        program.display(),
        out.trim()
    );
}

fn new_session() -> SessionMode {
    SessionMode::New {
        session_id: Some(ID.into()),
    }
}

fn resume() -> SessionMode {
    SessionMode::Resume {
        session_id: ID.into(),
    }
}

fn fork() -> SessionMode {
    SessionMode::Fork {
        from: ID.into(),
        new_session_id: Some(NEW_ID.into()),
    }
}

#[test]
fn documents_matches_whole_option_names_on_option_lines() {
    let help = "\
Usage: tool [options] -- use -q/--quiet for less
Options:
  -c, --continue                Continue the most recent conversation
  -r, --resume-session [value]  Resume a conversation
  --allowedTools, --allowed-tools <tools...>
      Comma or space-separated list of tools
  --max-budget-usd <amount>     Maximum spend (only works with --print)
                                and with --verbose
      --json
          Print events as JSONL; see --hidden
  -o, --output-format           The format  [string]
  -C, --cd <DIR>
  --tmux=<mode>                 Use tmux
";
    for flag in [
        "-c",
        "--continue",
        "-r",
        "--resume-session",
        "--allowedTools",
        "--allowed-tools",
        "--max-budget-usd",
        "--json",
        "-o",
        "--output-format",
        "-C",
        "--cd",
        "--tmux",
    ] {
        assert!(documents(help, flag), "{flag} should be documented");
    }
    for flag in [
        // A prefix of a longer option, or a longer name than the option.
        "--resume",
        "--allowed",
        "--output",
        "--jsonl",
        "--continue-x",
        // Only mentioned in a usage line or a description.
        "-q",
        "--quiet",
        "--print",
        "--verbose",
        "--hidden",
        // Case matters: `-c` and `-C` are different options.
        "--CD",
        "-p",
    ] {
        assert!(!documents(help, flag), "{flag} should not be documented");
    }
}

#[test]
fn lists_command_reads_only_the_commands_section() {
    let help = "\
Usage: tool exec [OPTIONS] <COMMAND>

Commands:
  resume  Resume a previous session, see fork
  fork    Fork a previous session

Arguments:
  review
";
    assert!(lists_command(help, "resume"));
    assert!(lists_command(help, "fork"));
    assert!(!lists_command(help, "review"));
    assert!(!lists_command(help, "Resume"));
    assert!(!lists_command("Usage: tool\n", "resume"));
}

#[test]
fn flags_are_the_dashed_arguments_before_the_separator() {
    let args: Vec<String> = [
        "exec",
        "--prompt=P -x",
        "-o",
        "json",
        "-c",
        "a=b",
        "--",
        "--not-a-flag",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(flags(&args), ["--prompt", "-o", "-c"]);
}

#[test]
fn claude_is_the_pinned_version() {
    assert_version(&cli("claude"), CLAUDE_VERSION);
}

#[test]
fn codex_is_the_pinned_version() {
    assert_version(&cli("codex"), CODEX_VERSION);
}

#[test]
fn gemini_is_the_pinned_version() {
    assert_version(&cli("gemini"), GEMINI_VERSION);
}

#[test]
fn claude_documents_every_flag_the_adapter_passes() {
    let program = cli("claude");
    let help = output_of(&program, &["--help"]);
    let cwd = Path::new("/w");
    let tools = ["Bash(git *)".to_string(), "Read".to_string()];
    let mut seen = Vec::new();
    let mut problems = Vec::new();
    for session in [new_session(), resume(), fork()] {
        let plain = request(session, cwd);
        let mut budgeted = plain.clone();
        budgeted.budget_micro_usd = Some(1_000_000);
        for (request, tools) in [(&plain, &[][..]), (&budgeted, &tools[..])] {
            let built = crate::claude::invocation(request, program.clone(), tools);
            problems.extend(undocumented("claude", &help, &built.args));
            seen.extend(flags(&built.args).into_iter().map(String::from));
        }
    }
    // The requests above must reach the conditional options, or they would
    // go unchecked.
    for flag in ["--max-budget-usd", "--allowedTools", "--fork-session"] {
        if !seen.iter().any(|seen| seen == flag) {
            problems.push(format!("{flag} was never built, so never checked"));
        }
    }
    assert_no_problems(&problems);
}

#[test]
fn codex_documents_every_flag_the_adapter_passes() {
    let program = cli("codex");
    let exec_help = output_of(&program, &["exec", "--help"]);
    let mut problems = Vec::new();
    for subcommand in ["resume", "fork"] {
        if !lists_command(&exec_help, subcommand) {
            problems.push(format!(
                "`codex exec --help` lists no `{subcommand}` subcommand"
            ));
        }
    }
    for session in [new_session(), resume(), fork()] {
        let built = crate::codex::invocation(&request(session, Path::new("/w")), program.clone());
        // The positionals before the options name the subcommand, whose
        // own help documents its options.
        let words: Vec<&str> = built
            .args
            .iter()
            .map(String::as_str)
            .take_while(|arg| !arg.starts_with('-'))
            .collect();
        let sub_help;
        let help = match words[..] {
            ["exec"] => &exec_help,
            ["exec", sub @ ("resume" | "fork")] => {
                sub_help = output_of(&program, &["exec", sub, "--help"]);
                &sub_help
            }
            _ => panic!("unexpected codex subcommand {words:?} in {:?}", built.args),
        };
        let command = format!("codex {}", words.join(" "));
        problems.extend(undocumented(&command, help, &built.args));
    }
    assert_no_problems(&problems);
}

#[test]
fn gemini_documents_every_flag_the_adapter_passes() {
    let program = cli("gemini");
    let help = output_of(&program, &["--help"]);
    // Gemini cannot fork: the adapter refuses a fork before building.
    let sessions = [
        new_session(),
        SessionMode::New { session_id: None },
        resume(),
    ];
    let problems: Vec<String> = sessions
        .into_iter()
        .filter_map(|session| {
            let built =
                crate::gemini::invocation(&request(session, Path::new("/w")), program.clone());
            undocumented("gemini", &help, &built.args)
        })
        .collect();
    assert_no_problems(&problems);
}
