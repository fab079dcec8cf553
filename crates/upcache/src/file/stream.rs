//! StreamCache's stream tracking tree (seed 003 §4.1): a file's cached pages as streams, runs of
//! consecutive pages, each with one dirty range, so that write-back finds a file's dirty pages
//! by walking its few streams instead of its index.
//!
//! Streams are keyed by their first page and never intersect. Tracking an I/O merges its pages
//! with the streams it intersects or touches: the address ranges are united, and so are the
//! dirty ranges that meet; dirty ranges that do not meet cut the merged range into one stream
//! per dirty range (the paper's split), so every dirty range is exact: a page is in one if and
//! only if it was tracked dirty and not cleaned since. The stream pointer remembers the stream
//! the last I/O touched and the first page of the stream after it (`upper_limit`): an I/O that
//! starts inside the cached stream and ends before `upper_limit` extends it without a search,
//! which is the common case of a sequential scan.
//!
//! The tree is a plain structure: its file serializes access to it (the paper's per-file
//! spinlock); I/O on the pages themselves is ordered by the file's range lock.

use std::collections::BTreeMap;
use std::ops::Range;

/// One stream: pages `start..end` are cached; `dirty` (inside them, not empty) are dirty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stream {
    /// First page.
    pub start: u64,
    /// One past the last page.
    pub end: u64,
    /// The dirty pages, if any.
    pub dirty: Option<Range<u64>>,
}

/// The stream pointer: the stream the last I/O touched, and where the next stream starts.
#[derive(Debug, Clone, Copy)]
struct Pointer {
    start: u64,
    upper_limit: u64,
}

/// A file's streams. See the module docs.
#[derive(Debug, Default)]
pub struct StreamTree {
    /// By first page: `start → (end, dirty)`.
    streams: BTreeMap<u64, (u64, Option<Range<u64>>)>,
    pointer: Option<Pointer>,
    /// Tracked I/Os that took the stream pointer's fast path (for tests and statistics).
    pointer_hits: u64,
}

/// The union of two ranges that overlap or touch.
fn join(a: &Range<u64>, b: &Range<u64>) -> Range<u64> {
    a.start.min(b.start)..a.end.max(b.end)
}

/// `r` without the pages of `cut`: what lies before it and what lies after (either may be
/// empty).
fn minus(r: &Range<u64>, cut: &Range<u64>) -> [Range<u64>; 2] {
    [r.start..r.end.min(cut.start), r.start.max(cut.end)..r.end]
}

/// Whether two ranges overlap or touch (so their union is one range).
fn meet(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start <= b.end && b.start <= a.end
}

