//! The processes attached to a segment: one slot each, whose id is the holder id that the
//! process's [`OwnerLock`](super::OwnerLock)s carry, so that any process can tell whether a
//! lock's holder is still alive.
//!
//! # A slot
//! Two `AtomicU64`s. The first is 0 when free; otherwise its low 32 bits are the process's pid
//! and its high 32 bits the low bits of its start time (clock ticks after boot,
//! `/proc/<pid>/stat`), so that a pid the kernel reused for another process does not pass for
//! the dead one. The second counts the slot's reaps: an id is the slot's number (bits 0-19)
//! with that count's low 10 bits (bits 20-29), so an id names one tenure of a slot and a lock
//! word holding a reaped client's id never matches its slot's next taker. Bit 30 is never in
//! an id: a shared frame's lock word carries a flag there beside its holder's id.
//!
//! A process takes a free slot with one CAS ([`Clients::join`]) and frees it when it detaches
//! ([`Clients::leave`]). A slot whose process died stays taken until whoever repaired what
//! that process held frees it ([`Clients::reap`]), which bumps the count first; with every
//! slot taken, a joiner takes a dead process's slot itself ([`Clients::take_dead`]) and
//! repairs after it. Both leave the dead word by CAS, so one of them wins it.
//!
//! # Liveness
//! A client is dead only on evidence: `/proc/<pid>` is gone, its start time differs, or the
//! whole process is a zombie (state Z or X with one thread left: a main thread that exited
//! while others run shows Z too). Anything else, an unreadable `/proc` included (out of
//! descriptors, another pid namespace), counts as alive: a lock is never taken from a holder
//! merely because it could not be checked.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, ErrorKind, Result};

/// Bits of an id that number the slot.
const SLOT_BITS: u32 = 20;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
/// Bits of an id that hold the slot's reap count.
const TENURE_MASK: u64 = (1 << 10) - 1;
/// The largest id: slot and tenure bits, below bit 30.
pub(crate) const MAX_CLIENT_ID: u32 = (1 << (SLOT_BITS + TENURE_MASK.count_ones())) - 1;
const _: () = assert!(MAX_CLIENT_ID < 1 << 30);

/// A view of a client table placed in a segment region.
pub struct Clients<'a> {
    /// Pairs of (identity, reap count).
    slots: &'a [[AtomicU64; 2]],
}

/// What `/proc` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Running, with this slot word (start time and pid).
    Alive(u64),
    /// Gone, a zombie, or another process with its pid.
    Dead,
    /// Could not be read: taken as alive.
    Unknown,
}

