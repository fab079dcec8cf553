//! A shared segment is one memory for two processes: a child attaches through the descriptor it
//! inherits, reads what the parent wrote and writes back (issue 17's first building block).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use upcache::internals::shm::{RegionSpec, Segment};

const FD_ENV: &str = "UPCACHE_TEST_SEGMENT_FD";
const KIND: u32 = 3;

fn counter(seg: &Segment) -> &AtomicU64 {
    let (p, len) = seg.region(KIND).expect("the region");
    assert!(len >= 8);
    // SAFETY: the region is 2 MiB-aligned, at least 8 bytes, and lives as long as `seg`.
    unsafe { &*p.as_ptr().cast::<AtomicU64>() }
}

/// A command that runs this binary's ignored test `entry` in a child process inheriting `seg`
/// (its descriptor's number in `FD_ENV`), and that descriptor, to keep open until it spawns.
fn child_inheriting(seg: &Segment, entry: &str) -> (Command, OwnedFd) {
    // The segment's own descriptor is close-on-exec; a duplicate without the flag is inherited.
    let inherited = seg.as_fd().try_clone_to_owned().unwrap();
    // SAFETY: fcntl on our own descriptor: clears its close-on-exec flag.
    assert_eq!(unsafe { libc::fcntl(inherited.as_raw_fd(), libc::F_SETFD, 0) }, 0);
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", entry, "--ignored", "--nocapture", "--quiet"])
        .env(FD_ENV, inherited.as_raw_fd().to_string());
    (cmd, inherited)
}

/// In a child process: the segment its parent passed (`child_inheriting`).
fn inherited_segment() -> Segment {
    let fd: i32 = std::env::var(FD_ENV).expect("run by the parent test").parse().unwrap();
    // SAFETY: the parent passed this descriptor for us to own.
    Segment::attach(unsafe { OwnedFd::from_raw_fd(fd) }).unwrap()
}

/// The child: attaches to the inherited segment, checks the parent's value, answers with its own.
#[test]
#[ignore = "the child process of the cross-process test, run by it"]
fn segment_child_entry() {
    let seg = inherited_segment();
    // Acquire/Release: each side publishes its value with the store the other loads.
    assert_eq!(counter(&seg).load(Ordering::Acquire), 42);
    counter(&seg).store(43, Ordering::Release);
}

#[test]
fn a_child_process_shares_the_segment_it_inherits() {
    let seg = Segment::create("upcache-test", &[RegionSpec { kind: KIND, len: 4096 }]).unwrap();
    counter(&seg).store(42, Ordering::Release);
    let (mut child, _inherited) = child_inheriting(&seg, "segment_child_entry");
    let status = child.status().unwrap();
    assert!(status.success(), "the child failed: {status}");
    assert_eq!(counter(&seg).load(Ordering::Acquire), 43, "the child's write is in our mapping");
}

const LOCK_KIND: u32 = 4;
const CLIENTS_KIND: u32 = 5;

fn lock_of(seg: &Segment) -> &upcache::internals::shm::OwnerLock {
    let (p, _) = seg.region(LOCK_KIND).expect("the region");
    // SAFETY: an OwnerLock is one AtomicU32 and all zeros is a free lock; the region is aligned
    // and lives as long as `seg`.
    unsafe { &*p.as_ptr().cast::<upcache::internals::shm::OwnerLock>() }
}

fn clients_of(seg: &Segment) -> upcache::internals::shm::Clients<'_> {
    let (p, len) = seg.region(CLIENTS_KIND).expect("the region");
    // SAFETY: the region is aligned, zeroed at creation, used only as the client table, and
    // lives as long as `seg`.
    unsafe { upcache::internals::shm::Clients::from_region(p, len) }
}

/// The child: joins the client table of the inherited segment, takes the lock as its client,
/// says so, and waits to be killed.
#[test]
#[ignore = "the child process of the killed-holder test, run by it"]
fn lock_holder_child_entry() {
    let seg = inherited_segment();
    let me = clients_of(&seg).join().unwrap();
    assert!(lock_of(&seg).try_lock(me));
    println!("locked {me}");
    // Held until the parent kills us: a read of stdin, which the parent never writes.
    let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
}

