//! The frames partitioned per NUMA node (SAFS §3.1, seed 002; ScalaCache's per-core
//! partitioning): node `i` of `n` owns frames `[i * frames / n, (i + 1) * frames / n)`, which
//! the service binds to that node's memory where the node exists, and has a clock hand of its
//! own. A miss takes its frame from the node of the CPU it runs on: a frame never used of
//! another node while its own node has used all of its (as the kernel takes a remote node's
//! free pages before it reclaims: filling one node alone would halve the cache of a process
//! whose threads run there), else its own node's hand's, and another node's only when every
//! frame of its own is locked, pinned or dirty past the hand's laps (the kernel's fallback
//! through its zone list). The service's flushers write each node's dirty pages from threads
//! bound to that node's CPUs.
//!
//! The topology is the machine's (`/sys/devices/system/node`) or described
//! ([`SharedNuma::Described`]): a machine with one node has one partition, and tests run a
//! topology of two nodes on it with a CPU each. The segment's header keeps the nodes' CPU
//! sets, so every process maps its CPUs to the same nodes.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, ErrorKind, Result};

/// Nodes a shared cache partitions its frames among at most.
pub const MAX_NODES: usize = 8;
/// CPUs a node's set in the header can name (0 to 255).
pub const MAX_CPUS: usize = 256;

/// How the shared cache's frames are partitioned among NUMA nodes (`SharedConfig::numa`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SharedNuma {
    /// The machine's nodes, as `/sys/devices/system/node` lists them (the default): one
    /// partition on a machine with one node.
    #[default]
    Machine,
    /// One partition over every frame, one clock hand.
    Off,
    /// These CPUs per node, node 0 first (written `0-3,8;4-7`: a node's CPUs as Linux lists
    /// them, nodes apart by `;`): a topology described for a test or a machine whose nodes
    /// the kernel does not show. Nodes that exist on the machine get their frames' memory
    /// bound to them.
    Described(Vec<Vec<u32>>),
}

impl SharedNuma {
    /// The nodes' CPU lists this setting gives on this machine (one node of every CPU if
    /// `Off`, or if the machine shows none).
    pub fn nodes(&self) -> Vec<Vec<u32>> {
        match self {
            SharedNuma::Off => vec![Vec::new()],
            SharedNuma::Machine => machine_nodes().unwrap_or_else(|| vec![Vec::new()]),
            SharedNuma::Described(nodes) => nodes.clone(),
        }
    }

    /// An `InvalidConfig` error if a described topology is empty, has more than
    /// [`MAX_NODES`] nodes, a node without CPUs, a CPU past [`MAX_CPUS`] or one in two nodes.
    pub fn check(&self) -> Result<()> {
        let SharedNuma::Described(nodes) = self else { return Ok(()) };
        let invalid = |m: String| Err(Error::new(ErrorKind::InvalidConfig, m));
        if nodes.is_empty() || nodes.len() > MAX_NODES {
            return invalid(format!(
                "a described NUMA topology has 1 to {MAX_NODES} nodes, not {}",
                nodes.len()
            ));
        }
        let mut seen = [false; MAX_CPUS];
        for (i, cpus) in nodes.iter().enumerate() {
            if cpus.is_empty() {
                return invalid(format!("NUMA node {i} has no CPU"));
            }
            for &c in cpus {
                match seen.get_mut(c as usize) {
                    None => return invalid(format!("CPU {c} of NUMA node {i} is past {}", MAX_CPUS - 1)),
                    Some(true) => return invalid(format!("CPU {c} is in two NUMA nodes")),
                    Some(s) => *s = true,
                }
            }
        }
        Ok(())
    }

    /// The setting's kind as the segment's header keeps it (`Header::numa_mode`).
    pub(crate) fn mode(&self) -> u32 {
        match self {
            SharedNuma::Machine => 0,
            SharedNuma::Off => 1,
            SharedNuma::Described(_) => 2,
        }
    }

    /// The setting a header's `mode` and node table say.
    pub(crate) fn of(mode: u32, table: &NodeTable) -> SharedNuma {
        match mode {
            2 => SharedNuma::Described((0..table.count()).map(|n| table.cpus(n)).collect()),
            1 => SharedNuma::Off,
            _ => SharedNuma::Machine,
        }
    }

    /// The setting's name as `upcache serve --numa` takes it.
    pub fn name(&self) -> String {
        match self {
            SharedNuma::Machine => "machine".into(),
            SharedNuma::Off => "off".into(),
            SharedNuma::Described(nodes) => {
                nodes.iter().map(|cpus| cpu_list(cpus)).collect::<Vec<_>>().join(";")
            }
        }
    }
}