impl<'a> Clients<'a> {
    /// The table in `len` bytes at `start` (8-byte aligned; all zeros is an empty table).
    ///
    /// # Safety
    /// The bytes stay mapped for `'a` and are used only as this table's atomics by every
    /// process that maps them.
    pub unsafe fn from_region(start: NonNull<u8>, len: usize) -> Clients<'a> {
        assert_eq!(start.as_ptr() as usize % 8, 0, "a client table is 8-byte aligned");
        let n = (len / 16).min(SLOT_MASK as usize);
        // SAFETY: as the caller promises: `n * 16 <= len` bytes of aligned memory, used only as
        // atomics for `'a`.
        Clients { slots: unsafe { std::slice::from_raw_parts(start.as_ptr().cast::<[AtomicU64; 2]>(), n) } }
    }

    /// Slots in the table.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Takes a free slot for this process; its id.
    pub fn join(&self) -> Result<u32> {
        let word = own_word()?;
        for (i, [who, reaps]) in self.slots.iter().enumerate() {
            // AcqRel: taking the slot is ordered after the reap that freed it, so the count
            // read next is the reap's.
            if who.compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                let tenure = reaps.load(Ordering::Acquire) & TENURE_MASK;
                return Ok((i as u32 + 1) | (tenure as u32) << SLOT_BITS);
            }
        }
        Err(Error::new(ErrorKind::Busy, format!("all {} client slots are taken", self.slots.len())))
    }

    /// With every slot taken, takes one whose process is certainly dead for this process:
    /// its identity word by CAS from the dead one's (one taker wins), then a new tenure, so
    /// the dead client's id stops matching (its locks are taken over as any dead holder's).
    /// Our id and the dead client's; None if no slot's process is certainly dead. The caller
    /// repairs what the dead client held, its open counts in the slot's row first.
    pub fn take_dead(&self) -> Option<(u32, u32)> {
        let word = own_word().ok()?;
        for (i, [who, reaps]) in self.slots.iter().enumerate() {
            // Acquire (both): pairs with the taker's and the reaper's Release.
            let (old, r) = (who.load(Ordering::Acquire), reaps.load(Ordering::Acquire));
            let dead = (i as u32 + 1) | ((r & TENURE_MASK) as u32) << SLOT_BITS;
            if old == 0 || !dead_word(old) {
                continue;
            }
            // AcqRel: ours after the dead one's. The one point a taker and a reaper meet: a
            // reaper frees the slot with a CAS from the same dead word (`reap`), so one of us
            // wins, and a count it bumped before losing only ends the dead tenure sooner.
            if who.compare_exchange(old, word, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            // AcqRel: the new tenure after the identity; the dead id no longer matches.
            let r = reaps.fetch_add(1, Ordering::AcqRel) + 1;
            return Some(((i as u32 + 1) | ((r & TENURE_MASK) as u32) << SLOT_BITS, dead));
        }
        None
    }

    /// Frees `id`, which this process holds, when it detaches.
    pub fn leave(&self, id: u32) {
        let [who, reaps] = self.slot(id).expect("a slot this process joined");
        // Release: a new tenure for the next taker, then the slot free.
        reaps.fetch_add(1, Ordering::Release);
        let old = who.swap(0, Ordering::Release);
        debug_assert_eq!(old as u32, std::process::id(), "left a slot another process holds");
    }

    /// Whether client `id` may be alive: false only for a free slot, a past tenure of it, or a
    /// process that is certainly dead.
    pub fn alive(&self, id: u32) -> bool {
        self.state(id).is_some_and(|s| s != Seen::Dead)
    }

    /// The slot's process as `/proc` sees it, None if `id` is not the slot's current tenure.
    fn state(&self, id: u32) -> Option<Seen> {
        let [who, reaps] = self.slot(id)?;
        // Acquire: pairs with the AcqRel of `join`.
        let word = who.load(Ordering::Acquire);
        let tenure = reaps.load(Ordering::Acquire) & TENURE_MASK;
        if word == 0 || tenure != (id >> SLOT_BITS) as u64 {
            return None;
        }
        Some(match seen(word as u32) {
            Seen::Alive(now) if now != word => Seen::Dead, // the pid was reused
            s => s,
        })
    }

    /// The index of client `id`'s slot, below [`Self::capacity`]; None for an id no slot has.
    pub fn index(&self, id: u32) -> Option<usize> {
        ((id & SLOT_MASK) as usize).checked_sub(1).filter(|&i| i < self.slots.len())
    }

    /// The pid of client `id`'s process, if `id` is its slot's current tenure.
    pub fn pid(&self, id: u32) -> Option<u32> {
        let [who, reaps] = self.slot(id)?;
        // Acquire: pairs with the AcqRel of `join`.
        let word = who.load(Ordering::Acquire);
        let tenure = reaps.load(Ordering::Acquire) & TENURE_MASK;
        (word != 0 && tenure == (id >> SLOT_BITS) as u64).then_some(word as u32)
    }

    /// The pids of the processes in taken slots.
    pub fn pids(&self) -> Vec<u32> {
        // Acquire: pairs with the AcqRel of `join`.
        self.slots.iter().map(|[who, _]| who.load(Ordering::Acquire) as u32).filter(|&p| p != 0).collect()
    }

    /// Whether `id` is its slot's current tenure and its process is certainly dead.
    pub fn is_dead(&self, id: u32) -> bool {
        self.state(id) == Some(Seen::Dead)
    }

    /// The id of table slot `i`'s (0-based) current tenure, whether anyone holds it or not.
    pub fn id_at(&self, i: usize) -> u32 {
        // Acquire: pairs with the Release and AcqRel increments of `leave`, `take_dead` and
        // `reap`, as in `state`, which checks the id against the tenure again.
        let tenure = self.slots[i][1].load(Ordering::Acquire) & TENURE_MASK;
        (i as u32 + 1) | (tenure as u32) << SLOT_BITS
    }

    /// The ids of taken slots whose process is certainly dead, for repair and then
    /// [`Self::reap`].
    pub fn dead(&self) -> Vec<u32> {
        (0..self.slots.len())
            .map(|i| self.id_at(i))
            .filter(|&id| self.state(id) == Some(Seen::Dead))
            .collect()
    }

    /// Frees the slot of dead client `id` once what it held was repaired. False if `id` is not
    /// the slot's current tenure, or its process is not certainly dead.
    pub fn reap(&self, id: u32) -> bool {
        let Some([who, reaps]) = self.slot(id) else { return false };
        // Acquire: pairs with the AcqRel of `join` and `take_dead`. The word judged dead is the
        // word freed below, never one a taker put there meanwhile.
        let word = who.load(Ordering::Acquire);
        if word == 0 || !dead_word(word) {
            return false;
        }
        // The count goes first, by CAS, so one reaper wins and the dead id stops matching
        // before the slot can be taken again; the dead process cannot change `who`, a joiner
        // only takes it from 0, and `take_dead` only from the dead word, so the winner frees it
        // with a CAS from that word (losing it to `take_dead`, whose slot it then is).
        let r = reaps.load(Ordering::Acquire);
        if r & TENURE_MASK != (id >> SLOT_BITS) as u64
            || reaps.compare_exchange(r, r + 1, Ordering::AcqRel, Ordering::Relaxed).is_err()
        {
            return false; // reaped by someone else meanwhile
        }
        // Release: the repairs are seen by the slot's next taker.
        let _ = who.compare_exchange(word, 0, Ordering::Release, Ordering::Relaxed);
        true
    }

    fn slot(&self, id: u32) -> Option<&[AtomicU64; 2]> {
        self.slots.get(((id & SLOT_MASK) as usize).checked_sub(1)?)
    }
}

