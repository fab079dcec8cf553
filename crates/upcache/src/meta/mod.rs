//! The array's metadata: the catalog (layout, files, checkpoint generation), the metadata log
//! of namespace and length changes since (F2FS §3.3-3.5), and the namespace they rebuild.

pub mod catalog;
pub mod metalog;
pub mod namespace;
