use super::tree::Tree;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

#[test]
fn deleted_leaf_is_reused() {
    let t = Tree::default();
    t.insert_if_absent(130, 1).unwrap(); // root (shift 7) + leaf for pages 128..256
    assert_eq!(t.node_counts(), (2, 0));
    assert!(t.remove_if(130, |_| true));
    // The leaf emptied and was deleted logically; the root stays.
    assert_eq!(t.node_counts(), (2, 1));
    assert_eq!(t.get(130), 0);
    t.insert_if_absent(255, 2).unwrap();
    assert_eq!(t.node_counts(), (2, 0), "the deleted leaf is revived, not replaced");
    assert_eq!(t.get(255), 2);
    t.check_counts();
}

/// A prefetch is a hint: on an empty tree, a page past the root's span, a missing leaf or a
/// present entry it changes nothing the tree says (no node made, no entry, no count).
#[test]
fn a_prefetch_changes_nothing() {
    let t = Tree::default();
    t.prefetch_slot(5);
    assert_eq!((t.len(), t.node_counts()), (0, (0, 0)));
    t.insert_if_absent(130, 1).unwrap();
    for page in [130, 129, 3, 1 << 40, u64::MAX] {
        t.prefetch_slot(page);
    }
    assert_eq!((t.len(), t.node_counts(), t.get(130), t.get(129)), (1, (2, 0), 1, 0));
    t.check_counts();
}

#[test]
fn expansion_keeps_entries() {
    let t = Tree::default();
    t.insert_if_absent(3, 7).unwrap();
    for b in [6, 7, 12, 13, 30, 50, 63] {
        t.insert_if_absent(1 << b, b).unwrap();
        assert_eq!(t.get(3), 7);
    }
    t.insert_if_absent(u64::MAX, 99).unwrap();
    assert_eq!(t.get(u64::MAX), 99);
    assert_eq!(t.len(), 9);
    t.check_counts();
}

#[test]
fn churn_over_far_apart_pages_frees_nodes() {
    let t = Tree::default();
    // A sliding window over a huge file: every leaf empties behind it.
    for p in 0..200_000u64 {
        t.insert_if_absent(p * 128, p as u32 + 1).unwrap();
        if p >= 4 {
            assert!(t.remove_if((p - 4) * 128, |_| true));
        }
    }
    let (nodes, deleted) = t.node_counts();
    // 4 live leaves and their ancestors, plus a bounded pool of deleted nodes.
    assert!(nodes < 600, "{nodes} nodes ({deleted} deleted) for 4 entries");
    assert_eq!(t.len(), 4);
    t.check_counts();
}

proptest! {
    #[test]
    fn counts_match_contents(ops in proptest::collection::vec((any::<bool>(), 0u64..5000, 1u32..4), 1..500)) {
        let t = Tree::default();
        let mut model = BTreeMap::new();
        for (insert, page, v) in ops {
            if insert {
                let want = match model.get(&page) { Some(&e) => Err(e), None => { model.insert(page, v); Ok(()) } };
                prop_assert_eq!(t.insert_if_absent(page, v), want);
            } else {
                prop_assert_eq!(t.remove_if(page, |_| true), model.remove(&page).is_some());
            }
        }
        t.check_counts();
        let mut all = Vec::new();
        t.for_each_from(0, |p, e| all.push((p, e)));
        prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    }
}

/// Threads insert and delete pages that share leaves and inner nodes, some of them racing
/// for the same pages, so node creation, deletion and reuse interleave; afterwards every
/// page holds exactly what the last successful operation left and the counts are exact.
#[test]
fn concurrent_inserts_and_deletes_keep_the_tree_exact() {
    // Dense: pages share leaves. Sparse: one page per leaf, so leaves and their parents are
    // deleted, revived and freed all the time.
    concurrent_churn(1);
    concurrent_churn(128);
}

fn concurrent_churn(stride: u64) {
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 20_000;
    let t = Arc::new(Tree::default());
    let start = Arc::new(std::sync::Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|id| {
            let t = t.clone();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let mut mine = BTreeMap::new();
                let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                for r in 0..ROUNDS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Own pages: interleaved with other threads' in the same leaves.
                    let own = ((x % 512) * THREADS + id) * stride;
                    let v = ((id << 24) | (r << 1) | 1) as u32;
                    if let Some(had) = mine.remove(&own) {
                        assert!(t.remove_if(own, |e| e == had));
                    } else {
                        t.insert_if_absent(own, v).unwrap();
                        mine.insert(own, v);
                    }
                    // A shared page: whoever wins owns it until it removes it.
                    let shared = ((x >> 20) % 64 + 1_000_000) * stride;
                    if t.insert_if_absent(shared, v).is_ok() {
                        assert_eq!(t.get(shared), v);
                        assert!(t.remove_if(shared, |e| e == v));
                    }
                }
                mine
            })
        })
        .collect();
    let mut want = BTreeMap::new();
    for h in handles {
        want.extend(h.join().unwrap());
    }
    let mut got = BTreeMap::new();
    t.for_each_from(0, |p, e| {
        got.insert(p, e);
    });
    assert_eq!(got, want);
    t.check_counts();
}

/// A node made in a retired one (`node::spare`) is as new: no slot, count or parent of
/// its past life survives.
#[test]
fn a_node_made_from_a_retired_one_is_clean() {
    use super::node::spare;
    use super::node::Node;
    use std::sync::atomic::Ordering;
    // A leaf, so the new node (inner) also shows that no entry word reads as a child.
    let used = Node::new(0, std::ptr::null_mut(), 5);
    for (i, s) in used.entries().iter().enumerate() {
        s.store(i as u32 + 1, Ordering::SeqCst);
    }
    used.state.store(super::node::DEL | 3, Ordering::SeqCst);
    let addr = &*used as *const Node as usize;
    spare::give(used);
    let parent: *mut Node = std::ptr::without_provenance_mut(0x1000);
    // Other tests may take it first; every node taken must be clean all the same.
    let mut kept = Vec::new();
    for _ in 0..8192 {
        let n = Node::new(7, parent, 1);
        assert_eq!(n.state.load(Ordering::SeqCst), 1);
        assert_eq!(n.parent.load(Ordering::SeqCst), parent);
        assert_eq!(n.shift, 7);
        assert!(n.children().iter().all(|s| s.load(Ordering::SeqCst).is_null()), "a slot of its past life");
        let ours = &*n as *const Node as usize == addr;
        kept.push(n);
        if ours {
            break;
        }
    }
}
