//! Everything between page frames and the devices: where a page lives ([`layout`]), the
//! backing files on each device ([`device`]) and how bytes move ([`engine`]).

pub mod completion;
pub mod device;
pub(crate) mod durable_len;
pub mod engine;
pub mod flush_group;
pub mod layout;
pub(crate) mod reserve;
pub(crate) mod sys;
pub mod zero_window;
