//! Pages in frames: claiming a frame by the clock hand, loading a page, locking the frame that
//! holds a page, writing a dirty frame back, dropping a file's pages.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::frame::{key, key_page, key_slot, DIRTY, HITS, REFERENCED, STREAMED, VALID};
use super::layout::{technique, CountStripe, COUNT_STRIPES};
use super::pool;
use super::Inner;
use crate::alloc::two_layer::Marks;
use crate::alloc::Pressure;
use crate::error::{Error, ErrorKind, Result};
use crate::policy::CleanFirst;
use crate::shm::Acquired;

/// How long a claim waits for the service's write-back to free a frame before it says
/// `CacheFull`: at least this, and ten of the service's passes (its flush interval).
const CLAIM_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// Frames a claim's hand turns over: `n` from `first`.
struct Area<'a> {
    first: usize,
    n: u64,
    hand: Hand<'a>,
}

/// A clock hand: frames it passed.
enum Hand<'a> {
    /// The cache's, or a NUMA node's (`numa.rs`).
    Cache(&'a AtomicU64),
    /// A set's (`index.rs`).
    Set(&'a std::sync::atomic::AtomicU32),
}

impl Area<'_> {
    /// Whether the hand has not yet passed every frame once: the frames ahead of it have never
    /// held a page.
    fn first_lap(&self) -> bool {
        // Relaxed (both): a hint; each frame is taken by CAS.
        match self.hand {
            Hand::Cache(h) => h.load(Ordering::Relaxed) < self.n,
            Hand::Set(h) => (h.load(Ordering::Relaxed) as u64) < self.n,
        }
    }

    /// The hand's next frame.
    fn next(&self) -> u32 {
        // Relaxed (both): a hand only spreads claims; each frame is taken by CAS.
        let at = match self.hand {
            Hand::Cache(h) => h.fetch_add(1, Ordering::Relaxed) % self.n,
            Hand::Set(h) => h.fetch_add(1, Ordering::Relaxed) as u64 % self.n,
        };
        (self.first as u64 + at) as u32
    }
}

/// How long a client found alive is taken to be (ms): a dead lock holder is taken over at
/// most this much later.
pub(crate) const ALIVE_FOR_MS: u32 = 10;

/// What a page's fresh frame is filled with before a write copies into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// The file's bytes (a read, or a write of part of the page).
    Read,
    /// Nothing: the write covers the whole page. The frame stays not `VALID` until the copy
    /// is done, so a writer killed half-way leaves nothing of the page's old file behind.
    Overwrite,
}

thread_local! {
    /// This thread's stripe of its clients' counters (`ClientCounters::stripes`).
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % COUNT_STRIPES;
    /// The last error of this thread's write-backs of victims (`write_back_victim`) since its
    /// claim began its rounds (`claim`).
    static VICTIM_ERROR: std::cell::RefCell<Option<Error>> = const { std::cell::RefCell::new(None) };
}

