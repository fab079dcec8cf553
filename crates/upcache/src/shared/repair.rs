//! Repair after a process died holding locks in the shared cache.
//!
//! Each lock names its holder, so a dead process's locks are found by looking at every lock
//! word: frames, index partitions, file entries, the file table. What each guarded is then
//! put right, as the kernel's page cache would stand after the process was killed in a
//! system call: a page being loaded is forgotten (the next reader loads it again), a page being
//! written keeps what was copied and stays dirty, a file's write sequence ends, an index
//! partition is rebuilt from the frames' flags. The dead process's opens are subtracted from
//! its files' open counts, and only then is its client slot freed.

use std::sync::atomic::{AtomicU64, Ordering};

use super::frame::{key_page, key_slot, DIRTY, VALID};
use super::layout::CountStripe;
use super::{tree, Inner, SharedStatus};
use crate::metrics::Stats;
use crate::shm::Acquired;

impl Inner {
    /// Puts frame `f` right after we took its lock from `dead`.
    pub(crate) fn repair_frame(&self, f: u32, dead: u32) {
        let m = &self.view.frames()[f as usize];
        log::warn!("shared cache: client {dead} died holding frame {f}; repairing it");
        // Relaxed: a count for reports.
        self.view.header().repairs.fetch_add(1, Ordering::Relaxed);
        if !self.index().holds_home(f) {
            // Killed between naming the page and placing the frame in the tree, or between
            // taking it out and clearing the name: the frame is not the page's.
            // Release: as the index's own stores of `home`.
            m.home.store(0, Ordering::Release);
        }
        let k = m.key();
        // Acquire: pairs with the length's Release stores.
        let len =
            if k != 0 { self.view.files()[key_slot(k) as usize].len.load(Ordering::Acquire) } else { 0 };
        let (start, page) = (self.view.page_size.start(key_page(k)), self.view.page_size.bytes());
        let published = k != 0 && start < len;
        if m.flags() & VALID != 0 && k != 0 && m.home() == k && !published && self.pinned(f) {
            // A page past the length that a live process holds pinned: a truncation killed
            // while it waited for the pin. Emptying it would wait for the pin here, maybe in
            // the pin holder's own thread (its next miss reaps the dead). The bytes stay until
            // the pin goes; the cut's finisher (the file's next writable taker of its lock,
            // `cut`) drops the page then, and no read reads past the length meanwhile.
            m.bump();
        } else if m.flags() & VALID == 0 || m.home() == 0 || m.home() != k || !published {
            // A load or a whole-page write cut short (its bytes are not the page's), a claim
            // or a free cut short, or a write past the end that died before the length took in
            // any byte of the page (it never returned; left dirty, nobody would write it back,
            // as write-backs stop at the length, and its count would keep the file dirty for
            // ever): empty it (the caller keeps the lock).
            self.empty_frame(f);
        } else {
            // A write cut short keeps what it copied below the length (it marked the frame
            // dirty before copying); what it copied past the length never became the file's (a
            // write raises the length after a page's copy, before its unlock, and nobody else
            // writes in a page we hold), so it goes back to the zeros everything past the
            // length reads as. Readers that began before it must not pass.
            if len < start + page as u64 {
                let from = (len - start) as usize;
                // SAFETY: we hold the frame's lock (taken from the dead); `from < page`.
                unsafe { std::ptr::write_bytes(self.view.page(f).add(from), 0, page - from) };
            }
            // Killed between marking it dirty and its bit in the map (`dirty_map.rs`).
            if m.flags() & super::frame::DIRTY != 0 {
                self.view.dirty_map().set(f);
            }
            m.bump();
        }
    }

