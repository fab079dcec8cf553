//! `upcache_cache`: an open array, or an attachment to the machine's shared cache of OS files
//! (`upcache_attach`).

use crate::config::{config_ref, text, upcache_config};
use crate::error::{status, Fail, UPCACHE_EBUSY};
use std::ffi::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use upcache::shared::{serve, SharedCache, SharedConfig};
use upcache::Cache;

/// An opaque open cache.
pub struct upcache_cache {
    _opaque: [u8; 0],
}

/// What an `upcache_cache` points to.
#[repr(C)]
pub(crate) struct CacheHandle {
    /// First, at the same offset in every handle kind, read before anything else.
    tag: u64,
    pub(crate) cache: Cache,
    /// File handles open on it: the cache cannot be closed under them.
    pub(crate) open_files: Arc<AtomicUsize>,
}

const CACHE_TAG: u64 = 0x7563_6361_6368_6521; // "uccache!"
const DEAD: u64 = 0;

/// The live cache behind `p`.
///
/// # Safety
/// `p` is null or from `upcache_create`/`upcache_open`.
pub(crate) unsafe fn cache_ref<'a>(p: *const upcache_cache) -> Result<&'a CacheHandle, Fail> {
    // SAFETY: the caller's contract: null or a handle, every kind `repr(C)` with the tag first.
    if unsafe { crate::error::tag_of(p.cast()) } != Some(CACHE_TAG) {
        return Err(Fail::invalid(if p.is_null() { "cache is null" } else { "not a live upcache_cache" }));
    }
    // SAFETY: the tag says it is a live cache.
    Ok(unsafe { &*p.cast::<CacheHandle>() })
}

unsafe fn start(config: *const upcache_config, out: *mut *mut upcache_cache, create: bool) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: the caller's contract.
        let c = unsafe { config_ref(config) }?;
        let cache = if create { Cache::create(c.config.clone()) } else { Cache::open(c.config.clone()) }?;
        // SAFETY: `out` is non-null and writable (the caller's contract).
        unsafe { hand_out(cache, out) };
        Ok(())
    })
}

/// Stores a new handle of `cache` in `*out`.
///
/// # Safety
/// `out` is non-null and writable.
unsafe fn hand_out(cache: Cache, out: *mut *mut upcache_cache) {
    let handle = Box::new(CacheHandle { tag: CACHE_TAG, cache, open_files: Arc::default() });
    // SAFETY: the function's contract.
    unsafe { *out = Box::into_raw(handle).cast::<upcache_cache>() };
}

/// Attaches this process to the shared cache whose service listens at `socket` (NULL: the
/// default, `$UPCACHE_SOCKET` or `/tmp/upcache-<uid>/cache.sock`), starting the service if
/// none answers, with `memory` bytes for pages (0: 256 MiB; used only when starting it). Every
/// process attached to one service sees one copy of each page of the OS files it opens
/// (`upcache_file_open_path`). `UPCACHE_EACCES` if the service belongs to another user.
///
/// # Safety
/// `socket` is NULL or NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_attach(
    socket: *const c_char,
    memory: u64,
    out: *mut *mut upcache_cache,
) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        let mut config = SharedConfig::default();
        if memory != 0 {
            config.memory = memory;
        }
        // SAFETY: the function's contract; `out` is non-null (checked).
        unsafe { attach(socket, &config, out) }
    })
}

/// The attach calls' common part: attaches to the service at `socket` (NULL: the default),
/// starting it with `config` if none answers, and hands the attachment out in `*out`.
///
/// # Safety
/// `socket` is NULL or NUL-terminated; `out` is non-null and writable.
unsafe fn attach(
    socket: *const c_char,
    config: &SharedConfig,
    out: *mut *mut upcache_cache,
) -> Result<(), Fail> {
    let socket = if socket.is_null() {
        serve::default_socket()
    } else {
        // SAFETY: the caller's contract.
        std::path::PathBuf::from(unsafe { text(socket, "socket") }?)
    };
    let cache = serve::connect_or_start(&socket, config, std::time::Duration::from_secs(60))?;
    // SAFETY: the caller's contract.
    unsafe { hand_out(Cache::over(cache), out) };
    Ok(())
}

