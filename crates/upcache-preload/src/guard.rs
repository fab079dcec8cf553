//! Re-entrancy guard: while a thread runs the shim's own code, every libc call it makes (the
//! library's opens, reads and stats included, which reach the shim's exported symbols too)
//! goes straight to libc.

use std::cell::Cell;

thread_local! {
    // `const` and without a destructor: usable at any point of a thread's life.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Proof that this thread is inside the shim; leaving drops it.
pub(crate) struct Inside(());

/// Enters the shim, or None if this thread is in it already (a nested call: pass through).
pub(crate) fn enter() -> Option<Inside> {
    INSIDE.try_with(|inside| if inside.replace(true) { None } else { Some(Inside(())) }).ok().flatten()
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.set(false));
    }
}