    /// Repairs after dead client `dead`, whose slot we took (`Clients::take_dead`): its open
    /// counts, left in our slot's row, go, and every lock it held is taken over and what it
    /// guarded repaired, as `repair_dead` does for the dead still in their slots.
    pub(crate) fn repair_inherited(&self, dead: u32) {
        log::info!("shared cache: client {dead} is gone and every slot was taken; its slot is ours now");
        let table = &self.view.header().files_lock;
        table.lock(self.me, |h| self.alive(h));
        let mut touched = Vec::new();
        for (slot, held) in self.view.holds(self.me).iter().enumerate() {
            // Relaxed: under the table's lock.
            if held.swap(0, Ordering::Relaxed) != 0 {
                touched.push(slot);
            }
        }
        // Nodes it may have taken and not linked: the trees' next generations sweep them. Its
        // count of tree operations is ours now, from 0.
        self.view.forest().mark_trees_leaky();
        // Relaxed: our own operations have not begun.
        self.view.counters_of(self.me).tree_ops.store(0, Ordering::Relaxed);
        // Its pins go too (we have none yet).
        self.own_ledger().clear();
        self.recount_counted(touched);
        table.unlock(self.me);
        self.repair_locks_of(&[dead]);
    }

    /// Releases every lock that dead clients hold, repairs what they guarded, subtracts their
    /// opens, and frees their slots; the number of clients reaped.
    pub(crate) fn repair_dead(&self) -> usize {
        let clients = self.view.clients();
        let dead = clients.dead();
        if dead.is_empty() {
            return 0;
        }
        self.repair_locks_of(&dead);
        let table = &self.view.header().files_lock;
        // A holder that died between the stores of an open or a close left counts that the
        // recount below puts right; entries are filled before they are marked live.
        table.lock(self.me, |h| self.alive(h));
        let mut reaped = 0;
        let mut in_tree_op = false;
        let mut touched = Vec::new();
        for &id in &dead {
            // Another repairer may have reaped it meanwhile, and a new process taken its slot:
            // only a client that is still this tenure, and dead, loses its holds.
            if !clients.is_dead(id) {
                continue;
            }
            for (slot, held) in self.view.holds(id).iter().enumerate() {
                // Relaxed: under the table's lock.
                if held.swap(0, Ordering::Relaxed) != 0 {
                    touched.push(slot);
                }
            }
            // Its pins go: a changer waiting for one is woken.
            if let Some(c) = clients.index(id) {
                self.view.ledger(c).clear();
            }
            // Acquire: pairs with the dead's last Release decrement.
            in_tree_op |= self.view.counters_of(id).tree_ops.swap(0, Ordering::Acquire) != 0;
            if clients.reap(id) {
                log::info!("shared cache: client {id} is gone; what it held is released");
                reaped += 1;
            }
        }
        if in_tree_op {
            // Tree nodes the dead may have taken and not linked, counted too high, or
            // unlinked and not given back: every tree's next generation sweeps them (a pass
            // over every node each, so not after every process that exits: only one that died
            // in a tree operation, `Inner::tree_op`).
            self.view.forest().mark_trees_leaky();
        }
        self.recount_counted(touched);
        table.unlock(self.me);
        reaped
    }

    /// Recounts the opens of `touched` and of every entry that counts an open (under the
    /// table's lock), not only those the dead held: a client killed in a close between its
    /// row and the entry's totals, or a repairer killed between taking a dead client's holds
    /// and recounting, left counts that no hold explains any more, and a writer counted for
    /// ever would keep its file from being written back as an orphan's.
    fn recount_counted(&self, touched: Vec<usize>) {
        // Relaxed: under the table's lock.
        let counted =
            self.view.files().iter().enumerate().filter(|(_, e)| e.opens.load(Ordering::Relaxed) > 0);
        for &slot in &touched {
            // The dead may have counted a dirty page and not yet put it in the range.
            self.view.files()[slot].widen_dirty_all();
        }
        for slot in counted.map(|(s, _)| s).chain(touched).collect::<std::collections::BTreeSet<_>>() {
            self.recount_opens(slot);
        }
    }

