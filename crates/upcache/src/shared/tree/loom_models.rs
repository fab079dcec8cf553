//! Loom models of the shared tree: two processes (here threads) racing on the trees of one or
//! two file entries, then the structural checks of `tests.rs` on the quiet trees and pools.
//!
//! Under loom a node has 4 slots (`BITS` = 2): a leaf spans pages 0..4, a node at level 1
//! spans 16 and one at level 2 spans 64, so page 5 needs a tree of height 2 (an inner root
//! above a leaf) and page 16 one of height 3.

use super::arena::Arena;
use super::*;
use crate::sync::Arc;
use loom::cell::UnsafeCell;
use loom::thread;

/// What frame `f` holds (its `home`, in the segment), written by its placer before the insert
/// and read by a loser told that `f` has the page: the entry's CAS must publish it.
struct Homes([UnsafeCell<u64>; 2]);

// SAFETY: home `f` is written only by the thread that places frame `f`, before its insert,
// and read only by one told of `f` by the tree; loom reports a read the tree does not order
// after the write.
unsafe impl Sync for Homes {}

/// Two threads place frames 0 and 1 for page 5 of an empty tree: both make a root (an inner
/// node, the height page 5 needs) and race to put it in the root word, then both make the
/// leaf below it and race for its slot, then for the page's. Exactly one frame is placed; the
/// other thread is told which, and sees what its placer wrote before (the AcqRel entry CAS);
/// the losers' nodes go back, so the tree is one root and one leaf, sound.
#[test]
fn racing_first_inserts_make_one_root_and_place_one_frame() {
    const PAGE: u64 = 5;
    loom::model(|| {
        let a = Arena::new(2, 2, 1);
        let homes = Arc::new(Homes([UnsafeCell::new(0), UnsafeCell::new(0)]));
        let place = |a: &Arena, homes: &Homes, f: u32| {
            a.begin();
            // SAFETY: ours to write (see `Homes`).
            homes.0[f as usize].with_mut(|h| unsafe { *h = PAGE });
            let done = a.forest().insert(0, 0, PAGE, f);
            if let Insert::Taken(g) = done {
                // SAFETY: frame `g`'s placer wrote it before its entry, which we were told of.
                assert_eq!(homes.0[g as usize].with(|h| unsafe { *h }), PAGE, "the winner's home");
            }
            done
        };
        let other = {
            let (a, homes) = (a.clone(), homes.clone());
            thread::spawn(move || place(&a, &homes, 1))
        };
        let mine = place(&a, &homes, 0);
        let winner = match (mine, other.join().unwrap()) {
            (Insert::Placed, Insert::Taken(0)) => 0,
            (Insert::Taken(1), Insert::Placed) => 1,
            other => panic!("not exactly one winner: {other:?}"),
        };
        assert_eq!(a.forest().get(0, 0, PAGE), Some(winner));
        assert_eq!(a.check_tree(0), vec![(PAGE, winner)]);
        assert_eq!(a.live(), (1, 1), "one root, one leaf");
        a.check_pools();
    });
}

/// The leaf of pages 4..8 holds page 4 only. Its remove takes the leaf's count to 0, so the
/// leaf dies and is unlinked and given back, while an insert of page 5 goes down into it: the
/// insert lands in the leaf before it dies (which keeps it), or meets it dead and replaces it,
/// or finds its slot emptied and makes a new leaf. Page 5 is found, page 4 is gone, and the
/// tree is one root and one leaf, sound.
#[test]
fn a_remove_that_kills_a_leaf_races_an_insert_into_it() {
    loom::model(|| {
        let a = Arena::new(2, 1, 1);
        assert_eq!(a.forest().insert(0, 0, 4, 1), Insert::Placed);
        let remover = {
            let a = a.clone();
            thread::spawn(move || {
                a.begin();
                assert!(a.forest().remove(0, 0, 4, 1));
            })
        };
        a.begin();
        assert_eq!(a.forest().insert(0, 0, 5, 2), Insert::Placed);
        assert_eq!(a.forest().get(0, 0, 5), Some(2), "ours until we take it out");
        remover.join().unwrap();
        let t = a.forest();
        assert_eq!((t.get(0, 0, 4), t.get(0, 0, 5)), (None, Some(2)));
        assert_eq!(a.check_tree(0), vec![(5, 2)]);
        assert_eq!(a.live(), (1, 1), "the emptied leaf went back, or holds page 5");
        a.check_pools();
    });
}

/// The tree is a root leaf (pages 0..4) holding page 1. An insert of page 5 puts an inner
/// root above it (an expansion) while the remove of page 1 empties it: the old root, no longer
/// a root, must die whichever comes first (the remove's `is_root` answer against the
/// expansion's reserve and release of the old root). No empty node is left below the root,
/// and the old leaf went back.
#[test]
fn an_expansion_races_the_remove_of_the_old_root_s_only_entry() {
    loom::model(|| {
        let a = Arena::new(2, 1, 1);
        assert_eq!(a.forest().insert(0, 0, 1, 1), Insert::Placed);
        let remover = {
            let a = a.clone();
            thread::spawn(move || {
                a.begin();
                assert!(a.forest().remove(0, 0, 1, 1));
            })
        };
        a.begin();
        assert_eq!(a.forest().insert(0, 0, 5, 2), Insert::Placed);
        remover.join().unwrap();
        let t = a.forest();
        assert_eq!((t.get(0, 0, 1), t.get(0, 0, 5)), (None, Some(2)));
        assert_eq!(a.check_tree(0), vec![(5, 2)]);
        assert_eq!(a.live(), (1, 1), "the new root and page 5's leaf; the old root went back");
        a.check_pools();
    });
}

