//! S3-FIFO (Yang et al., SOSP'23): three FIFO queues. A new page enters a small probation
//! queue (10% of the frames); when it reaches the old end it moves to the main queue if it
//! was used there, else it is evicted and its key remembered in a ghost queue. A page whose
//! key is in the ghost queue enters main directly. Main is a CLOCK with 2-bit counts: a used
//! page goes round again with one use less. Most pages used once leave after a short stay in
//! the small queue, without pushing out the main queue's working set.
//!
//! The queues are under one mutex, taken on inserts and evictions; a hit only bumps a
//! per-frame count. Queue entries carry the frame's insertion generation: an entry whose
//! frame was inserted again since (it lost its page outside the policy, in a truncation or a
//! stream eviction) is stale and skipped, and a frame found unowned leaves its queue. So a
//! frame has at most one live entry, the one of its current generation; stale entries are
//! compacted away once they outnumber the live ones. The ghost queue holds up to 0.9x as many
//! keys as there are frames, the newest entry of a key winning.

use super::{claim_unreferenced, DirtyRule, Policy, Victim};
use crate::frame::state::{ClaimResult, UNOWNED};
use crate::frame::{FrameId, FrameTable, PageKey};
use crate::sync::{lock, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};

/// Uses a frame's count holds at most (2 bits).
const MAX_USES: u8 = 3;

/// The S3-FIFO policy.
#[derive(Debug)]
pub struct S3FifoPolicy {
    queues: Mutex<Queues>,
    /// Uses since insertion (small queue) or since the last pass (main queue).
    uses: Box<[AtomicU8]>,
    /// Entries the small queue may hold before evictions come from it.
    small_target: usize,
    dirty: DirtyRule,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Home {
    Out,
    Small,
    Main,
}

#[derive(Debug)]
struct Queues {
    /// (frame, its generation at push); oldest at the front.
    small: VecDeque<(FrameId, u32)>,
    main: VecDeque<(FrameId, u32)>,
    generation: Vec<u32>,
    home: Vec<Home>,
    small_len: usize,
    main_len: usize,
    ghost: Ghost,
}

/// Keys of pages recently evicted from the small queue, oldest first. Each key maps to the
/// sequence number of its latest entry, so an older entry of the same key expiring, or one
/// taken out by a hit, leaves the newer one alone.
#[derive(Debug)]
struct Ghost {
    order: VecDeque<(u64, u64)>,
    latest: HashMap<u64, u64>,
    next_seq: u64,
    capacity: usize,
}

impl Ghost {
    fn insert(&mut self, key: u64) {
        if self.order.len() == self.capacity {
            if let Some((old, seq)) = self.order.pop_front() {
                if self.latest.get(&old) == Some(&seq) {
                    self.latest.remove(&old);
                }
            }
        }
        self.next_seq += 1;
        self.order.push_back((key, self.next_seq));
        self.latest.insert(key, self.next_seq);
    }

    /// Whether `key` is remembered; a hit forgets it (its entry in `order` expires unused).
    fn take(&mut self, key: u64) -> bool {
        self.latest.remove(&key).is_some()
    }
}

/// A page key folded to 64 bits for the ghost queue; a collision only admits a page to main.
fn ghost_key(k: PageKey) -> u64 {
    k.file.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ k.page
}

impl S3FifoPolicy {
    /// A policy for a table of `frames` frames, taking dirty frames by `dirty`.
    pub fn new(frames: usize, dirty: DirtyRule) -> Self {
        let ghost = Ghost {
            order: VecDeque::new(),
            latest: HashMap::new(),
            next_seq: 0,
            capacity: (frames * 9 / 10).max(1),
        };
        S3FifoPolicy {
            queues: Mutex::new(Queues {
                small: VecDeque::new(),
                main: VecDeque::new(),
                generation: vec![0; frames],
                home: vec![Home::Out; frames],
                small_len: 0,
                main_len: 0,
                ghost,
            }),
            uses: (0..frames).map(|_| AtomicU8::new(0)).collect(),
            small_target: (frames / 10).max(1),
            dirty,
        }
    }

