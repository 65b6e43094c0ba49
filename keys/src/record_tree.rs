//! Per-record keys: one key for each sealed field of each event, all derived from the
//! session's data key by a binary tree (a GGM tree), so that one field's key can be destroyed
//! while every other field of the session still opens, and erasing the session still destroys
//! them all with the one row of the key store.
//!
//! A field's leaf is at depth [`DEPTH`]: 64 levels for the event's seq, then [`FIELD_BITS`]
//! for the field. A child key is SHA-256 of the parent and the side taken, so a node derives
//! every leaf below it and nothing else. The session holds a *frontier*: nodes whose
//! subtrees are disjoint, at first the root alone. Destroying a leaf (puncturing) replaces the
//! node above it by the siblings along the path down to it: every other leaf stays derivable,
//! that one no longer is from anything kept. Nothing per event is stored or fetched: sealing a
//! field costs a few hashes (the node of the event's 256-seq block is cached), not a write.

use aws_lc_rs::digest::{Context, SHA256};
use std::sync::Mutex;
use zeroize::Zeroizing;

/// Bits of a leaf's path given to the field within its event.
pub const FIELD_BITS: u8 = 4;
/// Depth of a leaf: the seq's 64 bits, then the field's.
pub const DEPTH: u8 = 64 + FIELD_BITS;
/// The depth of the node a tree caches: its subtree covers 2^8 consecutive seqs, so a writer
/// or reader going through a session in order derives 12 levels per field, not 68.
const CACHED_DEPTH: u8 = DEPTH - 8 - FIELD_BITS;
/// What every child derivation hashes first.
const CHILD_CONTEXT: &[u8] = b"sessionlog-tree\0";

/// The sensitive fields in the order of their slot under an event (see
/// [`crate::sensitive_fields`]): append only, a slot once given names its field for good.
const FIELDS: [&str; 10] = sessionlog_schemas::SEALED_FIELDS;

/// The slot of `field` under its event, if it is a sealed field.
pub fn field_slot(field: &str) -> Option<u8> {
    FIELDS
        .iter()
        .position(|f| *f == field)
        .and_then(|slot| u8::try_from(slot).ok())
}

/// The field in `slot`.
pub fn field_name(slot: u8) -> Option<&'static str> {
    FIELDS.get(usize::from(slot)).copied()
}

/// A field's leaf: its path from the root.
pub fn leaf(seq: u64, slot: u8) -> u128 {
    (u128::from(seq) << FIELD_BITS) | u128::from(slot)
}

/// One node: the top `depth` bits of a path (right-aligned) and the key there.
#[derive(Clone)]
pub struct Node {
    pub depth: u8,
    pub path: u128,
    pub key: Zeroizing<[u8; 32]>,
}

impl Node {
    /// Whether `leaf` is below this node.
    fn covers(&self, leaf: u128) -> bool {
        above(leaf, self.depth) == self.path
    }
}

/// The top `depth` bits of `leaf`'s path.
fn above(leaf: u128, depth: u8) -> u128 {
    if depth == 0 {
        0
    } else {
        leaf >> (DEPTH - depth)
    }
}

/// The key of a node's child on side `bit` (0 left, 1 right).
fn child(key: &[u8; 32], bit: u8) -> Zeroizing<[u8; 32]> {
    let mut context = Context::new(&SHA256);
    context.update(CHILD_CONTEXT);
    context.update(key);
    context.update(&[bit]);
    let mut out = Zeroizing::new([0u8; 32]);
    out.copy_from_slice(context.finish().as_ref());
    out
}

/// Walks down from `node` to depth `to` along `leaf`'s path.
fn descend(node: &Node, leaf: u128, to: u8) -> Zeroizing<[u8; 32]> {
    let mut key = node.key.clone();
    for depth in node.depth..to {
        let bit = u8::from((leaf >> (DEPTH - depth - 1)) & 1 == 1);
        key = child(&key, bit);
    }
    key
}

/// A session's record keys: the frontier it keeps, and the last block node it derived.
pub struct RecordTree {
    nodes: Vec<Node>,
    cached: Mutex<Option<Node>>,
}

