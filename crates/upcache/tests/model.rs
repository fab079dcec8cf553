//! Model-based tests: random operation sequences against an in-memory oracle.
//!
//! Each case picks a layout (page size, stripe unit, 1 to 8 devices) and a cache of a few dozen
//! frames, far smaller than the data the sequence writes, so eviction, write-back of dirty
//! victims and reloads happen all the time. After every read the bytes must equal the
//! oracle's; after a close and reopen every file must equal it byte for byte.

mod common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use upcache::{
    AllocKind, Cache, CleanFirst, Config, ErrorKind, File, FlushKind, IndexKind, IoKind, LayoutKind,
    PolicyKind, SubmitKind,
};
use upcache::{SimConfig, SimDevice};

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];
const MAX_OFFSET: u64 = 300_000;

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Write {
        f: usize,
        offset: u64,
        len: usize,
        seed: u64,
    },
    Read {
        f: usize,
        offset: u64,
        len: usize,
    },
    /// `count` reads of `chunk` bytes back to back from `offset`: a sequential stream, which
    /// starts readahead.
    Scan {
        f: usize,
        offset: u64,
        chunk: usize,
        count: usize,
    },
    SetLen {
        f: usize,
        len: u64,
    },
    SyncData(usize),
    SyncAll(usize),
    CacheSync,
    Remove(usize),
    Close(usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![28 => op_in_place(), 1 => Just(Op::Reopen)]
}

/// Every operation but `Reopen`.
fn op_in_place() -> impl Strategy<Value = Op> {
    let f = 0..NAMES.len();
    prop_oneof![
        2 => f.clone().prop_map(Op::Create),
        8 => (f.clone(), 0..MAX_OFFSET, 0usize..40_000, any::<u64>())
            .prop_map(|(f, offset, len, seed)| Op::Write { f, offset, len, seed }),
        8 => (f.clone(), 0..MAX_OFFSET + 10_000, 0usize..40_000).prop_map(|(f, offset, len)| Op::Read { f, offset, len }),
        3 => (f.clone(), 0..MAX_OFFSET, 1usize..9000, 2usize..24)
            .prop_map(|(f, offset, chunk, count)| Op::Scan { f, offset, chunk, count }),
        2 => (f.clone(), 0..MAX_OFFSET).prop_map(|(f, len)| Op::SetLen { f, len }),
        1 => f.clone().prop_map(Op::SyncData),
        1 => f.clone().prop_map(Op::SyncAll),
        1 => Just(Op::CacheSync),
        1 => f.clone().prop_map(Op::Remove),
        1 => f.prop_map(Op::Close),
    ]
}

#[derive(Debug, Clone)]
struct Layout {
    page_size: usize,
    stripe_pages: u64,
    devices: usize,
    frames: usize,
    index: IndexKind,
    alloc: AllocKind,
    layout: LayoutKind,
    io: IoKind,
    submit: SubmitKind,
    streams: bool,
    flush: FlushKind,
    policy: PolicyKind,
    clean_first: CleanFirst,
    /// Device 0 is a simulated SSD (a mixed array).
    sim: bool,
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        prop_oneof![Just(4096usize), Just(8192), Just(16384)],
        1u64..=4,
        1usize..=8,
        16usize..48,
        proptest::sample::select(IndexKind::ALL.to_vec()),
        proptest::sample::select(AllocKind::ALL.to_vec()),
        proptest::sample::select(LayoutKind::ALL.to_vec()),
        proptest::sample::select(IoKind::ALL.to_vec()),
        proptest::sample::select(SubmitKind::ALL.to_vec()),
        any::<bool>(),
        (
            proptest::sample::select(FlushKind::ALL.to_vec()),
            proptest::sample::select(PolicyKind::ALL.to_vec()),
            proptest::sample::select(CleanFirst::ALL.to_vec()),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                page_size,
                stripe_pages,
                devices,
                frames,
                index,
                alloc,
                layout,
                io,
                submit,
                streams,
                (flush, policy, clean_first, sim),
            )| {
                Layout {
                    page_size,
                    stripe_pages,
                    devices,
                    frames,
                    index,
                    alloc,
                    layout,
                    io,
                    submit,
                    streams,
                    flush,
                    policy,
                    clean_first,
                    sim,
                }
            },
        )
}

