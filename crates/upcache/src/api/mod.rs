//! The public surface: [`Cache`], [`File`], pin guards and [`IoQueue`], a thin facade over the
//! engine (`shared/`): the per-page loops, locks and I/O are the engine's; nothing below
//! imports this.

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
