//! Finding a contained agent's processes from outside.
//!
//! A contained attempt runs in a PID namespace of its own, so the pid an
//! agent can write down (`$$`) is its namespace's, not this machine's. A
//! test marks the processes it wants to find with a variable of their
//! environment, which every descendant inherits, and looks them up here.

use std::fs;

/// The live processes (not zombies) whose environment holds `entry`
/// (`NAME=value`), by their pids on this machine.
pub fn pids_with_env(entry: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let wanted = entry.as_bytes();
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let zombie = fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let (_, rest) = stat.rsplit_once(')')?;
                    rest.split_whitespace().next().map(|state| state == "Z")
                })
                .unwrap_or(true);
            !zombie
                && fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|environ| environ.split(|byte| *byte == 0).any(|var| var == wanted))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::pids_with_env;

    #[test]
    fn a_child_is_found_by_a_variable_of_its_environment() {
        let entry = format!("REPRISE_TESTKIT_MARK={}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("REPRISE_TESTKIT_MARK", std::process::id().to_string())
            .spawn()
            .expect("spawn");
        let found = pids_with_env(&entry);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, vec![child.id()]);
        assert!(pids_with_env(&entry).is_empty());
    }
}
