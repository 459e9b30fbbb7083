//! The witness file of a state directory, kept beside the audit key.
//!
//! `<key dir>/witness/<name>.json`, where `<name>` is a hash of the state
//! directory's canonical path, mode 0600 in a 0700 directory. It is replaced
//! atomically (temp file, fsync, rename) after every audit append, while the audit chain's lock is held, so two appenders never write
//! it out of order. The format and the comparison with the chain are in
//! `reprise_core::witness`.

use std::fs;
use std::path::PathBuf;

use reprise_core::digest::tagged_sha256;
use reprise_core::witness::{Witness, WitnessFault, decode_witness, encode_witness};

use crate::error::{IoContext, Result};
use crate::fsutil::{create_dir_all_durable, replace_synced, write_atomic};
use crate::key::KeyFile;
use crate::state::StateDir;

/// What was found where the witness should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WitnessRead {
    Missing,
    Invalid(WitnessFault),
    Valid(Witness),
}

/// Where the witness of `state` lives for this key.
pub fn witness_path(key: &KeyFile, state: &StateDir) -> PathBuf {
    let root = state
        .root()
        .canonicalize()
        .unwrap_or_else(|_| state.root().to_path_buf());
    let name = tagged_sha256(
        b"reprise/witness-name/v1\n",
        &[root.as_os_str().as_encoded_bytes()],
    )
    .to_hex();
    key.path
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
        .join("witness")
        .join(format!("{}.json", &name[..32]))
}

/// Reads and checks the witness of `state`.
pub fn read_witness(key: &KeyFile, state: &StateDir) -> Result<WitnessRead> {
    let path = witness_path(key, state);
    match fs::read(&path) {
        Ok(bytes) => Ok(match decode_witness(key, &bytes) {
            Ok(witness) => WitnessRead::Valid(witness),
            Err(fault) => WitnessRead::Invalid(fault),
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(WitnessRead::Missing),
        Err(err) => Err(err).at(path),
    }
}

/// Replaces the witness of `state`: the file is synced before the rename,
/// the directory is not. A crash may bring back the previous witness, which
/// is behind the chain and so still agrees with it; it never leaves a torn
/// one. (One fsync per audit append instead of two.)
/// The first witness of a state directory (`first`) is published with its
/// directory synced too, so a crash cannot lose it altogether.
pub fn write_witness(
    key: &KeyFile,
    state: &StateDir,
    witness: &Witness,
    first: bool,
) -> Result<()> {
    let path = witness_path(key, state);
    if let Some(dir) = path.parent() {
        create_dir_all_durable(dir, 0o700)?;
    }
    let bytes = encode_witness(key, witness)?;
    if first {
        write_atomic(&path, &bytes, 0o600)
    } else {
        replace_synced(&path, &bytes, 0o600)
    }
}
