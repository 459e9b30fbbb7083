//! The program a shell command line starts, where that can be told from the
//! text alone: `pytest -q` starts `pytest`, `FOO=1 ./check.sh` starts
//! `./check.sh`. Checking that it exists before a run (`run --check`) turns
//! a missing tool into one line before anything is spent, instead of an
//! exit 127 that reads like a failing test. Anything the shell would work
//! out at run time (an expansion, a quote, a builtin, a function defined on
//! the line) is `Undecided`: never a false alarm.

/// What the first word of a command line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellProgram<'a> {
    /// A bare name, looked up on `PATH`.
    Name(&'a str),
    /// A path (it has a `/`), relative to the working directory or absolute.
    Path(&'a str),
    /// A shell builtin or keyword, or something only the shell can resolve.
    Undecided,
}

/// Words the shell itself runs (POSIX builtins and keywords, and common
/// ones of bash and dash).
const SHELL_WORDS: &[&str] = &[
    "!", ".", ":", "[", "[[", "{", "(", "alias", "bg", "break", "case", "cd", "command",
    "continue", "echo", "eval", "exec", "exit", "export", "false", "fg", "for", "function",
    "getopts", "hash", "if", "jobs", "kill", "local", "printf", "pwd", "read", "readonly",
    "return", "set", "shift", "source", "test", "times", "trap", "true", "type", "ulimit", "umask",
    "unalias", "unset", "until", "wait", "while", "time",
];

/// The program `command` (a `sh -c` line) starts first.
pub fn shell_program(command: &str) -> ShellProgram<'_> {
    // A line that defines or chooses something at run time is left alone.
    let first_line = command.lines().find(|line| !line.trim().is_empty());
    let Some(line) = first_line else {
        return ShellProgram::Undecided;
    };
    for word in line.split_whitespace() {
        if is_assignment(word) {
            continue;
        }
        if word.starts_with('#') {
            return ShellProgram::Undecided;
        }
        if word.contains(|c: char| "$`'\"\\*?[]{}()<>|&;~".contains(c))
            || SHELL_WORDS.contains(&word)
        {
            return ShellProgram::Undecided;
        }
        if word.contains('/') {
            return ShellProgram::Path(word);
        }
        return ShellProgram::Name(word);
    }
    ShellProgram::Undecided
}

/// `NAME=value` before the program: an assignment, not the program.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_word_is_the_program_when_the_text_says_so() {
        assert_eq!(shell_program("pytest -q"), ShellProgram::Name("pytest"));
        assert_eq!(shell_program("  cargo test\n"), ShellProgram::Name("cargo"));
        assert_eq!(
            shell_program("CI=1 RUST_LOG=x ./check.sh --min 80"),
            ShellProgram::Path("./check.sh")
        );
        assert_eq!(
            shell_program("/usr/bin/env x"),
            ShellProgram::Path("/usr/bin/env")
        );
        assert_eq!(
            shell_program("\n\ngrep -qx hello greeting.txt"),
            ShellProgram::Name("grep")
        );
    }

    #[test]
    fn what_only_the_shell_can_resolve_is_undecided() {
        for line in [
            "",
            "cd sub && make",
            "test -f x",
            "[ -f x ]",
            "$TOOL run",
            "\"my tool\" x",
            "(cd a; make)",
            "if true; then x; fi",
            "echo hi",
            "# a comment",
            "exec 2>&1",
            "FOO=1",
        ] {
            assert_eq!(shell_program(line), ShellProgram::Undecided, "{line:?}");
        }
    }
}