/// A child process joins, takes a lock and is killed with SIGKILL; before and after its parent
/// reaps it (a zombie holds nothing either), the lock is taken over as its holder's death,
/// and the dead client's slot is freed once repaired.
#[test]
fn a_lock_held_by_a_killed_process_is_taken_over() {
    use std::io::BufRead;
    use upcache::internals::shm::Acquired;
    let specs = [RegionSpec { kind: LOCK_KIND, len: 4096 }, RegionSpec { kind: CLIENTS_KIND, len: 4096 }];
    let seg = Segment::create("upcache-test", &specs).unwrap();
    let clients = clients_of(&seg);
    let me = clients.join().unwrap();
    let (mut cmd, _inherited) = child_inheriting(&seg, "lock_holder_child_entry");
    let mut child =
        cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let holder = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child ended before it locked");
        if let Some(id) = line.trim().strip_prefix("locked ") {
            break id.parse::<u32>().unwrap();
        }
    };
    assert_eq!(lock_of(&seg).holder(), Some(holder));
    assert!(clients.alive(holder) && clients.dead().is_empty());
    child.kill().unwrap();
    // Not waited for yet: a zombie. Its slot must read as dead all the same.
    // SAFETY: waitid with WNOWAIT only waits for the child to have exited; it stays a zombie.
    let exited = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(libc::P_PID, child.id(), &mut info, libc::WEXITED | libc::WNOWAIT)
    };
    assert_eq!(exited, 0);
    assert!(!clients.alive(holder), "a zombie holds nothing");
    assert_eq!(lock_of(&seg).lock(me, |h| clients.alive(h)), Acquired::OwnerDied(holder));
    assert_eq!(clients.dead(), [holder]);
    assert!(clients.reap(holder));
    assert!(lock_of(&seg).unlock(me));
    child.wait().unwrap();
    clients.leave(me);
}

const SOCKET_ENV: &str = "UPCACHE_TEST_SOCKET";

/// The child: becomes `nobody`, connects to the parent's socket and asks for the segment.
#[test]
#[ignore = "the other user's process of the handoff test, run by it"]
fn other_user_child_entry() {
    use std::os::linux::net::SocketAddrExt;
    let name = std::env::var(SOCKET_ENV).expect("run by the parent test");
    // SAFETY: setgid/setuid change only this process's credentials.
    assert_eq!(unsafe { libc::setgid(65534) + libc::setuid(65534) }, 0, "cannot become nobody");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = std::os::unix::net::UnixStream::connect_addr(&addr).unwrap();
    let err = upcache::internals::shm::handoff::receive(&sock).err().expect("another user gets no segment");
    assert_eq!(err.kind(), upcache::ErrorKind::PermissionDenied, "{err}");
}

/// Another user's process asks for the segment: the owner refuses it, and it is told so.
#[test]
fn another_users_process_cannot_attach() {
    use std::os::linux::net::SocketAddrExt;
    // SAFETY: geteuid has no arguments.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: becoming another user needs root");
        return;
    }
    let name = format!("upcache-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let seg = Segment::create("upcache-test", &[RegionSpec { kind: KIND, len: 4096 }]).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "other_user_child_entry", "--ignored", "--quiet"])
        .env(SOCKET_ENV, &name)
        .spawn()
        .unwrap();
    let (sock, _) = listener.accept().unwrap();
    let peer = upcache::internals::shm::handoff::peer(&sock).unwrap();
    assert_eq!((peer.pid, peer.uid), (child.id(), 65534));
    let err = upcache::internals::shm::handoff::offer(&sock, &seg).expect_err("refused");
    assert_eq!(err.kind(), upcache::ErrorKind::PermissionDenied);
    assert!(child.wait().unwrap().success(), "the other user's process was not told it was refused");
}
