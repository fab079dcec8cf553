//! Zero-copy page access (ScalaCache's pin/unpin, seed 004 §5.1): borrow a cached page's
//! bytes in place instead of copying them. The guards are the engine's (`shared/pin.rs`):
//! [`PageRef`] keeps its page's frame pinned through the process's pin ledger, so whatever
//! would change those bytes or drop the page waits until it drops; [`PageMut`] holds the
//! frame locked and its range, and marks the page dirty when it drops. Both give only the
//! bytes of the page that are inside the file.
//!
//! A guard must not be held by a thread that then writes the page, or truncates or extends
//! the file: it would wait for itself, as with any lock. Take the pins after such changes.

pub use crate::shared::{SharedPageMut as PageMut, SharedPageRef as PageRef};
