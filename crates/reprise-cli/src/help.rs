//! The text every command's help ends with, and the macro that puts a
//! command's examples before it. Declared first in `main.rs` so the grammar
//! in `cli.rs` and the commands' own arguments can use it.

/// What every command's help ends with: the environment that affects it and
/// the exit codes.
macro_rules! common_help {
    () => {
        "\
Environment:
  REPRISE_STATE_DIR       the state directory (as --state-dir; default: .reprise here or in a parent)
  REPRISE_AUDIT_KEY_FILE  the audit key (default: $XDG_STATE_HOME/reprise/audit.key,
                          else $HOME/.local/state/reprise/audit.key)

Exit codes:
  0    success
  1    a task failed, a verification failed, or a refusal
  2    usage or bad input (nothing was written)
  3    a run ended with tasks parked
  130  stopped by SIGINT (Ctrl-C), 143 by SIGTERM: tasks cancelled, agents stopped"
    };
}

/// A command's examples followed by the common environment and exit codes.
macro_rules! help {
    ($examples:literal) => {
        // A literal's first line loses its indent to the `\` line
        // continuation; the others keep theirs.
        concat!("Examples:\n  ", $examples, "\n\n", common_help!())
    };
}