/// The stripe the next thread takes. Relaxed: it only spreads threads over stripes.
static NEXT_STRIPE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Inner {
    /// The page index, as the cache was made with (`SharedConfig::index`).
    pub(crate) fn index(&self) -> super::index::Index<'_> {
        self.view.index(self.techniques)
    }

    /// Counts a lookup that found its page cached.
    pub(crate) fn count_hit(&self) {
        self.count(|s| &s.hits, 1);
    }

    /// Adds `n` to this thread's stripe of count `which`.
    pub(crate) fn count(&self, which: fn(&CountStripe) -> &AtomicU64, n: u64) {
        // Relaxed: a statistic.
        which(self.stripe()).fetch_add(n, Ordering::Relaxed);
    }

    /// This thread's stripe of this process's counters.
    fn stripe(&self) -> &CountStripe {
        &self.view.counters_of(self.me).stripes[STRIPE.with(|s| *s)]
    }

    /// Counts a lookup whose page an optimistic copy read (no lock, no pin), among the hits
    /// (`count_hit` counts it too).
    pub(crate) fn count_lock_free_hit(&self) {
        self.count(|s| &s.lock_free_hits, 1);
    }

    /// Counts a pin the thread's hot index served (`pin.rs`).
    pub(crate) fn count_hot_hit(&self) {
        self.count(|s| &s.hot_hits, 1);
    }

    /// The key of page `page` of file `slot` in its entry's current generation (stable while
    /// the file is open, or has dirty pages: only then may it change).
    pub(crate) fn key(&self, slot: u32, page: u64) -> u64 {
        // Relaxed: changed only under the table's lock while no process has the file open.
        key(slot, self.view.files()[slot as usize].gen.load(Ordering::Relaxed), page)
    }

    /// Whether client `id` may be alive: `/proc` asked at most once per [`ALIVE_FOR_MS`] while
    /// it is (each lock waiter asks at every wake, and the read costs more than most waits);
    /// a client found dead is asked about again at every call.
    pub(crate) fn alive(&self, id: u32) -> bool {
        let Some(seen) = self.view.clients().index(id).and_then(|i| self.alive_seen.get(i)) else {
            return self.view.clients().alive(id);
        };
        let now = super::files::coarse_ms() as u32;
        // Relaxed: a cache of a hint; its worst is one more wait of a poll.
        let w = seen.load(Ordering::Relaxed);
        if (w >> 32) as u32 == id && now.wrapping_sub(w as u32) < ALIVE_FOR_MS {
            return true;
        }
        let alive = self.view.clients().alive(id);
        seen.store(if alive { (id as u64) << 32 | now as u64 } else { 0 }, Ordering::Relaxed);
        alive
    }

    /// Whether client `id`'s process is stopped (SIGSTOP, a debugger, a frozen cgroup): what
    /// it holds stays held until it resumes, and a reader does not wait for that.
    pub(crate) fn stopped(&self, id: u32) -> bool {
        self.view.clients().pid(id).is_some_and(super::holder::stopped)
    }

    /// Locks frame `f` for us, repairing it first if its holder died.
    pub(crate) fn lock_frame(&self, f: u32) {
        self.lock_frame_unless(f, &|_| false);
    }

    /// As [`Self::lock_frame`], but false (not locked) once a wait is over and `give_up` says
    /// so of the holder.
    pub(crate) fn lock_frame_unless(&self, f: u32, give_up: &dyn Fn(u32) -> bool) -> bool {
        let m = &self.view.frames()[f as usize];
        match m.lock_unless(self.me, |h| self.alive(h), give_up) {
            Some(Acquired::OwnerDied(dead)) => self.repair_frame(f, dead),
            Some(Acquired::Clean) => {}
            None => return false,
        }
        true
    }

    /// Frees frame `f`, which we hold locked: out of the index, its dirty page (if any)
    /// uncounted and forgotten, no page, unlocked.
    pub(crate) fn free_frame(&self, f: u32) {
        let k = self.view.frames()[f as usize].key();
        self.empty_frame(f);
        self.view.frames()[f as usize].unlock(self.me, true);
        if self.pools_free_frames() {
            self.list_free_of(f, (k != 0).then(|| key_slot(k)));
        }
    }

    /// Lists frame `f` (empty, unlocked) for the next misses: in the two-layer allocator's
    /// pool (`pool.rs`), else on the free stack (`free.rs`).
    pub(super) fn list_free(&self, f: u32) {
        self.list_free_of(f, None);
    }

    /// As `list_free`, for a frame that held a page of file `slot`: with the two-layer
    /// allocator, on the file's own list while it holds fewer than the high mark (StreamCache
    /// §4.3: freed pages stay with their file for its next misses), else in the pool.
    fn list_free_of(&self, f: u32, slot: Option<u32>) {
        if !self.two_layer() {
            self.view.free_frames().push(f, self.me, |h| self.alive(h), |h| self.stopped(h));
            return;
        }
        self.as_taker(|who| {
            let pool = self.view.pool();
            let high = Marks::for_frames(self.view.active()).high;
            let spare = slot.and_then(|s| self.view.files().get(s as usize)).map(|e| &e.spare);
            match spare.filter(|s| s.len() < high) {
                Some(s) => s.give(pool.links, &[f], who),
                None => pool.give(&[f], who),
            };
        });
    }

    /// Moves file `slot`'s own free frames to the pool (the two-layer allocator's; its last
    /// close, or an entry freed).
    pub(crate) fn drain_spare(&self, slot: u32) {
        let Some(e) = self.view.files().get(slot as usize).filter(|e| e.spare.len() > 0) else { return };
        let pool = self.view.pool();
        self.as_taker(|who| {
            let frames = e.spare.take(pool.links, usize::MAX, who);
            pool.give(&frames, who);
        });
    }

    /// Runs `f` as a taker of the two-layer allocator's list locks (`pool.rs`).
    pub(super) fn as_taker<R>(&self, f: impl FnOnce(&pool::Taker<'_>) -> R) -> R {
        let (alive, stopped) = (|h| self.alive(h), |h| self.stopped(h));
        f(&pool::Taker { me: self.me, alive: &alive, give_up: &stopped })
    }

    /// Whether emptied frames are listed for the next misses (`free.rs`): not with page sets
    /// (a miss takes a frame of its page's set only) or NUMA partitions (of its node first).
    pub(crate) fn pools_free_frames(&self) -> bool {
        self.techniques & technique::SET_ASSOC == 0 && self.view.header().numa.count() == 1
    }

    /// A listed free frame for page key `k`, locked for us and emptied (as `claim_at`'s):
    /// from `k`'s file's own list or the pool with the two-layer allocator, else from the free
    /// stack; None if they are empty or gave only frames no longer free (claimed by the hand
    /// since, or listed twice), a few at most.
    fn claim_free(&self, k: u64) -> Option<u32> {
        if self.two_layer() {
            return self.claim_spare(key_slot(k));
        }
        let free = self.view.free_frames();
        for _ in 0..8 {
            if free.is_empty() {
                return None;
            }
            let f = free.pop(self.me, |h| self.alive(h), |h| self.stopped(h))?;
            if let Some(f) = self.take_listed(f) {
                return Some(f);
            }
        }
        None
    }

    /// Frame `f`, found on a list of free frames, locked for us and emptied if it is still
    /// free: no page, in use, unpinned, its memory allocated.
    fn take_listed(&self, f: u32) -> Option<u32> {
        let m = self.view.frames().get(f as usize)?;
        if m.holder().is_some() || !m.try_lock(self.me) {
            return None;
        }
        if m.key() != 0
            || m.home() != 0
            || m.flags() != 0
            || !self.in_use(f)
            || self.pinned(f)
            || !self.view.reserve(f as usize)
        {
            m.unlock(self.me, false);
            return None;
        }
        self.empty_frame(f);
        Some(f)
    }

    /// The two-layer allocator's frame for a miss of file `slot` (`pool.rs`): from the file's
    /// own list; an empty one takes the low mark's frames from the pool at once (this CPU's
    /// region first). A pool found short wakes the flushers, whose passes reclaim into it.
    fn claim_spare(&self, slot: u32) -> Option<u32> {
        let spare = &self.view.files().get(slot as usize)?.spare;
        let pool = self.view.pool();
        self.as_taker(|who| {
            for _ in 0..8 {
                let mut got = spare.take(pool.links, 1, who);
                if got.is_empty() {
                    let low = Marks::for_frames(self.view.active()).low;
                    got = pool.take(low, who);
                    if Pressure::of(pool.pooled(), self.view.active()) != Pressure::None {
                        self.kick_write_back();
                    }
                    let first = got.pop()?;
                    spare.give(pool.links, &got, who);
                    got = vec![first];
                }
                if let Some(f) = got.pop().and_then(|f| self.take_listed(f)) {
                    return Some(f);
                }
            }
            None
        })
    }

    /// The two-layer allocator's background reclaim (`pool.rs`; the flushers' passes): while
    /// the pool holds fewer than 1/32 of the frames in use, evicts clean, unreferenced pages
    /// into it as the hand (or the policy) picks them, up to twice that or a lap of the hand;
    /// under 1/128 it first halves every file's own list back into the pool (StreamCache
    /// §4.3's urgent level). The frames it listed.
    pub(crate) fn reclaim(&self) -> u64 {
        use crate::alloc::LOW_DIVISOR;
        if !self.two_layer() || !self.pools_free_frames() {
            return 0;
        }
        let pool = self.view.pool();
        let active = self.view.active();
        let level = Pressure::of(pool.pooled(), active);
        if level == Pressure::None {
            return 0;
        }
        self.as_taker(|who| {
            if level == Pressure::Urgent {
                for e in self.view.files().iter().filter(|e| e.spare.len() > 1) {
                    let half = e.spare.take(pool.links, e.spare.len() / 2, who);
                    pool.give(&half, who);
                }
            }
            let target = 2 * active / LOW_DIVISOR;
            // Bounded: the hand may give frames no list takes (pinned or dirty ones keep it
            // turning, free ones are listed already), a lap at most.
            let (mut batch, mut listed, mut misses, mut steps) = (Vec::new(), 0, 0, 0);
            while pool.pooled() + batch.len() < target && misses < 4 && steps < active {
                steps += 1;
                let Some((f, old)) = self.hand_claim() else {
                    misses += 1;
                    continue;
                };
                self.forget_evicted(old);
                self.view.frames()[f as usize].unlock(self.me, true);
                // A free frame on a list already (the hand takes them as any): no gain.
                // Relaxed: a hint; a list's push claims the word by CAS.
                if pool.links[f as usize].load(Ordering::Relaxed) != 0 {
                    misses += 1;
                    continue;
                }
                batch.push(f);
                if batch.len() == pool::RECLAIM_BATCH {
                    listed += pool.give(&batch, who) as u64;
                    batch.clear();
                }
            }
            listed += pool.give(&batch, who) as u64;
            // Relaxed: a counter.
            self.view.header().reclaimed.fetch_add(listed, Ordering::Relaxed);
            listed
        })
    }

    /// As `free_frame`, but keeps the lock. Waits for the frame's pins first.
    pub(crate) fn empty_frame(&self, f: u32) {
        let m = &self.view.frames()[f as usize];
        self.wait_unpinned(f);
        m.bump();
        self.unindex_unless(f, &|_| false);
        let k = m.key();
        if m.flags() & DIRTY != 0 && k != 0 {
            // Release: the flag goes before the counts shrink, so they never fall below it.
            m.flags.fetch_and(!DIRTY, Ordering::Release);
            self.view.dirty_map().clear(f);
            self.view.files()[key_slot(k) as usize].dirty.fetch_sub(1, Ordering::Release);
            self.view.header().dirty.fetch_sub(1, Ordering::Relaxed);
        }
        // Relaxed: published by the unlock's Release.
        m.key.store(0, Ordering::Relaxed);
        m.flags.store(0, Ordering::Relaxed);
    }

    /// Takes frame `f` (locked by us) out of the index; false, left in, once a wait for its
    /// partition's lock is over and `give_up` says so of the holder.
    pub(super) fn unindex_unless(&self, f: u32, give_up: &dyn Fn(u32) -> bool) -> bool {
        self.tree_op(|| self.index().unplace(f, self.me, &|h| self.alive(h), give_up))
    }

    /// A frame with no page, locked for us, for page key `k`: the clock hand's next frame
    /// that is unlocked, clean and not referenced since the hand last passed (dirty ones of
    /// files we have open for writing are written back on the second lap); with the
    /// set-associative index, the hand of `k`'s set, among its frames.
    pub(crate) fn claim(&self, k: u64) -> Result<u32> {
        // Every frame locked, or dirty in files this process cannot write: the service writes
        // dirty pages back in the background (`SharedCache::write_back_due`) through the
        // descriptors writers lent it, so the claim waits for that, as the kernel's
        // allocations wait for its flushers, before it gives up.
        let passes = self.view.header().flush_interval() * 10;
        // Set at the first wait only: a clock read is a tenth of a claim's time.
        let mut deadline = None;
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            VICTIM_ERROR.with(|e| e.take());
            if let Some(f) = self.try_claim_rounds(k, 2) {
                return Ok(f);
            }
            // Two rounds found no frame, and a dirty one of ours could not be written back:
            // the writer learns why now, as the in-process engine's do, rather than waiting
            // for a write-back that fails (the error stays on the file for its next sync).
            if let Some(e) = VICTIM_ERROR.with(|e| e.take()) {
                return Err(e);
            }
            self.ask_for_set_of(k);
            let deadline =
                *deadline.get_or_insert_with(|| std::time::Instant::now() + CLAIM_PATIENCE.max(passes));
            if std::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::CacheFull,
                    "every frame of the shared cache (or of the page's set) is locked, pinned or dirty in files this process cannot write",
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(50));
        }
    }

    /// With the set-associative index, asks the service to write back the files of `k`'s
    /// set's dirty frames that this process cannot write: a set is small, so its frames may
    /// all be dirty while the cache as a whole is below the ratios that start write-back.
    fn ask_for_set_of(&self, k: u64) {
        let index = self.index();
        let Some(sets) = index.sets() else { return };
        let mut asked = Vec::new();
        for m in &self.view.frames()[sets.frames_of(sets.set_of(k))] {
            let k = m.key();
            if m.flags() & DIRTY != 0
                && k != 0
                && !asked.contains(&key_slot(k))
                && self.writable_fd(key_slot(k)).is_none()
            {
                asked.push(key_slot(k));
                self.ask_write_back(key_slot(k));
            }
        }
    }

    /// As [`Self::claim`], but None at once if no frame can be taken now without waiting for
    /// any lock (no repair of dead clients' frames, which waits for locks): for a loader
    /// holding frames already.
    pub(crate) fn try_claim_holding(&self, k: u64) -> Option<u32> {
        self.try_claim_rounds(k, 1)
    }

    fn try_claim_rounds(&self, k: u64, rounds: usize) -> Option<u32> {
        let index = self.index();
        let header = self.view.header();
        let nodes = header.numa.count();
        // Where the hand turns: over `k`'s set with the set's own hand; over a node's frames
        // with its hand, then each other node's; or over every frame. The node is this CPU's,
        // or while that one has used each of its frames and another has not, the other (as
        // the kernel's allocations take a remote node's free pages before they reclaim).
        let (areas, here) = match (index.sets(), nodes) {
            (Some(_), _) | (None, 1) => (1, 0),
            (None, n) => {
                let here = header.numa.here();
                let fresh = (0..n).map(|i| (here + i) % n).find(|&node| {
                    let (all, active) = (self.view.n_frames, self.view.active());
                    let frames = super::numa::active_of(node, n, all, active).len() as u64;
                    // Relaxed: a hint; a hand past its frames has been round them once.
                    header.numa.hands[node].load(Ordering::Relaxed) < frames
                });
                (n, fresh.unwrap_or(here))
            }
        };
        let area = |i: usize| -> Area<'_> {
            if let Some(sets) = index.sets() {
                let s = sets.set_of(k);
                let r = sets.frames_of(s);
                // Its ways in use only (`resize.rs`).
                let n = r.len().min(self.active_ways()) as u64;
                return Area { first: r.start, n, hand: Hand::Set(&sets.hands[s]) };
            }
            if nodes == 1 {
                return Area { first: 0, n: self.view.active() as u64, hand: Hand::Cache(&header.clock) };
            }
            let node = (here + i) % nodes;
            // Its frames in use only (`resize.rs`).
            let r = super::numa::active_of(node, nodes, self.view.n_frames, self.view.active());
            Area { first: r.start, n: r.len() as u64, hand: Hand::Cache(&header.numa.hands[node]) }
        };
        if areas == 1 && index.sets().is_none() {
            if let Some(f) = self.claim_free(k) {
                self.inserted(f, k, None);
                return Some(f);
            }
        }
        let (f, evicted) = self.hand_claim_in(rounds, areas, &area)?;
        self.inserted(f, k, evicted);
        Some(f)
    }

    /// The clock hand's (or the policy's) victim over the whole cache, one round, emptied
    /// and locked for us, with the key S3-FIFO remembers for it: reclaim's, in a cache with
    /// neither page sets nor NUMA partitions.
    fn hand_claim(&self) -> Option<(u32, Option<u64>)> {
        let header = self.view.header();
        let area =
            |_: usize| Area { first: 0, n: self.view.active() as u64, hand: Hand::Cache(&header.clock) };
        self.hand_claim_in(1, 1, &area)
    }

    /// A claim's victim over `rounds` rounds of the `areas` that `area` gives (a set, NUMA
    /// nodes, the cache), emptied and locked for us, with the key S3-FIFO remembers for it;
    /// not a listed free frame.
    fn hand_claim_in<'a>(
        &'a self,
        rounds: usize,
        areas: usize,
        area: &dyn Fn(usize) -> Area<'a>,
    ) -> Option<(u32, Option<u64>)> {
        let index = self.index();
        let header = self.view.header();
        let nodes = header.numa.count();
        let rule = self.dirty_rule();
        let ordered = self.order().is_some();
        let laps = if self.counts_hits() { 8 } else { 4 };
        let mut steps = 0;
        let claimed = 'rounds: {
            for round in 0..rounds {
                for a in (0..areas).map(area).filter(|a| a.n > 0) {
                    if ordered {
                        // A frame the hand has not passed yet has never held a page; then the
                        // policy's victim (`policy/`); the hand's only if it found none.
                        while a.first_lap() {
                            steps += 1;
                            let f = a.next();
                            if self.claim_at(f, false, rule) {
                                break 'rounds Some((f, None));
                            }
                        }
                        if let Some(claimed) = self.claim_in_order(a.first, a.n as usize, rule) {
                            break 'rounds Some(claimed);
                        }
                    }
                    // A GClock frame read often stays up to four laps (`FrameMeta::age`).
                    for step in 0..laps * a.n {
                        steps += 1;
                        let f = a.next();
                        if self.claim_at(f, step >= a.n, rule) {
                            break 'rounds Some((f, None));
                        }
                    }
                }
                if round == 0 && rounds > 1 {
                    self.repair_dead();
                }
            }
            None
        };
        if index.sets().is_some() || nodes > 1 {
            // Relaxed: the cache-wide count of frames passed, a hint (`View::hand`).
            header.clock.fetch_add(steps, Ordering::Relaxed);
        }
        claimed
    }

    /// Takes frame `f` for a claim if its chunk's memory is allocated (`View::reserve`) and it
    /// is unlocked, clean (after a write-back if `rule` and `late`, a second lap, say so),
    /// unpinned and not referenced since the hand last passed: emptied, locked for us. Else
    /// ages its reference.
    fn claim_at(&self, f: u32, late: bool, rule: CleanFirst) -> bool {
        let m = &self.view.frames()[f as usize];
        // Past a resize's new size (the hand's area was computed before it): not allocated again.
        if !self.in_use(f) {
            return false;
        }
        // A set's hand turns over its own frames only, all allocated at the start.
        if self.techniques & technique::SET_ASSOC == 0 {
            self.passing(f as usize);
        }
        // A frame of a chunk whose memory is not allocated yet has never been used.
        if m.holder().is_some() || !self.view.reserve(f as usize) {
            return false;
        }
        let flags = m.flags();
        if m.age(flags) {
            return false;
        }
        if flags & DIRTY != 0 {
            // Clean-first passes dirty frames over for a lap (gc-aware only while their
            // device collects); plain takes this one if it can write it back.
            let defer = self.defers(rule, m.key());
            if !defer || late {
                self.write_back_victim(f);
            }
            if defer || m.flags() & DIRTY != 0 {
                return false;
            }
        }
        self.take(f).is_some()
    }

    /// Whether `rule` passes over a dirty frame holding page key `k` in search of a clean one:
    /// clean-first always, gc-aware while `k`'s device collects, plain never.
    pub(super) fn defers(&self, rule: CleanFirst, k: u64) -> bool {
        match rule {
            CleanFirst::Always => true,
            CleanFirst::Never => false,
            CleanFirst::WhileGc => k != 0 && self.collecting_key(k),
        }
    }

    /// [`Self::take_holding`] after writing frame `f` back if it is dirty (and this process
    /// can write its file): a policy's victim that no rule passed over.
    pub(super) fn take_written(&self, f: u32, want: Option<u64>) -> Option<u64> {
        if self.view.frames()[f as usize].flags() & DIRTY != 0 {
            self.write_back_victim(f);
        }
        self.take_holding(f, want)
    }

    /// Takes frame `f` if it is unlocked, clean, unpinned and not referenced (since the hand
    /// or the policy last looked): emptied, locked for us. The key of the page it held (0 for
    /// none), or None, left as it was.
    pub(super) fn take(&self, f: u32) -> Option<u64> {
        self.take_holding(f, None)
    }

    /// As [`Self::take`], only if the frame still holds page key `want` when it is.
    pub(super) fn take_holding(&self, f: u32, want: Option<u64>) -> Option<u64> {
        let m = &self.view.frames()[f as usize];
        if !m.try_lock(self.me) {
            return None;
        }
        // A frame a resize took out of use (`resize.rs`), after our look at it.
        if !self.in_use(f)
            || want.is_some_and(|k| m.key() != k)
            || m.flags() & (DIRTY | REFERENCED | HITS) != 0
            || self.pinned(f)
        {
            m.unlock(self.me, false);
            return None;
        }
        let old = m.key();
        if m.home() != 0 {
            // A victim whose index partition a stopped process holds is passed over.
            if !self.unindex_unless(f, &|h| self.stopped(h)) {
                m.unlock(self.me, false);
                return None;
            }
            self.count(|s| &s.evictions, 1);
            if m.flags() & STREAMED != 0 {
                // Relaxed: a statistic.
                self.view.header().stream_evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The new page's bytes will differ: bumped now, so that a reader of the old page fails
        // even if our unlock says nothing changed.
        self.empty_frame(f);
        Some(old)
    }

    /// Writes back dirty frame `f` if this process has its file open for writing.
    pub(super) fn write_back_victim(&self, f: u32) {
        let m = &self.view.frames()[f as usize];
        let k = m.key();
        if k == 0 {
            return;
        }
        let Some(fd) = self.writable_fd(key_slot(k)) else { return };
        if !m.try_lock(self.me) {
            return;
        }
        if m.key() == k && m.flags() & DIRTY != 0 {
            let _own = self.own_change(key_slot(k), fd.os());
            // An error is kept on the file for its next sync, and for a claim that finds no
            // frame (`claim`).
            if let Err(e) = self.write_back_locked(f, &fd) {
                VICTIM_ERROR.with(|v| *v.borrow_mut() = Some(e));
            }
        }
        m.unlock(self.me, false);
    }

    /// The files this process has open for writing, by slot, with our descriptor of each.
    pub(crate) fn writable_fds(&self) -> Vec<(u32, std::sync::Arc<super::backing::Backing>)> {
        let fds = self.fds.lock().unwrap_or_else(|p| p.into_inner());
        fds.iter().filter(|(_, o)| o.writable).map(|(s, o)| (*s, o.fd.clone())).collect()
    }

    /// Our descriptor of `slot`'s file, if we have it open for writing.
    pub(crate) fn writable_fd(&self, slot: u32) -> Option<std::sync::Arc<super::backing::Backing>> {
        let fds = self.fds.lock().unwrap_or_else(|p| p.into_inner());
        fds.get(&slot).filter(|o| o.writable).map(|o| o.fd.clone())
    }

    /// The cached pages of file `slot` in its dirty range (`FileEntry::dirty_pages`) whose
    /// frames are dirty: every page dirtied before the call, and some dirtied since. Where the
    /// range holds more pages than the cache has dirty frames, from the dirty map
    /// (`dirty_map.rs`), else from the index.
    pub(crate) fn dirty_candidates(&self, slot: u32) -> Vec<(u32, u64)> {
        let (gen, end) = self.file_extent(slot);
        let dirty = self.view.files()[slot as usize].dirty_pages();
        let (from, to) = (dirty.start.min(end), dirty.end.min(end));
        let frames = self.view.frames();
        // A hint (write-back looks again under the frame's lock): the pages dirty as listed.
        let dirty_now = |f: u32| frames[f as usize].flags() & DIRTY != 0;
        // Relaxed: a hint of which way is shorter.
        if to.saturating_sub(from) <= self.view.header().dirty.load(Ordering::Relaxed) {
            return self.candidates_where(slot, gen, (from, to), &dirty_now);
        }
        self.holding(slot, gen, (from, to), self.view.dirty_map().scan().into_iter(), &dirty_now)
    }

    /// Of `frames`, those that hold a page `from..to` of generation `gen` of file `slot` and
    /// that `keep` takes, with their keys.
    fn holding(
        &self,
        slot: u32,
        gen: u32,
        (from, to): (u64, u64),
        frames: impl Iterator<Item = u32>,
        keep: &dyn Fn(u32) -> bool,
    ) -> Vec<(u32, u64)> {
        let metas = self.view.frames();
        frames
            .filter_map(|f| {
                let k = metas[f as usize].key();
                let ours = k != 0 && key_slot(k) == slot && k == key(slot, gen, key_page(k));
                (ours && (from..to).contains(&key_page(k)) && keep(f)).then_some((f, k))
            })
            .collect()
    }

    /// File `slot`'s generation and the end of its pages below its length: read under the
    /// table's lock, they let `candidates_of` list the file's pages after the lock is let go
    /// (its partition locks may be held by a stopped process) without ever listing another
    /// file's that took the entry meanwhile.
    pub(crate) fn file_extent(&self, slot: u32) -> (u32, u64) {
        let e = &self.view.files()[slot as usize];
        // Relaxed (gen): see `key`. Acquire (len): pairs with the length's Release stores; a
        // write extends it before it unlocks its frame, so every dirty page lies below it.
        (e.gen.load(Ordering::Relaxed), self.view.page_size.pages_in(e.len.load(Ordering::Acquire)))
    }

    /// The frames that held pages `from..to` of file `slot`, with their keys, each to be
    /// locked and checked by the caller: the tree's pages in the range, or, with the hash,
    /// exact lookups for a range small against the cache, else a pass over every frame.
    pub(crate) fn candidates(&self, slot: u32, from: u64, to: u64) -> Vec<(u32, u64)> {
        // Relaxed: see `key`.
        self.candidates_of(slot, self.view.files()[slot as usize].gen.load(Ordering::Relaxed), from, to)
    }

    /// `candidates` of generation `gen` of file `slot`.
    pub(crate) fn candidates_of(&self, slot: u32, gen: u32, from: u64, to: u64) -> Vec<(u32, u64)> {
        self.candidates_where(slot, gen, (from, to), &|_| true)
    }

    /// `candidates_of` pages `from..to`, only those whose frames `keep` takes.
    fn candidates_where(
        &self,
        slot: u32,
        gen: u32,
        (from, to): (u64, u64),
        keep: &dyn Fn(u32) -> bool,
    ) -> Vec<(u32, u64)> {
        let index = self.index();
        if let Some(pages) = index.pages(slot, gen, (from, to), keep) {
            return pages;
        }
        if to.saturating_sub(from) > (self.view.n_frames / 64) as u64 {
            return self.holding(slot, gen, (from, to), 0..self.view.n_frames as u32, keep);
        }
        (from..to)
            .filter_map(|page| {
                let k = key(slot, gen, page);
                index.find(k, self.me, &|h| self.alive(h)).filter(|&f| keep(f)).map(|f| (f, k))
            })
            .collect()
    }

    /// Marks frame `f` (locked by us) dirty, counting it first.
    pub(crate) fn mark_dirty(&self, f: u32) {
        let m = &self.view.frames()[f as usize];
        if m.flags() & DIRTY != 0 {
            return;
        }
        let e = &self.view.files()[key_slot(m.key()) as usize];
        // Counts before the flag, so they are never below the truth.
        if e.dirty.fetch_add(1, Ordering::AcqRel) == 0 {
            // Relaxed: an age for the service's write-back, which tolerates a stale one.
            e.dirtied.store(super::files::now_secs(), Ordering::Relaxed);
        }
        self.view.header().dirty.fetch_add(1, Ordering::Relaxed);
        // After the count: see `widen_dirty`.
        e.widen_dirty(key_page(m.key()));
        // Release: a sync that sees the flag sees the count.
        m.flags.fetch_or(DIRTY, Ordering::Release);
        self.view.dirty_map().set(f);
    }

    /// The frame holding page `page` of file `slot`, locked for us. If no frame holds it, one is
    /// claimed and, for [`Fill::Read`], filled from `fd` and made `VALID`; for
    /// [`Fill::Overwrite`] left not `VALID` for the caller to fill.
    pub(crate) fn lock_page(
        &self,
        slot: u32,
        page: u64,
        fd: &super::backing::Backing,
        fill: Fill,
    ) -> Result<u32> {
        Ok(self.lock_page_unless(slot, page, fd, fill, &|_| false, true)?.expect("never given up"))
    }

    /// As [`Self::lock_page`], but None once a wait for the page's frame, or for its index
    /// partition's lock, is over and `give_up` says so of its holder (a reader beside a
    /// stopped process); a page found counts as a hit if `count` (a read's first pass).
    pub(crate) fn lock_page_unless(
        &self,
        slot: u32,
        page: u64,
        fd: &super::backing::Backing,
        fill: Fill,
        give_up: &dyn Fn(u32) -> bool,
        count: bool,
    ) -> Result<Option<u32>> {
        let k = self.key(slot, page);
        let index = self.index();
        let frames = self.view.frames();
        loop {
            let found = match index.hint(k) {
                Some(f) => Some(f),
                None => match index.find_unless(k, self.me, &|h| self.alive(h), give_up) {
                    Some(found) => found,
                    None => return Ok(None),
                },
            };
            if let Some(f) = found {
                if !self.lock_frame_unless(f, give_up) {
                    return Ok(None);
                }
                let m = &frames[f as usize];
                if m.home() == k && m.flags() & VALID != 0 {
                    if count {
                        self.count_hit();
                    }
                    return Ok(Some(f));
                }
                self.tree_op(|| index.drop_stale(k, f));
                m.unlock(self.me, false);
                continue;
            }
            let f = self.claim(k)?;
            match self.place_unless(f, k, give_up)? {
                Some(true) => {}
                Some(false) => {
                    self.free_frame(f);
                    continue; // someone else put the page in a frame meanwhile
                }
                None => {
                    self.free_frame(f);
                    return Ok(None);
                }
            }
            self.count(|s| &s.misses, 1);
            if fill == Fill::Read {
                match self.fill_run(&[f], slot, page, fd) {
                    Ok(direct) if !direct => frames[f as usize].loaded(),
                    Ok(_) => {}
                    Err(e) => {
                        self.free_frame(f);
                        return Err(e);
                    }
                }
                // Release: published with the bytes by the unlock.
                frames[f as usize].flags.fetch_or(VALID, Ordering::Release);
                self.count(|s| &s.loads, 1);
            }
            return Ok(Some(f));
        }
    }

    /// Runs `op`, a change of the page index, counted in our client slot as under way
    /// (`ClientCounters::tree_ops`): the reaper of a process that died in one has every tree
    /// swept for nodes it took and did not link (`repair_dead`), the reaper of one that died
    /// between them none.
    pub(crate) fn tree_op<T>(&self, op: impl FnOnce() -> T) -> T {
        let ops = &self.view.counters_of(self.me).tree_ops;
        // SeqCst: stored before any store of the operation, for whoever reaps us.
        ops.fetch_add(1, Ordering::SeqCst);
        let r = op();
        // Release: after every store of the operation.
        ops.fetch_sub(1, Ordering::Release);
        r
    }

    /// The frame holding page `page` of file `slot`, locked for us, if the page is cached (an
    /// exact lookup; nothing is loaded).
    pub(crate) fn lock_cached(&self, slot: u32, page: u64) -> Option<u32> {
        let k = self.key(slot, page);
        let f = self.index().find(k, self.me, &|h| self.alive(h))?;
        self.lock_frame(f);
        if self.view.frames()[f as usize].home() == k {
            return Some(f);
        }
        self.view.frames()[f as usize].unlock(self.me, false);
        None
    }

    /// Moves entry `slot` (under the table's lock, nobody having it open, nothing dirty) to its
    /// next generation, so its old pages match no lookup. Once in 256 the generation comes
    /// round again: every frame of the slot, of any generation, is dropped first.
    pub(crate) fn next_generation(&self, slot: u32) {
        let e = &self.view.files()[slot as usize];
        // Relaxed: under the table's lock.
        let gen = (e.gen.load(Ordering::Relaxed) + 1) & 0xff;
        // The old generation's tree goes whole (its frames are the clock's to reclaim), and
        // with it what a dead process may have left of it. `leaky` stays set until the new
        // generation is stored, so a process killed in here leaves the next try (of the same
        // generation) to sweep what it had not given back yet.
        let forest = self.view.forest();
        // Relaxed (leaky, all): under the table's lock.
        let leaky = e.leaky.swap(1, Ordering::Relaxed) != 0;
        forest.clear(slot, gen);
        if leaky {
            let n = forest.sweep_slot(slot);
            if n > 0 {
                log::info!(
                    "shared cache: {n} index nodes a dead process left of file entry {slot} given back"
                );
            }
        }
        if gen == 0 {
            for (f, m) in self.view.frames().iter().enumerate() {
                let k = m.key();
                if k == 0 || key_slot(k) != slot {
                    continue;
                }
                self.lock_frame(f as u32);
                if m.key() == k {
                    self.free_frame(f as u32);
                } else {
                    m.unlock(self.me, false);
                }
            }
        }
        e.gen.store(gen, Ordering::Relaxed);
        e.leaky.store(0, Ordering::Relaxed);
    }

    /// Drops every cached page of `slot` in `from..to` (dirty ones too: their bytes are past
    /// a new end, or the file is being forgotten); `to` is past every page the file may have
    /// cached (the end of its largest length since).
    pub(crate) fn drop_pages(&self, slot: u32, from: u64, to: u64) {
        // SeqCst: see `fill_run`.
        fence(Ordering::SeqCst);
        for (f, k) in self.candidates(slot, from, to) {
            let m = &self.view.frames()[f as usize];
            self.lock_frame(f);
            if m.key() != k {
                m.unlock(self.me, false);
                continue;
            }
            self.free_frame(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{tests::small, SharedCache, SharedConfig};
    use crate::index::IndexKind;
    use crate::policy::{CleanFirst, PolicyKind};

    /// 16 frames; no readahead, no write-back before the cache is full of dirty pages.
    fn sixteen(policy: PolicyKind, clean_first: CleanFirst) -> SharedConfig {
        SharedConfig {
            memory: 16 * 4096,
            readahead: 0,
            dirty_ratios: (0.99, 1.0),
            policy,
            clean_first,
            ..small()
        }
    }

    /// Frames a drop of pages empties are claimed again by the next misses before the hand
    /// moves on (`free.rs`): a file's 8 pages evicted, another file's 8 misses take their
    /// frames, the hand where it was, every page read as it is on disk.
    #[test]
    fn frames_emptied_are_claimed_again_before_the_hand_moves() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, vec![1u8; 8 * 4096]).unwrap();
        std::fs::write(&b, (0..8 * 4096u32).map(|i| (i >> 12) as u8 + 2).collect::<Vec<u8>>()).unwrap();
        let cache = SharedCache::create(&sixteen(PolicyKind::Clock, CleanFirst::Always)).unwrap();
        let (fa, fb) = (cache.open_path(&a, false).unwrap(), cache.open_path(&b, false).unwrap());
        let mut page = vec![0u8; 4096];
        for p in 0..8 {
            fa.read_at(&mut page, p * 4096).unwrap();
        }
        fa.evict(0, 0).unwrap();
        let (hand, misses) = (cache.hand(), cache.status().stats.misses);
        for p in 0..8 {
            fb.read_at(&mut page, p * 4096).unwrap();
            assert_eq!(page, vec![p as u8 + 2; 4096]);
        }
        assert_eq!(cache.status().stats.misses, misses + 8);
        assert_eq!(cache.hand(), hand, "the misses took the emptied frames");
        cache.check_index().unwrap();
    }

    /// A listed frame that is in use again (the hand claimed it, or it was listed twice) is
    /// passed over by the miss that pops it: the page in it stays, and the miss takes the
    /// hand's next frame.
    #[test]
    fn a_listed_frame_in_use_again_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, vec![1u8; 4096]).unwrap();
        std::fs::write(&b, vec![2u8; 4096]).unwrap();
        let cache = SharedCache::create(&sixteen(PolicyKind::Clock, CleanFirst::Always)).unwrap();
        let (fa, fb) = (cache.open_path(&a, false).unwrap(), cache.open_path(&b, false).unwrap());
        let mut page = vec![0u8; 4096];
        fa.read_at(&mut page, 0).unwrap();
        let inner = &cache.inner;
        let f = inner.index().hint(inner.key(fa.slot(), 0)).expect("cached");
        inner.view.free_frames().push(f, inner.me, |_| true, |_| false);
        let hand = cache.hand();
        fb.read_at(&mut page, 0).unwrap();
        assert_eq!(page, vec![2u8; 4096]);
        assert!(inner.view.free_frames().is_empty(), "popped");
        assert_eq!(cache.hand(), hand + 1, "the hand's frame, not the listed one");
        let misses = cache.status().stats.misses;
        fa.read_at(&mut page, 0).unwrap();
        assert_eq!(page, vec![1u8; 4096]);
        assert_eq!(cache.status().stats.misses, misses, "the page in the listed frame stayed");
    }

    /// Set-associative placement (SAFS §4): each cached page's frame lies in its key's set,
    /// and a miss evicts only from its page's set, so a page read once stays cached through
    /// misses of four times the cache's frames whose pages fall in other sets; the cache-wide
    /// hand (the same reads with the hash index) evicts it.
    #[test]
    fn a_set_associative_miss_evicts_only_from_its_pages_set() {
        let dir = tempfile::tempdir().unwrap();
        let (hot, scan) = (dir.path().join("hot"), dir.path().join("scan"));
        std::fs::write(&hot, vec![1u8; 4096]).unwrap();
        std::fs::write(&scan, (0..1024 * 4096u32).map(|i| (i >> 12) as u8).collect::<Vec<u8>>()).unwrap();
        let kept = |index| {
            let config = SharedConfig {
                memory: 64 * 4096,
                set_ways: 8,
                index,
                ..sixteen(PolicyKind::Clock, CleanFirst::Always)
            };
            let cache = SharedCache::create(&config).unwrap();
            let (h, s) = (cache.open_path(&hot, false).unwrap(), cache.open_path(&scan, false).unwrap());
            let inner = &cache.inner;
            // The sets as the set-associative index cuts these 64 frames (either index).
            let sets = inner.view.sets();
            let hot_set = sets.set_of(inner.key(h.slot(), 0));
            let mut page = vec![0u8; 4096];
            h.read_at(&mut page, 0).unwrap();
            let others: Vec<u64> =
                (0..1024).filter(|&p| sets.set_of(inner.key(s.slot(), p)) != hot_set).take(256).collect();
            assert_eq!(others.len(), 256);
            for &p in &others {
                s.read_at(&mut page, p * 4096).unwrap();
                assert_eq!(page, vec![p as u8; 4096]);
            }
            if index == IndexKind::SetAssoc {
                for (f, m) in inner.view.frames().iter().enumerate() {
                    let home = m.home();
                    assert!(
                        home == 0 || sets.frames_of(sets.set_of(home)).contains(&f),
                        "frame {f} out of its set"
                    );
                }
            }
            let misses = cache.status().stats.misses;
            h.read_at(&mut page, 0).unwrap();
            assert_eq!(page, vec![1u8; 4096]);
            cache.check_index().unwrap();
            cache.status().stats.misses == misses
        };
        assert!(kept(IndexKind::SetAssoc), "a miss of another set evicted the page");
        assert!(!kept(IndexKind::Sharded), "the cache-wide hand kept the page through 4 laps");
    }

    /// GClock keeps a page read often through a scan of two and a half times the cache, where
    /// CLOCK (one lap per read since the hand last passed) lets it go.
    #[test]
    fn gclock_keeps_a_page_read_often_through_a_scan_that_clock_evicts() {
        let dir = tempfile::tempdir().unwrap();
        let (hot, scan) = (dir.path().join("hot"), dir.path().join("scan"));
        std::fs::write(&hot, vec![1u8; 4096]).unwrap();
        std::fs::write(&scan, vec![2u8; 40 * 4096]).unwrap();
        let kept = |policy| {
            let cache = SharedCache::create(&sixteen(policy, CleanFirst::Always)).unwrap();
            let (h, s) = (cache.open_path(&hot, false).unwrap(), cache.open_path(&scan, false).unwrap());
            let mut page = vec![0u8; 4096];
            for _ in 0..5 {
                h.read_at(&mut page, 0).unwrap();
            }
            for i in 0..40 {
                s.read_at(&mut page, i * 4096).unwrap();
                assert_eq!(page, vec![2u8; 4096]);
            }
            let misses = cache.status().stats.misses;
            h.read_at(&mut page, 0).unwrap();
            assert_eq!(page, vec![1u8; 4096]);
            cache.status().stats.misses == misses
        };
        assert!(kept(PolicyKind::GClock), "gclock evicted the page read five times");
        assert!(!kept(PolicyKind::Clock), "clock kept the page read five times through the scan");
    }

    /// With stream-aware eviction, the pages a sequential scan reads once (readahead's, read
    /// through hits) are no reference, so a page read again every 12 pages of the scan (less
    /// than a lap of the hand over 16 frames) stays cached throughout; without it, the scan's
    /// hits count as references, the hand clears every bit in a lap, and the page is evicted
    /// between its reads.
    #[test]
    fn a_scan_read_once_goes_before_a_page_read_again_with_streams() {
        let dir = tempfile::tempdir().unwrap();
        let (hot, scan) = (dir.path().join("hot"), dir.path().join("scan"));
        std::fs::write(&hot, vec![1u8; 4096]).unwrap();
        std::fs::write(&scan, vec![2u8; 64 * 4096]).unwrap();
        let hot_misses = |streams, read: usize| {
            let config = SharedConfig {
                readahead: 8 * 4096,
                streams,
                ..sixteen(PolicyKind::Clock, CleanFirst::Always)
            };
            let cache = SharedCache::create(&config).unwrap();
            let (h, s) = (cache.open_path(&hot, false).unwrap(), cache.open_path(&scan, false).unwrap());
            let mut page = vec![0u8; 4096];
            // Loaded, then read again: referenced.
            h.read_at(&mut page, 0).unwrap();
            h.read_at(&mut page, 0).unwrap();
            let mut misses = 0;
            // The scan: reads of `read` bytes one after another (a page read in parts, or a
            // read across two, is read once still); the page again every 12 pages of it.
            let (mut at, end, mut again) = (0u64, 64 * 4096u64, 12 * 4096u64);
            while at < end {
                let n = (read as u64).min(end - at) as usize;
                s.read_at(&mut page[..n], at).unwrap();
                assert_eq!(page[..n], vec![2u8; n][..]);
                at += n as u64;
                if at >= again {
                    again += 12 * 4096;
                    let before = cache.status().stats.misses;
                    h.read_at(&mut page, 0).unwrap();
                    assert_eq!(page, vec![1u8; 4096]);
                    misses += cache.status().stats.misses - before;
                }
            }
            let stats = cache.status().stats;
            (misses, stats.stream_evictions, stats.evictions)
        };
        let (misses, by_stream, evictions) = hot_misses(true, 4096);
        assert_eq!(misses, 0, "with streams");
        // The scan's 64 pages went through 16 frames: its pages were the evictions, counted as
        // the stream's.
        assert!(by_stream >= 40 && by_stream <= evictions, "{by_stream} of {evictions} evictions by stream");
        assert_eq!(hot_misses(true, 1024).0, 0, "with streams, a page read in quarters");
        assert_eq!(hot_misses(true, 1536).0, 0, "with streams, reads across pages");
        let (misses, by_stream, _) = hot_misses(false, 4096);
        assert!(misses > 0, "without streams the scan's hits outweigh the page's");
        assert_eq!(by_stream, 0, "without streams no page is a stream's");
    }

    /// Clean-first passes over the dirty pages the hand meets first and evicts a clean one;
    /// plain takes the first dirty one, written back first, so the miss costs a write;
    /// gc-aware does as clean-first while the dirty pages' device is taken to be collecting
    /// garbage (a write-back far slower than its baseline just ended: what the policy sees of
    /// a device's GC, never the device's own word), and as plain otherwise.
    #[test]
    fn clean_first_evicts_a_clean_page_where_plain_writes_a_dirty_one_back() {
        let dir = tempfile::tempdir().unwrap();
        let (dirty, clean, miss) =
            (dir.path().join("dirty"), dir.path().join("clean"), dir.path().join("miss"));
        std::fs::write(&dirty, b"").unwrap();
        std::fs::write(&clean, vec![2u8; 8 * 4096]).unwrap();
        std::fs::write(&miss, vec![3u8; 4096]).unwrap();
        let after_a_miss = |rule, collecting: bool| {
            let cache = SharedCache::create(&sixteen(PolicyKind::Clock, rule)).unwrap();
            let d = cache.open_path(&dirty, true).unwrap();
            // The hand's first eight frames dirty, the next eight clean; then a miss.
            d.write_at(&[9u8; 8 * 4096], 0).unwrap();
            let mut page = vec![0u8; 8 * 4096];
            cache.open_path(&clean, false).unwrap().read_at(&mut page, 0).unwrap();
            let device = cache.inner.gc_device(d.slot()).unwrap();
            let now = super::super::gc::now_ns();
            device.end_at(None, 1, 20_000, true, now); // the baseline: 20 us a page
            if collecting {
                device.end_at(None, 1, 1_000_000_000, true, now); // 1 s: until now + 0.5 s
            }
            assert_eq!(cache.inner.collecting(d.slot()), collecting);
            cache.open_path(&miss, false).unwrap().read_at(&mut page[..4096], 0).unwrap();
            assert_eq!(page[..4096], [3u8; 4096]);
            let s = cache.status();
            d.sync_data().unwrap();
            assert_eq!(std::fs::read(&dirty).unwrap(), vec![9u8; 8 * 4096]);
            (s.stats.dirty_pages, s.stats.writeback_bytes / 4096, s.stats.evictions)
        };
        let plain = |(still_dirty, written, evictions): (u64, u64, u64)| {
            still_dirty < 8 && written > 0 && evictions == 1
        };
        assert_eq!(after_a_miss(CleanFirst::Always, false), (8, 0, 1), "clean-first");
        let got = after_a_miss(CleanFirst::Never, false);
        assert!(plain(got), "plain: {got:?}");
        assert_eq!(after_a_miss(CleanFirst::WhileGc, true), (8, 0, 1), "gc-aware while collecting");
        let got = after_a_miss(CleanFirst::WhileGc, false);
        assert!(plain(got), "gc-aware otherwise: {got:?}");
    }
}
