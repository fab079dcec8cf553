//! Finding a shared cache's segment without its service (and, for a service started after
//! every process died, in its file: `named.rs`). The service writes a record of
//! itself (pid, the segment's descriptor number there, the segment's device and inode) into
//! its lock file, `<socket>.lock`. A process that finds the service stopped opens the segment
//! through `/proc/<pid>/fd/<n>` (it lives while any process maps it), and a service started
//! after one died adopts the segment from any live process that still has it open, so a
//! service that dies or stops is replaced without a second cache of the same files.
//!
//! Only processes of the same user are looked at: `/proc/<pid>/fd` of others is closed to us
//! anyway, and a segment is one user's trust domain (`shm::handoff`).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What a service says of itself in its lock file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub pid: u32,
    /// The segment's descriptor in the service.
    pub fd: i32,
    /// The segment's identity (its memfd's device and inode).
    pub dev: u64,
    pub ino: u64,
}

impl Record {
    pub fn of(pid: u32, seg: &impl AsRawFd) -> Option<Record> {
        let (dev, ino) = identity(seg)?;
        Some(Record { pid, fd: seg.as_raw_fd(), dev, ino })
    }

    pub fn text(&self) -> String {
        format!("{} {} {} {}\n", self.pid, self.fd, self.dev, self.ino)
    }

    pub fn parse(text: &str) -> Option<Record> {
        let mut it = text.split_whitespace();
        let mut next = || it.next()?.parse::<u64>().ok();
        let (pid, fd, dev, ino) = (next()?, next()?, next()?, next()?);
        Some(Record { pid: u32::try_from(pid).ok()?, fd: i32::try_from(fd).ok()?, dev, ino })
    }

    /// The record in the lock file at `lock`, if any.
    pub fn read(lock: &Path) -> Option<Record> {
        Record::parse(&std::fs::read_to_string(lock).ok()?)
    }
}

/// (device, inode) of a descriptor.
pub(crate) fn identity(fd: &impl AsRawFd) -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes one stat into `st`, read only on success.
    (unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } == 0).then(|| {
        // SAFETY: filled by the successful fstat.
        let st = unsafe { st.assume_init() };
        (st.st_dev, st.st_ino)
    })
}

/// Whether process `pid` is stopped (SIGSTOP, a debugger, a frozen cgroup): it holds what it
/// held and answers nothing until resumed.
pub(crate) fn stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
    matches!(state, Some("T" | "t")) || frozen(pid)
}

/// Whether `pid`'s cgroup (v2) is frozen: its tasks show as sleeping, not stopped.
fn frozen(pid: u32) -> bool {
    let Ok(cgroup) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else { return false };
    let Some(path) = cgroup.lines().find_map(|l| l.strip_prefix("0::")) else { return false };
    std::fs::read_to_string(format!("/sys/fs/cgroup{path}/cgroup.events"))
        .is_ok_and(|ev| ev.lines().any(|l| l.trim() == "frozen 1"))
}

/// The segment `rec` names, opened from a live process that has it open: the recorded
/// service first, then any process of this user with a memfd of the same identity.
pub(crate) fn find(rec: &Record) -> Option<OwnedFd> {
    if let Some(fd) = open_if(Path::new(&format!("/proc/{}/fd/{}", rec.pid, rec.fd)), rec) {
        return Some(fd);
    }
    // SAFETY: geteuid has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    let own = std::process::id();
    for proc_dir in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = proc_dir.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == own || proc_dir.metadata().map_or(true, |m| m.uid() != me) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(proc_dir.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            // A memfd, or a file in /dev/shm (an O_TMPFILE shows as `/dev/shm/#<inode>`
            // whatever its name): `open_if` checks which.
            let is_segment = std::fs::read_link(fd.path()).is_ok_and(|t| {
                let t = t.as_os_str().as_encoded_bytes();
                t.starts_with(b"/memfd:upcache-shared") || t.starts_with(b"/dev/shm/")
            });
            if is_segment {
                if let Some(found) = open_if(&fd.path(), rec) {
                    return Some(found);
                }
            }
        }
    }
    None
}

/// `path` (a `/proc/<pid>/fd/<n>`, or the segment's file) opened, if it is the segment `rec`
/// names.
pub(crate) fn open_if(path: &Path, rec: &Record) -> Option<OwnedFd> {
    let f = std::fs::OpenOptions::new().read(true).write(true).custom_flags_cloexec().open(path).ok()?;
    let fd = OwnedFd::from(f);
    (identity(&fd) == Some((rec.dev, rec.ino))).then_some(fd)
}

trait Cloexec {
    fn custom_flags_cloexec(&mut self) -> &mut Self;
}

impl Cloexec for std::fs::OpenOptions {
    fn custom_flags_cloexec(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::custom_flags(self, libc::O_CLOEXEC)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::shm::{RegionSpec, Segment};
    use std::os::fd::AsFd;

    #[test]
    fn a_record_reads_back_and_finds_its_segment_in_a_live_process() {
        let seg = Segment::create("upcache-shared-test", &[RegionSpec { kind: 1, len: 64 }]).unwrap();
        let rec = Record::of(std::process::id(), &seg.as_fd()).unwrap();
        assert_eq!(Record::parse(&rec.text()), Some(rec));
        assert_eq!(Record::parse("12 x"), None);
        // Through the recorded process (this one).
        let fd = find(&rec).expect("the segment, from /proc/self");
        assert_eq!(identity(&fd), Some((rec.dev, rec.ino)));
        // A record of a dead process whose segment nobody holds: none. (Not a neighbouring
        // inode number: memfd inodes are handed out in turn, and another test's segment may
        // have it.)
        let gone = Record { pid: u32::MAX, ..rec };
        assert!(find(&Record { ino: u64::MAX, ..gone }).is_none());
        assert!(!stopped(std::process::id()));
    }
}
