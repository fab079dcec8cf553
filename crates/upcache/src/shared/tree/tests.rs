use super::arena::Arena;
use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[test]
fn pages_near_and_far_go_in_and_out_and_give_their_nodes_back() {
    let a = Arena::new(64, 64, 2);
    let t = a.forest();
    assert_eq!(t.get(0, 0, 5), None);
    assert_eq!(t.insert(0, 0, 5, 10), Insert::Placed);
    assert_eq!(a.live(), (1, 0), "a root leaf");
    assert_eq!(t.insert(0, 0, 5, 11), Insert::Taken(10));
    // Expansion: a page past the root leaf's 64 puts roots above it.
    assert_eq!(t.insert(0, 0, 1 << 20, 12), Insert::Placed);
    // Heights 2, 3 and 4 (2^24 pages) put three inner roots over the old root leaf; the new
    // page's path adds an inner node at levels 2 and 1, and a leaf.
    assert_eq!(a.live(), (2, 5));
    assert_eq!((t.get(0, 0, 5), t.get(0, 0, 1 << 20), t.get(0, 0, 6)), (Some(10), Some(12), None));
    // Another file's tree is its own.
    assert_eq!(t.get(1, 0, 5), None);
    assert_eq!(t.insert(1, 0, 5, 20), Insert::Placed);
    assert_eq!(t.range(0, 0, 0, u64::MAX >> 20), vec![(10, 5), (12, 1 << 20)]);
    assert_eq!(t.range_where(0, 0, 0, u64::MAX >> 20, &|f| f == 12), vec![(12, 1 << 20)], "kept only");
    // Taking the far page out deletes its leaf and inner nodes; the root stays.
    assert!(t.remove(0, 0, 1 << 20, 12));
    assert!(!t.remove(0, 0, 1 << 20, 12));
    assert_eq!(a.live(), (2, 3), "file 0: the old root leaf and the path to it; file 1: its root leaf");
    assert!(!t.remove(0, 0, 5, 11), "only the frame that is there goes");
    assert!(t.remove(0, 0, 5, 10));
    assert_eq!(a.live(), (1, 1), "the old root leaf and its path go too, all but the root");
    a.check_pools();
    // A new generation starts empty and gives every node back.
    t.clear(1, 1);
    assert_eq!(t.get(1, 1, 5), None);
    assert_eq!(t.get(1, 0, 5), None, "the old generation is gone");
    assert_eq!(a.live(), (0, 1));
    a.check_pools();
}

#[test]
fn a_full_pool_says_so_and_recovers_as_pages_go() {
    let a = Arena::new(2, 1, 1);
    let t = a.forest();
    assert_eq!(t.insert(0, 0, 0, 1), Insert::Placed);
    assert_eq!(t.insert(0, 0, 64, 2), Insert::Placed, "a root above two leaves");
    assert_eq!(t.insert(0, 0, 128, 3), Insert::Full, "no third leaf");
    assert_eq!(t.insert(0, 0, 1 << 12, 3), Insert::Full, "no second inner node");
    assert_eq!(t.get(0, 0, 64), Some(2));
    assert!(t.remove(0, 0, 64, 2));
    assert_eq!(t.insert(0, 0, 128, 3), Insert::Placed, "the emptied leaf was given back and reused");
    assert_eq!(t.range(0, 0, 0, 1 << 12), vec![(1, 0), (3, 128)]);
    a.check_pools();
}

/// A deleter killed between marking a node dead and unlinking it leaves it linked: an insert
/// below replaces it, and the dead node goes back to the pool.
#[test]
fn an_insert_replaces_a_dead_node_its_deleter_left_linked() {
    let a = Arena::new(8, 8, 1);
    let t = a.forest();
    assert_eq!(t.insert(0, 0, 0, 1), Insert::Placed);
    assert_eq!(t.insert(0, 0, 64, 2), Insert::Placed);
    // The leaf of page 64, emptied by hand as its deleter would up to its death.
    let (_, _, top) = root_parts(a.files[0].root.load(Ordering::Relaxed));
    let (leaf, inc) = unptr(a.inners[top.unwrap().0 as usize].slots[1].load(Ordering::Relaxed));
    a.leaves[leaf as usize].slots[0].store(0, Ordering::Relaxed);
    a.leaf_meta[leaf as usize].state.store((inc as u64) << 32 | LIVE | DEAD, Ordering::Relaxed);
    assert_eq!(t.get(0, 0, 64), None);
    assert_eq!(t.insert(0, 0, 65, 3), Insert::Placed);
    assert_eq!(t.range(0, 0, 0, 128), vec![(1, 0), (3, 65)]);
    assert_eq!(a.live(), (2, 1), "the dead leaf went back");
    a.check_pools();
}