/// The shared cache's size, write-back settings and technique switches, as `upcache serve`'s
/// flags; they take effect when `upcache_attach_with` starts the service (a running one keeps
/// its own). Start from `upcache_shared_settings_default()`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct upcache_shared_settings {
    /// Bytes of memory for pages (a multiple of 4096, at least 64 KiB).
    pub memory: u64,
    /// Past this fraction of the cache dirty, the service writes dirty files back until the
    /// cache is a sixteenth below it (0 < dirty_background <= dirty_foreground <= 1,
    /// dirty_background < 1).
    pub dirty_background: f64,
    /// Past this fraction, a writer writes back its own file before writing.
    pub dirty_foreground: f64,
    /// Age at which dirty pages are written back, in milliseconds (at most an hour).
    pub dirty_expire_ms: u64,
    /// Time between two passes of the service's flusher, in milliseconds (1 to an hour).
    pub flush_interval_ms: u64,
    /// The range lock: a write within a file's length holds only its pages (false: the whole
    /// file).
    pub range_lock: bool,
    /// Adjacent dirty pages written back with one request (false: a request per page).
    pub run_merging: bool,
    /// A read's missing pages and its readahead loaded with one request (false: a request per
    /// page).
    pub bundling: bool,
    /// Bytes a sequential stream's read loads ahead, at most 1 MiB (0: no readahead).
    pub readahead: u64,
    /// The page index as ScaleCache's ccXArray, a lock-free tree per file (false: hash chains
    /// under partition locks).
    pub lock_free_index: bool,
    /// The service's flushers, 1 to 8: files due for write-back written back at once.
    pub flushers: u32,
    /// Whole pages written back through the file opened with O_DIRECT, past the kernel's page
    /// cache (false: through a writer's descriptor).
    pub direct_write_back: bool,
    /// The replacement policy by name, NUL-terminated: "clock" (or empty; the hand passes a
    /// page read since it last passed over once), "gclock" (SAFS: once per read, up to 4),
    /// "lru" or "lfu" (sampled), "sieve" or "s3fifo" (not with `set_ways` or NUMA
    /// partitions).
    pub policy: [c_char; 16],
    /// Clean-first eviction: the clock hand passes dirty pages over for a lap (false: it takes
    /// the first it finds, written back).
    pub clean_first: bool,
    /// With `clean_first`, GC-aware: only while the page's device is taken to be collecting
    /// garbage, as the latency of the write-backs that reach it shows.
    pub gc_aware: bool,
    /// dflush: a writer past the foreground fraction writes back its own file (false: it
    /// pauses until the service's write-back brings the cache under it).
    pub dflush: bool,
    /// Stream-aware eviction: a page a sequential stream reads once is no reference for the
    /// clock hand (false: every hit is one).
    pub streams: bool,
    /// The service puts the frames' bytes in use on 2 MiB pages once the cache is warm
    /// (`MADV_COLLAPSE`, Linux 6.1), so random hits seldom miss the TLB (false: 4 KiB pages,
    /// unless the system gives more).
    pub huge_pages: bool,
    /// Missing pages read through the file opened with O_DIRECT, past the kernel's page cache
    /// (false: through the reader's descriptor, a copy through the kernel's cache).
    pub direct_loads: bool,
    /// Write-back through io_uring, a sync's runs or a write-back's under dirty pressure in
    /// the kernel's hands at once (false: one pwritev after another).
    pub uring_write_back: bool,
    /// ScalaCache's per-thread hot index: a thread's repeat pin of a page skips the page index
    /// (pins are the Rust API's; false: every pin looks the page up).
    pub hot_index: bool,
    /// SAFS's set-associative index, with this many frames per set, 1 to 64: a page lives in
    /// the one set its key hashes to, and a miss evicts from that set (0: no sets, the index
    /// `lock_free_index` says).
    pub set_ways: u32,
    /// The frames' partitions per NUMA node, as `upcache serve --numa` takes them,
    /// NUL-terminated: "machine" (or empty) for the machine's nodes, "off" for one partition,
    /// or each node's CPUs, as "0-3,8;4-7" (a topology described, for testing on a machine of
    /// one node).
    pub numa: [c_char; 256],
    /// The size of a page and its frame, a power of two from 4096 to 65536 (0: 4096).
    pub page_size: u32,
    /// StreamCache's two-layer allocator: free frames pooled per CPU and listed per file, the
    /// service reclaiming clean pages into the pool while it is short (false: one stack of
    /// emptied frames; misses run the clock hand). Not with `set_ways` or NUMA partitions.
    pub two_layer_alloc: bool,
    /// Every frame made resident as the cache is made, so that no miss pays the first touch
    /// of its frame (false: a frame's memory is taken at its first use).
    pub prefault: bool,
    /// With `lock_free_index`, each file's tree changed under one lock (the kernel's XArray,
    /// the lock-free tree's baseline; lookups take none).
    pub locked_index: bool,
}

