//! loom models of the frame state word protocol and of the ccXArray page index
//! (`index::radix::tree`). Run with `ci/loom.sh`
//! (`RUSTFLAGS="--cfg loom" cargo test --test loom --release`).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use upcache::internals::frame::state::{self, ClaimResult, FrameState, LOCKED, UNOWNED, VALID};
use upcache::internals::frame::wait::WaitTable;

/// An owned, valid, unpinned, unreferenced frame.
fn resident() -> FrameState {
    let s = FrameState::new_unowned();
    s.assign_locked();
    s.unlock(VALID, 0);
    s.unpin();
    s.clear_referenced();
    s
}

#[test]
fn pin_and_eviction_exclude_each_other() {
    loom::model(|| {
        let s = Arc::new(resident());
        let s2 = s.clone();
        let pinner = thread::spawn(move || s2.try_pin().is_ok());
        // A CLOCK sweep: a referenced frame gets a second look, as the hand comes round again.
        let mut r = s.try_claim();
        if r == ClaimResult::Referenced {
            r = s.try_claim();
        }
        let claimed = r == ClaimResult::Claimed;
        let pinned = pinner.join().unwrap();
        let w = s.load();
        assert!(!(pinned && claimed), "a pinned frame was evicted");
        if claimed {
            assert_eq!(w, UNOWNED);
        }
        if pinned {
            assert_eq!(state::pins(w), 1);
            assert_eq!(w & UNOWNED, 0);
        }
    });
}

#[test]
fn a_waiter_is_always_woken_by_unlock() {
    loom::model(|| {
        let s = Arc::new(FrameState::new_unowned());
        let waits = Arc::new(WaitTable::default());
        s.assign_locked(); // the loader: pinned, LOCKED, not VALID
        let (s2, w2) = (s.clone(), waits.clone());
        s2.try_pin().unwrap(); // the waiter's pin, taken before it waits
        let waiter = thread::spawn(move || {
            let w = w2.wait_until(7, &s2, |w| w & VALID != 0 || w & LOCKED == 0);
            assert!(w & VALID != 0);
            s2.unpin();
        });
        let old = s.unlock(VALID, 0);
        waits.wake_if_waiters(7, old);
        waiter.join().unwrap();
        s.unpin();
        assert_eq!(state::pins(s.load()), 0);
    });
}

#[test]
fn release_waits_out_a_stale_pin_and_keeps_counts() {
    loom::model(|| {
        // The owner holds the only pin of a frame it is giving back (unlocked, not VALID); a
        // stale lookup pins and unpins it concurrently.
        let s = Arc::new(FrameState::new_unowned());
        s.assign_locked();
        s.unlock(0, VALID);
        let s2 = s.clone();
        let stale = thread::spawn(move || {
            if s2.try_pin().is_ok() {
                s2.unpin();
            }
        });
        loop {
            let w = s.load();
            if state::pins(w) == 1 && w & LOCKED == 0 && s.try_release(w) {
                break;
            }
            thread::yield_now();
        }
        stale.join().unwrap();
        assert_eq!(s.load(), UNOWNED, "pin count clobbered");
    });
}

#[test]
fn write_back_lock_and_writer_lock_exclude_each_other() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    loom::model(|| {
        let s = Arc::new(resident());
        assert!(s.try_lock());
        s.unlock(state::DIRTY, 0);
        let inside = Arc::new(AtomicBool::new(false));
        let (s2, in2) = (s.clone(), inside.clone());
        let flusher = thread::spawn(move || {
            if s2.try_lock_dirty() {
                assert!(!in2.swap(true, Ordering::SeqCst), "writer inside during write-back");
                in2.store(false, Ordering::SeqCst);
                s2.unlock(0, state::DIRTY);
                true
            } else {
                false
            }
        });
        s.try_pin().unwrap();
        while !s.try_lock() {
            thread::yield_now();
        }
        assert!(!inside.swap(true, Ordering::SeqCst), "write-back inside during a copy-in");
        inside.store(false, Ordering::SeqCst);
        s.unlock(state::DIRTY, 0);
        s.unpin();
        let flushed = flusher.join().unwrap();
        let w = s.load();
        assert_eq!(state::pins(w), 0);
        assert_eq!(w & LOCKED, 0);
        // The writer's unlock sets DIRTY; only a flush that locked after it could clear it,
        // and the flusher tries once, so the page is clean only if that flush came second.
        if !flushed {
            assert!(w & state::DIRTY != 0);
        }
    });
}

