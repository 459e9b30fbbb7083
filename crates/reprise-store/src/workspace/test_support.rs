//! Helpers the workspace tests share: building trees and hashing them.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use tempfile::TempDir;

use super::stat_cache::{CachedFile, CachedFiles};
use super::{WorkspaceHash, hash_workspace};

pub(super) fn write(root: &Path, relative: &str, content: &[u8]) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().expect("a file has a parent")).expect("create parent");
    fs::write(&path, content).expect("write file");
}

pub(super) fn set_mode(root: &Path, relative: &str, mode: u32) {
    fs::set_permissions(root.join(relative), fs::Permissions::from_mode(mode)).expect("set mode");
}

pub(super) fn hash(root: &Path) -> WorkspaceHash {
    hash_workspace(root, 2).expect("hash the tree")
}

/// `a.txt`, `sub/b.txt` and `link` -> `a.txt`.
pub(super) fn base_tree() -> TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    write(root, "a.txt", b"alpha\n");
    write(root, "sub/b.txt", b"beta\n");
    set_mode(root, "a.txt", 0o644);
    set_mode(root, "sub/b.txt", 0o644);
    symlink("a.txt", root.join("link")).expect("symlink");
    dir
}

/// Looks up one recorded path.
pub(super) fn find<'files, 'bytes>(
    files: &'files CachedFiles<'bytes>,
    path: &[u8],
) -> Option<&'files CachedFile<'bytes>> {
    files.cursor_from(path).find(path)
}