/// `name` NUL-terminated in a settings' text field (`numa`, `policy`); None if it does not fit.
fn text_field<const N: usize>(name: &str) -> Option<[c_char; N]> {
    let mut text = [0 as c_char; N];
    if name.len() >= text.len() {
        return None;
    }
    for (t, b) in text.iter_mut().zip(name.bytes()) {
        *t = b as c_char;
    }
    Some(text)
}

/// A settings' text field up to its NUL (the whole field if it has none), as UTF-8.
fn field_text(field: &[c_char], what: &str) -> Result<String, Fail> {
    let bytes = field.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8(bytes)
        .map_err(|_| Fail { code: crate::error::UPCACHE_ECONFIG, msg: format!("{what} is not UTF-8") })
}

impl From<&SharedConfig> for upcache_shared_settings {
    fn from(c: &SharedConfig) -> Self {
        upcache_shared_settings {
            memory: c.memory,
            dirty_background: c.dirty_ratios.0,
            dirty_foreground: c.dirty_ratios.1,
            dirty_expire_ms: c.dirty_expire.as_millis() as u64,
            flush_interval_ms: c.flush_interval.as_millis() as u64,
            range_lock: c.range_lock,
            run_merging: c.run_merging,
            bundling: c.bundling,
            readahead: c.readahead,
            lock_free_index: matches!(c.index, upcache::IndexKind::Radix | upcache::IndexKind::Locked),
            flushers: c.flushers,
            direct_write_back: c.direct_write_back,
            policy: text_field(c.policy.name()).expect("policy names are short"),
            clean_first: c.clean_first != upcache::CleanFirst::Never,
            gc_aware: c.clean_first == upcache::CleanFirst::WhileGc,
            dflush: c.flush == upcache::FlushKind::Direct,
            streams: c.streams,
            huge_pages: c.huge_pages,
            direct_loads: c.direct_loads,
            uring_write_back: c.io == upcache::IoKind::Uring,
            hot_index: c.hot_index,
            set_ways: if c.index == upcache::IndexKind::SetAssoc { c.set_ways } else { 0 },
            // A topology too long to say reads as "" (the machine's); `upcache_shared_settings_of`
            // refuses it instead.
            numa: text_field(&c.numa.name()).unwrap_or([0; 256]),
            page_size: c.page_size.min(u32::MAX as usize) as u32,
            two_layer_alloc: c.alloc == upcache::AllocKind::TwoLayer,
            prefault: c.prefault,
            locked_index: c.index == upcache::IndexKind::Locked,
        }
    }
}

