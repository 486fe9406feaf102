//! XDT in the daemon: the in-sandbox SDK's requests. Functions
//! invoke other functions of the same owner through the pool (as nested
//! invocations in the caller's chain, bounded by its deadline and the chain
//! limits) and pass objects by reference through the worker's object table
//! (sealed memfds; see `thaw_xdt`). The object-store baseline's PUT / GET
//! go to the home's remote tier (the emulated MinIO of `thaw tier setup
//! --tiers remote`), made by the worker for the function.
use crate::metrics::Metrics;
use futures::future::BoxFuture;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;
use thaw_tiers::objects::GetError;
use thaw_tiers::objects::RemoteStore;
use thaw_xdt::sdk::{CallFailure, CallOutcome, Host};
use thaw_xdt::{CallCtx, ChainLimits, ObjectTable};

pub mod config;
pub mod peer;

pub use config::{PeerConfig, XdtConfig};

/// What the host asks of the daemon it serves (implemented where the
/// daemon's functions and pool are known: `crate::nested`).
pub trait Daemon: Send + Sync {
    /// The owner of a deployed function, if there is one of that name.
    fn owner_of(&self, function: &str) -> Option<String>;
    /// One invocation a function made, in its caller's chain.
    fn invoke(self: Arc<Self>, ctx: CallCtx, event: Value) -> BoxFuture<'static, CallOutcome>;
}

/// Why the host could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("XDT peering: {}", thaw_error::chain(.0))]
    Peers(peer::PeerError),
}

pub struct XdtHost {
    daemon: OnceLock<Weak<dyn Daemon>>,
    metrics: Arc<Metrics>,
    table: ObjectTable,
    chains: ChainLimits,
    rt: tokio::runtime::Handle,
    home: PathBuf,
    /// the remote tier's client, opened at the first store request
    store: Mutex<Option<Arc<RemoteStore>>>,
    peers: Option<Arc<peer::Peers>>,
}

/// Pulls started for one invocation, by reference.
pub type Prefetched = HashMap<String, thaw_xdt::sdk::Pulling>;

/// Most references in one event whose pulls start before the instance is
/// ready (the rest are pulled when the function asks).
const MAX_PREFETCH: usize = 16;

/// Where functions' objects live in the remote tier's bucket (snapshots
/// are elsewhere in it).
const STORE_PREFIX: &str = "fn-objects";

impl XdtHost {
    pub fn new(
        cfg: &XdtConfig,
        home: &Path,
        metrics: Arc<Metrics>,
        rt: tokio::runtime::Handle,
    ) -> Result<XdtHost, Error> {
        Ok(XdtHost {
            daemon: OnceLock::new(),
            metrics,
            table: ObjectTable::new(cfg.objects.clone()),
            chains: cfg.chains.clone(),
            rt,
            home: home.to_path_buf(),
            store: Mutex::new(None),
            peers: peer::Peers::from_config(&cfg.peering)
                .map_err(Error::Peers)?
                .map(Arc::new),
        })
    }

    pub fn peers(&self) -> Option<&Arc<peer::Peers>> {
        self.peers.as_ref()
    }

    /// Starts pulling every other worker's reference in `event` (up to
    /// [`MAX_PREFETCH`]) for a consumer of `owner` that may take
    /// `max_bytes`: called when the invocation arrives, so the pulls run
    /// while the consumer's instance is found or restored (the queue-proxy overlap of
    /// "Data-centric Serverless Cloud Architecture"). Each pull is one retrieval, whether or not the
    /// function then asks for the object; one it does not ask for is
    /// dropped with the invocation.
    pub fn prefetch(
        &self,
        owner: &str,
        event: &Value,
        max_bytes: u64,
        deadline: Instant,
    ) -> Prefetched {
        let mut out = HashMap::new();
        if !self.peers.as_ref().is_some_and(|p| p.prefetch) {
            return out;
        }
        let mut refs = Vec::new();
        foreign_refs(event, self.table.worker(), 0, &mut refs);
        for r in refs {
            if out.len() >= MAX_PREFETCH {
                break;
            }
            if !out.contains_key(r) {
                out.insert(r.to_string(), self.pull(owner, r, max_bytes, deadline));
            }
        }
        out
    }

    /// The home's remote tier (the first tier of kind remote).
    fn store(&self) -> Result<Arc<RemoteStore>, CallFailure> {
        let mut s = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(st) = s.as_ref() {
            return Ok(st.clone());
        }
        let open = || -> Result<RemoteStore, thaw_error::BoxError> {
            let tiers = thaw_tiers::TiersConfig::load(&self.home)?;
            let t = tiers
                .tiers
                .iter()
                .find(|t| t.kind == thaw_tiers::Kind::Remote)
                .ok_or("no remote tier is configured")?;
            Ok(RemoteStore::open(&self.home, t)?)
        };
        let st = Arc::new(open().map_err(|e| {
            failure(
                "unavailable",
                format!("the object store: {}", thaw_error::chain(&*e)),
            )
        })?);
        *s = Some(st.clone());
        Ok(st)
    }