impl StreamTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that pages `pages` are cached and, if `dirty`, dirty.
    pub fn track(&mut self, pages: Range<u64>, dirty: bool) {
        if pages.is_empty() {
            return;
        }
        if self.try_pointer(&pages, dirty) {
            self.pointer_hits += 1;
            return;
        }
        // Meeting nothing (a random write): one search, one insert, no merging.
        let before = self.streams.range(..=pages.end).next_back().map(|(&s, &(e, _))| (s, e));
        if !matches!(before, Some((_, e)) if e >= pages.start) {
            let upper_limit = self.streams.range(pages.end..).next().map_or(u64::MAX, |(&s, _)| s);
            self.streams.insert(pages.start, (pages.end, dirty.then(|| pages.clone())));
            self.pointer = Some(Pointer { start: pages.start, upper_limit });
            return;
        }
        let keys = self.meeting(&pages, true);
        let mut address = pages.clone();
        let mut dirt: Vec<Range<u64>> = Vec::new();
        if dirty {
            dirt.push(pages.clone());
        }
        for s in keys {
            let (e, d) = self.streams.remove(&s).expect("listed above");
            address = join(&address, &(s..e));
            dirt.extend(d);
        }
        self.insert_split(address, dirt);
        self.point_at(pages.start);
    }

    /// The fast path: `pages` starts inside (or at the end of) the cached stream and ends
    /// before the next stream, and its dirt meets the stream's (or one of them has none).
    fn try_pointer(&mut self, pages: &Range<u64>, dirty: bool) -> bool {
        let Some(p) = self.pointer else { return false };
        let Some((end, d)) = self.streams.get_mut(&p.start) else { return false };
        // Reaching the next stream would make two touching streams the slow path would join.
        if pages.start < p.start || pages.start > *end || pages.end >= p.upper_limit {
            return false;
        }
        let new_dirty = match (dirty, d.as_ref()) {
            (false, _) => d.clone(),
            (true, None) => Some(pages.clone()),
            (true, Some(old)) if meet(old, pages) => Some(join(old, pages)),
            (true, Some(_)) => return false, // a second dirty range: split on the slow path
        };
        *end = (*end).max(pages.end);
        *d = new_dirty;
        true
    }

    /// Inserts the stream `address` with dirty ranges `dirt` (inside it, in any order):
    /// the ranges that meet are joined, and if more than one remains the address range is
    /// cut into one stream per dirty range, each cut at the start of a dirty range.
    fn insert_split(&mut self, address: Range<u64>, mut dirt: Vec<Range<u64>>) {
        dirt.sort_by_key(|r| r.start);
        let mut joined: Vec<Range<u64>> = Vec::new();
        for r in dirt {
            match joined.last_mut() {
                Some(last) if meet(last, &r) => *last = join(last, &r),
                _ => joined.push(r),
            }
        }
        if joined.len() <= 1 {
            self.streams.insert(address.start, (address.end, joined.pop()));
            return;
        }
        let mut start = address.start;
        for (i, d) in joined.iter().enumerate() {
            let end = joined.get(i + 1).map_or(address.end, |next| next.start);
            self.streams.insert(start, (end, Some(d.clone())));
            start = end;
        }
    }

    /// Makes the stream holding `page` the cached one.
    fn point_at(&mut self, page: u64) {
        self.pointer =
            self.streams.range(..=page).next_back().filter(|(_, &(e, _))| page <= e).map(|(&s, &(e, _))| {
                Pointer {
                    start: s,
                    upper_limit: self.streams.range(e..).next().map_or(u64::MAX, |(&next, _)| next),
                }
            });
    }

    /// Marks pages `pages` clean (written back): they leave the dirty ranges, and a stream
    /// whose dirty range loses its middle is cut in two.
    pub fn clean(&mut self, pages: Range<u64>) {
        if pages.is_empty() {
            return;
        }
        for s in self.meeting(&pages, false) {
            let (e, d) = self.streams.remove(&s).expect("listed above");
            let dirt =
                d.map_or(Vec::new(), |d| minus(&d, &pages).into_iter().filter(|r| !r.is_empty()).collect());
            self.insert_split(s..e, dirt);
        }
        self.pointer = None;
    }

    /// Cleans and forgets pages `pages` (written back and no longer tracked): as
    /// [`Self::clean`] then [`Self::forget`], with a fast path for pages inside one stream
    /// whose dirty range is all of it (the shape of a tree that tracks dirty pages only).
    pub fn clean_and_forget(&mut self, pages: Range<u64>) {
        if pages.is_empty() {
            return;
        }
        let within = self.streams.range(..=pages.start).next_back().map(|(&s, (e, d))| (s, *e, d.clone()));
        match within {
            Some((s, e, Some(d))) if d == (s..e) && pages.end <= e => {
                self.streams.remove(&s);
                for part in minus(&(s..e), &pages) {
                    if !part.is_empty() {
                        self.streams.insert(part.start, (part.end, Some(part.clone())));
                    }
                }
                self.pointer = None;
            }
            _ => {
                self.clean(pages.clone());
                self.forget(pages);
            }
        }
    }

    /// Forgets pages `pages` (evicted): they leave the address ranges, which may cut a stream
    /// in two. Dirty pages must be cleaned first; forgetting one is a bug (debug builds panic,
    /// others drop it from the dirty range too).
    pub fn forget(&mut self, pages: Range<u64>) {
        if pages.is_empty() {
            return;
        }
        for s in self.meeting(&pages, false) {
            let (e, d) = self.streams.remove(&s).expect("listed above");
            if let Some(d) = &d {
                debug_assert!(d.end <= pages.start || pages.end <= d.start, "forgetting dirty pages {d:?}");
            }
            for part in minus(&(s..e), &pages) {
                if part.is_empty() {
                    continue;
                }
                // Clipped to the part: a (wrongly) forgotten dirty page leaves the range too.
                let dirt = d
                    .clone()
                    .map(|d| d.start.max(part.start)..d.end.min(part.end))
                    .filter(|d| !d.is_empty())
                    .into_iter()
                    .collect();
                self.insert_split(part, dirt);
            }
        }
        self.pointer = None;
    }

    /// First pages of the streams that share a page with `pages` (not empty), or also, if
    /// `touching`, that start right at its end or end right at its start.
    fn meeting(&self, pages: &Range<u64>, touching: bool) -> Vec<u64> {
        let mut keys: Vec<u64> = Vec::new();
        if let Some((&s, &(e, _))) = self.streams.range(..pages.start).next_back() {
            if e > pages.start || (touching && e == pages.start) {
                keys.push(s);
            }
        }
        let last = if touching { pages.end } else { pages.end - 1 };
        keys.extend(self.streams.range(pages.start..=last).map(|(&s, _)| s));
        keys
    }

    /// The streams, by first page.
    pub fn streams(&self) -> impl Iterator<Item = Stream> + '_ {
        self.streams.iter().map(|(&start, (end, dirty))| Stream { start, end: *end, dirty: dirty.clone() })
    }

    /// The dirty ranges, ascending.
    pub fn dirty_ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.streams.values().filter_map(|(_, d)| d.clone())
    }

    /// The dirty pages from `page` on, as ranges, ascending: O(log n) to find the first.
    pub fn dirty_from(&self, page: u64) -> impl Iterator<Item = Range<u64>> + '_ {
        // The stream that starts before `page` may hold dirty pages past it.
        let before = self.streams.range(..page).next_back().filter(|(_, (end, _))| *end > page);
        before.into_iter().chain(self.streams.range(page..)).filter_map(move |(_, (_, d))| {
            let d = d.as_ref()?;
            let start = d.start.max(page);
            (start < d.end).then_some(start..d.end)
        })
    }

    /// How many tracked I/Os took the stream pointer's fast path.
    pub fn pointer_hits(&self) -> u64 {
        self.pointer_hits
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// The tree's invariants, and its pages against the oracle's.
    fn check(t: &StreamTree, cached: &BTreeSet<u64>, dirty: &BTreeSet<u64>) -> Result<(), TestCaseError> {
        let streams: Vec<Stream> = t.streams().collect();
        let mut prev_end = 0;
        let (mut have, mut have_dirty) = (BTreeSet::new(), BTreeSet::new());
        for (i, s) in streams.iter().enumerate() {
            prop_assert!(s.start < s.end, "empty stream {s:?}");
            prop_assert!(i == 0 || s.start >= prev_end, "streams intersect at {s:?}");
            prev_end = s.end;
            if let Some(d) = &s.dirty {
                prop_assert!(
                    !d.is_empty() && s.start <= d.start && d.end <= s.end,
                    "dirty range outside {s:?}"
                );
                have_dirty.extend(d.clone());
            }
            have.extend(s.start..s.end);
        }
        for w in streams.windows(2) {
            if let (Some(a), Some(b)) = (&w[0].dirty, &w[1].dirty) {
                prop_assert!(!meet(a, b), "dirty ranges {a:?} and {b:?} meet in two streams");
            }
        }
        prop_assert_eq!(&have, cached, "cached pages");
        prop_assert_eq!(&have_dirty, dirty, "dirty pages");
        for from in [0, 1, 7, 50, 99, 150, 223, 300] {
            let got: BTreeSet<u64> = t.dirty_from(from).flatten().collect();
            let want: BTreeSet<u64> = dirty.range(from..).copied().collect();
            prop_assert_eq!(got, want, "dirty pages from {}", from);
            let starts: Vec<u64> = t.dirty_from(from).map(|r| r.start).collect();
            prop_assert!(starts.windows(2).all(|w| w[0] < w[1]), "dirty_from not ascending");
        }
        Ok(())
    }

    #[derive(Debug, Clone)]
    enum Op {
        Track(Range<u64>, bool),
        Clean(Range<u64>),
        Forget(Range<u64>),
        CleanAndForget(Range<u64>),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Empty ranges too (every call must take them as a no-op).
        let range = (0..200u64, 0..24u64).prop_map(|(s, n)| s..s + n);
        prop_oneof![
            4 => (range.clone(), any::<bool>()).prop_map(|(r, d)| Op::Track(r, d)),
            1 => range.clone().prop_map(Op::Clean),
            1 => range.clone().prop_map(Op::Forget),
            1 => range.prop_map(Op::CleanAndForget),
        ]
    }

    proptest! {
        /// Any sequence of tracked I/Os, write-backs and evictions: the streams never intersect,
        /// cover exactly the cached pages, and their dirty ranges cover exactly the dirty ones.
        #[test]
        fn streams_match_a_page_set_model(ops in proptest::collection::vec(op(), 1..120)) {
            let mut t = StreamTree::new();
            let (mut cached, mut dirty) = (BTreeSet::new(), BTreeSet::new());
            for op in ops {
                match op {
                    Op::Track(r, d) => {
                        t.track(r.clone(), d);
                        cached.extend(r.clone());
                        if d {
                            dirty.extend(r);
                        }
                    }
                    Op::Clean(r) => {
                        t.clean(r.clone());
                        r.for_each(|p| { dirty.remove(&p); });
                    }
                    // Evicting dirty pages is a caller's bug; the model evicts clean ones only.
                    Op::Forget(r) if r.clone().any(|p| dirty.contains(&p)) => {}
                    Op::Forget(r) => {
                        t.forget(r.clone());
                        r.for_each(|p| { cached.remove(&p); });
                    }
                    Op::CleanAndForget(r) => {
                        t.clean_and_forget(r.clone());
                        r.for_each(|p| { dirty.remove(&p); cached.remove(&p); });
                    }
                }
                check(&t, &cached, &dirty)?;
            }
        }
    }

    #[test]
    fn a_sequential_scan_takes_the_pointer_and_stays_one_stream() {
        // A write scan, then a read scan past it.
        let mut t = StreamTree::new();
        for i in 0..1000u64 {
            t.track(i * 4..(i + 1) * 4, true);
        }
        for i in 1000..2000u64 {
            t.track(i * 4..(i + 1) * 4, false);
        }
        let s: Vec<Stream> = t.streams().collect();
        assert_eq!(s, vec![Stream { start: 0, end: 8000, dirty: Some(0..4000) }]);
        assert_eq!(t.pointer_hits(), 1999, "every I/O after the first extends the cached stream");
    }

    #[test]
    fn dirty_ranges_that_do_not_meet_split_the_stream() {
        let mut t = StreamTree::new();
        t.track(0..10, true);
        t.track(10..20, false);
        t.track(20..30, true);
        let s: Vec<Stream> = t.streams().collect();
        assert_eq!(
            s,
            vec![
                Stream { start: 0, end: 20, dirty: Some(0..10) },
                Stream { start: 20, end: 30, dirty: Some(20..30) },
            ]
        );
        // Cleaning the middle of a dirty range cuts its stream.
        t.clean(3..6);
        assert_eq!(t.dirty_ranges().collect::<Vec<_>>(), vec![0..3, 6..10, 20..30]);
        // A write that bridges two dirty ranges joins them again.
        t.track(2..8, true);
        assert_eq!(t.dirty_ranges().collect::<Vec<_>>(), vec![0..10, 20..30]);
    }

    #[test]
    fn the_pointer_never_extends_into_the_next_stream() {
        let mut t = StreamTree::new();
        t.track(100..110, false);
        t.track(0..10, false);
        // Extending 0..10 up to 105 would intersect 100..110: a search merges them instead.
        t.track(10..105, false);
        let s: Vec<Stream> = t.streams().collect();
        assert_eq!(s, vec![Stream { start: 0, end: 110, dirty: None }]);
    }
}