/// This process's slot word (start time and pid).
fn own_word() -> Result<u64> {
    match seen(std::process::id()) {
        Seen::Alive(w) => Ok(w),
        _ => Err(Error::io("read /proc/self/stat", std::io::Error::last_os_error())),
    }
}

/// Whether the process a slot word names is certainly dead (gone, a zombie, or its pid now
/// another process's).
fn dead_word(word: u64) -> bool {
    match seen(word as u32) {
        Seen::Dead => true,
        Seen::Alive(now) => now != word,
        Seen::Unknown => false,
    }
}

/// What `/proc` says of process `pid`.
fn seen(pid: u32) -> Seen {
    let stat = match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) || e.raw_os_error() == Some(libc::ESRCH) => {
            return Seen::Dead
        }
        Err(_) => return Seen::Unknown,
    };
    // Fields after the command name, which is in parentheses and may hold any bytes.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else { return Seen::Unknown };
    let rest = String::from_utf8_lossy(&stat[(close + 2).min(stat.len())..]).into_owned();
    let fields: Vec<&str> = rest.split(' ').collect();
    // Field 3 is the state, field 20 the thread count, field 22 the start time: indexes 0, 17
    // and 19 after the name.
    let (Some(&state), Some(threads), Some(start)) = (
        fields.first(),
        fields.get(17).and_then(|f| f.parse::<u64>().ok()),
        fields.get(19).and_then(|f| f.parse::<u64>().ok()),
    ) else {
        return Seen::Unknown;
    };
    if matches!(state, "Z" | "X" | "x") && threads <= 1 {
        return Seen::Dead;
    }
    Seen::Alive(start << 32 | pid as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_process_joins_is_alive_and_leaves() {
        let mut mem = vec![0u64; 8];
        let start = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `mem` outlives the view and is used only through it.
        let clients = unsafe { Clients::from_region(start, 64) };
        assert_eq!(clients.capacity(), 4);
        let a = clients.join().unwrap();
        let b = clients.join().unwrap();
        assert_ne!(a, b);
        assert!(clients.alive(a) && clients.alive(b));
        assert!(clients.dead().is_empty());
        assert!(!clients.reap(a), "a live client is not reaped");
        clients.leave(b);
        assert!(!clients.alive(b) && !clients.alive(0) && !clients.alive(99));
        let b2 = clients.join().unwrap();
        assert_eq!(b2 & SLOT_MASK, b & SLOT_MASK, "the freed slot is taken again");
        assert_ne!(b2, b, "under a new tenure");
        assert!(clients.alive(b2) && !clients.alive(b), "the old id does not pass for the new");
        // A slot naming a pid that does not exist, or this pid with another start time, is dead.
        clients.slots[2][0].store(1 << 32 | u32::MAX as u64, Ordering::Relaxed);
        clients.slots[3][0].store(7 << 32 | std::process::id() as u64, Ordering::Relaxed);
        assert_eq!(clients.dead(), [3, 4]);
        assert!(clients.reap(3) && clients.reap(4));
        assert!(!clients.reap(3), "reaped once");
        assert!(clients.dead().is_empty());
        clients.leave(b2);
        clients.leave(a);
    }

    /// With every slot taken, a joiner takes a dead client's slot under a new tenure: the
    /// dead id is neither alive nor reapable any more (a reaper that judged it dead cannot free
    /// the slot from under its taker), and a slot of a live process is never taken.
    #[test]
    fn a_dead_client_s_slot_is_taken_when_every_slot_is_taken() {
        let mut mem = vec![0u64; 4];
        let start = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `mem` outlives the view and is used only through it.
        let clients = unsafe { Clients::from_region(start, 32) };
        let a = clients.join().unwrap();
        assert_eq!(clients.take_dead(), None, "a free slot is not a dead one");
        clients.slots[1][0].store(1 << 32 | u32::MAX as u64, Ordering::Relaxed);
        let dead = clients.dead()[0];
        assert_eq!(clients.join().unwrap_err().kind(), ErrorKind::Busy);
        let (me, was) = clients.take_dead().expect("the dead one's slot");
        assert_eq!((was, me & SLOT_MASK), (dead, dead & SLOT_MASK));
        assert_ne!(me, dead);
        assert!(clients.alive(me) && !clients.alive(dead) && !clients.is_dead(me));
        assert!(!clients.reap(dead), "a past tenure is not reaped");
        assert!(clients.alive(me), "and its slot stays ours");
        assert_eq!(clients.take_dead(), None, "only live processes left");
        clients.leave(me);
        clients.leave(a);
    }

    #[test]
    fn only_evidence_makes_a_process_dead() {
        assert!(matches!(seen(std::process::id()), Seen::Alive(_)));
        assert_eq!(seen(u32::MAX), Seen::Dead, "no such pid");
    }
}
