//! The in-memory catalog: names to ids, each file's length as last logged, and the next id.
//!
//! Every change goes through `Namespace::apply` with a metadata-log record
//! (`meta/metalog.rs`), the same function that replays the log at open, so the namespace and
//! the log cannot disagree about what a record means.
//!
//! # Locking
//! Held by [`crate::Cache`] as `Mutex<Namespace>`. It may be held while taking a file's range
//! lock (remove waits for in-flight operations), so no thread may take it while holding a
//! range lock. Records are appended to the log under it, so the log's order is its order.

use std::collections::{BTreeMap, HashMap};

use super::catalog::{ArrayLayout, Catalog, FileEntry};
use super::metalog::Record;
use crate::error::{Error, ErrorKind, Result};

/// One name's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NameEntry {
    pub(crate) id: u64,
    /// Length as last logged.
    pub(crate) len: u64,
    /// The sequence number of the record of `len` in this process's log
    /// (`metalog::Ticket::seq`), or 0 if `len` came from the catalog or a replay (durable).
    pub(crate) record: u64,
}

/// The namespace of an array.
#[derive(Debug)]
pub(crate) struct Namespace {
    pub(crate) layout: ArrayLayout,
    /// Where the metadata log lives, if not in the first device directory.
    pub(crate) meta_dir: Option<String>,
    pub(crate) next_file_id: u64,
    pub(crate) names: BTreeMap<String, NameEntry>,
    /// Name of each id, for records that name a file by id.
    ids: HashMap<u64, String>,
}

impl Namespace {
    pub(crate) fn from_catalog(c: Catalog) -> Self {
        let ids = c.files.iter().map(|f| (f.id, f.name.clone())).collect();
        let names =
            c.files.into_iter().map(|f| (f.name, NameEntry { id: f.id, len: f.len, record: 0 })).collect();
        Namespace { layout: c.layout, meta_dir: c.meta_dir, next_file_id: c.next_file_id, names, ids }
    }

    /// Applies one change (at run time, before logging it; at open, replaying it). A record
    /// that the namespace already reflects changes nothing.
    pub(crate) fn apply(&mut self, r: &Record) {
        match r {
            Record::Create { id, name } => {
                if let Some(old) = self.names.insert(name.clone(), NameEntry { id: *id, len: 0, record: 0 }) {
                    self.ids.remove(&old.id);
                }
                self.ids.insert(*id, name.clone());
                self.next_file_id = self.next_file_id.max(id + 1);
            }
            Record::Remove { id, name } => {
                if self.names.get(name).is_some_and(|e| e.id == *id) {
                    self.names.remove(name);
                    self.ids.remove(id);
                }
            }
            Record::SetLen { id, len } => {
                if let Some(e) = self.ids.get(id).and_then(|n| self.names.get_mut(n)) {
                    e.len = *len;
                }
            }
        }
    }

    /// File `id`'s length as last logged, and the sequence number of its record (0: durable
    /// from the start); None if no file has the id.
    pub(crate) fn latest_len(&self, id: u64) -> Option<(u64, u64)> {
        let e = self.names.get(self.ids.get(&id)?)?;
        Some((e.len, e.record))
    }

    /// Record `seq` of this process's log set file `id`'s length (applied before).
    pub(crate) fn set_record(&mut self, id: u64, seq: u64) {
        if let Some(e) = self.ids.get(&id).and_then(|n| self.names.get_mut(n)) {
            e.record = seq;
        }
    }

    /// The entry of `name`; `NotFound` if there is none.
    pub(crate) fn entry(&self, name: &str) -> Result<NameEntry> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no file named {name:?}")))
    }

    /// Puts back an entry that a failed remove took out.
    pub(crate) fn restore(&mut self, name: &str, e: NameEntry) {
        self.names.insert(name.to_owned(), e);
        self.ids.insert(e.id, name.to_owned());
    }

    /// The namespace as a catalog of checkpoint generation `generation`.
    pub(crate) fn catalog(&self, generation: u64) -> Catalog {
        let files = self
            .names
            .iter()
            .map(|(name, e)| FileEntry { id: e.id, len: e.len, name: name.clone() })
            .collect();
        Catalog {
            layout: self.layout,
            generation,
            meta_dir: self.meta_dir.clone(),
            next_file_id: self.next_file_id,
            files,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::io::layout::LayoutKind;

    fn empty() -> Namespace {
        let layout = ArrayLayout {
            array_id: 1,
            devices: 1,
            page_size: 4096,
            stripe_unit: 8192,
            kind: LayoutKind::Stripe,
        };
        Namespace::from_catalog(Catalog {
            layout,
            generation: 0,
            meta_dir: None,
            next_file_id: 1,
            files: Vec::new(),
        })
    }

    #[test]
    fn replaying_a_suffix_again_changes_nothing() {
        let history = [
            Record::Create { id: 1, name: "a".into() },
            Record::SetLen { id: 1, len: 10 },
            Record::Create { id: 2, name: "b".into() },
            Record::Remove { id: 1, name: "a".into() },
            Record::Create { id: 3, name: "a".into() },
            Record::SetLen { id: 3, len: 7 },
            Record::SetLen { id: 2, len: 5 },
        ];
        let mut ns = empty();
        history.iter().for_each(|r| ns.apply(r));
        let want = ns.catalog(0);
        assert_eq!(want.next_file_id, 4);
        for from in 0..history.len() {
            let mut again = Namespace::from_catalog(want.clone());
            history[from..].iter().for_each(|r| again.apply(r));
            assert_eq!(again.catalog(0), want, "replaying from record {from}");
        }
    }
}
