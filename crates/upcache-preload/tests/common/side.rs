//! Running a scenario on both sides, the kernel's and the shim's, and talking to its
//! processes and to the shim's service (tests/promises.rs, tests/kills.rs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use super::build_shim;

/// One side of a scenario: its directory (the prefix) and, with the shim, the shim and a
/// socket of its own, so that every process it starts attaches to the same cache.
pub struct Side {
    pub dir: PathBuf,
    pub shim: Option<(PathBuf, PathBuf)>,
}

/// The shim's side leaves no socket directory behind (its service, idle for a second, exits
/// by itself), unless the test failed: the service's log is there.
impl Drop for Side {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some(dir) = self.shim.as_ref().and_then(|(_, socket)| socket.parent()) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Side {
    /// The two sides under `tmp`: the kernel's first, then the shim's.
    pub fn both(tmp: &Path, name: &str) -> [Side; 2] {
        let so = build_shim();
        let make = |which: &str| {
            let dir = tmp.join(format!("{name}-{which}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            dir
        };
        let socket = std::env::temp_dir()
            .join(format!("upcache-promise-{}-{name}", std::process::id()))
            .join("cache.sock");
        [Side { dir: make("kernel"), shim: None }, Side { dir: make("shim"), shim: Some((so, socket)) }]
    }

    pub fn label(&self) -> &'static str {
        if self.shim.is_some() {
            "with the shim"
        } else {
            "without the shim"
        }
    }

    /// `program args...`, loading the shim on this side's cache.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.dir).env("LC_ALL", "C");
        if let Some((so, socket)) = &self.shim {
            cmd.env("LD_PRELOAD", so)
                .env("UPCACHE_PREFIX", &self.dir)
                .env("UPCACHE_MEMORY", "64M")
                .env("UPCACHE_SOCKET", socket)
                .env("UPCACHE_IDLE", "1");
        }
        cmd
    }

    /// `python3 -c code args...` on this side.
    pub fn python(&self, code: &str, args: &[&str]) -> Command {
        let mut cmd = self.command("python3");
        cmd.arg("-c").arg(code).args(args);
        cmd
    }
}

/// Waits for `child` and returns its output, failing the test with it if it failed.
pub fn finished(child: Child, what: &str) -> Output {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A line from a child's stdout.
pub fn line_of(out: &mut impl std::io::BufRead) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim().to_string()
}

/// A child the test talks to: it says lines on stdout, and goes on at each line on stdin.
pub struct Talker {
    pub child: Child,
    pub said: std::io::BufReader<std::process::ChildStdout>,
}

impl Talker {
    /// Spawns `cmd` and waits until it says `first`.
    pub fn start(mut cmd: Command, first: &str) -> Talker {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let said = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut t = Talker { child, said };
        assert_eq!(t.next(), first);
        t
    }

    /// What it says next.
    pub fn next(&mut self) -> String {
        line_of(&mut self.said)
    }

    /// Tells it to go on.
    pub fn tell(&mut self) {
        std::io::Write::write_all(self.child.stdin.as_mut().unwrap(), b"\n").unwrap();
    }

    /// Closes its stdin and waits for it, which must succeed.
    pub fn end(mut self, what: &str) {
        drop(self.child.stdin.take());
        std::io::Read::read_to_end(&mut self.said, &mut Vec::new()).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{what}: {status:?}");
    }
}

/// Kills `pid` with SIGKILL if still armed after `limit`: a stall fails the test instead of
/// hanging it.
pub struct Watchdog {
    done: std::sync::mpsc::Sender<()>,
    fired: std::thread::JoinHandle<bool>,
}

impl Watchdog {
    pub fn arm(pid: i32, limit: std::time::Duration) -> Watchdog {
        let (done, stop) = std::sync::mpsc::channel::<()>();
        let fired = std::thread::spawn(move || {
            let waited = stop.recv_timeout(limit);
            if waited == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                signal(pid, libc::SIGKILL);
                return true;
            }
            false
        });
        Watchdog { done, fired }
    }

    /// Disarms it; whether it fired.
    pub fn disarm(self) -> bool {
        drop(self.done);
        self.fired.join().unwrap()
    }
}

/// The pid of the service at `socket`: the process that holds its lock file open.
pub fn service_pid(socket: &Path) -> i32 {
    running_service(socket).unwrap_or_else(|| panic!("no service at {}", socket.display()))
}

/// The lock file a service at `socket` holds for its whole life.
pub fn lock_of(socket: &Path) -> PathBuf {
    let mut lock = socket.as_os_str().to_owned();
    lock.push(".lock");
    PathBuf::from(lock)
}

/// Waits until the service at `socket`, if one runs, has exited (once it has written back
/// what it must, with nothing dirty and nobody attached, its lock is free); killed after 60 s.
/// Whether the watchdog fired, None if no service ran.
pub fn wait_for_service_exit(socket: &Path) -> Option<bool> {
    let watchdog = running_service(socket).map(|pid| Watchdog::arm(pid, std::time::Duration::from_secs(60)));
    let lock = std::fs::File::open(lock_of(socket)).unwrap();
    // SAFETY: flock on our own descriptor; it waits for the service's exit.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) }, 0);
    watchdog.map(Watchdog::disarm)
}

/// The pid of the service at `socket`, if one runs.
pub fn running_service(socket: &Path) -> Option<i32> {
    let lock = lock_of(socket);
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        if fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == lock)) {
            return Some(pid);
        }
    }
    None
}

pub fn signal(pid: i32, sig: i32) {
    // SAFETY: no memory arguments.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "signal {sig} to {pid}");
}
