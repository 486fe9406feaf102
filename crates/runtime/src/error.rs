//! What can go wrong with runtime roots, package trees and their builds,
//! for callers to match.
use thaw_error::Context;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// a name that is not a runtime, an input size or a function
    #[error("{0}")]
    Unknown(String),
    /// the state home is missing or not a directory
    #[error("{0}")]
    Home(String),
    /// a runtime root or package tree that is not built here
    #[error("{0}")]
    NotBuilt(String),
    /// a runtime root or package tree whose files do not match its manifest
    #[error("{0}")]
    Corrupt(String),
    /// a function's output its checker refused
    #[error("{0}")]
    CheckFailed(String),
    /// the host lacks what a build needs, or a host tool failed (apt-get,
    /// dpkg-deb, tar, chroot)
    #[error("{0}")]
    Host(String),
    /// packages the root's recipe asks for that apt refuses
    #[error(transparent)]
    Refused(#[from] crate::packages::Refused),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

impl From<crate::packages::PackagesError> for RuntimeError {
    fn from(e: crate::packages::PackagesError) -> Self {
        match e {
            crate::packages::PackagesError::Refused(r) => r.into(),
            crate::packages::PackagesError::Host(e) => e,
        }
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