/// The bytes a frame's readers borrow and its content writer changes; loom's cell reports
/// any access of one that races the other's.
struct Bytes(loom::cell::UnsafeCell<u64>);

// SAFETY: access goes through loom's cell, which checks every access against the others.
unsafe impl Sync for Bytes {}

impl Bytes {
    fn read(&self) -> u64 {
        // SAFETY: loom checks that no write races this read; the model fails if one does.
        self.0.with(|p| unsafe { *p })
    }

    fn write(&self, v: u64) {
        // SAFETY: as in `read`.
        self.0.with_mut(|p| unsafe { *p = v })
    }
}

/// A writer's whole change of the bytes (1 to 2) as `LockedPage` does it: pin, content lock
/// (waiting for readers), write, unlock clearing `WRITING` and waking, unpin.
fn write_under_content_lock(s: &FrameState, waits: &WaitTable, bytes: &Bytes) {
    s.try_pin().unwrap();
    waits.lock_content(7, s);
    bytes.write(2);
    let old = s.unlock(state::DIRTY, state::WRITING);
    waits.wake_if_waiters(7, old);
    s.unpin();
}

/// No pin, reader, lock or `WRITING` is left.
fn assert_idle(s: &FrameState) {
    assert_eq!(s.load() & (state::PIN_MASK | state::READER_MASK | LOCKED | state::WRITING), 0);
}

/// A borrowed reader (`PageRef`'s hit: one CAS, no range lock) against a writer that takes the
/// content lock: the reader reads whole values only, the writer never writes under a reader,
/// and whichever waits is woken.
#[test]
fn a_borrowed_reader_and_a_content_writer_exclude_each_other() {
    loom::model(|| {
        let s = Arc::new(resident());
        let waits = Arc::new(WaitTable::default());
        let bytes = Arc::new(Bytes(loom::cell::UnsafeCell::new(1)));
        let (s2, w2, b2) = (s.clone(), waits.clone(), bytes.clone());
        let reader = thread::spawn(move || {
            if s2.try_pin_reader().is_ok() {
                let v = b2.read();
                assert!(v == 1 || v == 2);
                w2.unpin_reader(7, &s2);
            }
        });
        write_under_content_lock(&s, &waits, &bytes);
        reader.join().unwrap();
        assert_idle(&s);
    });
}

/// A reader that pinned the page first (`PageRef`'s locked path) waits for `WRITING` and then
/// borrows the bytes, while a writer waits for an earlier reader to go and a write-back locks
/// and unlocks the frame in between, leaving the writer's `WRITING` set.
#[test]
fn a_writer_waits_out_readers_across_a_write_back_and_a_late_reader_waits_for_it() {
    loom::model(|| {
        let s = Arc::new(resident());
        let waits = Arc::new(WaitTable::default());
        let bytes = Arc::new(Bytes(loom::cell::UnsafeCell::new(1)));
        s.try_pin_reader().unwrap(); // an early reader, dropped by the flusher thread below
        s.try_pin().unwrap(); // the late reader's pin
        let (s2, w2, b2) = (s.clone(), waits.clone(), bytes.clone());
        let late = thread::spawn(move || {
            loop {
                match s2.try_add_reader() {
                    Ok(_) => break,
                    Err(_) => {
                        w2.wait_until(7, &s2, |w| w & state::WRITING == 0);
                    }
                }
            }
            assert!(b2.read() >= 1);
            w2.unpin_reader(7, &s2);
        });
        let (s3, w3, b3) = (s.clone(), waits.clone(), bytes.clone());
        let flusher = thread::spawn(move || {
            if s3.try_lock() {
                let _ = b3.read(); // write-back reads beside readers
                let old = s3.unlock(0, 0);
                w3.wake_if_waiters(7, old);
            }
            w3.unpin_reader(7, &s3); // the early reader goes
        });
        write_under_content_lock(&s, &waits, &bytes);
        late.join().unwrap();
        flusher.join().unwrap();
        assert_idle(&s);
    });
}

// ---- ccXArray (index::radix::tree) ----
//
// Under loom a node has 4 slots (BITS = 2), and a leaf 4 entry words (`LEAF_BITS = BITS`
// there; 128 for 64 outside loom, the same protocol): a leaf spans 4 pages, a node of shift 2
// spans 16, one of shift 4 spans 64. The first insert makes the smallest root that spans its page.

