//! The public surface: [`Cache`], [`File`], pin guards and [`IoQueue`]. Each call here takes
//! the file's range lock and calls into the cache core (`cache/`); nothing below imports this.

mod aio;
mod cache;
mod file;
mod pin;
mod queue;
mod std_io;

pub use aio::{AioEngine, AsyncIo, InProcess, IoFuture, OnShared, SyncFuture};
pub use cache::{Cache, StatsReader};
pub use file::File;
pub use pin::{PageMut, PageRef};
pub use queue::{Completion, IoQueue};
pub use std_io::{FileCursor, Positioned};