impl upcache_shared_settings {
    /// The configuration these settings say; `InvalidConfig` for one out of its range.
    fn config(&self) -> Result<SharedConfig, Fail> {
        let s = self;
        let numa = match field_text(&s.numa, "numa")?.as_str() {
            "" => upcache::shared::SharedNuma::Machine,
            text => text.parse()?,
        };
        let policy = match field_text(&s.policy, "policy")?.as_str() {
            "" => upcache::PolicyKind::Clock,
            text => text.parse()?,
        };
        let config = SharedConfig {
            memory: s.memory,
            dirty_ratios: (s.dirty_background, s.dirty_foreground),
            dirty_expire: std::time::Duration::from_millis(s.dirty_expire_ms),
            flush_interval: std::time::Duration::from_millis(s.flush_interval_ms),
            range_lock: s.range_lock,
            run_merging: s.run_merging,
            bundling: s.bundling,
            readahead: s.readahead,
            index: match (s.set_ways, s.lock_free_index) {
                (0, true) if s.locked_index => upcache::IndexKind::Locked,
                (0, true) => upcache::IndexKind::Radix,
                (0, false) => upcache::IndexKind::Sharded,
                _ => upcache::IndexKind::SetAssoc,
            },
            set_ways: if s.set_ways == 0 { SharedConfig::default().set_ways } else { s.set_ways },
            flushers: s.flushers,
            direct_write_back: s.direct_write_back,
            policy,
            clean_first: match (s.clean_first, s.gc_aware) {
                (false, _) => upcache::CleanFirst::Never,
                (true, false) => upcache::CleanFirst::Always,
                (true, true) => upcache::CleanFirst::WhileGc,
            },
            flush: if s.dflush { upcache::FlushKind::Direct } else { upcache::FlushKind::Background },
            streams: s.streams,
            huge_pages: s.huge_pages,
            direct_loads: s.direct_loads,
            io: if s.uring_write_back { upcache::IoKind::Uring } else { upcache::IoKind::Psync },
            hot_index: s.hot_index,
            numa,
            page_size: if s.page_size == 0 {
                SharedConfig::default().page_size
            } else {
                s.page_size as usize
            },
            alloc: if s.two_layer_alloc { upcache::AllocKind::TwoLayer } else { upcache::AllocKind::Global },
            prefault: s.prefault,
            ..SharedConfig::default()
        };
        config.check()?;
        Ok(config)
    }
}

/// The defaults: 256 MiB, dirty fractions 0.25 and 0.5, 30 s expiry, a pass every second,
/// every technique on (CLOCK, not GClock), 1 MiB of readahead.
#[no_mangle]
pub extern "C" fn upcache_shared_settings_default() -> upcache_shared_settings {
    upcache_shared_settings::from(&SharedConfig::default())
}

/// The configuration `settings` say (NULL: the defaults).
///
/// # Safety
/// `settings` is NULL or readable.
unsafe fn config_of(settings: *const upcache_shared_settings) -> Result<SharedConfig, Fail> {
    // SAFETY: the caller's contract.
    unsafe { settings.as_ref() }.copied().unwrap_or_else(|| upcache_shared_settings_default()).config()
}

/// As `upcache_attach`, starting the service with `settings` if none answers (NULL: the
/// defaults). `UPCACHE_ECONFIG` if a setting is out of its range.
///
/// # Safety
/// `socket` is NULL or NUL-terminated; `settings` is NULL or readable; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_attach_with(
    socket: *const c_char,
    settings: *const upcache_shared_settings,
    out: *mut *mut upcache_cache,
) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: the function's contract: NULL or readable.
        let config = unsafe { config_of(settings) }?;
        // SAFETY: the function's contract; `out` is non-null (checked).
        unsafe { attach(socket, &config, out) }
    })
}

/// A cache of this process alone with `settings` (NULL: the defaults): the shared cache's
/// engine on memory no other process maps, with no service; a thread of this process writes
/// back (`SharedCache::create_private`). Its files are opened by path
/// (`upcache_file_open_path`), as an attachment's; it is coherent within this process only,
/// and what it did not write back goes with the process. A forked child does not use it.
/// `UPCACHE_ECONFIG` if a setting is out of its range.
///
/// # Safety
/// `settings` is NULL or readable; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_create_private(
    settings: *const upcache_shared_settings,
    out: *mut *mut upcache_cache,
) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: the function's contract: NULL or readable.
        let cache = SharedCache::create_private(&unsafe { config_of(settings) }?)?;
        // SAFETY: the function's contract; `out` is non-null (checked).
        unsafe { hand_out(Cache::over(cache), out) };
        Ok(())
    })
}

