//! The environment the shim reads when the first file under the prefix opens.

use std::path::PathBuf;

/// Default page memory of each process's cache.
const DEFAULT_MEMORY: u64 = 256 << 20;

#[derive(Debug)]
pub(crate) struct Settings {
    /// UPCACHE_PREFIX, resolved: only files whose resolved path is under it are cached.
    pub prefix: PathBuf,
    /// UPCACHE_MEMORY.
    pub memory: u64,
    /// Whether UPCACHE_MEMORY was set (a shared cache of another size is then said to be).
    pub memory_asked: bool,
    /// UPCACHE_STATS.
    pub stats: Option<PathBuf>,
    /// UPCACHE_SHARED: the machine's shared cache (1, the default) or one of this process's
    /// own (0).
    pub shared: bool,
    /// UPCACHE_IDLE: seconds a shared cache's service started by the shim stays with nobody
    /// attached (default `upcache::shared::serve::DEFAULT_IDLE`, as `upcache serve --idle`).
    pub idle: std::time::Duration,
    /// UPCACHE_DIRTY_RATIOS (`BG,FG`), UPCACHE_DIRTY_EXPIRE and UPCACHE_FLUSH_INTERVAL
    /// (durations), UPCACHE_RANGE_LOCK, UPCACHE_RUN_MERGING and UPCACHE_BUNDLING (on|off),
    /// UPCACHE_READAHEAD (a size), UPCACHE_INDEX (radix|locked|sharded|setassoc), UPCACHE_SET_WAYS
    /// (frames per set, 1 to 64), UPCACHE_NUMA (machine|off|a described topology, as
    /// `upcache serve --numa`; the shared cache's only), UPCACHE_FLUSHERS (a count),
    /// UPCACHE_DIRECT_WRITE_BACK and UPCACHE_DIRECT_LOADS (on|off; the shared cache's only), UPCACHE_POLICY
    /// (clock|gclock|lru|lfu|sieve|s3fifo), UPCACHE_CLEAN_FIRST (clean-first|plain|gc-aware), UPCACHE_FLUSH
    /// (dflush|background), UPCACHE_STREAMS and UPCACHE_HUGE_PAGES (on|off), UPCACHE_IO
    /// (uring|psync), UPCACHE_HOT_INDEX and UPCACHE_PREFAULT (on|off), and UPCACHE_DIRECT=0 (both direct settings
    /// off unless set): the settings of a cache the shim makes, as `upcache serve`'s flags (a
    /// shared cache's service the shim starts, or a private cache); unset, the cache's
    /// defaults.
    pub cache: CacheSettings,
}

#[derive(Debug, Default)]
pub(crate) struct CacheSettings {
    pub dirty_ratios: Option<(f64, f64)>,
    pub dirty_expire: Option<std::time::Duration>,
    pub flush_interval: Option<std::time::Duration>,
    pub range_lock: Option<bool>,
    pub run_merging: Option<bool>,
    pub bundling: Option<bool>,
    pub readahead: Option<u64>,
    pub index: Option<upcache::IndexKind>,
    pub set_ways: Option<u32>,
    pub numa: Option<upcache::shared::SharedNuma>,
    pub flushers: Option<u32>,
    pub direct_write_back: Option<bool>,
    pub direct_loads: Option<bool>,
    pub policy: Option<upcache::PolicyKind>,
    pub clean_first: Option<upcache::CleanFirst>,
    pub flush: Option<upcache::FlushKind>,
    pub streams: Option<bool>,
    pub huge_pages: Option<bool>,
    pub hot_index: Option<bool>,
    pub io: Option<upcache::IoKind>,
    pub page_size: Option<u64>,
    pub alloc: Option<upcache::AllocKind>,
    pub prefault: Option<bool>,
}

