//! loom models of the frame state word protocol. Run with `ci/loom.sh`
//! (`RUSTFLAGS="--cfg loom" cargo test --test loom --release`).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use upcache::frame::state::{self, ClaimResult, FrameState, LOCKED, UNOWNED, VALID};
use upcache::frame::wait::WaitTable;

/// An owned, valid, unpinned, unreferenced frame.
fn resident() -> FrameState {
    let s = FrameState::new_unowned();
    s.assign_locked();
    s.unlock(VALID, 0);
    s.unpin();
    s.clear_referenced();
    s
}

#[test]
fn pin_and_eviction_exclude_each_other() {
    loom::model(|| {
        let s = Arc::new(resident());
        let s2 = s.clone();
        let pinner = thread::spawn(move || s2.try_pin().is_ok());
        // A CLOCK sweep: a referenced frame gets a second look, as the hand comes round again.
        let mut r = s.try_claim();
        if r == ClaimResult::Referenced {
            r = s.try_claim();
        }
        let claimed = r == ClaimResult::Claimed;
        let pinned = pinner.join().unwrap();
        let w = s.load();
        assert!(!(pinned && claimed), "a pinned frame was evicted");
        if claimed {
            assert_eq!(w, UNOWNED);
        }
        if pinned {
            assert_eq!(state::pins(w), 1);
            assert_eq!(w & UNOWNED, 0);
        }
    });
}

#[test]
fn a_waiter_is_always_woken_by_unlock() {
    loom::model(|| {
        let s = Arc::new(FrameState::new_unowned());
        let waits = Arc::new(WaitTable::default());
        s.assign_locked(); // the loader: pinned, LOCKED, not VALID
        let (s2, w2) = (s.clone(), waits.clone());
        s2.try_pin().unwrap(); // the waiter's pin, taken before it waits
        let waiter = thread::spawn(move || {
            let w = w2.wait_until(7, &s2, |w| w & VALID != 0 || w & LOCKED == 0);
            assert!(w & VALID != 0);
            s2.unpin();
        });
        let old = s.unlock(VALID, 0);
        waits.wake_if_waiters(7, old);
        waiter.join().unwrap();
        s.unpin();
        assert_eq!(state::pins(s.load()), 0);
    });
}

#[test]
fn release_waits_out_a_stale_pin_and_keeps_counts() {
    loom::model(|| {
        // The owner holds the only pin of a frame it is giving back (unlocked, not VALID); a
        // stale lookup pins and unpins it concurrently.
        let s = Arc::new(FrameState::new_unowned());
        s.assign_locked();
        s.unlock(0, VALID);
        let s2 = s.clone();
        let stale = thread::spawn(move || {
            if s2.try_pin().is_ok() {
                s2.unpin();
            }
        });
        loop {
            let w = s.load();
            if state::pins(w) == 1 && w & LOCKED == 0 && s.try_release(w) {
                break;
            }
            thread::yield_now();
        }
        stale.join().unwrap();
        assert_eq!(s.load(), UNOWNED, "pin count clobbered");
    });
}

#[test]
fn write_back_lock_and_writer_lock_exclude_each_other() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    loom::model(|| {
        let s = Arc::new(resident());
        assert!(s.try_lock());
        s.unlock(state::DIRTY, 0);
        let inside = Arc::new(AtomicBool::new(false));
        let (s2, in2) = (s.clone(), inside.clone());
        let flusher = thread::spawn(move || {
            if s2.try_lock_dirty() {
                assert!(!in2.swap(true, Ordering::SeqCst), "writer inside during write-back");
                in2.store(false, Ordering::SeqCst);
                s2.unlock(0, state::DIRTY);
                true
            } else {
                false
            }
        });
        s.try_pin().unwrap();
        while !s.try_lock() {
            thread::yield_now();
        }
        assert!(!inside.swap(true, Ordering::SeqCst), "write-back inside during a copy-in");
        inside.store(false, Ordering::SeqCst);
        s.unlock(state::DIRTY, 0);
        s.unpin();
        let flushed = flusher.join().unwrap();
        let w = s.load();
        assert_eq!(state::pins(w), 0);
        assert_eq!(w & LOCKED, 0);
        // The writer's unlock sets DIRTY; only a flush that locked after it could clear it,
        // and the flusher tries once, so the page is clean only if that flush came second.
        if !flushed {
            assert!(w & state::DIRTY != 0);
        }
    });
}