/// Stores in `*out` the settings the shared cache `cache` runs with (its service's).
/// `UPCACHE_EINVAL` for an array's cache (`upcache_create`, `upcache_open`).
///
/// # Safety
/// `cache` is from `upcache_attach` or `upcache_attach_with`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_shared_settings_of(
    cache: *const upcache_cache,
    out: *mut upcache_shared_settings,
) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: the function's contract.
        let handle = unsafe { cache_ref(cache) }?;
        if handle.cache.has_array() {
            return Err(Fail::invalid("not an attachment to the shared cache"));
        }
        let config = handle.cache.engine().config();
        if text_field::<256>(&config.numa.name()).is_none() {
            return Err(Fail::invalid("its NUMA topology is too long for the settings' 255 bytes"));
        }
        // SAFETY: `out` is non-null and writable (checked, and the contract).
        unsafe { *out = upcache_shared_settings::from(&config) };
        Ok(())
    })
}

/// Creates a new array in the configuration's directories and opens it into `*out`.
///
/// # Safety
/// `config` is from `upcache_config_new`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_create(config: *const upcache_config, out: *mut *mut upcache_cache) -> i32 {
    // SAFETY: the function's contract.
    unsafe { start(config, out, true) }
}

/// Opens an existing array into `*out` (replaying its metadata log).
///
/// # Safety
/// `config` is from `upcache_config_new`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_open(config: *const upcache_config, out: *mut *mut upcache_cache) -> i32 {
    // SAFETY: the function's contract.
    unsafe { start(config, out, false) }
}

/// Writes everything back, makes it durable and closes the cache. Fails with
/// `UPCACHE_EBUSY` while file handles or queues are open on it, and with the sync's error if the data
/// could not be made durable: in both cases nothing is closed and no data is dropped (close
/// the files, or clear the device's fault, and call again).
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`, not closed before.
#[no_mangle]
pub unsafe extern "C" fn upcache_close(cache: *mut upcache_cache) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let c = unsafe { cache_ref(cache) }?;
        // SeqCst: pairs with the increments of file opens; no open may slip past the check
        // (opens on a cache being closed are the caller's race, as with close(2)).
        let open = c.open_files.load(Ordering::SeqCst);
        if open > 0 {
            return Err(Fail {
                code: UPCACHE_EBUSY,
                msg: format!("{open} file or queue handle(s) still open"),
            });
        }
        if c.cache.has_array() {
            c.cache.sync()?;
        }
        // SAFETY: allocated by `Box::into_raw` in `hand_out`, freed only here.
        let mut handle = unsafe { Box::from_raw(cache.cast::<CacheHandle>()) };
        handle.tag = DEAD;
        drop(handle);
        Ok(())
    })
}

/// Makes every file's written data and length durable (on a shared cache: every file this
/// process has open for writing).
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`/`upcache_attach`.
#[no_mangle]
pub unsafe extern "C" fn upcache_sync(cache: *mut upcache_cache) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        Ok(unsafe { cache_ref(cache) }?.cache.sync()?)
    })
}

/// Changes how much of its memory the cache uses, while I/O runs, and stores the bytes of
/// frames now in use in `*in_use` (if not NULL). A shared cache (`upcache_attach`,
/// `upcache_create_private`): `bytes` rounded down to whole pages, between 16 pages and the
/// memory it was made with; shrinking writes back and drops the pages past the new size, and
/// fails with `UPCACHE_EBUSY` (the size unchanged) while pinned pages stay there; with page
/// sets, in whole ways of every set; with NUMA partitions, each node keeps its share. An array
/// (`upcache_create`, `upcache_open`) resizes the same way.
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`/`upcache_attach`/`upcache_create_private`;
/// `in_use` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_resize(cache: *mut upcache_cache, bytes: u64, in_use: *mut u64) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let now = unsafe { cache_ref(cache) }?.cache.resize(bytes)?;
        if !in_use.is_null() {
            // SAFETY: non-null, so writable (the function's contract).
            unsafe { *in_use = now };
        }
        Ok(())
    })
}

/// Removes file `name` (its handles must be closed).
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`; `name` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn upcache_remove(cache: *mut upcache_cache, name: *const c_char) -> i32 {
    status(|| {
        // SAFETY: the function's contract.
        let c = unsafe { cache_ref(cache) }?;
        // SAFETY: the function's contract.
        Ok(c.cache.remove_file(unsafe { text(name, "name") }?)?)
    })
}