impl CacheSettings {
    fn from_env() -> Result<CacheSettings, String> {
        fn var<T>(name: &str, parse: fn(&str) -> Result<T, String>) -> Result<Option<T>, String> {
            match std::env::var(name) {
                Ok(v) => parse(&v).map(Some).map_err(|e| format!("{name}={v}: {e}")),
                Err(std::env::VarError::NotPresent) => Ok(None),
                Err(e) => Err(format!("{name}: {e}")),
            }
        }
        /// One of a `choice!` enum's names (`IndexKind`, `PolicyKind`, ...).
        fn choice<T: std::str::FromStr<Err = upcache::Error>>(s: &str) -> Result<T, String> {
            s.parse().map_err(|e: upcache::Error| e.to_string())
        }
        // UPCACHE_DIRECT=0: through the kernel's page cache, where the direct settings are unset.
        let through_kernel = match std::env::var("UPCACHE_DIRECT").as_deref() {
            Err(std::env::VarError::NotPresent) | Ok("1") => None,
            Ok("0") => Some(false),
            Ok(v) => return Err(format!("UPCACHE_DIRECT={v}: 0 or 1")),
            Err(e) => return Err(format!("UPCACHE_DIRECT: {e}")),
        };
        Ok(CacheSettings {
            dirty_ratios: var("UPCACHE_DIRTY_RATIOS", upcache::parse_ratios)?,
            dirty_expire: var("UPCACHE_DIRTY_EXPIRE", upcache::parse_duration)?,
            flush_interval: var("UPCACHE_FLUSH_INTERVAL", upcache::parse_duration)?,
            range_lock: var("UPCACHE_RANGE_LOCK", upcache::parse_on_off)?,
            run_merging: var("UPCACHE_RUN_MERGING", upcache::parse_on_off)?,
            bundling: var("UPCACHE_BUNDLING", upcache::parse_on_off)?,
            readahead: var("UPCACHE_READAHEAD", upcache::parse_size)?,
            index: var("UPCACHE_INDEX", choice)?,
            numa: var("UPCACHE_NUMA", choice)?,
            set_ways: var("UPCACHE_SET_WAYS", |s| {
                s.parse().map_err(|e: std::num::ParseIntError| e.to_string())
            })?,
            flushers: var("UPCACHE_FLUSHERS", |s| {
                s.parse().map_err(|e: std::num::ParseIntError| e.to_string())
            })?,
            direct_write_back: var("UPCACHE_DIRECT_WRITE_BACK", upcache::parse_on_off)?.or(through_kernel),
            direct_loads: var("UPCACHE_DIRECT_LOADS", upcache::parse_on_off)?.or(through_kernel),
            policy: var("UPCACHE_POLICY", choice)?,
            clean_first: var("UPCACHE_CLEAN_FIRST", choice)?,
            flush: var("UPCACHE_FLUSH", choice)?,
            streams: var("UPCACHE_STREAMS", upcache::parse_on_off)?,
            huge_pages: var("UPCACHE_HUGE_PAGES", upcache::parse_on_off)?,
            hot_index: var("UPCACHE_HOT_INDEX", upcache::parse_on_off)?,
            io: var("UPCACHE_IO", choice)?,
            page_size: var("UPCACHE_PAGE_SIZE", upcache::parse_size)?,
            alloc: var("UPCACHE_ALLOC", choice)?,
            prefault: var("UPCACHE_PREFAULT", upcache::parse_on_off)?,
        })
    }

    /// `config` with these settings.
    pub fn shared(&self, config: upcache::shared::SharedConfig) -> upcache::shared::SharedConfig {
        upcache::shared::SharedConfig {
            dirty_ratios: self.dirty_ratios.unwrap_or(config.dirty_ratios),
            dirty_expire: self.dirty_expire.unwrap_or(config.dirty_expire),
            flush_interval: self.flush_interval.unwrap_or(config.flush_interval),
            range_lock: self.range_lock.unwrap_or(config.range_lock),
            run_merging: self.run_merging.unwrap_or(config.run_merging),
            bundling: self.bundling.unwrap_or(config.bundling),
            readahead: self.readahead.unwrap_or(config.readahead),
            index: self.index.unwrap_or(config.index),
            set_ways: self.set_ways.unwrap_or(config.set_ways),
            numa: self.numa.clone().unwrap_or(config.numa),
            flushers: self.flushers.unwrap_or(config.flushers),
            direct_write_back: self.direct_write_back.unwrap_or(config.direct_write_back),
            direct_loads: self.direct_loads.unwrap_or(config.direct_loads),
            policy: self.policy.unwrap_or(config.policy),
            clean_first: self.clean_first.unwrap_or(config.clean_first),
            flush: self.flush.unwrap_or(config.flush),
            streams: self.streams.unwrap_or(config.streams),
            huge_pages: self.huge_pages.unwrap_or(config.huge_pages),
            hot_index: self.hot_index.unwrap_or(config.hot_index),
            io: self.io.unwrap_or(config.io),
            page_size: self.page_size.map_or(config.page_size, |p| p.min(usize::MAX as u64) as usize),
            alloc: self.alloc.unwrap_or(config.alloc),
            prefault: self.prefault.unwrap_or(config.prefault),
            ..config
        }
    }

