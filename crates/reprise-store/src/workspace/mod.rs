//! The workspace hash: one deterministic digest of a directory tree.
//!
//! Retry decisions compare the hash of a task's sandbox before and after an
//! agent attempt, so the hash must change exactly when the files the task
//! works on change, and must not depend on anything but the tree itself.
//!
//! # What is hashed
//!
//! Every entry under the root that the tree's own ignore rules keep:
//!
//! - `.gitignore` files at any depth, with git's semantics (negations, `dir/`
//!   patterns, anchoring; a deeper file overrides a shallower one), applied
//!   whether or not the tree is a git repository;
//! - `ROOT/.git/info/exclude` when `ROOT/.git` is a directory, anchored at the
//!   root and below every `.gitignore`, as in git.
//!
//! Nothing from outside the tree is consulted: not the user's global
//! gitignore, not `.gitignore` files above the root, not `.ignore` files, and
//! not the exclude file of the repository that a worktree's `.git` *file*
//! points to. An ignored path is left out even if git tracks it: the hash
//! reads the tree, never a git index. A pattern that does not parse, or a line
//! that is not UTF-8, is dropped, as the `ignore` crate (ripgrep's matcher)
//! does. Hidden files count. Any entry named `.git` (a repository, or the
//! `.git` file of a worktree or submodule) or `.reprise` (reprise's own state)
//! is left out at every depth with everything below it: both change on their
//! own while a task runs, and neither is the task's work.
//!
//! Entries are regular files, symlinks (never followed) and other
//! non-directory types (fifo, socket, block and character devices), which are
//! recorded by type and never opened. Directories are not entries, so an empty
//! directory changes nothing, as in git. Modification times, owners and every
//! mode bit but "executable" are left out: they change without the content
//! changing.
//!
//! # Encoding (version 1)
//!
//! ```text
//! hash   = SHA-256( "reprise/workspace/v1\n" || record_1 || ... || record_n )
//! record = u64le(len(path)) || path || type || executable || payload
//! ```
//!
//! - `path`: the entry's path relative to the root, as raw unix bytes with `/`
//!   separators and no leading `./`. Records are sorted by these bytes
//!   (plain bytewise order); paths are unique.
//! - `type`: one byte, `f` regular file, `l` symlink, `p` fifo, `s` socket,
//!   `b` block device, `c` character device.
//! - `executable`: one byte, `0x01` for a regular file with any of the `0o111`
//!   mode bits set, otherwise `0x00`.
//! - `payload`: for `f`, the 32-byte SHA-256 of the content (untagged, what
//!   `sha256sum` prints); for `l`, `u64le(len(target)) || target` with the
//!   link's target bytes as `readlink` returns them; nothing for other types.
//!
//! `u64le` is an unsigned 64-bit little-endian integer. The type byte fixes the
//! payload's length, so the stream parses one way only. `files` counts
//! records; `bytes` sums the content bytes of regular files.
//!
//! # Concurrent changes
//!
//! The tree is walked in parallel, the entries sorted, and file contents then
//! hashed on worker threads; the records are encoded in sorted order, so the
//! hash does not depend on thread count or scheduling. An entry that
//! disappears during the walk is left out. A file is read up to the size
//! `fstat` reported when it was opened, as git does (a size of zero is not
//! trusted: such a file is read to its end). An entry that turns into another
//! type between listing and opening is an error: the tree changed under the
//! hash, and the caller should hash again.
//!
//! # Stat cache
//!
//! `hash_workspace_cached` gives the same hash, reading only the files whose
//! `lstat` no longer matches the one recorded with their digest in a cache
//! file; an unchanged file is never opened. The cache's format, and the rule
//! that keeps a file changed in the same timestamp tick from being trusted,
//! are in `stat_cache.rs`.
//!
//! A fresh checkout's cache can be seeded before its first hash
//! (`seed_stat_cache`): a file still exactly as its checkout index recorded
//! it gets its blob's digest from the state directory's blob digest map,
//! unread; `seed.rs` says when that is sound, `blob_digests.rs` holds the
//! map.

mod blob_digests;
mod cached;
mod error;
mod hash;
mod seed;
mod stat_cache;
#[cfg(test)]
mod test_support;
mod walk;

pub use cached::hash_workspace_cached;
pub use error::{Result, WorkspaceError};
pub use hash::{WorkspaceHash, hash_workspace};
pub use seed::{Checkout, SeedReport, seed_stat_cache};
pub use walk::covered_paths;