/// Nodes a killed process popped and never linked (here: popped by hand) go back at the
/// sweep of their entry's next generation; nodes of trees in use stay.
#[test]
fn a_sweep_gives_back_nodes_of_generations_gone_by_only() {
    let a = Arena::new(8, 8, 2);
    let t = a.forest();
    assert_eq!(t.insert(0, 0, 3, 1), Insert::Placed);
    assert!(t.leaves.pop(whose(1, 0, 0, 0)).is_some());
    assert!(t.inners.pop(whose(1, 0, 1, 0)).is_some());
    assert_eq!(t.sweep_slot(1), 0, "file 1 is still in generation 0");
    t.clear(1, 1);
    assert_eq!(t.sweep_slot(0), 0, "file 0's tree is in use");
    assert_eq!(t.sweep_slot(1), 2);
    assert_eq!(t.get(0, 0, 3), Some(1));
    assert_eq!(a.live(), (1, 0));
    a.check_pools();
}

/// A process killed between clearing a tree for the entry's next generation and storing that
/// generation leaves the tree a generation ahead of the entry: the entry's is the file's, and
/// the next insert starts a tree of it (the other's nodes go at the next generation's sweep).
#[test]
fn an_insert_takes_the_entry_s_generation_over_a_tree_left_ahead_of_it() {
    let a = Arena::new(8, 8, 1);
    let t = a.forest();
    assert_eq!(t.insert(0, 0, 3, 1), Insert::Placed);
    t.clear(0, 1); // and killed: the entry stays in generation 0
    assert_eq!(t.get(0, 0, 3), None);
    assert_eq!(t.insert(0, 0, 3, 2), Insert::Placed);
    assert_eq!(t.get(0, 0, 3), Some(2));
    assert_eq!(a.files[0].leaky.load(Ordering::Relaxed), 1, "marked for the next generation's sweep");
    assert_eq!(a.check_tree(0), vec![(3, 2)]);
    a.check_pools();
}

/// A clear walks only its own tree's nodes: a pointer left in a node of the old tree that was
/// given back and reused by another file leads nowhere it frees.
#[test]
fn a_clear_frees_nothing_of_another_tree() {
    let a = Arena::new(16, 16, 2);
    let t = a.forest();
    assert_eq!(t.insert(0, 0, 1 << 13, 1), Insert::Placed);
    assert_eq!(t.insert(1, 0, 1 << 13, 2), Insert::Placed);
    // Point file 0's root at file 1's inner node, as a reused node would look.
    let (_, _, top1) = root_parts(a.files[1].root.load(Ordering::Relaxed));
    let (_, h0, top0) = root_parts(a.files[0].root.load(Ordering::Relaxed));
    let inc1 = t.inners.live_inc(top1.unwrap().0).unwrap();
    a.inners[top0.unwrap().0 as usize].slots[5].store(ptr(top1.unwrap().0, inc1), Ordering::Relaxed);
    assert_eq!(h0, 3);
    t.clear(0, 1);
    assert_eq!(t.get(1, 0, 1 << 13), Some(2));
    assert_eq!(a.live(), (1, 2), "file 1's tree, whole");
    a.check_pools();
}

proptest! {
    /// The tree answers as a map does, through inserts, removes and clears over pages near and
    /// far; a pool never loses or doubles a node; an emptied tree keeps only its root.
    #[test]
    fn the_tree_agrees_with_a_map(
        ops in proptest::collection::vec((0u8..4, prop_oneof![0u64..300, 0u64..1 << 30], 0u32..50), 1..400)
    ) {
        let a = Arena::new(400, 1600, 1);
        let t = a.forest();
        let mut gen = 0;
        let mut map: BTreeMap<u64, u32> = BTreeMap::new();
        for (op, page, f) in ops {
            match op {
                0 | 1 => {
                    let want = map.get(&page).map_or(Insert::Placed, |&g| Insert::Taken(g));
                    prop_assert_eq!(t.insert(0, gen, page, f), want);
                    map.entry(page).or_insert(f);
                }
                2 => {
                    let there = map.get(&page) == Some(&f);
                    prop_assert_eq!(t.remove(0, gen, page, f), there);
                    if there {
                        map.remove(&page);
                    }
                }
                _ if f == 0 => {
                    gen = (gen + 1) & 0xff;
                    t.clear(0, gen);
                    map.clear();
                }
                _ => prop_assert_eq!(t.get(0, gen, page), map.get(&page).copied()),
            }
        }
        let listed: Vec<(u32, u64)> = map.iter().map(|(&p, &f)| (f, p)).collect();
        prop_assert_eq!(t.range(0, gen, 0, 1 << 36), listed);
        prop_assert_eq!(a.check_tree(0), map.iter().map(|(&p, &f)| (p, f)).collect::<Vec<_>>());
        a.check_pools();
        for (&page, &f) in &map {
            prop_assert!(t.remove(0, gen, page, f));
        }
        prop_assert_eq!(a.check_tree(0), vec![]);
        let (l, i) = a.live();
        prop_assert!(l + i <= 1, "an emptied tree keeps its root only: {:?}", (l, i));
        a.check_pools();
    }
}

