//! The blob digest map: for a git blob id, the SHA-256 of the blob's bytes
//! (the content digest a workspace record holds), kept in the state
//! directory so a fresh checkout's files need not be read to be hashed.
//!
//! Every pair is computed from the same bytes: a file read whole gives its
//! SHA-256 and its blob id (SHA-1 of `blob <size>\0` and the bytes, git's
//! object id), so a pair is true whatever the file was, and no index or
//! checkout is trusted to fill the map. Trusting that a file holds a given
//! blob is the seed's decision (`seed.rs`), not the map's.
//!
//! Like the stat cache, the map is an optimisation only: a map that is
//! missing, damaged or of another version is set aside, one that cannot be
//! written is not written, and neither is an error.
//!
//! # File format (version 1)
//!
//! ```text
//! file  = "reprise/blob-digests\n" || u32le(1) || u64le(count)
//!         || pair_1 || ... || pair_count || sha256
//! pair  = blob_id (20 bytes) || sha256_of_content (32 bytes)
//! ```
//!
//! Pairs are sorted by blob id, strictly increasing; `sha256` is the SHA-256
//! of every byte before it.

use std::fs;
use std::path::Path;

use sha2::{Digest as _, Sha256};

use super::stat_cache::write_atomic;

const MAGIC: &[u8] = b"reprise/blob-digests\n";
const VERSION: u32 = 1;
const PAIR_BYTES: usize = 20 + 32;
const CHECKSUM_BYTES: usize = 32;

/// A git blob id (SHA-1).
pub(super) type BlobId = [u8; 20];

/// Blob ids and their content digests, sorted by id with no id twice.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct BlobDigests {
    pairs: Vec<(BlobId, [u8; 32])>,
}

impl BlobDigests {
    /// The map at `path`; an empty one when it is missing or unusable.
    pub(super) fn load(path: &Path) -> Self {
        fs::read(path)
            .ok()
            .and_then(|bytes| parse(&bytes))
            .unwrap_or_default()
    }

    pub(super) fn get(&self, id: &BlobId) -> Option<&[u8; 32]> {
        self.pairs
            .binary_search_by(|(known, _)| known.cmp(id))
            .ok()
            .map(|at| &self.pairs[at].1)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.pairs.len()
    }

    /// The pairs of `ids` only, from this map and from `learned`: what the
    /// next checkout of the same tree needs, so the map stays the size of
    /// one tree.
    pub(super) fn kept<'id>(
        &self,
        learned: &[(BlobId, [u8; 32])],
        ids: impl Iterator<Item = &'id BlobId>,
    ) -> Self {
        let mut learned = learned.to_vec();
        learned.sort_unstable();
        learned.dedup_by_key(|(id, _)| *id);
        let mut pairs: Vec<_> = ids
            .filter_map(|id| {
                let digest = self.get(id).or_else(|| {
                    learned
                        .binary_search_by(|(known, _)| known.cmp(id))
                        .ok()
                        .map(|at| &learned[at].1)
                })?;
                Some((*id, *digest))
            })
            .collect();
        pairs.sort_unstable();
        pairs.dedup_by_key(|(id, _)| *id);
        Self { pairs }
    }

    /// Writes the map at `path` atomically; a failure is ignored.
    pub(super) fn store(&self, path: &Path) {
        let _ = write_atomic(path, &self.encode());
    }

    fn encode(&self) -> Vec<u8> {
        let mut bytes =
            Vec::with_capacity(MAGIC.len() + 12 + self.pairs.len() * PAIR_BYTES + CHECKSUM_BYTES);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&(self.pairs.len() as u64).to_le_bytes());
        for (id, digest) in &self.pairs {
            bytes.extend_from_slice(id);
            bytes.extend_from_slice(digest);
        }
        let checksum = Sha256::digest(&bytes);
        bytes.extend_from_slice(&checksum);
        bytes
    }
}

/// The pairs of a map file; `None` for anything but a whole, sorted map of
/// this version.
fn parse(bytes: &[u8]) -> Option<BlobDigests> {
    let body_end = bytes.len().checked_sub(CHECKSUM_BYTES)?;
    let (body, checksum) = bytes.split_at(body_end);
    if Sha256::digest(body)[..] != *checksum {
        return None;
    }
    let rest = body.strip_prefix(MAGIC)?;
    let (version, rest) = rest.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*version) != VERSION {
        return None;
    }
    let (count, rest) = rest.split_first_chunk::<8>()?;
    let count = usize::try_from(u64::from_le_bytes(*count)).ok()?;
    if rest.len() != count.checked_mul(PAIR_BYTES)? {
        return None;
    }
    let mut pairs: Vec<(BlobId, [u8; 32])> = Vec::with_capacity(count);
    for pair in rest.chunks_exact(PAIR_BYTES) {
        let (id, digest) = pair.split_at(20);
        let id: BlobId = id.try_into().ok()?;
        if pairs.last().is_some_and(|(previous, _)| *previous >= id) {
            return None;
        }
        pairs.push((id, digest.try_into().ok()?));
    }
    Some(BlobDigests { pairs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BlobDigests {
        let learned: Vec<_> = [3u8, 1, 2]
            .into_iter()
            .map(|byte| ([byte; 20], [byte.wrapping_mul(7); 32]))
            .collect();
        let ids: Vec<BlobId> = learned.iter().map(|(id, _)| *id).collect();
        BlobDigests::default().kept(&learned, ids.iter())
    }

    #[test]
    fn a_stored_map_loads_as_it_was() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cache/blob-digests.bin");
        let map = sample();
        map.store(&path);
        assert_eq!(BlobDigests::load(&path), map);
    }

    #[test]
    fn a_damaged_or_foreign_map_loads_empty() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("map");
        sample().store(&path);
        let good = fs::read(&path).expect("map");
        let mut flipped = good.clone();
        flipped[MAGIC.len() + 12 + 25] ^= 1;
        let mut newer = good.clone();
        newer[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&2u32.to_le_bytes());
        let cases = [
            ("a flipped digest bit", flipped),
            ("another version", newer),
            ("truncated", good[..good.len() - 1].to_vec()),
            ("empty", Vec::new()),
        ];
        for (name, bytes) in cases {
            fs::write(&path, bytes).expect("damage");
            assert_eq!(BlobDigests::load(&path).len(), 0, "{name}");
        }
        assert_eq!(BlobDigests::load(&dir.path().join("missing")).len(), 0);
    }

    #[test]
    fn kept_holds_only_the_ids_asked_for_that_it_knows_or_learned() {
        let learned = [([5u8; 20], [9u8; 32])];
        let kept = sample().kept(&learned, [[1u8; 20], [9u8; 20], [5u8; 20]].iter());
        assert_eq!(kept.len(), 2);
        assert_eq!(kept.get(&[1u8; 20]), Some(&[7u8; 32]));
        assert_eq!(kept.get(&[5u8; 20]), Some(&[9u8; 32]));
        assert_eq!(kept.get(&[2u8; 20]), None);
    }
}