    /// Takes over every lock that clients `dead` hold (frames, index partitions, files'
    /// locks and range slots) and repairs what each guarded.
    fn repair_locks_of(&self, dead: &[u32]) {
        let is_dead = |h: u32| dead.contains(&h);
        for (f, m) in self.view.frames().iter().enumerate() {
            if m.holder().is_some_and(is_dead) {
                self.lock_frame(f as u32);
                m.unlock(self.me, true);
            }
        }
        let map = self.view.map();
        for (p, l) in map.locks.iter().enumerate() {
            if l.holder().is_some_and(is_dead) {
                // Only the hash's chains need rebuilding: a set's place is one store of `home`
                // (and its tag), which the frame's repair clears, and a tree has no partitions.
                use super::layout::technique;
                let hash = self.techniques & (technique::RADIX_INDEX | technique::SET_ASSOC) == 0;
                if let Acquired::OwnerDied(d) = l.lock(self.me, |h| self.alive(h)) {
                    if hash {
                        log::warn!(
                            "shared cache: client {d} died changing index partition {p}; rebuilding it"
                        );
                        map.rebuild(p);
                    }
                }
                l.unlock(self.me);
            }
        }
        // A file's lock or range slot is taken only from the dead: one a live process took
        // over meanwhile is its own to repair, and waiting for it could wait for a range slot
        // our own caller holds (a range writer that repairs while it claims a frame).
        for e in self.view.files() {
            if e.lock.holder().is_some_and(is_dead) {
                if let Some(taken) = e.lock.lock_unless(self.me, |h| self.alive(h), |h| !is_dead(h)) {
                    if let Acquired::OwnerDied(_) = taken {
                        e.repair_lock();
                    }
                    e.lock.unlock(self.me);
                }
            }
            // A dead range writer's pages are repaired with their frames; its slot only goes.
            for r in &e.ranges {
                if r.lock.holder().is_some_and(is_dead)
                    && r.lock.lock_unless(self.me, |h| self.alive(h), |h| !is_dead(h)).is_some()
                {
                    r.lock.unlock(self.me);
                }
            }
        }
    }

    /// Sets `slot`'s open counts to the sum of every client's holds (under the table's lock).
    pub(crate) fn recount_opens(&self, slot: usize) {
        let (mut opens, mut writers) = (0, 0);
        for c in 0..self.view.n_clients() {
            // Relaxed: under the table's lock.
            let h = self.view.holds_of_slot(c)[slot].load(Ordering::Relaxed);
            opens += h & 0xffff;
            writers += h >> 16;
        }
        let e = &self.view.files()[slot];
        // Relaxed: under the table's lock.
        e.opens.store(opens, Ordering::Relaxed);
        e.writers.store(writers, Ordering::Relaxed);
    }