    fn count_use(&self, id: FrameId) {
        // Relaxed: a hint; load + store, as a lost use costs little and a hit is the hot path.
        let u = &self.uses[id as usize];
        let n = u.load(Ordering::Relaxed);
        if n < MAX_USES {
            u.store(n + 1, Ordering::Relaxed);
        }
    }
}

impl Queues {
    fn leave(&mut self, id: FrameId) {
        match std::mem::replace(&mut self.home[id as usize], Home::Out) {
            Home::Small => self.small_len -= 1,
            Home::Main => self.main_len -= 1,
            Home::Out => {}
        }
    }

    /// Drops stale entries once they outnumber the live ones (frames re-inserted after leaving
    /// outside the policy, while no eviction came to pop their old entries).
    fn compact_if_stale(&mut self) {
        let live = self.small_len + self.main_len;
        if self.small.len() + self.main.len() <= 2 * live + 64 {
            return;
        }
        let (generation, home) = (&self.generation, &self.home);
        let keep = |want: Home| {
            move |&(id, g): &(FrameId, u32)| generation[id as usize] == g && home[id as usize] == want
        };
        self.small.retain(keep(Home::Small));
        self.main.retain(keep(Home::Main));
    }

    fn join(&mut self, id: FrameId, home: Home) {
        self.home[id as usize] = home;
        let entry = (id, self.generation[id as usize]);
        match home {
            Home::Small => {
                self.small_len += 1;
                self.small.push_back(entry);
            }
            Home::Main => {
                self.main_len += 1;
                self.main.push_back(entry);
            }
            Home::Out => unreachable!("joining no queue"),
        }
    }
}

impl Policy for S3FifoPolicy {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    fn on_insert(&self, frames: &FrameTable, id: FrameId) {
        // Being loaded is not a use.
        frames.state(id).clear_referenced();
        frames.take_touched(id);
        // Relaxed: see `count_use`.
        self.uses[id as usize].store(0, Ordering::Relaxed);
        let key = ghost_key(frames.key(id));
        let mut q = lock(&self.queues);
        q.leave(id);
        q.generation[id as usize] = q.generation[id as usize].wrapping_add(1);
        let home = if q.ghost.take(key) { Home::Main } else { Home::Small };
        q.join(id, home);
        q.compact_if_stale();
    }

    fn on_hit(&self, id: FrameId) {
        self.count_use(id);
    }