struct Harness {
    root: tempfile::TempDir,
    layout: Layout,
    cache: Option<Cache>,
    handles: BTreeMap<usize, File>,
    oracle: BTreeMap<usize, Vec<u8>>,
    /// Device 0 when `layout.sim`; kept across reopens.
    sim: Option<std::sync::Arc<SimDevice>>,
    /// Backing files without O_DIRECT (the soak's, on tmpfs).
    buffered: bool,
}

impl Harness {
    fn config(&self) -> Config {
        let l = &self.layout;
        let c = Config::new(common::dirs(self.root.path(), l.devices), (l.frames * l.page_size) as u64)
            .with_page_size(l.page_size)
            .with_stripe_unit(l.stripe_pages * l.page_size as u64)
            .with_dirty_background_ratio(0.25)
            .with_dirty_foreground_ratio(0.5)
            .with_index(l.index)
            .with_alloc(l.alloc)
            .with_layout(l.layout)
            .with_io(l.io)
            .with_io_threads(l.submit)
            .with_streams(l.streams)
            .with_flush(l.flush)
            .with_policy(l.policy)
            .with_clean_first(l.clean_first)
            .with_allow_buffered(self.buffered);
        match &self.sim {
            Some(s) => c.with_sim_device(0, s.clone()),
            None => c,
        }
    }

    fn cache(&self) -> &Cache {
        self.cache.as_ref().unwrap()
    }

    fn handle(&mut self, f: usize) -> File {
        if let Some(h) = self.handles.get(&f) {
            return h.clone();
        }
        let h = self.cache().open_file(NAMES[f]).unwrap();
        self.handles.insert(f, h.clone());
        h
    }

    fn check_all(&mut self) {
        let mut names = self.cache().list();
        names.sort();
        let want: Vec<String> = self.oracle.keys().map(|&f| NAMES[f].to_string()).collect();
        assert_eq!(names, want);
        for (f, data) in self.oracle.clone() {
            let h = self.handle(f);
            assert_eq!(h.len(), data.len() as u64, "length of {}", NAMES[f]);
            let mut back = vec![0xAAu8; data.len()];
            h.read_exact_at(&mut back, 0).unwrap();
            assert!(back == data, "contents of {} differ", NAMES[f]);
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Create(f) => {
                let r = self.cache().create_file(NAMES[f]);
                if self.oracle.contains_key(&f) {
                    assert_eq!(r.unwrap_err().kind(), ErrorKind::AlreadyExists);
                } else {
                    self.handles.insert(f, r.unwrap());
                    self.oracle.insert(f, Vec::new());
                }
            }
            Op::Write { f, offset, len, seed } => {
                if !self.oracle.contains_key(&f) {
                    return;
                }
                let data = common::pattern(seed, len);
                self.handle(f).write_all_at(&data, offset).unwrap();
                let o = self.oracle.get_mut(&f).unwrap();
                if len > 0 {
                    let end = offset as usize + len;
                    if o.len() < end {
                        o.resize(end, 0);
                    }
                    o[offset as usize..end].copy_from_slice(&data);
                }
            }
            Op::Scan { f, offset, chunk, count } => {
                for i in 0..count {
                    self.apply(&Op::Read { f, offset: offset + (i * chunk) as u64, len: chunk });
                }
            }
            Op::Read { f, offset, len } => {
                if !self.oracle.contains_key(&f) {
                    return;
                }
                let mut buf = vec![0xAAu8; len];
                let n = self.handle(f).read_at(&mut buf, offset).unwrap();
                let o = &self.oracle[&f];
                let want = if (offset as usize) >= o.len() {
                    &[][..]
                } else {
                    &o[offset as usize..(offset as usize + len).min(o.len())]
                };
                assert_eq!(n, want.len(), "read length at {offset}+{len}");
                assert!(&buf[..n] == want, "read of {}+{} differs", offset, len);
            }
            Op::SetLen { f, len } => {
                if !self.oracle.contains_key(&f) {
                    return;
                }
                self.handle(f).set_len(len).unwrap();
                self.oracle.get_mut(&f).unwrap().resize(len as usize, 0);
            }
            Op::SyncData(f) => {
                if self.oracle.contains_key(&f) {
                    self.handle(f).sync_data().unwrap();
                }
            }
            Op::SyncAll(f) => {
                if self.oracle.contains_key(&f) {
                    self.handle(f).sync_all().unwrap();
                }
            }
            Op::CacheSync => self.cache().sync().unwrap(),
            Op::Remove(f) => {
                let r = self.cache().remove_file(NAMES[f]);
                if self.oracle.remove(&f).is_some() {
                    r.unwrap();
                    if let Some(h) = self.handles.remove(&f) {
                        let mut b = [0u8; 1];
                        assert_eq!(h.read_at(&mut b, 0).unwrap_err().kind(), ErrorKind::NotFound);
                    }
                } else {
                    assert_eq!(r.unwrap_err().kind(), ErrorKind::NotFound);
                }
            }
            Op::Close(f) => {
                self.handles.remove(&f);
            }
            Op::Reopen => {
                self.handles.clear();
                self.cache = None; // drop writes everything back
                self.cache = Some(Cache::open(self.config()).unwrap());
                self.check_all();
            }
        }
    }
}

