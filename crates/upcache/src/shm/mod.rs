//! Shared memory for the cache that every process attaches to (issue 17; ARCHITECTURE.md, "The
//! shared cache"). A [`Segment`] is one memfd (or tmpfs file, below) that each attached
//! process maps wherever its kernel chooses, so nothing in it may hold an address: its header
//! names its regions by offset, and each process turns an offset into a pointer against its
//! own mapping.
//!
//! A memfd has no name in any file system: a process gets one only as a descriptor, inherited
//! across fork or passed over a socket whose peer was checked, which is what makes one segment
//! one trust domain. Its size is sealed before any other process sees it, so no peer can
//! shrink it under another's mapping (which would turn that process's next access into a
//! SIGBUS).
//!
//! A memfd dies with the last process that maps it, and a cache's dirty pages with it. The
//! service's segment is therefore a file of its own in `/dev/shm` ([`Segment::create_in_tmpfs`],
//! mode 0600): it outlives the death of every process, as the kernel's page cache does, and a
//! service started afterwards adopts it. Such a file cannot be sealed; [`Segment::attach`]
//! takes an unsealed descriptor only if it is such a file, which only its user (who can
//! signal every process of the cache anyway) may open or truncate.
//!
//! [`handoff`] passes a segment's descriptor over a Unix socket, to processes of the same user
//! only.
//!
//! Locks in a segment are [`OwnerLock`]s: a word that names its holder, so that the lock of a
//! process killed while holding it is taken over, and the taker told to repair what it guards;
//! holder ids are slots of a [`Clients`] table, which says whether a slot's process lives. The
//! wait loop they share with the shared cache's frame locks is in `lock_word.rs`.

pub(crate) mod clients;
pub(crate) mod futex;
pub mod handoff;
pub mod high_fd;
pub mod huge;
pub(crate) mod lock_word;
mod owner_lock;
mod segment;

pub use clients::Clients;
pub use lock_word::{Acquired, LIVENESS_POLL, MAX_HOLDER};
pub use owner_lock::OwnerLock;
pub use segment::{forget_all, hold_mapped_for_fork, take_keeper, Mapped, RegionSpec, Segment, MAX_REGIONS};
