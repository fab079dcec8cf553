//! The processes attached to a segment: one slot each, whose number is the holder id that the
//! process's [`OwnerLock`](super::OwnerLock)s carry, so that any process can tell whether a
//! lock's holder is still alive.
//!
//! # A slot
//! One `AtomicU64`: 0 is free; otherwise the low 32 bits are the process's pid and the high 32
//! bits the low bits of its start time (clock ticks after boot, `/proc/<pid>/stat`), so that a
//! pid the kernel reused for another process does not pass for the dead one. A process takes a
//! free slot with one CAS ([`Clients::join`]) and frees it when it detaches
//! ([`Clients::leave`]). A slot whose process died stays taken, its id possibly still in lock
//! words, until whoever repaired what that process held frees it ([`Clients::reap`]): a new
//! process never inherits a dead one's id while a lock may still name it.
//!
//! A process is alive while `/proc/<pid>` exists, has the start time its slot records, and is
//! not a zombie: a process killed and not yet waited for by its parent holds nothing any more.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use super::owner_lock::MAX_HOLDER;
use crate::error::{Error, ErrorKind, Result};

/// A view of a client table placed in a segment region.
pub struct Clients<'a> {
    slots: &'a [AtomicU64],
}

impl<'a> Clients<'a> {
    /// The table in `len` bytes at `start` (8-byte aligned; all zeros is an empty table).
    ///
    /// # Safety
    /// The bytes stay mapped for `'a` and are used only as this table's atomics by every
    /// process that maps them.
    pub unsafe fn from_region(start: NonNull<u8>, len: usize) -> Clients<'a> {
        assert_eq!(start.as_ptr() as usize % 8, 0, "a client table is 8-byte aligned");
        let n = (len / 8).min(MAX_HOLDER as usize);
        // SAFETY: as the caller promises: `n * 8 <= len` bytes of aligned memory, used only as
        // atomics for `'a`.
        Clients { slots: unsafe { std::slice::from_raw_parts(start.as_ptr().cast::<AtomicU64>(), n) } }
    }

    /// Slots in the table.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Takes a free slot for this process; its id (1-based).
    pub fn join(&self) -> Result<u32> {
        let me = std::process::id();
        let word =
            identity(me).ok_or_else(|| Error::io("read /proc/self/stat", std::io::Error::last_os_error()))?;
        for (i, slot) in self.slots.iter().enumerate() {
            // AcqRel: taking the slot is ordered after the reap that freed it.
            if slot.compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return Ok(i as u32 + 1);
            }
        }
        Err(Error::new(ErrorKind::Busy, format!("all {} client slots are taken", self.slots.len())))
    }

    /// Frees `id`, which this process holds, when it detaches.
    pub fn leave(&self, id: u32) {
        let slot = self.slot(id).expect("a slot this process joined");
        // Release: what the process did before leaving is seen by the slot's next taker.
        let old = slot.swap(0, Ordering::Release);
        debug_assert_eq!(old as u32, std::process::id(), "left a slot another process holds");
    }

    /// Whether the process holding slot `id` is alive (false for a free slot).
    pub fn alive(&self, id: u32) -> bool {
        // Acquire: pairs with the AcqRel of `join`.
        match self.slot(id).map(|s| s.load(Ordering::Acquire)) {
            None | Some(0) => false,
            Some(word) => identity(word as u32) == Some(word),
        }
    }

    /// The ids of taken slots whose process is dead, for repair and then [`Self::reap`].
    pub fn dead(&self) -> Vec<u32> {
        (1..=self.slots.len() as u32)
            .filter(|&id| self.slot(id).is_some_and(|s| s.load(Ordering::Acquire) != 0) && !self.alive(id))
            .collect()
    }

    /// Frees the slot of dead client `id` once what it held was repaired. False if the slot
    /// is free, or its process is alive.
    pub fn reap(&self, id: u32) -> bool {
        let Some(slot) = self.slot(id) else { return false };
        let word = slot.load(Ordering::Acquire);
        // Release: the repairs are seen by the slot's next taker.
        word != 0
            && !self.alive(id)
            && slot.compare_exchange(word, 0, Ordering::Release, Ordering::Relaxed).is_ok()
    }

    fn slot(&self, id: u32) -> Option<&AtomicU64> {
        self.slots.get((id as usize).checked_sub(1)?)
    }
}

/// The slot word of live process `pid`: its pid and start time; None if it is gone or a
/// zombie.
fn identity(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold anything.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // Field 3 is the state, field 22 the start time: indexes 0 and 19 after the name.
    if matches!(*fields.first()?, "Z" | "X" | "x") {
        return None;
    }
    let start: u64 = fields.get(19)?.parse().ok()?;
    Some(start << 32 | pid as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_process_joins_is_alive_and_leaves() {
        let mut mem = vec![0u64; 4];
        let start = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `mem` outlives the view and is used only through it.
        let clients = unsafe { Clients::from_region(start, 32) };
        assert_eq!(clients.capacity(), 4);
        let a = clients.join().unwrap();
        let b = clients.join().unwrap();
        assert_ne!(a, b);
        assert!(clients.alive(a) && clients.alive(b));
        assert!(clients.dead().is_empty());
        assert!(!clients.reap(a), "a live client is not reaped");
        clients.leave(b);
        assert!(!clients.alive(b) && !clients.alive(0) && !clients.alive(99));
        // A slot naming a pid that does not exist, or this pid with another start time, is dead.
        clients.slots[2].store(1 << 32 | u32::MAX as u64, Ordering::Relaxed);
        assert_eq!(clients.dead(), [3]);
        assert!(clients.reap(3));
        assert_eq!(clients.join().unwrap(), 2, "freed slots are taken again");
        clients.leave(2);
        clients.leave(a);
    }
}
