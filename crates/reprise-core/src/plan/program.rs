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
            // A value with a substitution or a quote may run on past this
            // word (`J=$(git rev-parse HEAD)`): what follows is not known
            // to be the program.
            if word.contains(|c: char| "$`'\"\\(".contains(c)) {
                return ShellProgram::Undecided;
            }
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

/// Interpreters whose first operand is the script they run, each with the
/// options after which there is no script file (the code or module comes
/// on the line instead).
const INTERPRETERS: &[(&str, &[&str])] = &[
    ("sh", &["-c", "-s"]),
    ("bash", &["-c", "-s"]),
    ("dash", &["-c", "-s"]),
    ("zsh", &["-c", "-s"]),
    ("ksh", &["-c", "-s"]),
    ("python", &["-c", "-m", "-"]),
    ("python3", &["-c", "-m", "-"]),
    ("node", &["-e", "-p", "--eval", "--print", "-"]),
    ("perl", &["-e", "-E", "-"]),
    ("ruby", &["-e", "-"]),
];

/// The file a gate's command runs as its program, when the text alone says
/// so and it can be a file of the tree: the first program when it is a
/// relative path (`./gate.sh`, `scripts/check --fast`), or, after an
/// interpreter (`sh`, `bash`, `python3`, `node`, `perl`, `ruby`, ...), its
/// script operand (`sh tests/check.sh`, `python3 -W ignore x.py`): each of
/// the words after the interpreter that is not an option, in order, until
/// one names a file (`is_file`, given the path relative to the command's
/// directory). The path comes back without `./` and `.` components; one
/// that climbs out (`..`) or is absolute is not the tree's.
pub fn gate_script(command: &str, is_file: &dyn Fn(&str) -> bool) -> Option<String> {
    let line = command.lines().find(|line| !line.trim().is_empty())?;
    let mut words = line
        .split_whitespace()
        .skip_while(|word| is_assignment(word));
    match shell_program(command) {
        ShellProgram::Path(path) => tree_path(path),
        ShellProgram::Name(name) => {
            let (_, no_script) = INTERPRETERS
                .iter()
                .find(|(interpreter, _)| *interpreter == name)?;
            words.next();
            for word in words {
                if word.contains(|c: char| "$`'\"\\*?[]{}()<>|&;~#".contains(c)) {
                    return None;
                }
                if word.starts_with('-') {
                    if no_script.contains(&word) {
                        return None;
                    }
                    continue;
                }
                if let Some(path) = tree_path(word).filter(|path| is_file(path)) {
                    return Some(path);
                }
            }
            None
        }
        ShellProgram::Undecided => None,
    }
}

/// `path` as a path inside the tree: relative, `.` components dropped, no
/// `..`.
fn tree_path(path: &str) -> Option<String> {
    if path.starts_with('/') {
        return None;
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            part => parts.push(part),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
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
        // An assignment whose value substitutes or quotes may span words:
        // the word after it is not the program.
        for line in [
            "J=$(git rev-parse HEAD) && test -n \"$J\"",
            "J=`git rev-parse HEAD` && test -n \"$J\"",
            "MSG=\"two words\" ./check.sh",
            "A='x y' run",
        ] {
            assert_eq!(shell_program(line), ShellProgram::Undecided, "{line}");
        }
    }

    #[test]
    fn a_gate_s_program_file_is_its_relative_path_or_its_interpreter_s_script() {
        let files = ["gate.sh", "tests/check.sh", "scripts/x.py", "bin/check"];
        let is_file = |path: &str| files.contains(&path);
        let script = |command: &str| gate_script(command, &is_file);
        assert_eq!(script("./gate.sh"), Some("gate.sh".into()));
        assert_eq!(script("CI=1 ./bin/check --all"), Some("bin/check".into()));
        assert_eq!(script("sh tests/check.sh"), Some("tests/check.sh".into()));
        assert_eq!(
            script("bash -eu ./tests//check.sh x"),
            Some("tests/check.sh".into())
        );
        assert_eq!(
            script("python3 scripts/x.py --fast"),
            Some("scripts/x.py".into())
        );
        assert_eq!(
            script("python3 -W ignore scripts/x.py"),
            Some("scripts/x.py".into())
        );
        assert_eq!(script("sh gate.sh"), Some("gate.sh".into()));
        // Not a file of the tree: what the agent may create, or the system's.
        assert_eq!(script("./missing.sh"), Some("missing.sh".into()));
        for command in [
            "/usr/bin/check",
            "../outside.sh",
            "sh -c './gate.sh'",
            "python3 -m pytest tests/",
            "pytest -q",
            "cargo test",
            "sh $SCRIPT",
            "node -e 'x'",
            "cd sub && ./gate.sh",
            "python3 missing.py",
        ] {
            assert_eq!(script(command), None, "{command}");
        }
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