impl RecordTree {
    /// The tree whose root is `root`.
    pub fn from_root(root: Zeroizing<[u8; 32]>) -> Self {
        Self::from_nodes(vec![Node {
            depth: 0,
            path: 0,
            key: root,
        }])
    }

    /// A tree keeping `nodes` (read back from the key store).
    pub fn from_nodes(nodes: Vec<Node>) -> Self {
        Self {
            nodes,
            cached: Mutex::new(None),
        }
    }

    /// The nodes kept.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The key of `leaf`, unless it was destroyed.
    pub fn leaf_key(&self, leaf: u128) -> Option<Zeroizing<[u8; 32]>> {
        let block = above(leaf, CACHED_DEPTH);
        // A poisoned cache only costs the derivation again.
        if let Ok(cached) = self.cached.lock()
            && let Some(node) = cached.as_ref().filter(|n| n.path == block)
        {
            return Some(descend(node, leaf, DEPTH));
        }
        let node = self.nodes.iter().find(|n| n.covers(leaf))?;
        if node.depth > CACHED_DEPTH {
            return Some(descend(node, leaf, DEPTH));
        }
        let block_node = Node {
            depth: CACHED_DEPTH,
            path: block,
            key: descend(node, leaf, CACHED_DEPTH),
        };
        let key = descend(&block_node, leaf, DEPTH);
        if let Ok(mut cached) = self.cached.lock() {
            *cached = Some(block_node);
        }
        Some(key)
    }

    /// Destroys `leaf`'s key: the node above it gives way to the siblings along the path
    /// down to it. Whether the leaf was derivable before.
    pub fn puncture(&mut self, leaf: u128) -> bool {
        let Some(at) = self.nodes.iter().position(|n| n.covers(leaf)) else {
            return false;
        };
        let mut node = self.nodes.swap_remove(at);
        while node.depth < DEPTH {
            let bit = u8::from((leaf >> (DEPTH - node.depth - 1)) & 1 == 1);
            let depth = node.depth + 1;
            let path = above(leaf, depth);
            self.nodes.push(Node {
                depth,
                path: path ^ 1,
                key: child(&node.key, bit ^ 1),
            });
            node = Node {
                depth,
                path,
                key: child(&node.key, bit),
            };
        }
        if let Ok(mut cached) = self.cached.lock() {
            *cached = None;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> RecordTree {
        RecordTree::from_root(Zeroizing::new([7u8; 32]))
    }

    #[test]
    fn a_punctured_leaf_is_gone_and_every_other_leaf_keeps_its_key() {
        let whole = tree();
        let mut punctured = tree();
        let target = leaf(1_000, 3);
        assert!(punctured.puncture(target));
        assert!(punctured.leaf_key(target).is_none());
        assert!(!punctured.puncture(target), "not twice");
        for seq in [0, 1, 999, 1_000, 1_001, 1 << 40, u64::MAX] {
            for slot in 0..16 {
                let l = leaf(seq, slot);
                if l == target {
                    continue;
                }
                assert_eq!(
                    punctured.leaf_key(l).as_deref(),
                    whole.leaf_key(l).as_deref(),
                    "seq {seq} slot {slot}"
                );
            }
        }
        // No node kept is above the destroyed leaf.
        assert!(punctured.nodes().iter().all(|n| !n.covers(target)));
        assert_eq!(punctured.nodes().len(), usize::from(DEPTH));
    }

    #[test]
    fn leaves_differ_and_the_cache_changes_nothing() {
        let t = tree();
        let a = t.leaf_key(leaf(5, 1)).unwrap();
        let b = t.leaf_key(leaf(5, 2)).unwrap();
        let c = t.leaf_key(leaf(6, 1)).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, c);
        // From a fresh tree (no cache) the same keys.
        assert_eq!(tree().leaf_key(leaf(6, 1)).unwrap(), c);
        assert_eq!(t.leaf_key(leaf(5, 1)).unwrap(), a);
    }

    #[test]
    fn every_sealed_field_has_a_slot_that_fits() {
        for (slot, field) in FIELDS.iter().enumerate() {
            assert_eq!(field_slot(field), u8::try_from(slot).ok());
            assert!(slot < 1 << FIELD_BITS);
        }
    }
}
