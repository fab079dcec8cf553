//! The cache's threads: flushers (write-back, checkpoints, reclaim) and the readahead loader.
//! Each is given what it works on when started; the core never calls up into them.

pub(crate) mod flusher;
pub(crate) mod loader;
