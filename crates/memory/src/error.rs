//! What can go wrong with memory layouts and the files derived from a
//! snapshot (working sets, write sets, tier files), for callers to match.
use thaw_error::Context;

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// a memory layout (from a snapshot's state: the sandbox's word) that
    /// does not hold together: overlaps, runs outside their regions
    #[error("{0}")]
    Layout(String),
    /// a derived file recorded from another snapshot or in another format:
    /// record it again
    #[error("{0}")]
    Stale(String),
    /// a derived file that fails its checks (parse, lengths, checksums,
    /// runs that do not match the snapshot's pages)
    #[error("{0}")]
    Corrupt(String),
    /// a recorded fault or page outside what the layout serves
    #[error("{0}")]
    Outside(String),
    #[error(transparent)]
    Uffd(#[from] crate::uffd::UffdError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

pub type Result<T, E = MemoryError> = std::result::Result<T, E>;
