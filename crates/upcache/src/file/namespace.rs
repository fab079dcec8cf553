//! The in-memory catalog: names to ids, lengths as last persisted, and the next id.
//!
//! # Locking
//! Held by [`crate::Cache`] as `Mutex<Namespace>`. It may be held while taking a file's range
//! lock (remove waits for in-flight operations), so no thread may take it while holding a
//! range lock.

use std::collections::BTreeMap;

use super::catalog::{ArrayLayout, Catalog, FileEntry};

/// One name's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NameEntry {
    pub(crate) id: u64,
    /// Length as last written to the catalog.
    pub(crate) len: u64,
}

/// The namespace of an array.
#[derive(Debug)]
pub(crate) struct Namespace {
    pub(crate) layout: ArrayLayout,
    pub(crate) next_file_id: u64,
    pub(crate) names: BTreeMap<String, NameEntry>,
}

impl Namespace {
    pub(crate) fn from_catalog(c: Catalog) -> Self {
        let names = c.files.into_iter().map(|f| (f.name, NameEntry { id: f.id, len: f.len })).collect();
        Namespace { layout: c.layout, next_file_id: c.next_file_id, names }
    }

    /// The catalog to store, with each file's length taken from `current_len` where the
    /// file is open (and its entry updated to match).
    pub(crate) fn snapshot_catalog(&mut self, current_len: impl Fn(u64) -> Option<u64>) -> Catalog {
        let mut files = Vec::with_capacity(self.names.len());
        for (name, e) in self.names.iter_mut() {
            if let Some(len) = current_len(e.id) {
                e.len = len;
            }
            files.push(FileEntry { id: e.id, len: e.len, name: name.clone() });
        }
        Catalog { layout: self.layout, next_file_id: self.next_file_id, files }
    }
}