impl std::str::FromStr for SharedNuma {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |m: &str| Error::new(ErrorKind::InvalidConfig, format!("NUMA topology {s:?}: {m}"));
        match s {
            "machine" => return Ok(SharedNuma::Machine),
            "off" => return Ok(SharedNuma::Off),
            _ => {}
        }
        let nodes = s
            .split(';')
            .map(|node| {
                parse_cpu_list(node).ok_or_else(|| bad("machine, off, or CPU lists such as 0-3,8;4-7"))
            })
            .collect::<Result<Vec<_>>>()?;
        let numa = SharedNuma::Described(nodes);
        numa.check()?;
        Ok(numa)
    }
}

/// A CPU list as Linux writes it (`0-3,8`); None if malformed or empty.
fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        if a > b || b as usize >= MAX_CPUS {
            return None;
        }
        cpus.extend(a..=b);
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// `cpus` as a CPU list (`0-3,8`).
fn cpu_list(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    parts.join(",")
}

/// The machine's nodes' CPU lists, by node number from 0; None if the kernel shows no nodes,
/// or their numbers have gaps (then the partitions would not be the nodes).
fn machine_nodes() -> Option<Vec<Vec<u32>>> {
    let mut nodes = Vec::new();
    while nodes.len() < MAX_NODES {
        let path = format!("/sys/devices/system/node/node{}/cpulist", nodes.len());
        let Ok(list) = std::fs::read_to_string(path) else { break };
        // A node with memory and no CPU (a memory expander): no thread runs there.
        nodes.push(parse_cpu_list(&list).unwrap_or_default());
    }
    (!nodes.is_empty()).then_some(nodes)
}

/// Whether node `node` exists on this machine.
fn node_exists(node: usize) -> bool {
    std::path::Path::new(&format!("/sys/devices/system/node/node{node}")).exists()
}

/// The nodes' CPU sets as the segment's header keeps them: a bit per CPU.
#[repr(C)]
pub(crate) struct NodeTable {
    /// Nodes (1 to [`MAX_NODES`]); set before the magic number, then fixed, as the sets.
    pub nodes: AtomicU64,
    cpus: [[AtomicU64; MAX_CPUS / 64]; MAX_NODES],
    /// Each node's clock hand, with more than one node (`Inner::claim`).
    pub hands: [AtomicU64; MAX_NODES],
}

impl NodeTable {
    /// Records `nodes` (checked) in a header nobody else sees yet.
    pub fn set(&self, nodes: &[Vec<u32>]) {
        let n = nodes.len().clamp(1, MAX_NODES);
        // Relaxed (all): published by the magic number's Release store.
        self.nodes.store(n as u64, Ordering::Relaxed);
        for (node, cpus) in nodes.iter().take(n).enumerate() {
            for &c in cpus.iter().filter(|&&c| (c as usize) < MAX_CPUS) {
                self.cpus[node][c as usize / 64].fetch_or(1 << (c % 64), Ordering::Relaxed);
            }
        }
    }

    /// How many nodes.
    pub fn count(&self) -> usize {
        // Relaxed: fixed before the magic number was published.
        (self.nodes.load(Ordering::Relaxed) as usize).clamp(1, MAX_NODES)
    }

    /// Node `node`'s CPUs.
    pub fn cpus(&self, node: usize) -> Vec<u32> {
        (0..MAX_CPUS as u32)
            // Relaxed: as above.
            .filter(|&c| self.cpus[node][c as usize / 64].load(Ordering::Relaxed) & (1 << (c % 64)) != 0)
            .collect()
    }

    /// The node of CPU `cpu`: the one whose set has it, else (a CPU the topology does not
    /// name, or none known) `cpu` modulo the nodes.
    pub fn node_of(&self, cpu: usize) -> usize {
        let n = self.count();
        if n == 1 {
            return 0;
        }
        (0..n)
            // Relaxed: as above.
            .find(|&node| {
                cpu < MAX_CPUS && self.cpus[node][cpu / 64].load(Ordering::Relaxed) & (1 << (cpu % 64)) != 0
            })
            .unwrap_or(cpu % n)
    }

    /// The node of the CPU this thread runs on now.
    pub fn here(&self) -> usize {
        if self.count() == 1 {
            return 0;
        }
        // SAFETY: sched_getcpu has no preconditions; it reads the CPU number (vDSO/rseq).
        let cpu = unsafe { libc::sched_getcpu() };
        self.node_of(cpu.max(0) as usize)
    }
}

/// Node `node`'s frames of `frames` among `nodes`.
pub(crate) fn frames_of(node: usize, nodes: usize, frames: usize) -> std::ops::Range<usize> {
    node * frames / nodes..(node + 1) * frames / nodes
}