    /// A store error for the function: the chain of causes, and what to do
    /// when the store is not there at all. The client is dropped: one that
    /// failed (the store was down) was seen to hang its next requests, so
    /// the next request starts with a fresh one.
    fn store_failure(&self, e: thaw_error::BoxError) -> CallFailure {
        *self.store.lock().unwrap_or_else(|p| p.into_inner()) = None;
        failure(
            "store_failed",
            format!(
                "{} (an emulated store is set up with `thaw tier setup --tiers remote`)",
                thaw_error::chain(&*e)
            ),
        )
    }

    /// Connects the host to its daemon (once, right after it is made).
    pub fn attach(&self, daemon: Weak<dyn Daemon>) {
        let _ = self.daemon.set(daemon);
    }

    fn daemon(&self) -> Option<Arc<dyn Daemon>> {
        self.daemon.get().and_then(Weak::upgrade)
    }
}

impl Host for XdtHost {
    fn pull(
        &self,
        owner: &str,
        token: &str,
        max_bytes: u64,
        deadline: Instant,
    ) -> thaw_xdt::sdk::Pulling {
        let Some(peers) = self.peers.clone() else {
            return thaw_xdt::sdk::no_peers(token);
        };
        let (tx, rx) = mpsc::channel();
        let (owner, token) = (owner.to_string(), token.to_string());
        let m = self.metrics.clone();
        self.rt.spawn(async move {
            let t0 = Instant::now();
            let r = peer::pull_until(&peers, &owner, &token, max_bytes, deadline).await;
            {
                let outcome = match &r {
                    Ok(got) => {
                        m.pulled_bytes.inc_by(got.size);
                        m.pull_duration.observe(t0.elapsed().as_secs_f64());
                        "ok"
                    }
                    Err(e) => e.kind(),
                };
                m.pulls
                    .get_or_create(&crate::metrics::OutcomeLabel {
                        outcome: outcome.into(),
                    })
                    .inc();
            }
            // a consumer that stopped waiting drops the object here
            let _ = tx.send(r);
        });
        rx
    }

    fn table(&self) -> &ObjectTable {
        &self.table
    }

    fn chain_limits(&self) -> &ChainLimits {
        &self.chains
    }

    fn owner_of(&self, function: &str) -> Option<String> {
        self.daemon()?.owner_of(function)
    }

    fn start_invoke(&self, ctx: CallCtx, event: Value) -> mpsc::Receiver<CallOutcome> {
        let (tx, rx) = mpsc::channel();
        let daemon = self.daemon();
        self.rt.spawn(async move {
            let out = match daemon {
                Some(d) => d.invoke(ctx, event).await,
                None => Err(failure("shutting_down", "the daemon is stopping")),
            };
            let _ = tx.send(out);
        });
        rx
    }

    fn store_put(&self, key: &str, data: Vec<u8>) -> Result<(), CallFailure> {
        let r = self
            .store()?
            .put_plain(&format!("{STORE_PREFIX}/{key}"), data);
        r.map_err(|e| self.store_failure(e.into()))
    }

    fn store_get(
        &self,
        key: &str,
        max_bytes: u64,
        sink: &mut std::fs::File,
    ) -> Result<Option<u64>, CallFailure> {
        let r = self
            .store()?
            .get_plain(&format!("{STORE_PREFIX}/{key}"), max_bytes, sink);
        r.map_err(|e| match e {
            // the store is fine: this function cannot take the object
            GetError::TooLarge { size, max, .. } => failure(
                "too_large",
                format!("the object has {size} bytes; this function may take at most {max}"),
            ),
            GetError::Failed(e) => self.store_failure(e.into()),
        })
    }
}

/// Strings in `v` that are references of workers other than `own`
/// (bounded in depth: an event is at most a few MiB of JSON).
fn foreign_refs<'v>(v: &'v Value, own: thaw_xdt::WorkerId, depth: u32, out: &mut Vec<&'v str>) {
    if depth > 32 || out.len() > MAX_PREFETCH {
        return;
    }
    match v {
        Value::String(s) if thaw_xdt::reference::worker_of(s).is_ok_and(|w| w != own) => {
            out.push(s)
        }
        Value::Array(a) => a.iter().for_each(|x| foreign_refs(x, own, depth + 1, out)),
        Value::Object(m) => m
            .values()
            .for_each(|x| foreign_refs(x, own, depth + 1, out)),
        _ => {}
    }
}

pub(crate) fn failure(kind: &str, message: impl Into<String>) -> CallFailure {
    CallFailure {
        kind: kind.to_string(),
        message: message.into(),
    }
}