/// A simulated SSD that takes no time (device 0 when `Layout::sim`).
fn fast_sim() -> std::sync::Arc<SimDevice> {
    SimDevice::new(SimConfig {
        read_latency: std::time::Duration::ZERO,
        write_latency: std::time::Duration::ZERO,
        gc_every: 1 << 20,
        gc_time: std::time::Duration::ZERO,
        ..SimConfig::default()
    })
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_ops_match_the_oracle(layout in layout(), ops in proptest::collection::vec(op(), 1..100)) {
        let root = tempfile::tempdir().unwrap();
        let sim = layout.sim.then(fast_sim);
        let mut h = Harness { root, layout, cache: None, handles: BTreeMap::new(), oracle: BTreeMap::new(), sim, buffered: false };
        h.cache = Some(Cache::create(h.config()).unwrap());
        for op in &ops {
            h.apply(op);
        }
        h.apply(&Op::Reopen);
    }
}

/// The long soak (issue 20): at least `UPCACHE_SOAK_OPS` (default 1,000,000) operations of
/// the same model, in sequences of 2,000-4,000 over layouts drawn as above (every index kind,
/// allocator, policy, layout, engine, streams on and off, simulated devices), with a close and
/// reopen of the array every `SOAK_REOPEN_EVERY` operations (a whole check of every file), from
/// the seed in `UPCACHE_SOAK_SEED` or a new one, printed first and with any failure.
/// `.ci/run` runs it once, in release.
const SOAK_REOPEN_EVERY: usize = 500;

#[test]
#[ignore = "the long soak: .ci/run runs it once, in release (cargo test --release --test model -- --ignored)"]
fn soak_random_ops_match_the_oracle() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
    let total: usize =
        std::env::var("UPCACHE_SOAK_OPS").map_or(1_000_000, |v| v.parse().expect("UPCACHE_SOAK_OPS"));
    let seed: u64 = std::env::var("UPCACHE_SOAK_SEED").map_or_else(
        |_| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
        |v| v.parse().expect("UPCACHE_SOAK_SEED"),
    );
    println!("soak: seed {seed}, {total} operations (UPCACHE_SOAK_SEED={seed} repeats them)");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner =
        TestRunner::new_with_rng(ProptestConfig::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let (mut done, mut case) = (0, 0);
    while done < total {
        let layout = layout().new_tree(&mut runner).unwrap().current();
        let mut ops =
            proptest::collection::vec(op_in_place(), 2000..4000).new_tree(&mut runner).unwrap().current();
        for i in (SOAK_REOPEN_EVERY..ops.len()).step_by(SOAK_REOPEN_EVERY).rev() {
            ops.insert(i, Op::Reopen);
        }
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let sim = layout.sim.then(fast_sim);
            // On tmpfs: its syncs cost nothing, so the soak spends its time in the cache (the
            // O_DIRECT paths and real flushes are the proptest's above).
            let root = tempfile::tempdir_in("/dev/shm").unwrap();
            let mut h = Harness {
                root,
                layout: layout.clone(),
                cache: None,
                handles: BTreeMap::new(),
                oracle: BTreeMap::new(),
                sim,
                buffered: true,
            };
            h.cache = Some(Cache::create(h.config()).unwrap());
            for (i, op) in ops.iter().enumerate() {
                if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.apply(op))) {
                    eprintln!("soak: seed {seed}, sequence {case}, operation {i}: {op:?}\nlayout {layout:?}");
                    std::panic::resume_unwind(p);
                }
            }
            h.apply(&Op::Reopen);
        }));
        if let Err(p) = run {
            eprintln!(
                "soak: FAILED with seed {seed} at sequence {case} (UPCACHE_SOAK_SEED={seed} repeats it)"
            );
            std::panic::resume_unwind(p);
        }
        done += ops.len();
        case += 1;
    }
    println!("soak: {done} operations in {case} sequences, all as the oracle");
}