/// Threads insert and remove frames of one file at once, over pages close enough to meet in
/// leaves and far enough to expand the tree and delete nodes: a page is never two frames', a
/// thread's frame is found while it is in, and the pools end whole.
#[test]
fn threads_placing_and_removing_pages_at_once_keep_one_frame_per_page() {
    let a = Arena::new(512, 256, 1);
    let t = a.forest();
    let threads = 4u32;
    std::thread::scope(|s| {
        for th in 0..threads {
            let t = &t;
            s.spawn(move || {
                let mut x = 0x9e37_79b9u64 * (th as u64 + 1);
                let mut mine: Vec<(u64, u32)> = Vec::new();
                for i in 0..200_000u32 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let page = [x % 200, x % 4096 * 4099 % (1 << 24)][(x >> 40) as usize % 2];
                    // Unique across threads: 200,000 inserts each.
                    let f = th * 200_000 + i;
                    if mine.is_empty() || (mine.len() < 24 && x.is_multiple_of(2)) {
                        match t.insert(0, 0, page, f) {
                            Insert::Placed => {
                                // Ours until we take it out: nobody else may place the page.
                                assert_eq!(t.get(0, 0, page), Some(f));
                                mine.push((page, f));
                            }
                            Insert::Taken(g) => assert_ne!(g, f),
                            Insert::Full | Insert::Broken => {
                                panic!("the pools hold every page in play, and nothing breaks the tree")
                            }
                        }
                    } else {
                        let (page, f) = mine.swap_remove((x >> 20) as usize % mine.len());
                        assert_eq!(t.get(0, 0, page), Some(f), "a placed frame stays until removed");
                        assert!(t.remove(0, 0, page, f));
                    }
                }
                for (page, f) in mine {
                    assert!(t.remove(0, 0, page, f));
                }
            });
        }
    });
    assert_eq!(a.check_tree(0), vec![]);
    let (l, i) = a.live();
    assert!(l + i <= 1, "an emptied tree keeps its root only: {:?}", (l, i));
    a.check_pools();
}

/// One thread churns file 0's tree while another fills file 1's, clears it for its next
/// generation and fills it again, and a third removes file 1's frames of generations gone by,
/// as the clock hand does for frames of a reused entry: nodes given back under those removes
/// and reused by either tree never mix the trees.
#[test]
fn removes_of_a_cleared_generation_leave_the_trees_that_reuse_its_nodes_whole() {
    let a = Arena::new(1024, 512, 2);
    let t = a.forest();
    let (send, stale) = std::sync::mpsc::channel::<Vec<(u32, u64, u32)>>();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let mut mine: Vec<(u64, u32)> = Vec::new();
            for i in 0..100_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if mine.is_empty() || (mine.len() < 32 && x.is_multiple_of(2)) {
                    let page = x % (1 << 20);
                    if t.insert(0, 0, page, i) == Insert::Placed {
                        mine.push((page, i));
                    }
                } else {
                    let (page, f) = mine.swap_remove((x >> 32) as usize % mine.len());
                    assert_eq!(t.get(0, 0, page), Some(f));
                    assert!(t.remove(0, 0, page, f));
                }
            }
            for (page, f) in mine {
                assert!(t.remove(0, 0, page, f));
            }
        });
        s.spawn(|| {
            for round in 0..2000u32 {
                let gen = round & 0xff;
                let frames: Vec<(u32, u64, u32)> = (0..16u32)
                    .map(|j| (gen, (round as u64 * 7919 + j as u64 * 104_729) % (1 << 22), 1_000_000 + j))
                    .filter(|&(g, page, f)| t.insert(1, g, page, f) == Insert::Placed)
                    .collect();
                for &(g, page, f) in &frames {
                    assert_eq!(t.get(1, g, page), Some(f));
                }
                send.send(frames).unwrap();
                // The entry's next generation, as `next_generation` does it.
                t.clear(1, (gen + 1) & 0xff);
                a.files[1].gen.store((gen + 1) & 0xff, Ordering::Relaxed);
            }
            drop(send);
        });
        s.spawn(|| {
            for frames in stale {
                for (g, page, f) in frames {
                    t.remove(1, g, page, f);
                }
            }
        });
    });
    assert_eq!(a.check_tree(0), vec![]);
    assert_eq!(a.check_tree(1), vec![]);
    t.clear(1, 0);
    assert_eq!(t.sweep_slot(1), 0, "a clear reaches every node of its tree");
    let (l, i) = a.live();
    assert!(l + i <= 1, "file 0's emptied tree keeps its root only: {:?}", (l, i));
    a.check_pools();
}
