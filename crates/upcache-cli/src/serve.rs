//! `upcache serve`: runs the shared cache's service in the foreground (the shim and the
//! library start one themselves when none answers), or asks a running one for its status.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use upcache::shared::serve::{self, ServeOptions};
use upcache::shared::SharedConfig;

#[derive(Args)]
pub struct ServeArgs {
    /// The socket (default: $UPCACHE_SOCKET, else /tmp/upcache-<uid>/cache.sock)
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Memory for pages (K/M/G suffixes)
    #[arg(long, default_value = "256M", value_parser = crate::size::parse_size)]
    memory: u64,
    /// Files cached at once
    #[arg(long, default_value_t = 4096)]
    files: u32,
    /// Dirty fractions of the cache BG,FG: past BG the service writes dirty files back until
    /// the cache is a sixteenth below it, past FG a writer writes back its own file first (as the shim's
    /// UPCACHE_DIRTY_RATIOS)
    #[arg(long, value_name = "BG,FG", default_value = "0.25,0.5", value_parser = upcache::parse_ratios)]
    dirty_ratios: (f64, f64),
    /// Age at which dirty pages are written back (as UPCACHE_DIRTY_EXPIRE)
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::size::parse_duration)]
    dirty_expire: Duration,
    /// Time between two passes of the service's flusher (as UPCACHE_FLUSH_INTERVAL)
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = crate::size::parse_duration)]
    flush_interval: Duration,
    /// The range lock (F2FS): a write within a file's length holds only its pages, beside
    /// writers of other parts, or off, the whole file (as UPCACHE_RANGE_LOCK)
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = upcache::parse_on_off, action = clap::ArgAction::Set)]
    range_lock: bool,
    /// Write back a file's adjacent dirty pages with one request of up to 1 MiB, or off, a
    /// request per page (as UPCACHE_RUN_MERGING)
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = upcache::parse_on_off, action = clap::ArgAction::Set)]
    run_merging: bool,
    /// Load a read's missing pages and its readahead with one request (ScalaCache's batched
    /// I/O), or off, a request per page (as UPCACHE_BUNDLING)
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = upcache::parse_on_off, action = clap::ArgAction::Set)]
    bundling: bool,
    /// Write whole pages back through the file opened with O_DIRECT, past the kernel's page
    /// cache (no second copy of each page), or off, through the writer's descriptor (as
    /// UPCACHE_DIRECT_WRITE_BACK)
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = upcache::parse_on_off, action = clap::ArgAction::Set)]
    direct_write_back: bool,
    /// Load missing pages through the file opened with O_DIRECT, past the kernel's page cache
    /// (one read, no second copy), or off, through the reader's descriptor (as
    /// UPCACHE_DIRECT_LOADS)
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = upcache::parse_on_off, action = clap::ArgAction::Set)]
    direct_loads: bool,
    /// Write-back through io_uring, up to 32 runs of a sync or of a write-back under dirty
    /// pressure in the kernel's hands at once (uring), or one pwritev after another (psync)
    /// (as UPCACHE_IO)
    #[arg(long, value_name = "uring|psync", default_value = "uring")]
    io: upcache::IoKind,
    /// Flushers of the service, 1 to 8: files due for write-back are written back by as many
    /// threads at once (as UPCACHE_FLUSHERS)
    #[arg(long, default_value_t = 2)]
    flushers: u32,
    /// The page index: radix, ScaleCache's ccXArray, a lock-free tree per file; locked, the
    /// same trees with each file's inserts and removes under one lock (the kernel's XArray,
    /// its baseline); sharded, hash chains under 1024 partition locks; or setassoc, SAFS's set-associative cache (a
    /// page lives in the one set of --set-ways frames its key hashes to, and a miss evicts
    /// from that set with its own clock hand) (as UPCACHE_INDEX)
    #[arg(long, value_name = "radix|locked|sharded|setassoc", default_value = "radix")]
    index: upcache::IndexKind,
    /// The frames partitioned per NUMA node: machine (the machine's nodes; one partition where
    /// it has one), off, or a described topology, each node's CPUs as Linux lists them and
    /// nodes apart by ';' (0-3,8;4-7): a miss takes a frame of its CPU's node first, and each
    /// node's flushers write its dirty pages from its CPUs (as UPCACHE_NUMA)
    #[arg(long, value_name = "machine|off|CPUS;CPUS..", default_value = "machine")]
    numa: upcache::shared::SharedNuma,
    /// Frames per set with --index setassoc, 1 to 64 (as UPCACHE_SET_WAYS)
    #[arg(long, value_name = "N", default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=64))]
    set_ways: u32,
    /// The replacement policy: clock (a page read since the hand passed stays a lap), gclock
    /// (SAFS: a lap per read, up to 4), lru or lfu (sampled, LFU-DA), sieve or s3fifo (not
    /// with --index setassoc or NUMA partitions) (as UPCACHE_POLICY)
    #[arg(long, value_name = "clock|gclock|lru|lfu|sieve|s3fifo", default_value = "clock")]
    policy: upcache::PolicyKind,
    /// clean-first: the hand passes dirty pages over for a lap in search of a clean one; plain:
    /// it takes the first it finds, writing it back; gc-aware: it passes them over only while
    /// their device is taken to be collecting garbage, as the latency of its O_DIRECT
    /// write-backs shows (ScalaCache) (as UPCACHE_CLEAN_FIRST)
    #[arg(long, value_name = "clean-first|plain|gc-aware", default_value = "clean-first")]
    clean_first: upcache::CleanFirst,
    /// Stream-aware eviction (StreamCache): a page a sequential stream reads once is no
    /// reference for the clock hand, so a scan's pages go first; off, every hit is one (as
    /// UPCACHE_STREAMS)
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = upcache::parse_on_off, action = clap::ArgAction::Set)]
    streams: bool,
    /// Put the frames' bytes in use on 2 MiB pages once the cache is warm (the service collapses
    /// them with MADV_COLLAPSE, Linux 6.1): random hits then seldom miss the TLB, after a pause
    /// while it collapses them (as UPCACHE_HUGE_PAGES)
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = upcache::parse_on_off, action = clap::ArgAction::Set)]
    huge_pages: bool,
    /// ScalaCache's per-thread hot index: a thread's repeat pin of a page skips the page index
    /// (pins are the Rust API's, SharedFile::pin) (as UPCACHE_HOT_INDEX)
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = upcache::parse_on_off, action = clap::ArgAction::Set)]
    hot_index: bool,
    /// A writer past the foreground ratio: dflush, writes its file back itself (ScaleCache);
    /// background, pauses until the service's write-back brings the cache under it (the
    /// kernel's way) (as UPCACHE_FLUSH)
    #[arg(long, value_name = "dflush|background", default_value = "dflush")]
    flush: upcache::FlushKind,
    /// Bytes a sequential stream's read loads ahead, at most 1 MiB; 0 turns readahead off
    /// (as UPCACHE_READAHEAD)
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = crate::size::parse_size)]
    readahead: u64,
    /// Where a miss finds a free frame: twolayer (StreamCache: per-CPU regions of a pool and a
    /// list per file, refilled in batches; the flusher reclaims clean pages into the pool
    /// while it is short) or global (one stack of emptied frames; misses run the clock hand)
    /// (as UPCACHE_ALLOC)
    #[arg(long, value_name = "KIND", default_value = "global")]
    alloc: upcache::AllocKind,
    /// The size of a page and its frame: a power of two from 4 KiB to 64 KiB. Loads,
    /// write-backs and pins are of whole pages
    #[arg(long, value_name = "SIZE", default_value = "4k", value_parser = crate::size::parse_size)]
    page_size: u64,
    /// Make every frame resident as the cache is made (allocated and mapped): no miss pays
    /// the first touch of its frame, and the memory is taken at once (as UPCACHE_PREFAULT)
    #[arg(long, value_name = "on|off", default_value = "off", value_parser = upcache::parse_on_off, action = clap::ArgAction::Set)]
    prefault: bool,
    /// Seconds with nobody attached before the service exits (as the shim's UPCACHE_IDLE)
    #[arg(long, default_value_t = serve::DEFAULT_IDLE.as_secs())]
    idle: u64,
    /// Print the running service's status (its pid, the cache's size, attached processes,
    /// hit ratio, dirty pages) and exit
    #[arg(long)]
    status: bool,
    /// With --status: one JSON object instead of text
    #[arg(long, requires = "status")]
    json: bool,
    /// Serve the shared cache's counters for Prometheus at http://ADDR/metrics (port 0 picks
    /// one, printed on stderr)
    #[arg(long, value_name = "ADDR", conflicts_with = "status")]
    metrics: Option<String>,
}

