//! What the process and the machine used around a measured phase: CPU time (getrusage,
//! /proc/stat) and memory (/proc/self).

/// User plus system CPU time of the whole process so far (every thread, flushers included).
pub(super) fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one rusage struct, which we own, and reads nothing.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Busy CPU time of the whole machine so far, from `/proc/stat` (user, nice, system, irq and
/// softirq of every CPU). A process's own CPU time holds the interrupt work that lands while
/// it runs and misses what lands while it sleeps, so two programs that sleep differently are
/// compared fairly only by this (bench/RESULTS.md, issue 18). None if unreadable.
pub(super) fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line.split_whitespace().skip(1).map_while(|t| t.parse().ok()).collect();
    // user nice system idle iowait irq softirq (steal, guest: guest is inside user already,
    // steal is time the host took away).
    let busy = [0, 1, 2, 5, 6].iter().map(|&i| ticks.get(i).copied()).sum::<Option<u64>>()?;
    // SAFETY: sysconf reads a constant and has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| busy as f64 / hz as f64)
}

/// Resets the process's peak RSS (VmHWM) to the current RSS, so each engine's peak is its own.
/// Returns false if the kernel refused (then VmHWM is the process-wide peak so far).
pub(super) fn reset_peak_rss() -> bool {
    // "5" resets the peak resident set size (Linux 4.0+).
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A `kB` field of /proc/self/status (VmRSS, VmHWM), in MiB; 0 if unavailable.
pub(super) fn mem_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}