/// File 0's tree (generation 0) is an inner root and the leaf of page 4, holding frame 1. The
/// clock hand removes that frame while the entry goes to its next generation (a clear, then
/// the new generation stored) and file 1 places frame 2 at page 4, taking the nodes the clear
/// gave back (the free stacks are LIFO: the same inner node and leaf, new incarnations). The
/// stale remove and its unlink, at any point, must not touch file 1's tree: a CAS of the old
/// entry, a release of the old incarnation's count, an unlink of the old pointer all miss.
/// File 1's tree is whole and sound, file 0's empty, and every node but file 1's is free.
#[test]
fn a_stale_remove_races_a_clear_and_the_reuse_of_its_nodes() {
    loom::model(|| {
        let a = Arena::new(2, 1, 2);
        assert_eq!(a.forest().insert(0, 0, 4, 1), Insert::Placed);
        let hand = {
            let a = a.clone();
            thread::spawn(move || {
                a.begin();
                a.forest().remove(0, 0, 4, 1)
            })
        };
        a.begin();
        let t = a.forest();
        t.clear(0, 1);
        // Relaxed: as `next_generation` stores it (the table's lock orders it there).
        a.files[0].gen.store(1, Ordering::Relaxed);
        assert_eq!(t.insert(1, 0, 4, 2), Insert::Placed);
        hand.join().unwrap();
        assert_eq!((t.get(1, 0, 4), t.get(0, 1, 4), t.get(0, 0, 4)), (Some(2), None, None));
        assert_eq!(a.check_tree(1), vec![(4, 2)]);
        assert_eq!(a.check_tree(0), vec![]);
        assert_eq!(a.live(), (1, 1), "file 1's root and leaf");
        a.check_pools();
    });
}

/// A tree of height 3 (pages 0..64): the root, the level-1 node of pages 16..32 and the leaf
/// of 16..20, holding page 16 only. Its remove kills the leaf, whose unlink takes the level-1
/// node's count to 0, so that node dies too and is unlinked from the root, while an insert of
/// page 20 goes down through the dying node (to make the leaf of 20..24 under it): it lands
/// in the node before it dies, or meets it dead and replaces it, or finds the root's slot
/// emptied and makes a new one. Page 20 is found, page 16 is gone, no node is left empty.
#[test]
fn a_cascading_delete_races_an_insert_below_the_dying_parent() {
    loom::model(|| {
        let a = Arena::new(3, 3, 1);
        assert_eq!(a.forest().insert(0, 0, 16, 1), Insert::Placed);
        let remover = {
            let a = a.clone();
            thread::spawn(move || {
                a.begin();
                assert!(a.forest().remove(0, 0, 16, 1));
            })
        };
        a.begin();
        assert_eq!(a.forest().insert(0, 0, 20, 2), Insert::Placed);
        remover.join().unwrap();
        let t = a.forest();
        assert_eq!((t.get(0, 0, 16), t.get(0, 0, 20)), (None, Some(2)));
        assert_eq!(a.check_tree(0), vec![(20, 2)]);
        assert_eq!(a.live(), (1, 2), "the root, page 20's level-1 node and leaf");
        a.check_pools();
    });
}

/// File 0's tree as above (page 16 in a tree of height 3). The clock hand removes that page,
/// so the leaf and the level-1 node die, are unlinked and given back, and its process then
/// places page 4 of file 1, whose new tree (an inner root and a leaf) takes those nodes back
/// (LIFO stacks), while file 0's entry is cleared for its next generation. The clear's walk
/// may have checked the level-1 node as file 0's just before it went and came back as file
/// 1's root: it must follow only nodes of its own tree (`whose`) and free only incarnations
/// it read. File 1's tree is whole and sound, file 0's empty, every node of it given back.
///
/// The longest model: at most 2 preemptions (the race it is for needs one: the clear stopped
/// between checking a node and reading its slots), 190 thousand runs; at ci/loom.sh's 3 it
/// takes 1.6 million (over a minute).
#[test]
fn a_clear_walks_its_tree_while_a_cascading_delete_gives_it_to_another_file() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.map_or(2, |p| p.min(2)));
    b.check(|| {
        let a = Arena::new(2, 3, 2);
        assert_eq!(a.forest().insert(0, 0, 16, 1), Insert::Placed);
        let clear = {
            let a = a.clone();
            thread::spawn(move || {
                a.begin();
                a.forest().clear(0, 1);
                // Relaxed: as `next_generation` stores it (the table's lock orders it there).
                a.files[0].gen.store(1, Ordering::Relaxed);
            })
        };
        a.begin();
        let t = a.forest();
        t.remove(0, 0, 16, 1);
        assert_eq!(t.insert(1, 0, 4, 2), Insert::Placed);
        clear.join().unwrap();
        assert_eq!((t.get(1, 0, 4), t.get(0, 1, 16), t.get(0, 0, 16)), (Some(2), None, None));
        assert_eq!(a.check_tree(1), vec![(4, 2)]);
        assert_eq!(a.check_tree(0), vec![]);
        assert_eq!(a.live(), (1, 1), "file 1's root and leaf");
        a.check_pools();
    });
}
