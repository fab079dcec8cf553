//! Fatal signals: what `write` accepted survives the writer's death, as it does with the
//! kernel's page cache. For every signal whose default action ends the process and whose
//! disposition is the default when the shim starts, the shim installs a handler that has every
//! cached file written back, then restores the default action and raises the signal again,
//! so the process ends as it would have (its wait status, its core dump). A signal the program
//! handles itself stays the program's: the shim only stands in for "the default".
//!
//! The handler does not write back itself: the interrupted thread may hold a lock that the
//! write-back needs (malloc's, or the shim's own). It hands the work to a rescue thread that
//! the shim starts with every signal blocked (as are the cache's own threads), and waits for
//! it, giving up if the rescuer makes no progress for `STALL` (a rescuer stuck behind a lock
//! that the interrupted thread holds). A thread inside the shim when an asynchronous signal
//! arrives may hold the shim's locks: the signal is raised again as that thread leaves the
//! shim (`guard.rs`), moments later, or as it begins to sleep for another process's lock
//! (holding none then), which it might not leave while that process is stopped.
//!
//! `sigaction`, `signal`, `bsd_signal` and `sysv_signal` are interposed so that the program
//! sees "the default" where the shim's handler stands, and setting the default puts the
//! shim's handler back. Not covered: SIGKILL and the OOM killer (no handler runs; what is not
//! written back yet is lost until the shared cache of issue 17 holds it outside the process),
//! a stack overflow without an alternate signal stack, and a program changing a signal's
//! disposition at the instant the shim starts.

use crate::real;
use libc::{c_int, c_void, sighandler_t, siginfo_t};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::time::Duration;

/// How long a handler waits for a rescuer that writes nothing back and finishes no file.
const STALL: Duration = Duration::from_secs(10);

/// Signals whose default action ends the process (signal(7)), but SIGKILL and SIGSTOP, which
/// cannot be caught. Real-time signals are added from SIGRTMIN (past glibc's own two).
const FATAL: [c_int; 22] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGABRT,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGUSR1,
    libc::SIGSEGV,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGSTKFLT,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGIO,
    libc::SIGPWR,
    libc::SIGSYS,
];

fn is_fatal(sig: c_int) -> bool {
    FATAL.contains(&sig) || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&sig)
}

fn fatal_signals() -> impl Iterator<Item = c_int> {
    FATAL.into_iter().chain(libc::SIGRTMIN()..=libc::SIGRTMAX())
}

/// One process image's rescue: the work a rescuer is asked for and has done, counted
/// (wrapping), and what a waiting handler watches to see that it is not stuck.
pub(crate) struct Rescue {
    asked: AtomicU32,
    done: AtomicU32,
    /// Files written back by the rescuer.
    progress: AtomicU32,
    /// The cache it writes back (its bytes written back count as progress too).
    cache: &'static upcache::shared::SharedCache,
    pid: u32,
}

impl Rescue {
    pub(crate) fn new(cache: &'static upcache::shared::SharedCache) -> Rescue {
        let (asked, done, progress) = (AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0));
        Rescue { asked, done, progress, cache, pid: std::process::id() }
    }
}

/// The running shim's rescue, set when it starts (`install`); null before, and in a forked
/// child until its own shim starts.
static RESCUE: AtomicPtr<Rescue> = AtomicPtr::new(std::ptr::null_mut());

/// The rescue of this process image, if its shim runs.
fn current() -> Option<&'static Rescue> {
    // Acquire: pairs with the Release in `install`. (A plain load: async-signal-safe.)
    let p = RESCUE.load(Ordering::Acquire);
    // SAFETY: set only to a leaked Rescue, never freed.
    unsafe { p.as_ref() }
}

/// A forked child: the parent's rescuer is not in it.
pub(crate) fn forget() {
    RESCUE.store(std::ptr::null_mut(), Ordering::Release); // Release: as in `install`
}

fn handler_address() -> sighandler_t {
    on_fatal as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as sighandler_t
}

/// The shim's disposition for `sig`.
fn ours() -> libc::sigaction {
    // SAFETY: sigaction is plain data; all zeros is a valid value, filled in below.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler_address();
    // Everything blocked while it runs (the raise it ends with stays pending until it returns);
    // the program's alternate stack if it has one (a stack overflow's SIGSEGV).
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
    // SAFETY: a valid sigset_t.
    unsafe { libc::sigfillset(&mut act.sa_mask) };
    act
}

