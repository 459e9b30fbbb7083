//! Why a tree could not be hashed, with messages that name the path.

use std::io;
use std::path::{Path, PathBuf};

/// Why a tree could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("cannot hash {}: no such directory", path.display())]
    RootMissing { path: PathBuf },
    #[error("cannot hash {}: not a directory", path.display())]
    RootNotDirectory { path: PathBuf },
    #[error("cannot read {}: {}", path.display(), describe_io(source))]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot hash {}: it changed type while the tree was being hashed; hash again", path.display())]
    ChangedType { path: PathBuf },
    #[error("cannot hash {}: unsupported file type", path.display())]
    UnsupportedType { path: PathBuf },
}

pub type Result<T, E = WorkspaceError> = std::result::Result<T, E>;

pub(super) fn read_error(path: &Path, source: io::Error) -> WorkspaceError {
    WorkspaceError::Read {
        path: path.to_path_buf(),
        source,
    }
}

pub(super) fn changed_type(path: &Path) -> WorkspaceError {
    WorkspaceError::ChangedType {
        path: path.to_path_buf(),
    }
}

/// "Permission denied (os error 13)" -> "permission denied": error messages
/// are one lowercase line.
fn describe_io(error: &io::Error) -> String {
    let text = error.to_string();
    let text = text
        .find(" (os error ")
        .map_or(text.as_str(), |end| &text[..end]);
    let mut characters = text.chars();
    match characters.next() {
        Some(first) => first.to_lowercase().chain(characters).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_error_messages_are_one_lowercase_line() {
        let error = WorkspaceError::Read {
            path: PathBuf::from("/x/y"),
            source: io::Error::from_raw_os_error(13),
        };
        assert_eq!(error.to_string(), "cannot read /x/y: permission denied");
    }
}
