//! A byte range of a file split at page boundaries: what every read and write loop walks.

/// The part of a byte range that falls in one page.
pub(crate) struct Chunk {
    pub page: u64,
    /// Offset of the chunk in the page.
    pub in_page: usize,
    pub len: usize,
    /// Offset of the chunk in the caller's buffer (the range starts at 0).
    pub at: usize,
}

/// Splits `offset..end` at page boundaries (pages of `ps` bytes).
pub(crate) fn chunks(offset: u64, end: u64, ps: u64) -> impl Iterator<Item = Chunk> {
    let mut pos = offset;
    std::iter::from_fn(move || {
        (pos < end).then(|| {
            let len = (ps - pos % ps).min(end - pos);
            let c = Chunk {
                page: pos / ps,
                in_page: (pos % ps) as usize,
                len: len as usize,
                at: (pos - offset) as usize,
            };
            pos += len;
            c
        })
    })
}
