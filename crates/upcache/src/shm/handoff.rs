//! Handing a segment to another process over a Unix socket: the descriptor travels as
//! `SCM_RIGHTS`, and only between processes of one user, checked on both sides with the
//! kernel's `SO_PEERCRED` (the credentials the peer had when it connected), so one segment
//! stays one user's trust domain whoever can reach the socket.
//!
//! One message each way: the offering side sends one byte, `S` with the descriptor or `R`
//! when it refuses, so a refused process gets a clear error instead of a hang-up.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use super::Segment;
use crate::error::{Error, ErrorKind, Result};

const SENT: u8 = b'S';
const REFUSED: u8 = b'R';

/// Who is on the other end of a Unix socket, as the kernel saw it connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its process id.
    pub pid: u32,
    /// Its effective user id.
    pub uid: u32,
    /// Its effective group id.
    pub gid: u32,
}

/// The credentials of `sock`'s peer.
pub fn peer(sock: &UnixStream) -> Result<Peer> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which lives for the call.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(Error::io("read a socket peer's credentials", std::io::Error::last_os_error()));
    }
    Ok(Peer { pid: cred.pid as u32, uid: cred.uid, gid: cred.gid })
}

/// Refuses a peer of another user.
fn same_user(p: Peer) -> Result<()> {
    // SAFETY: geteuid has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    if p.uid != me {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("process {} runs as uid {}; this cache belongs to uid {me}", p.pid, p.uid),
        ));
    }
    Ok(())
}

/// Sends `seg` to `sock`'s peer if it runs as this process's user; otherwise tells it so and
/// fails with `PermissionDenied`.
pub fn offer(sock: &UnixStream, seg: &Segment) -> Result<()> {
    let p = peer(sock)?;
    if let Err(e) = same_user(p) {
        // Told if it still listens; it may have refused us first (it checks our uid too).
        let _ = send(sock, REFUSED, None);
        log::warn!("refused to share a cache: {e}");
        return Err(e);
    }
    send(sock, SENT, Some(seg.as_fd().as_raw_fd()))
}

/// Receives a segment from `sock`'s peer (which must run as this process's user) and attaches
/// to it. `PermissionDenied` if the peer refused us or is another user's.
pub fn receive(sock: &UnixStream) -> Result<Segment> {
    Segment::attach(receive_fd(sock)?)
}

/// As [`receive`], the segment's descriptor not yet attached (mapped): to check first which
/// segment it is.
pub fn receive_fd(sock: &UnixStream) -> Result<OwnedFd> {
    same_user(peer(sock)?)?;
    let (byte, fd) = recv(sock)?;
    match (byte, fd) {
        (SENT, Some(fd)) => Ok(fd),
        (REFUSED, _) => {
            Err(Error::new(ErrorKind::PermissionDenied, "the cache refused to share with this user"))
        }
        _ => Err(Error::new(ErrorKind::Io, "the cache's answer was not a segment")),
    }
}

/// Room for one descriptor's control message.
const CMSG_ROOM: usize = 64;

fn send(sock: &UnixStream, byte: u8, fd: Option<i32>) -> Result<()> {
    send_msg(sock, &[byte], fd)
}

/// Sends `data` (one message, a few bytes) with `fd` attached, if any.
pub(crate) fn send_msg(sock: &UnixStream, data: &[u8], fd: Option<i32>) -> Result<()> {
    send_msg_with(sock, data, fd, 0)
}

/// As [`send_msg`], failing with `WouldBlock` instead of waiting when the socket's buffer is
/// full (a peer that reads nothing, being stopped).
pub(crate) fn send_msg_now(sock: &UnixStream, data: &[u8], fd: Option<i32>) -> Result<()> {
    send_msg_with(sock, data, fd, libc::MSG_DONTWAIT)
}

fn send_msg_with(sock: &UnixStream, data: &[u8], fd: Option<i32>, flags: libc::c_int) -> Result<()> {
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    let mut control = [0u64; CMSG_ROOM / 8];
    // SAFETY: zeroed msghdr is valid (null pointers, zero lengths); filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE computes a size; `control` is large and aligned enough for one
        // descriptor, and CMSG_FIRSTHDR/CMSG_DATA point inside it once msg_control is set.
        unsafe {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd);
        }
    }
    let n = loop {
        // SAFETY: `msg` points at `iov`, `data` and `control`, all alive for the call; the
        // kernel only reads `data`.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | flags) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n != data.len() as isize {
        return Err(Error::io("send a shared segment", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn recv(sock: &UnixStream) -> Result<(u8, Option<OwnedFd>)> {
    let mut data = [0u8];
    match recv_msg(sock, &mut data)? {
        (0, _) => Err(Error::new(ErrorKind::Io, "the cache closed the connection without an answer")),
        (_, fd) => Ok((data[0], fd)),
    }
}

/// Receives one message into `data` (0 bytes: the peer hung up) and the first descriptor
/// attached to it, if any (others are closed).
pub(crate) fn recv_msg(sock: &UnixStream, data: &mut [u8]) -> Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
    let mut control = [0u64; CMSG_ROOM / 8];
    // SAFETY: as in `send`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_ROOM;
    let n = loop {
        // SAFETY: `msg` points at buffers alive for the call, of the lengths it says.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n < 0 {
        return Err(Error::io("receive from a cache's socket", std::io::Error::last_os_error()));
    }
    let mut fd = None;
    // SAFETY: the kernel filled `msg_controllen` bytes of `control`; CMSG_FIRSTHDR/NXTHDR walk
    // only those, and a SCM_RIGHTS message's data holds descriptors now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<i32>();
                for i in 0..count {
                    let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>().add(i));
                    // Keep the first; close any other a peer sent.
                    let owned = OwnedFd::from_raw_fd(raw);
                    if fd.is_none() {
                        fd = Some(owned);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, fd))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::shm::RegionSpec;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn a_segment_passes_to_a_peer_of_the_same_user() {
        let (a, b) = UnixStream::pair().unwrap();
        assert_eq!(peer(&a).unwrap().pid, std::process::id());
        let seg = Segment::create("handoff-test", &[RegionSpec { kind: 1, len: 64 }]).unwrap();
        offer(&a, &seg).unwrap();
        let got = receive(&b).unwrap();
        let word = |s: &Segment| {
            let (p, _) = s.region(1).unwrap();
            // SAFETY: an aligned region of 64 bytes that lives as long as `s`.
            unsafe { &*p.as_ptr().cast::<AtomicU64>() }
        };
        word(&seg).store(7, Ordering::Relaxed);
        assert_eq!(word(&got).load(Ordering::Relaxed), 7);
    }

    #[test]
    fn a_refusal_or_a_hang_up_is_an_error_not_a_segment() {
        let (a, b) = UnixStream::pair().unwrap();
        send(&a, REFUSED, None).unwrap();
        assert_eq!(receive(&b).err().unwrap().kind(), ErrorKind::PermissionDenied);
        drop(a);
        assert_eq!(receive(&b).err().unwrap().kind(), ErrorKind::Io);
    }
}