use upcache::internals::index::radix::tree::Tree;

/// Every (page, entry) in page order.
fn contents(t: &Tree) -> Vec<(u64, u32)> {
    let mut v = Vec::new();
    t.for_each_from(0, |p, e| v.push((p, e)));
    v
}

/// Quiescent check of the counts through the public API: removes every entry; afterwards
/// every node but the root must be logically deleted. A count left too high keeps a node live
/// (so does an emptied node that was never deleted); one too low deletes a node early and the
/// next debit of it wraps.
fn drain_and_check(t: &Tree) {
    for (p, e) in contents(t) {
        assert!(t.remove_if(p, |x| x == e), "entry for page {p} vanished");
    }
    assert_eq!(t.len(), 0);
    let (nodes, deleted) = t.node_counts();
    assert_eq!(deleted + 1, nodes, "after draining, every node but the root is deleted");
}

/// A model with a bigger tree built before the threads start (single-threaded, so no extra
/// interleavings, but every atomic op is a loom branch).
fn model_with_branches(max_branches: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.max_branches = b.max_branches.max(max_branches);
    b.check(f);
}

/// Paper Fig. 6 (winner strategy): two inserts race to create the same missing leaf under an
/// existing root. Both entries land, in one leaf: the loser drops its node and uses the
/// winner's, and the root counts the leaf once.
#[test]
fn racing_inserts_create_one_leaf() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(8, 1).unwrap(); // root (pages 0..16) + the leaf of 8..12
        let t2 = t.clone();
        let b = thread::spawn(move || t2.insert_if_absent(5, 0xB));
        assert_eq!(t.insert_if_absent(4, 0xA), Ok(()));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(contents(&t), [(4, 0xA), (5, 0xB), (8, 1)]);
        assert_eq!(t.node_counts(), (3, 0), "one leaf for pages 4..8");
        drain_and_check(&t);
    });
}

/// Fig. 6 two levels down: the inner node and the leaf are both missing, so the two inserts
/// race twice, and both race for the same page's slot: exactly one wins, the other is told
/// the winner's entry.
#[test]
fn racing_inserts_of_one_page_create_one_path() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(32, 1).unwrap(); // root (pages 0..64) + node 16..32 + leaf
        let t2 = t.clone();
        let b = thread::spawn(move || t2.insert_if_absent(4, 0xB));
        let a = t.insert_if_absent(4, 0xA);
        let b = b.join().unwrap();
        match (a, b) {
            (Ok(()), Err(0xA)) => assert_eq!(t.get(4), 0xA),
            (Err(0xB), Ok(())) => assert_eq!(t.get(4), 0xB),
            other => panic!("not exactly one winner: {other:?}"),
        }
        assert_eq!(t.node_counts(), (5, 0), "one node for 0..16, one leaf for 4..8");
        drain_and_check(&t);
    });
}

/// Paper Fig. 8 (logical deletion vs reuse): the last entry of a leaf is removed while
/// another page of that leaf is inserted. Whether the insert reserves the live leaf, revives
/// it after its deletion, or loses to the deletion, the new entry is there, the old one is
/// gone, and no node is lost or duplicated.
#[test]
fn insert_races_the_delete_of_its_leaf() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(8, 1).unwrap(); // keeps the root's other child live
        t.insert_if_absent(4, 1).unwrap();
        let t2 = t.clone();
        let b = thread::spawn(move || t2.insert_if_absent(5, 0xB));
        assert!(t.remove_if(4, |e| e == 1));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(t.get(4), 0);
        assert_eq!(t.get(5), 0xB);
        assert_eq!(contents(&t), [(5, 0xB), (8, 1)]);
        assert_eq!(t.node_counts(), (3, 0), "the leaf was reused, not replaced");
        drain_and_check(&t);
    });
}

/// Fig. 8 with a cascade: removing page 4 empties its leaf and then the leaf's parent (the
/// node of 0..16), while page 0 is inserted: into a new leaf under that same parent. The
/// parent must end up live and counting the new leaf (never a live node under a deleted
/// parent), the emptied leaf deleted.
#[test]
fn insert_races_a_cascading_delete_of_its_parent() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(32, 1).unwrap(); // root (0..64) + node 16..32 + leaf
        t.insert_if_absent(4, 1).unwrap(); // + node 0..16 + leaf 4..8
        let t2 = t.clone();
        let b = thread::spawn(move || t2.insert_if_absent(0, 0xB));
        assert!(t.remove_if(4, |e| e == 1));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(contents(&t), [(0, 0xB), (32, 1)]);
        assert_eq!(t.node_counts(), (6, 1), "only the leaf of 4..8 is deleted");
        drain_and_check(&t);
    });
}