/// The node whose frames (of `frames` among `nodes`) frame `f` is in.
pub(crate) fn node_of_frame(f: usize, nodes: usize, frames: usize) -> usize {
    let mut node = (f * nodes / frames.max(1)).min(nodes - 1);
    while node + 1 < nodes && frames_of(node + 1, nodes, frames).start <= f {
        node += 1;
    }
    while node > 0 && frames_of(node, nodes, frames).start > f {
        node -= 1;
    }
    node
}

/// Node `node`'s frames in use while `active` (at most `frames`) of the cache's `frames` are
/// (`SharedCache::resize`): the first of its own, its range's share of `active`. The shares
/// never pass a node's frames and add up to `active`: the ends' shares telescope.
pub(crate) fn active_of(node: usize, nodes: usize, frames: usize, active: usize) -> std::ops::Range<usize> {
    let all = frames_of(node, nodes, frames);
    let (frames, active) = (frames.max(1) as u128, active.min(frames) as u128);
    let share = |at: usize| (at as u128 * active / frames) as usize;
    all.start..all.start + (share(all.end) - share(all.start))
}

/// Binds each node's part of the frames' bytes (`pages`, `frames` pages) to that node's
/// memory, for the nodes this machine has (a described node it lacks keeps the default
/// policy); before any page is touched. A refusal is logged: the frames stay where the
/// kernel puts them.
pub(crate) fn bind_frames(
    table: &NodeTable,
    pages: *mut u8,
    frames: usize,
    page: super::page_size::PageSize,
) {
    let n = table.count();
    if n == 1 {
        return;
    }
    for node in (0..n).filter(|&node| node_exists(node)) {
        let range = frames_of(node, n, frames);
        let mask: libc::c_ulong = 1 << node;
        // SAFETY: the range lies inside the frames' mapping (`frames` pages at `pages`), page
        // aligned; mbind changes only the memory policy of those pages.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                pages.add(range.start * page.bytes()),
                range.len() * page.bytes(),
                libc::MPOL_PREFERRED,
                &mask as *const libc::c_ulong,
                libc::c_ulong::BITS as libc::c_ulong,
                0,
            )
        };
        if r != 0 {
            log::warn!(
                "shared cache: binding NUMA node {node}'s frames to its memory: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Binds this thread to node `node`'s CPUs (those the machine has); false if none of them can
/// run it.
pub(crate) fn run_on(table: &NodeTable, node: usize) -> bool {
    let cpus = table.cpus(node);
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it for CPUs below
    // its size (checked), and sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in cpus.iter().filter(|&&c| (c as usize) < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(*c as usize, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_parse_print_and_check() {
        let two: SharedNuma = "0-3,8;4-7".parse().unwrap();
        assert_eq!(two, SharedNuma::Described(vec![vec![0, 1, 2, 3, 8], vec![4, 5, 6, 7]]));
        assert_eq!(two.name(), "0-3,8;4-7");
        assert_eq!("machine".parse::<SharedNuma>().unwrap(), SharedNuma::Machine);
        assert_eq!("off".parse::<SharedNuma>().unwrap().nodes(), vec![Vec::<u32>::new()]);
        for bad in ["", "0;", "0;0", "3-1", "x", "0;256", "0;1;2;3;4;5;6;7;8"] {
            let e = bad.parse::<SharedNuma>().err().unwrap_or_else(|| panic!("{bad:?} parsed"));
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{bad:?}");
        }
        assert!(!SharedNuma::Machine.nodes().is_empty());
    }

    #[test]
    fn cpus_map_to_their_nodes_and_others_spread() {
        // SAFETY: the table is atomics only; all zeros is an empty one.
        let table: NodeTable = unsafe { std::mem::zeroed() };
        table.set(&[vec![0, 2], vec![1, 65]]);
        assert_eq!(table.count(), 2);
        assert_eq!((table.node_of(0), table.node_of(1), table.node_of(2), table.node_of(65)), (0, 1, 0, 1));
        assert_eq!((table.node_of(7), table.node_of(300)), (1, 0), "unnamed CPUs: modulo");
        assert_eq!(table.cpus(1), vec![1, 65]);
        assert_eq!((frames_of(0, 2, 101), frames_of(1, 2, 101)), (0..50, 50..101));
        for (nodes, frames) in [(1, 7), (2, 101), (3, 10), (3, 7), (5, 64), (5, 18), (7, 17), (8, 21)] {
            for f in 0..frames {
                let node = node_of_frame(f, nodes, frames);
                assert!(frames_of(node, nodes, frames).contains(&f), "{f} of {frames} in {nodes} nodes");
            }
            for active in 1..=frames {
                let used: usize = (0..nodes).map(|n| active_of(n, nodes, frames, active).len()).sum();
                assert_eq!(used, active, "{active} of {frames} in {nodes} nodes");
                for n in 0..nodes {
                    let (of, all) = (active_of(n, nodes, frames, active), frames_of(n, nodes, frames));
                    assert!(of.start == all.start && of.end <= all.end, "node {n}: {of:?} of {all:?}");
                }
            }
        }
    }
}

#[cfg(test)]
mod cache_tests {
    use std::sync::Arc;

    use super::super::tests::small;
    use super::super::writeback::Lent;
    use super::super::{SharedCache, SharedConfig};
    use super::*;

    /// The first two CPUs this process may run on (one if it has one).
    fn two_cpus() -> Vec<u32> {
        // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it.
        let set = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
            set
        };
        // SAFETY: CPU_ISSET reads inside the set for CPUs below its size.
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .map(|c| c as u32)
            .take(2)
            .collect()
    }

    /// Runs `f` on a thread bound to CPU `cpu`.
    fn on_cpu<T: Send>(cpu: u32, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: as in `run_on`.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu as usize, &mut set);
                    assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0);
                }
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// On a described topology of two nodes of a CPU each: a thread's misses take frames of
    /// its CPU's node; once its node has used each of its frames, the other's unused ones;
    /// once every frame of its node is pinned, the other's; the flushers of each node write
    /// its dirty pages back, and the file reads back whole.
    #[test]
    fn misses_take_frames_of_their_cpus_node_and_the_others_only_when_theirs_are_pinned() {
        let cpus = two_cpus();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..256 * 4096u32).map(|i| (i >> 12) as u8 ^ i as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let nodes: Vec<Vec<u32>> = cpus.iter().map(|&c| vec![c]).collect();
        let config = SharedConfig {
            memory: 128 * 4096,
            readahead: 0,
            numa: SharedNuma::Described(nodes.clone()),
            ..small()
        };
        let cache = SharedCache::create(&config).unwrap();
        assert_eq!(cache.config().numa, SharedNuma::Described(nodes));
        let f = cache.open_path(&p, true).unwrap();
        let inner = &cache.inner;
        let frame_of = |page: u64| inner.index().hint(inner.key(f.slot(), page)).unwrap() as usize;
        let n = cpus.len();
        let read = |pages: std::ops::Range<u64>| {
            let mut buf = [0u8; 4096];
            for page in pages {
                f.read_at(&mut buf, page * 4096).unwrap();
                assert_eq!(buf[..], data[page as usize * 4096..][..4096]);
            }
        };
        let home = frames_of(0, n, 128);
        on_cpu(cpus[0], || read(0..home.len() as u64));
        for page in 0..home.len() as u64 {
            assert!(home.contains(&frame_of(page)), "page {page} read on node 0");
        }
        if n == 2 {
            // Node 0 has used every frame: its next miss takes node 1's unused one.
            on_cpu(cpus[0], || read(64..65));
            assert!(!home.contains(&frame_of(64)), "node 1 had frames never used");
            on_cpu(cpus[1], || read(65..128));
            for page in 64..128 {
                assert!(!home.contains(&frame_of(page)), "page {page} read on node 1");
            }
        }
        // Both nodes used all round: node 0's misses evict there, until each of its frames is
        // pinned; then a miss there takes the other node's frame.
        // (Only with two CPUs: one node's 128 frames are more than a process may pin.)
        if n == 2 {
            on_cpu(cpus[0], || {
                let pins: Vec<_> =
                    (128..128 + home.len() as u64).map(|page| f.pin(page * 4096).unwrap()).collect();
                for page in 128..128 + home.len() as u64 {
                    assert!(home.contains(&frame_of(page)), "pinned page {page} on node 0");
                }
                read(200..201);
                drop(pins);
            });
            assert!(!home.contains(&frame_of(200)), "with node 0 all pinned, a miss there");
        }
        // Dirty pages on both nodes; each node's flusher writes its own.
        let mut want = data.clone();
        for (node, &cpu) in cpus.iter().enumerate() {
            let at = node * 16 * 4096;
            want[at..at + 8 * 4096].fill(node as u8 + 1);
            on_cpu(cpu, || f.write_at(&want[at..at + 8 * 4096], at as u64).unwrap());
        }
        let lent = [(
            f.slot(),
            Arc::new(Lent::new(std::fs::OpenOptions::new().write(true).open(&p).unwrap(), true)),
        )];
        assert_eq!(cache.write_back_due(&lent, &[f.slot()]), 8 * n as u64);
        assert_eq!(cache.status().flusher_files.iter().sum::<u64>(), n as u64, "a flusher per node");
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }
}