impl ServeArgs {
    /// Whether this runs the service (not `--status`, which prints and exits).
    pub fn runs_service(&self) -> bool {
        !self.status
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let socket = args.socket.unwrap_or_else(serve::default_socket);
    if args.status {
        let report = if args.json { serve::status_json(&socket) } else { serve::status(&socket) };
        print!("{}", report.with_context(|| format!("no service at {}", socket.display()))?);
        return Ok(());
    }
    let opts = ServeOptions {
        socket: socket.clone(),
        config: SharedConfig {
            memory: args.memory,
            files: args.files,
            dirty_ratios: args.dirty_ratios,
            dirty_expire: args.dirty_expire,
            flush_interval: args.flush_interval,
            range_lock: args.range_lock,
            run_merging: args.run_merging,
            bundling: args.bundling,
            readahead: args.readahead,
            index: args.index,
            set_ways: args.set_ways,
            numa: args.numa,
            flushers: args.flushers,
            direct_write_back: args.direct_write_back,
            direct_loads: args.direct_loads,
            policy: args.policy,
            clean_first: args.clean_first,
            flush: args.flush,
            streams: args.streams,
            huge_pages: args.huge_pages,
            hot_index: args.hot_index,
            io: args.io,
            page_size: args.page_size.min(usize::MAX as u64) as usize,
            alloc: args.alloc,
            prefault: args.prefault,
            ..SharedConfig::default()
        },
        idle: Duration::from_secs(args.idle),
    };
    let metrics = match &args.metrics {
        Some(addr) => Some(crate::metrics::serve(addr)?),
        None => None,
    };
    // Ctrl-C or SIGTERM: stop as an idle service stops (its cache's file goes if nothing in it
    // is dirty).
    serve::stop_on_signals();
    let served = serve::serve(&opts, |cache| {
        if let Some(bound) = metrics {
            crate::metrics::publish_shared(cache.clone());
            say(&format!("metrics: http://{bound}/metrics"));
        }
        say(&format!("upcache serve: listening on {}", socket.display()));
    })?;
    if !served {
        anyhow::bail!("another service already serves {}", socket.display());
    }
    Ok(())
}

/// A line on stderr that cannot fail: the service outlives the terminal or pipe that started
/// it (`eprintln!` panics once the reader has gone, and the panic would end the service every
/// attached process shares).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}