/// Paper Fig. 7 (expansion vs delete): the root is the leaf of pages 0..4 holding page 1; an
/// insert of page 4 puts a new root above it while page 1 is removed through whichever root
/// the remover saw. Page 4 is there, page 1 is gone, the counts drain to zero.
#[test]
fn expansion_races_a_delete_in_the_old_root() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(1, 1).unwrap();
        let t2 = t.clone();
        let b = thread::spawn(move || t2.remove_if(1, |e| e == 1));
        assert_eq!(t.insert_if_absent(4, 0xA), Ok(()));
        assert!(b.join().unwrap());
        assert_eq!(contents(&t), [(4, 0xA)]);
        assert_eq!(t.node_counts().0, 3, "old root, new root, leaf of 4..8");
        drain_and_check(&t);
    });
}

/// Fig. 7 (expansion vs insert): as above, but page 2 is inserted into the old root while it
/// is pushed down; nothing is lost and no node is duplicated.
#[test]
fn expansion_races_an_insert_in_the_old_root() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(1, 1).unwrap();
        let t2 = t.clone();
        let b = thread::spawn(move || t2.insert_if_absent(2, 0xB));
        assert_eq!(t.insert_if_absent(4, 0xA), Ok(()));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(contents(&t), [(1, 1), (2, 0xB), (4, 0xA)]);
        assert_eq!(t.node_counts(), (3, 0));
        drain_and_check(&t);
    });
}

/// Fig. 7, delete then reuse: while page 4's insert pushes the old root (pages 0..4) down,
/// page 1 is removed from it (it may be deleted logically once it has its parent) and then
/// page 2 inserted into it: the insert must find it again, reviving it through the new root
/// if it was deleted, not make a second node for 0..4.
#[test]
fn expansion_races_a_delete_and_reuse_of_the_old_root() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(1, 1).unwrap();
        let t2 = t.clone();
        let b = thread::spawn(move || {
            assert!(t2.remove_if(1, |e| e == 1));
            t2.insert_if_absent(2, 0xB)
        });
        assert_eq!(t.insert_if_absent(4, 0xA), Ok(()));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(contents(&t), [(2, 0xB), (4, 0xA)]);
        assert_eq!(t.node_counts(), (3, 0));
        drain_and_check(&t);
    });
}

/// Fig. 7 two levels up: inserting page 16 expands a root of 0..4 twice while page 1 is
/// removed from it, so the delete's cascade can meet two roots that are not yet linked to
/// their parents.
#[test]
fn double_expansion_races_a_delete_in_the_old_root() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(1, 1).unwrap();
        let t2 = t.clone();
        let b = thread::spawn(move || t2.remove_if(1, |e| e == 1));
        assert_eq!(t.insert_if_absent(16, 0xA), Ok(()));
        assert!(b.join().unwrap());
        assert_eq!(contents(&t), [(16, 0xA)]);
        // Roots 0..4, 0..16, 0..64; node 16..32 and its leaf.
        assert_eq!(t.node_counts().0, 5);
        drain_and_check(&t);
    });
}

/// Fig. 7 with three threads, as in the paper: page 4's insert expands the root (the leaf of
/// 0..4) while pages 0 and 1, its two entries, are removed through whichever root each
/// remover saw. One of the removers empties the old root.
#[test]
fn expansion_races_two_deletes_in_the_old_root() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(0, 1).unwrap();
        t.insert_if_absent(1, 1).unwrap();
        let (t2, t3) = (t.clone(), t.clone());
        let b = thread::spawn(move || t2.remove_if(0, |e| e == 1));
        let c = thread::spawn(move || t3.remove_if(1, |e| e == 1));
        assert_eq!(t.insert_if_absent(4, 0xA), Ok(()));
        assert!(b.join().unwrap());
        assert!(c.join().unwrap());
        assert_eq!(contents(&t), [(4, 0xA)]);
        assert_eq!(t.node_counts().0, 3);
        drain_and_check(&t);
    });
}

