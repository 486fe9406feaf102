//! Memory images and the strategies that bring them back.
//!
//! This crate sees regions of memory and where their contents live in an
//! image file; it knows nothing of processes or tiers. A sandbox (or, later, a
//! microVM backend) turns a strategy's per-region [`Fill`] decisions into
//! mappings, and hands lazily served regions' userfaultfd to a [`PageServer`].

mod layout;
mod page_server;
mod strategy;
pub mod tiering;
pub mod uffd;
pub mod working_set;

pub use layout::{MemoryLayout, Region, Run, PAGE_SIZE};
pub use page_server::{FaultStats, ImageSource, OverlaySource, PageServer, PageSource};
pub use strategy::{strategy_by_name, Fill, RestoreStrategy, STRATEGY_NAMES};