fn default_action() -> libc::sigaction {
    // SAFETY: as in `ours`; zeros are SIG_DFL, no flags, an empty mask.
    unsafe { std::mem::zeroed() }
}

/// At the shim's start, with its rescue (whose rescuer runs): the handler stands in for every
/// fatal signal left at its default.
pub(crate) fn install(rescue: &'static Rescue) {
    RESCUE.store(rescue as *const Rescue as *mut Rescue, Ordering::Release); // Release: made
    upcache::shared::on_sleep_for_another_process(crate::guard::raise_deferred_now);
    let act = ours();
    for sig in fatal_signals() {
        let mut cur = default_action();
        // SAFETY: valid sigaction storage.
        let got = unsafe { real::sigaction()(sig, std::ptr::null(), &mut cur) } == 0;
        if got && cur.sa_sigaction == libc::SIG_DFL {
            // SAFETY: as above.
            unsafe { real::sigaction()(sig, &act, std::ptr::null_mut()) };
        }
    }
}

/// Runs `f` with every signal blocked in this thread: threads it starts inherit the mask, so
/// no signal is delivered to the cache's threads or the rescuer (which the handler waits for).
pub(crate) fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: valid sigset_t storage for both masks.
    let old = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    };
    let out = f();
    // SAFETY: the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    out
}

/// The rescuer's loop: each time a handler asks, `write_back` every cached file (calling the
/// function it is given after each).
pub(crate) fn rescuer(r: &Rescue, write_back: impl Fn(&dyn Fn())) {
    loop {
        // SeqCst (all): the handler's `asked` increment, then its wait on `done`.
        let asked = r.asked.load(Ordering::SeqCst);
        if asked == r.done.load(Ordering::SeqCst) {
            futex_wait(&r.asked, asked, None);
            continue;
        }
        if let Some(_inside) = crate::guard::enter() {
            // A panic must not end the rescuer: every later signal would wait for it in vain.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                write_back(&|| {
                    r.progress.fetch_add(1, Ordering::SeqCst);
                })
            }));
        }
        r.done.store(asked, Ordering::SeqCst);
        futex_wake(&r.done);
    }
}

/// Has the rescuer write everything back; returns when it has, or when it seems stuck.
/// Async-signal-safe: atomics, futex and clock_gettime only.
fn rescue(r: &Rescue) {
    let ticket = r.asked.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
    futex_wake(&r.asked);
    let progress = || r.progress.load(Ordering::SeqCst).wrapping_add(r.cache.written_back_bytes() as u32);
    let (mut seen, mut since) = (progress(), now());
    loop {
        let done = r.done.load(Ordering::SeqCst);
        if done.wrapping_sub(ticket) as i32 >= 0 {
            return;
        }
        let now_at = progress();
        if now_at != seen {
            (seen, since) = (now_at, now());
        } else if now().saturating_sub(since) > STALL {
            return;
        }
        futex_wait(&r.done, done, Some(Duration::from_millis(100)));
    }
}

/// Whether `sig` is a fault the CPU raised at an instruction that runs again when the handler
/// returns (a bad address, an illegal instruction, a division by zero), rather than a signal
/// sent (`si_code` <= 0: kill, raise, sigqueue).
fn refaults(sig: c_int, info: *const siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    matches!(sig, libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE) && code > 0
}

extern "C" fn on_fatal(sig: c_int, info: *mut siginfo_t, _ctx: *mut c_void) {
    let errno = crate::errno::get();
    let fault = refaults(sig, info);
    // A fault cannot wait: its instruction would fault again as soon as this returns. Nor a
    // thread asleep for another process's lock in the shared cache: it holds none of the
    // cache's, and would not leave the shim while that process is stopped.
    if !fault && !upcache::shared::waiting_for_another_process() && crate::guard::defer_if_inside(sig) {
        crate::errno::set(errno);
        return;
    }
    if let Some(r) = current() {
        // SAFETY: getpid has no arguments. (A child that cloned without fork's handlers has
        // its parent's, whose rescuer is not in it.)
        if r.pid == unsafe { libc::getpid() } as u32 {
            // (After a fault inside the shim the thread may hold a lock the rescuer needs:
            // then the wait ends with `STALL`, and whatever was written back is kept.)
            rescue(r);
        }
    }
    // The default action, as the program asked for: a fault happens again as this returns,
    // with its own siginfo; a sent signal is raised again and delivered as this returns (it
    // is blocked until then). Either way the wait status and core dump are the kernel's.
    let dfl = default_action();
    // SAFETY: a valid sigaction; raise has no memory arguments.
    unsafe {
        real::sigaction()(sig, &dfl, std::ptr::null_mut());
        if !fault {
            libc::raise(sig);
        }
    }
    crate::errno::set(errno);
}