/// Two removers empty one leaf together (pages 4 and 5, its only entries) and its parent
/// with it: both debit, exactly one deletes each node, and the counts are exact.
#[test]
fn racing_deletes_delete_each_node_once() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(32, 1).unwrap(); // root (0..64) + node 16..32 + leaf
        t.insert_if_absent(4, 1).unwrap(); // + node 0..16 + leaf 4..8
        t.insert_if_absent(5, 1).unwrap();
        let t2 = t.clone();
        let b = thread::spawn(move || t2.remove_if(5, |e| e == 1));
        assert!(t.remove_if(4, |e| e == 1));
        assert!(b.join().unwrap());
        assert_eq!(contents(&t), [(32, 1)]);
        assert_eq!(t.node_counts(), (5, 2), "the leaf of 4..8 and the node of 0..16");
        drain_and_check(&t);
    });
}

/// Two expansions race (pages 4 and 16 from a root spanning 0..4): the roots stack into one
/// chain, each pushed-down root under exactly one parent, and both entries land.
#[test]
fn racing_expansions_stack_one_chain_of_roots() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(1, 1).unwrap();
        let t2 = t.clone();
        let b = thread::spawn(move || t2.insert_if_absent(16, 0xB));
        assert_eq!(t.insert_if_absent(4, 0xA), Ok(()));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(contents(&t), [(1, 1), (4, 0xA), (16, 0xB)]);
        // Roots 0..4, 0..16, 0..64; leaf 4..8; node 16..32 and its leaf.
        assert_eq!(t.node_counts(), (6, 0));
        drain_and_check(&t);
    });
}

/// Builds a tree whose root spans all of u64 (32 levels), with `deleted` logically deleted
/// nodes in chains far from pages 0..64, so that one more deletion near page 0 crosses the
/// reap threshold (more than 64 deleted, a quarter of all nodes). `hot` are inserted with
/// entry 1; `pad` is one extra page inserted and removed to fine-tune the count.
fn tree_at_reap_threshold(hot: &[u64], pad: u64) -> Tree {
    let t = Tree::default();
    for k in 1..4u64 {
        t.insert_if_absent(k << 62, 1).unwrap(); // a 31-node chain each
    }
    for &p in hot {
        t.insert_if_absent(p, 1).unwrap();
    }
    t.insert_if_absent(pad, 1).unwrap();
    for p in [1 << 62, 2 << 62, pad] {
        assert!(t.remove_if(p, |_| true));
    }
    t
}

/// Reaping (physical removal) vs reuse of a leaf: with the pool of deleted nodes full,
/// removing page 0 deletes its leaf and then marks it dead and unlinks it, while page 1 is
/// inserted into that leaf: the inserter reserves it, revives it, or finds it dead and helps
/// unlink it before making a new one. The entry lands and the node and deleted counts match
/// (a node retired twice would be counted out twice).
#[test]
fn reap_races_reuse_of_the_leaf() {
    model_with_branches(20_000, || {
        // Pages 0 and 4 share the node of 0..16, so only the leaf of 0..4 goes.
        let t = tree_at_reap_threshold(&[0, 4], (3 << 62) + 16);
        assert_eq!(t.node_counts(), (128, 64));
        let t = Arc::new(t);
        let t2 = t.clone();
        let b = thread::spawn(move || t2.insert_if_absent(1, 0xB));
        assert!(t.remove_if(0, |e| e == 1));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(contents(&t), [(1, 0xB), (4, 1), (3 << 62, 1)]);
        assert_eq!(t.node_counts(), (128, 64));
        drain_and_check(&t);
    });
}

/// Reaping a subtree vs reuse: removing page 0 deletes its leaf and the node of 0..16 above
/// it, then reaps that node with the leaf under it, while page 1 is inserted through both.
#[test]
fn reap_of_a_subtree_races_an_insert_into_it() {
    model_with_branches(20_000, || {
        // Page 16 keeps the node of 0..64 live, so the cascade stops below it.
        let t = tree_at_reap_threshold(&[0, 16], (3 << 62) + 4);
        assert_eq!(t.node_counts(), (128, 63));
        let t = Arc::new(t);
        let t2 = t.clone();
        let b = thread::spawn(move || t2.insert_if_absent(1, 0xB));
        assert!(t.remove_if(0, |e| e == 1));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(contents(&t), [(1, 0xB), (16, 1), (3 << 62, 1)]);
        assert_eq!(t.node_counts(), (128, 63));
        drain_and_check(&t);
    });
}