/// A snapshot of a cache's counters (`upcache_get_stats`); the fields are those of the Rust
/// `upcache::Stats`, whose docs say what each counts.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct upcache_stats {
    /// Page lookups that found the page resident.
    pub hits: u64,
    /// Of those, pages copied by a lock-free read.
    pub lock_free_hits: u64,
    /// Page lookups that had to load or create the page.
    pub misses: u64,
    /// Pages evicted to make room.
    pub evictions: u64,
    /// Of those, evicted ahead of demand by background reclaim.
    pub reclaimed: u64,
    /// Of those, pages of written-back streams evicted in stream order.
    pub stream_evictions: u64,
    /// Pages loaded ahead of sequential readers.
    pub readahead_pages: u64,
    /// Readahead windows handed to the loader.
    pub readahead_windows: u64,
    /// Pins served by the thread's hot index.
    pub hot_hits: u64,
    /// Device read requests.
    pub read_ios: u64,
    /// Bytes read from devices.
    pub read_bytes: u64,
    /// Device write requests made by write-back.
    pub writeback_ios: u64,
    /// Bytes written back.
    pub writeback_bytes: u64,
    /// Write-back requests that failed (their pages stayed dirty).
    pub writeback_errors: u64,
    /// Pages written back by writers themselves past the foreground threshold.
    pub dflush_pages: u64,
    /// Pages dirty now.
    pub dirty_pages: u64,
    /// Frames in the cache.
    pub frames: u64,
    /// Bytes of per-frame metadata.
    pub metadata_bytes: u64,
    /// Bytes of the open files' page indexes now.
    pub index_bytes: u64,
}

impl From<upcache::Stats> for upcache_stats {
    fn from(s: upcache::Stats) -> Self {
        let upcache::Stats {
            hits,
            lock_free_hits,
            misses,
            evictions,
            reclaimed,
            stream_evictions,
            readahead_pages,
            readahead_windows,
            hot_hits,
            read_ios,
            read_bytes,
            writeback_ios,
            writeback_bytes,
            writeback_errors,
            dflush_pages,
            dirty_pages,
            frames,
            metadata_bytes,
            index_bytes,
        } = s;
        upcache_stats {
            hits,
            lock_free_hits,
            misses,
            evictions,
            reclaimed,
            stream_evictions,
            readahead_pages,
            readahead_windows,
            hot_hits,
            read_ios,
            read_bytes,
            writeback_ios,
            writeback_bytes,
            writeback_errors,
            dflush_pages,
            dirty_pages,
            frames,
            metadata_bytes,
            index_bytes,
        }
    }
}

/// Stores the cache's counters in `*out`. For an attachment to the shared cache, the shared
/// cache's counts, of every process attached since it was made: hits, misses, evictions, read_ios and read_bytes (requests that loaded pages,
/// and their bytes), writeback_ios and writeback_bytes (requests that wrote pages back, and
/// their bytes), dirty_pages and frames; the fields it does not keep are 0.
///
/// # Safety
/// `cache` is from `upcache_create`/`upcache_open`/`upcache_attach`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn upcache_get_stats(cache: *const upcache_cache, out: *mut upcache_stats) -> i32 {
    status(|| {
        if out.is_null() {
            return Err(Fail::invalid("out is null"));
        }
        // SAFETY: the function's contract.
        let stats = upcache_stats::from(unsafe { &cache_ref(cache)?.cache }.stats());
        // SAFETY: `out` is non-null and writable (the function's contract).
        unsafe { *out = stats };
        Ok(())
    })
}