    /// What of these settings a running shared cache's `config` does not have, said as the
    /// variables that ask for it; None if it has them all.
    pub fn differs(&self, config: &upcache::shared::SharedConfig) -> Option<String> {
        let mut asked = Vec::new();
        if let Some((bg, fg)) = self.dirty_ratios.filter(|r| *r != config.dirty_ratios) {
            asked.push(format!("UPCACHE_DIRTY_RATIOS asks for {bg},{fg}"));
        }
        if let Some(e) = self.dirty_expire.filter(|e| *e != config.dirty_expire) {
            asked.push(format!("UPCACHE_DIRTY_EXPIRE for {e:?}"));
        }
        if let Some(i) = self.flush_interval.filter(|i| *i != config.flush_interval) {
            asked.push(format!("UPCACHE_FLUSH_INTERVAL for {i:?}"));
        }
        for (name, asked_for, has) in [
            ("UPCACHE_RANGE_LOCK", self.range_lock, config.range_lock),
            ("UPCACHE_RUN_MERGING", self.run_merging, config.run_merging),
            ("UPCACHE_BUNDLING", self.bundling, config.bundling),
            ("UPCACHE_DIRECT_WRITE_BACK", self.direct_write_back, config.direct_write_back),
            ("UPCACHE_DIRECT_LOADS", self.direct_loads, config.direct_loads),
            ("UPCACHE_STREAMS", self.streams, config.streams),
            ("UPCACHE_HUGE_PAGES", self.huge_pages, config.huge_pages),
            ("UPCACHE_HOT_INDEX", self.hot_index, config.hot_index),
            ("UPCACHE_PREFAULT", self.prefault, config.prefault),
        ] {
            if let Some(b) = asked_for.filter(|b| *b != has) {
                asked.push(format!("{name} for {}", upcache::on_off(b)));
            }
        }
        if let Some(r) = self.readahead.filter(|r| *r != config.readahead) {
            asked.push(format!("UPCACHE_READAHEAD for {r} bytes"));
        }
        if let Some(i) = self.index.filter(|i| *i != config.index) {
            asked.push(format!("UPCACHE_INDEX for {}", i.name()));
        }
        if let Some(numa) = self.numa.as_ref().filter(|n| **n != config.numa) {
            asked.push(format!("UPCACHE_NUMA for {}", numa.name()));
        }
        if let Some(w) = self.set_ways.filter(|w| *w != config.set_ways) {
            asked.push(format!("UPCACHE_SET_WAYS for {w}"));
        }
        if let Some(n) = self.flushers.filter(|n| *n != config.flushers) {
            asked.push(format!("UPCACHE_FLUSHERS for {n}"));
        }
        if let Some(p) = self.policy.filter(|p| *p != config.policy) {
            asked.push(format!("UPCACHE_POLICY for {}", p.name()));
        }
        if let Some(c) = self.clean_first.filter(|c| *c != config.clean_first) {
            asked.push(format!("UPCACHE_CLEAN_FIRST for {}", c.name()));
        }
        if let Some(f) = self.flush.filter(|f| *f != config.flush) {
            asked.push(format!("UPCACHE_FLUSH for {}", f.name()));
        }
        if let Some(io) = self.io.filter(|io| *io != config.io) {
            asked.push(format!("UPCACHE_IO for {}", io.name()));
        }
        if let Some(a) = self.alloc.filter(|a| *a != config.alloc) {
            asked.push(format!("UPCACHE_ALLOC for {}", a.name()));
        }
        if let Some(p) = self.page_size.filter(|p| *p != config.page_size as u64) {
            asked.push(format!("UPCACHE_PAGE_SIZE for {p} bytes"));
        }
        (!asked.is_empty()).then(|| asked.join(", "))
    }
}

impl Settings {
    /// None if UPCACHE_PREFIX is unset or empty (the shim stays out of the way); an error
    /// message if a setting is bad.
    pub fn from_env() -> Result<Option<Settings>, String> {
        let prefix = match std::env::var_os("UPCACHE_PREFIX") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => return Ok(None),
        };
        let prefix = std::fs::canonicalize(&prefix)
            .map_err(|e| format!("UPCACHE_PREFIX={}: {e}", prefix.display()))?;
        let memory = match std::env::var("UPCACHE_MEMORY") {
            Ok(v) => parse_size(&v).map_err(|e| format!("UPCACHE_MEMORY={v}: {e}"))?,
            Err(std::env::VarError::NotPresent) => DEFAULT_MEMORY,
            Err(e) => return Err(format!("UPCACHE_MEMORY: {e}")),
        };
        let stats = std::env::var_os("UPCACHE_STATS").filter(|s| !s.is_empty()).map(PathBuf::from);
        let shared = match std::env::var("UPCACHE_SHARED").as_deref() {
            Err(std::env::VarError::NotPresent) | Ok("1") => true,
            Ok("0") => false,
            Ok(v) => return Err(format!("UPCACHE_SHARED={v}: 0 or 1")),
            Err(e) => return Err(format!("UPCACHE_SHARED: {e}")),
        };
        let idle = match std::env::var("UPCACHE_IDLE") {
            Ok(v) => v.parse::<u64>().map_err(|e| format!("UPCACHE_IDLE={v}: {e}"))?,
            Err(std::env::VarError::NotPresent) => upcache::shared::serve::DEFAULT_IDLE.as_secs(),
            Err(e) => return Err(format!("UPCACHE_IDLE: {e}")),
        };
        let idle = std::time::Duration::from_secs(idle);
        let memory_asked = std::env::var_os("UPCACHE_MEMORY").is_some();
        let cache = CacheSettings::from_env()?;
        Ok(Some(Settings { prefix, memory, memory_asked, stats, shared, idle, cache }))
    }
}

/// Bytes from a size as `upcache::parse_size` reads it ("4096", "64K", "256MiB", "1.5G"),
/// which must be more than 0.
pub fn parse_size(text: &str) -> Result<u64, String> {
    match upcache::parse_size(text)? {
        0 => Err("must be more than 0".into()),
        bytes => Ok(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_suffixes_and_bad_ones_are_errors() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size(" 1g "), Ok(1 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        for bad in ["", "M", "0", "-1", "1X", "99999999999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
