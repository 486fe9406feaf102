//! What a restore is asked for: the snapshot, the strategy, whose instance
//! and where its sandbox comes from.
use crate::{StrategyKind, UserFunction};
use thaw_sandbox::SandboxPool;
use thaw_store::Snapshot;

/// One restore, as [`Worker::restore`](crate::Worker::restore) takes it: by default a suite
/// function's instance (the worker's sandbox configuration) into a sandbox
/// from the worker's pool if it has one waiting, from the snapshot's own
/// image.
pub struct RestoreRequest<'a> {
    pub snapshot: &'a Snapshot,
    pub strategy: StrategyKind,
    /// a user function's instance: same code mount and limits as its fresh
    /// start
    pub function: Option<&'a UserFunction>,
    pub sandbox: SandboxFrom<'a>,
    /// the image is still arriving (the remote tier's streamed restore):
    /// see [`thaw_checkpoint::RestoreArgs::streamed`]
    pub streamed: Option<thaw_restore::Streamed>,
}

/// Where a restore's sandbox comes from. A sandbox built ahead is taken
/// only if it was built for the restore's configuration.
#[derive(Clone, Copy)]
pub enum SandboxFrom<'a> {
    /// the worker's pool ([`Worker::set_pool`](crate::Worker::set_pool)) if it has one waiting, else
    /// built now
    WorkerPool,
    /// this pool (e.g. [`Worker::user_pool`](crate::Worker::user_pool)'s) if it has one waiting, else
    /// built now
    Pool(&'a SandboxPool),
    /// built now, on the restore's critical path
    BuiltNow,
}

impl<'a> RestoreRequest<'a> {
    pub fn new(snapshot: &'a Snapshot, strategy: StrategyKind) -> RestoreRequest<'a> {
        RestoreRequest {
            snapshot,
            strategy,
            function: None,
            sandbox: SandboxFrom::WorkerPool,
            streamed: None,
        }
    }

    /// An instance of the user function `f`.
    pub fn function(self, f: &'a UserFunction) -> RestoreRequest<'a> {
        RestoreRequest {
            function: Some(f),
            ..self
        }
    }

    /// Into a sandbox from `pool` when it has one, else one built now.
    pub fn pool(self, pool: Option<&'a SandboxPool>) -> RestoreRequest<'a> {
        RestoreRequest {
            sandbox: pool.map_or(SandboxFrom::BuiltNow, SandboxFrom::Pool),
            ..self
        }
    }

    /// From an image that is still arriving.
    pub fn streamed(self, streamed: thaw_restore::Streamed) -> RestoreRequest<'a> {
        RestoreRequest {
            streamed: Some(streamed),
            ..self
        }
    }
}