/// Two reapers of one leaf: the remover of page 0 deletes the leaf and goes on to reap it,
/// while the other thread revives it (page 1), empties it again and reaps it itself; the
/// first reaper's view of the leaf is then stale. The leaf is unlinked and retired once.
#[test]
fn reap_races_a_second_reap_of_the_leaf() {
    model_with_branches(20_000, || {
        let t = tree_at_reap_threshold(&[0, 4], (3 << 62) + 16);
        let t = Arc::new(t);
        let t2 = t.clone();
        let b = thread::spawn(move || {
            t2.insert_if_absent(1, 0xB).unwrap();
            assert!(t2.remove_if(1, |e| e == 0xB));
        });
        assert!(t.remove_if(0, |e| e == 1));
        b.join().unwrap();
        assert_eq!(contents(&t), [(4, 1), (3 << 62, 1)]);
        assert_eq!(t.node_counts(), (127, 64), "the leaf of 0..4 was reaped");
        drain_and_check(&t);
    });
}

/// A root of pages 0..256 (three levels under it, 85 nodes when full) in which only page 0
/// is left: the other 63 leaves were filled and emptied, so 64 nodes under it are deleted
/// (the rest of the emptied ones were reaped on the way).
fn old_root_at_reap_threshold() -> Tree {
    let t = Tree::default();
    t.insert_if_absent(252, 1).unwrap(); // a root of shift 6
    for p in (0..63).map(|i| i * 4) {
        t.insert_if_absent(p, 1).unwrap();
    }
    for p in (1..64).rev().map(|i| i * 4) {
        assert!(t.remove_if(p, |_| true));
    }
    assert_eq!(t.node_counts(), (68, 64));
    t
}

/// Reaping an old root vs its expansion: page 256 is inserted, which pushes the root of
/// 0..256 down, while page 0, its last entry, is removed: the cascade deletes page 0's path
/// and, if the old root has its parent by then, the old root, and reaps what it deleted. The
/// emptied old root must end up deleted however the two interleave.
#[test]
fn reap_of_an_old_root_races_its_expansion() {
    model_with_branches(20_000, || {
        let t = Arc::new(old_root_at_reap_threshold());
        let t2 = t.clone();
        let b = thread::spawn(move || t2.insert_if_absent(256, 0xB));
        assert!(t.remove_if(0, |e| e == 1));
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(contents(&t), [(256, 0xB)]);
        drain_and_check(&t);
    });
}

/// The statistics never run backwards: a reviver must not take a node off the deleted count
/// before its deleter has put it on, or `node_counts` reports (for a moment) more deleted
/// nodes than nodes (the deleted count wraps below zero).
#[test]
fn node_counts_never_show_more_deleted_than_nodes() {
    loom::model(|| {
        let t = Arc::new(Tree::default());
        t.insert_if_absent(8, 1).unwrap();
        t.insert_if_absent(4, 1).unwrap();
        let t2 = t.clone();
        let b = thread::spawn(move || {
            t2.insert_if_absent(5, 0xB).unwrap();
            let (nodes, deleted) = t2.node_counts();
            assert!(deleted <= nodes, "node_counts() = ({nodes}, {deleted})");
        });
        assert!(t.remove_if(4, |e| e == 1));
        b.join().unwrap();
    });
}

/// The premise of the two reap models, sequentially: in the trees they start from, removing
/// page 0 does reap (the node count drops), so the races above do reach `reap`, `unlink` and
/// `retire_subtree`.
#[test]
fn reap_models_cross_the_reap_threshold() {
    model_with_branches(20_000, || {
        let t = tree_at_reap_threshold(&[0, 4], (3 << 62) + 16);
        assert!(t.remove_if(0, |_| true));
        assert_eq!(t.node_counts(), (127, 64), "the leaf of 0..4 was reaped");
        let t = tree_at_reap_threshold(&[0, 16], (3 << 62) + 4);
        assert!(t.remove_if(0, |_| true));
        assert_eq!(t.node_counts(), (126, 63), "the node of 0..16 and its leaf were reaped");
        let t = old_root_at_reap_threshold();
        assert!(t.remove_if(0, |_| true));
        assert!(t.node_counts().0 < 68, "page 0's path was reaped");
    });
}