    fn pick_victim(&self, frames: &FrameTable) -> Victim {
        let mut q = lock(&self.queues);
        let mut deferred = None;
        // Entries of each queue passed over in a row (pinned, under I/O, or dirty and deferred):
        // once a queue's every entry was, the other queue is tried, whatever the sizes say.
        let (mut stuck_small, mut stuck_main) = (0, 0);
        // Every main entry may go round MAX_USES times, and a small one moves once.
        let budget = (MAX_USES as usize + 2) * (q.small_len + q.main_len) + 2;
        for _ in 0..budget {
            let small_stuck = stuck_small >= q.small_len;
            let main_stuck = stuck_main >= q.main_len;
            if small_stuck && main_stuck {
                break;
            }
            let from_small = if small_stuck {
                false
            } else if main_stuck {
                true
            } else {
                q.small_len >= self.small_target
            };
            let popped = if from_small { q.small.pop_front() } else { q.main.pop_front() };
            let Some((id, generation)) = popped else {
                if q.small_len + q.main_len == 0 {
                    break;
                }
                continue;
            };
            let expected = if from_small { Home::Small } else { Home::Main };
            if q.generation[id as usize] != generation || q.home[id as usize] != expected {
                continue; // stale: the frame was inserted again since
            }
            q.leave(id);
            if frames.state(id).load() & UNOWNED != 0 {
                continue; // freed outside the policy
            }
            if frames.take_touched(id) {
                self.count_use(id);
            }
            // Relaxed: see `count_use`.
            let uses = self.uses[id as usize].load(Ordering::Relaxed);
            if uses > 0 {
                // Small → main resets the count; main goes round with one use less.
                self.uses[id as usize].store(if from_small { 0 } else { uses - 1 }, Ordering::Relaxed);
                q.join(id, Home::Main);
                (stuck_small, stuck_main) = (0, 0);
                continue;
            }
            match claim_unreferenced(frames, id) {
                ClaimResult::Claimed => {
                    if from_small {
                        q.ghost.insert(ghost_key(frames.key(id)));
                    }
                    return Victim::Claimed(id);
                }
                ClaimResult::Dirty if !self.dirty.defer(frames, id) => {
                    // Back at the old end: once written back, the next pick takes it.
                    q.join(id, expected);
                    let entry = if from_small { q.small.pop_back() } else { q.main.pop_back() };
                    let entry = entry.expect("just pushed");
                    if from_small {
                        q.small.push_front(entry)
                    } else {
                        q.main.push_front(entry)
                    }
                    return Victim::Dirty(id);
                }
                // Dirty and deferred, pinned or under I/O: round again.
                r => {
                    if r == ClaimResult::Dirty {
                        deferred.get_or_insert(id);
                    }
                    if from_small {
                        stuck_small += 1;
                    } else {
                        stuck_main += 1;
                    }
                    q.join(id, expected);
                }
            }
        }
        deferred.map_or(Victim::None, Victim::Dirty)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::policy::tests::{insert, resident_table_with};

    fn policy(n: usize) -> impl FnOnce(usize) -> S3FifoPolicy {
        move |_| S3FifoPolicy::new(n, DirtyRule::default())
    }

    /// Evicts once and gives the frame `page`; returns the frame.
    fn miss(t: &FrameTable, p: &S3FifoPolicy, page: u64) -> FrameId {
        match p.pick_victim(t) {
            Victim::Claimed(id) => {
                insert(t, p, id, page);
                id
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn pages_used_once_leave_through_the_small_queue() {
        let (t, p) = resident_table_with(20, policy(20));
        // Pages 0..20 are all in the small queue; using 0..10 moves them to main when their
        // turn comes, so a scan of new pages evicts only the unused ones and its own pages.
        for id in 0..10 {
            p.on_hit(id);
        }
        for page in 100..200 {
            // Each victim held an unused old page (10..20) or a page of the scan itself.
            let id = miss(&t, &p, page);
            assert!(id >= 10 || t.key(id).page >= 100, "used page {id} was evicted");
        }
        for id in 0..10 {
            assert_eq!(t.key(id).page, u64::from(id), "used page {id} was evicted");
        }
    }

    #[test]
    fn a_page_evicted_from_small_comes_back_to_main() {
        let (t, p) = resident_table_with(10, policy(10));
        // Frame 0 (page 0) is the oldest, unused: the first victim, remembered in the ghost.
        assert_eq!(p.pick_victim(&t), Victim::Claimed(0));
        insert(&t, &p, 0, 0); // page 0 again: straight to main
        assert_eq!(lock(&p.queues).home[0], Home::Main);
        // A scan of new pages goes through the small queue and leaves page 0 alone while
        // the small queue has pages to give.
        for page in 100..108 {
            let id = miss(&t, &p, page);
            assert_ne!(id, 0);
        }
    }

    #[test]
    fn pinned_pages_in_the_small_queue_do_not_hide_main() {
        let (t, p) = resident_table_with(20, policy(20));
        // Pages 0..10 used (they move to main on the first eviction pass), pages 10..20
        // pinned in the small queue: a victim must come from main.
        for id in 0..10 {
            p.on_hit(id);
        }
        for id in 10..20 {
            t.state(id).try_pin().unwrap();
        }
        assert!(matches!(p.pick_victim(&t), Victim::Claimed(id) if id < 10));
    }

    #[test]
    fn stale_entries_are_compacted() {
        let (t, p) = resident_table_with(8, policy(8));
        // Frames freed outside the policy and inserted again, many times, with no eviction.
        for round in 0..100u64 {
            for id in 0..8 {
                assert_eq!(t.state(id).try_claim(), ClaimResult::Claimed);
                insert(&t, &p, id, 1000 + round * 8 + u64::from(id));
            }
        }
        let q = lock(&p.queues);
        assert!(q.small.len() + q.main.len() <= 2 * 8 + 64 + 1, "{} entries", q.small.len() + q.main.len());
    }
}