fn now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid timespec storage.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec { tv_sec: t.as_secs() as _, tv_nsec: t.subsec_nanos() as _ });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live u32 for the call; the timeout, if any, outlives it. Returns at
    // once if the word is no longer `expected`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            tsp,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live u32; waking has no other memory arguments.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX)
    };
}

/// The program's view of a disposition: the shim's handler is "the default".
fn as_seen(act: &mut libc::sigaction) {
    if act.sa_sigaction == handler_address() {
        *act = default_action();
    }
}

/// `as_seen` for a handler alone (signal(3) and kin return one).
fn handler_as_seen(handler: sighandler_t) -> sighandler_t {
    if handler == handler_address() {
        libc::SIG_DFL
    } else {
        handler
    }
}

/// Whether the shim stands in for the default of `sig` now (it runs in this process).
fn standing_in(sig: c_int) -> bool {
    is_fatal(sig) && current().is_some()
}

// Every function below is called by C with what its prototype says.

#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if !is_fatal(sig) {
        // SAFETY: the caller's sigaction pointers, each null or valid, passed on.
        return unsafe { real::sigaction()(sig, act, old) };
    }
    let mine;
    let mut act = act;
    // SAFETY: `act` is the caller's, null or valid.
    if let Some(a) = unsafe { act.as_ref() } {
        if a.sa_sigaction == libc::SIG_DFL && standing_in(sig) {
            mine = ours();
            act = &mine;
        }
    }
    // One call: the old disposition is swapped out atomically, as the program's own call does.
    // SAFETY: `act` is the caller's or `mine`, which outlives the call; `old` the caller's.
    let r = unsafe { real::sigaction()(sig, act, old) };
    if r == 0 {
        // SAFETY: the caller's, null or valid, just filled by libc.
        if let Some(o) = unsafe { old.as_mut() } {
            as_seen(o);
        }
    }
    r
}

/// signal(3) and kin: the shim's handler for the default, and the default for its handler.
/// `set` is libc's function of that kind (its arguments are plain values).
fn signal_with(
    sig: c_int,
    handler: sighandler_t,
    set: unsafe extern "C" fn(c_int, sighandler_t) -> sighandler_t,
) -> sighandler_t {
    if !is_fatal(sig) {
        // SAFETY: libc's function, with a signal number and a disposition.
        return unsafe { set(sig, handler) };
    }
    if handler == libc::SIG_DFL && standing_in(sig) {
        let act = ours();
        let mut old = default_action();
        // SAFETY: valid sigaction storage for both.
        if unsafe { real::sigaction()(sig, &act, &mut old) } != 0 {
            return libc::SIG_ERR;
        }
        as_seen(&mut old);
        return old.sa_sigaction;
    }
    // SAFETY: as above.
    handler_as_seen(unsafe { set(sig, handler) })
}

#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_with(sig, handler, real::signal())
}

#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_with(sig, handler, real::bsd_signal())
}

/// sigset(3) also takes the signal out of the mask when it sets a disposition: libc's does
/// that, then the shim's handler replaces the default.
#[no_mangle]
pub unsafe extern "C" fn sigset(sig: c_int, handler: sighandler_t) -> sighandler_t {
    // SAFETY: plain values.
    let old = unsafe { real::sigset()(sig, handler) };
    if handler == libc::SIG_DFL && standing_in(sig) && old != libc::SIG_ERR {
        let act = ours();
        // SAFETY: a valid sigaction; no old one asked for.
        unsafe { real::sigaction()(sig, &act, std::ptr::null_mut()) };
    }
    handler_as_seen(old)
}

#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    signal_with(sig, handler, real::sysv_signal())
}
