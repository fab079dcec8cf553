//! A shared segment is one memory for two processes: a child attaches through the descriptor it
//! inherits, reads what the parent wrote and writes back (issue 17's first building block).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use upcache::shm::{RegionSpec, Segment};

const FD_ENV: &str = "UPCACHE_TEST_SEGMENT_FD";
const KIND: u32 = 3;

fn counter(seg: &Segment) -> &AtomicU64 {
    let (p, len) = seg.region(KIND).expect("the region");
    assert!(len >= 8);
    // SAFETY: the region is 2 MiB-aligned, at least 8 bytes, and lives as long as `seg`.
    unsafe { &*p.as_ptr().cast::<AtomicU64>() }
}

/// The child: attaches to the inherited segment, checks the parent's value, answers with its own.
#[test]
#[ignore = "the child process of the cross-process test, run by it"]
fn segment_child_entry() {
    let fd: i32 = std::env::var(FD_ENV).expect("run by the parent test").parse().unwrap();
    // SAFETY: the parent passed this descriptor for us to own.
    let seg = Segment::attach(unsafe { OwnedFd::from_raw_fd(fd) }).unwrap();
    // Acquire/Release: each side publishes its value with the store the other loads.
    assert_eq!(counter(&seg).load(Ordering::Acquire), 42);
    counter(&seg).store(43, Ordering::Release);
}

#[test]
fn a_child_process_shares_the_segment_it_inherits() {
    let seg = Segment::create("upcache-test", &[RegionSpec { kind: KIND, len: 4096 }]).unwrap();
    counter(&seg).store(42, Ordering::Release);
    // The segment's own descriptor is close-on-exec; a duplicate without the flag is inherited.
    let inherited = seg.as_fd().try_clone_to_owned().unwrap();
    // SAFETY: fcntl on our own descriptor: clears its close-on-exec flag.
    assert_eq!(unsafe { libc::fcntl(inherited.as_raw_fd(), libc::F_SETFD, 0) }, 0);
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "segment_child_entry", "--ignored", "--quiet"])
        .env(FD_ENV, inherited.as_raw_fd().to_string())
        .status()
        .unwrap();
    assert!(status.success(), "the child failed: {status}");
    assert_eq!(counter(&seg).load(Ordering::Acquire), 43, "the child's write is in our mapping");
}