    /// Puts `slot`'s dirty count right where a writer killed between counting a page dirty and
    /// flagging it left it one too high (the count goes first so that it is never below the
    /// truth): without this the file would stay dirty for ever, and its service with it. Only
    /// for a file that nobody has open (so no page of it is dirtied meanwhile), under the
    /// table's lock. Each frame is counted under its lock, under which every flag and count
    /// change pair happens (a repairer's or a write-back's, in any process), and the count
    /// read after: what is uncounted meanwhile was flagged when seen, so the count never falls
    /// below the flags. Nothing is done if a frame of the file is locked (by a process that
    /// may be stopped: the table's lock is held). The excess removed.
    pub(crate) fn recount_dirty(&self, slot: u32) -> u64 {
        let e = &self.view.files()[slot as usize];
        let mut flagged = 0u64;
        // Every page of the file, past the length too: a pass over every frame.
        for (f, k) in self.candidates(slot, 0, u64::MAX) {
            let m = &self.view.frames()[f as usize];
            if !m.try_lock(self.me) {
                return 0; // another time
            }
            if m.key() == k && m.flags() & DIRTY != 0 {
                flagged += 1;
            }
            m.unlock(self.me, false);
        }
        // Acquire: pairs with `mark_dirty`'s count.
        let counted = e.dirty.load(Ordering::Acquire);
        let excess = counted.saturating_sub(flagged);
        if excess > 0 {
            log::warn!(
                "shared cache: file {slot} counted {counted} dirty pages, {flagged} flagged (a writer killed \
                 while dirtying one); counted again"
            );
            e.dirty.fetch_sub(excess, Ordering::Release);
            // Relaxed: a hint, as everywhere; never below zero.
            let _ = self
                .view
                .header()
                .dirty
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| Some(d.saturating_sub(excess)));
        }
        excess
    }

    pub(crate) fn status(&self) -> SharedStatus {
        let frames = self.view.frames();
        let h = self.view.header();
        let page_bytes = |pages: u64| pages * self.view.page_size.bytes() as u64;
        let forest = self.view.forest();
        let index_nodes = (forest.leaves.live() as u64, forest.inners.live() as u64);
        // Relaxed (all): a report.
        let sum =
            |count: fn(&CountStripe) -> &AtomicU64| self.view.counters().iter().map(|c| c.sum(count)).sum();
        let stats = Stats {
            hits: sum(|c| &c.hits),
            lock_free_hits: sum(|c| &c.lock_free_hits),
            hot_hits: sum(|c| &c.hot_hits),
            misses: sum(|c| &c.misses),
            evictions: sum(|c| &c.evictions),
            reclaimed: h.reclaimed.load(Ordering::Relaxed),
            stream_evictions: h.stream_evictions.load(Ordering::Relaxed),
            readahead_pages: h.ahead_pages.load(Ordering::Relaxed),
            readahead_windows: h.ahead_windows.load(Ordering::Relaxed),
            read_ios: sum(|c| &c.load_requests),
            read_bytes: page_bytes(sum(|c| &c.loads)),
            writeback_ios: h.write_back_requests.load(Ordering::Relaxed),
            writeback_bytes: page_bytes(h.written_back.load(Ordering::Relaxed)),
            writeback_errors: h.write_back_errors.load(Ordering::Relaxed),
            dflush_pages: h.dflush_pages.load(Ordering::Relaxed),
            dirty_pages: frames.iter().filter(|m| m.flags() & DIRTY != 0).count() as u64,
            frames: self.view.active() as u64,
            metadata_bytes: self.view.metadata_bytes(),
            // The tree index's nodes in use, each with its state word (`tree.rs`).
            index_bytes: index_nodes.0 * (tree::LEAF_BYTES + tree::NODE_META_BYTES)
                + index_nodes.1 * (tree::INNER_BYTES + tree::NODE_META_BYTES),
        };
        SharedStatus {
            stats,
            cached: frames.iter().filter(|m| m.flags() & VALID != 0).count() as u64,
            locked: frames.iter().filter(|m| m.holder().is_some()).count() as u64,
            files: self.view.files().iter().filter(|e| e.state.load(Ordering::Relaxed) != 0).count() as u64,
            clients: self.view.clients().pids(),
            repairs: h.repairs.load(Ordering::Relaxed),
            write_back_batches: h.write_back_batches.load(Ordering::Relaxed),
            index_nodes,
            index_full: h.index_full.load(Ordering::Relaxed),
            writer_write_backs: h.writer_write_backs.load(Ordering::Relaxed),
            writer_pauses: h.writer_pauses.load(Ordering::Relaxed),
            next_to_go_written: h.next_to_go_written.load(Ordering::Relaxed),
            behind_pages: h.behind_pages.load(Ordering::Relaxed),
            free_frames: if self.two_layer() {
                let spares: usize = self.view.files().iter().map(|e| e.spare.len()).sum();
                (self.view.pool().pooled() + spares) as u64
            } else {
                h.free_count.load(Ordering::Relaxed) as u64
            },
            flusher_files: h.flusher_files[..h.flushers() as usize]
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        }
    }
}
