//! XDT in the daemon (issue 15): the in-sandbox SDK's requests. Functions
//! invoke other functions of the same owner through the pool (as nested
//! invocations in the caller's chain, bounded by its deadline and the chain
//! limits) and pass objects by reference through the worker's object table
//! (sealed memfds; see `thaw_xdt`). The object-store baseline's PUT / GET
//! go to the home's remote tier (the emulated MinIO of `thaw tier setup
//! --tiers remote`), made by the worker for the function.
use crate::pool::{FnVersion, Mode, Refusal};
use crate::App;
use anyhow::Context as _;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use thaw_tiers::objects::RemoteStore;
use thaw_xdt::sdk::{CallFailure, CallOutcome, Host};
use thaw_xdt::{CallCtx, ChainLimits, ObjectTable, TableLimits};

/// `[xdt]` in the daemon's configuration.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct XdtConfig {
    pub objects: TableLimits,
    pub chains: ChainLimits,
}

pub struct XdtHost {
    app: OnceLock<Weak<App>>,
    table: ObjectTable,
    chains: ChainLimits,
    rt: tokio::runtime::Handle,
    home: PathBuf,
    /// the remote tier's client, opened at the first store request
    store: Mutex<Option<Arc<RemoteStore>>>,
}

/// Where functions' objects live in the remote tier's bucket (snapshots
/// are elsewhere in it).
const STORE_PREFIX: &str = "fn-objects";

impl XdtHost {
    pub fn new(cfg: &XdtConfig, home: &Path, rt: tokio::runtime::Handle) -> XdtHost {
        XdtHost {
            app: OnceLock::new(),
            table: ObjectTable::new(cfg.objects.clone()),
            chains: cfg.chains.clone(),
            rt,
            home: home.to_path_buf(),
            store: Mutex::new(None),
        }
    }

    /// The home's remote tier (the first tier of kind remote).
    fn store(&self) -> Result<Arc<RemoteStore>, CallFailure> {
        let mut s = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(st) = s.as_ref() {
            return Ok(st.clone());
        }
        let open = || -> anyhow::Result<RemoteStore> {
            let tiers = thaw_tiers::TiersConfig::load(&self.home)?;
            let t = tiers
                .tiers
                .iter()
                .find(|t| t.kind == thaw_tiers::Kind::Remote)
                .context("no remote tier is configured")?;
            RemoteStore::open(&self.home, t)
        };
        let st = Arc::new(
            open().map_err(|e| failure("unavailable", format!("the object store: {e:#}")))?,
        );
        *s = Some(st.clone());
        Ok(st)
    }

    /// A store error for the function: the chain of causes, and what to do
    /// when the store is not there at all. The client is dropped: one that
    /// failed (the store was down) was seen to hang its next requests, so
    /// the next request starts with a fresh one.
    fn store_failure(&self, e: anyhow::Error) -> CallFailure {
        *self.store.lock().unwrap_or_else(|p| p.into_inner()) = None;
        failure(
            "store_failed",
            format!("{e:#} (an emulated store is set up with `thaw tier setup --tiers remote`)"),
        )
    }

    /// Connects the host to its daemon (once, right after it is made).
    pub fn attach(&self, app: &Arc<App>) {
        let _ = self.app.set(Arc::downgrade(app));
    }

    fn app(&self) -> Option<Arc<App>> {
        self.app.get().and_then(Weak::upgrade)
    }
}

impl Host for XdtHost {
    fn table(&self) -> &ObjectTable {
        &self.table
    }

    fn chain_limits(&self) -> &ChainLimits {
        &self.chains
    }

    fn owner_of(&self, function: &str) -> Option<String> {
        let app = self.app()?;
        let fns = app.functions.read().unwrap_or_else(|p| p.into_inner());
        fns.get(function).map(|v| v.rec.owner.clone())
    }

    fn start_invoke(&self, ctx: CallCtx, event: Value) -> mpsc::Receiver<CallOutcome> {
        let (tx, rx) = mpsc::channel();
        let app = self.app();
        self.rt.spawn(async move {
            let out = match app {
                Some(app) => nested_invoke(app, ctx, event).await,
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
        r.map_err(|e| self.store_failure(e))
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
        r.map_err(|e| self.store_failure(e))
    }
}

fn failure(kind: &str, message: impl Into<String>) -> CallFailure {
    CallFailure {
        kind: kind.to_string(),
        message: message.into(),
    }
}

/// One invocation made by a function: like `POST .../invoke`, in the
/// caller's chain, and never past the caller's deadline.
async fn nested_invoke(app: Arc<App>, ctx: CallCtx, event: Value) -> CallOutcome {
    let name = ctx.function.clone();
    let event_bytes = serde_json::to_vec(&event).map_or(0, |b| b.len() as u64);
    if event_bytes > app.cfg.limits.event_bytes {
        return Err(failure(
            "payload_too_large",
            format!(
                "an event of {event_bytes} bytes is over the {}-byte limit (pass a reference: thaw.put)",
                app.cfg.limits.event_bytes
            ),
        ));
    }
    let left = || ctx.deadline.saturating_duration_since(Instant::now());
    let lookup = |app: &App| -> Option<Arc<FnVersion>> {
        let fns = app.functions.read().unwrap_or_else(|p| p.into_inner());
        fns.get(&name).cloned()
    };
    let mut tries = 0;
    let (v, lease) = loop {
        let Some(v) = lookup(&app) else {
            return Err(failure("not_found", format!("no function {name:?}")));
        };
        match tokio::time::timeout(left(), app.pool.acquire(&v, Mode::Normal)).await {
            Err(_) => {
                return Err(failure(
                    "timeout",
                    format!("no instance of {name:?} before the caller's deadline"),
                ))
            }
            Ok(Ok(l)) => break (v, l),
            Ok(Err(Refusal::Replaced)) if tries < 3 => tries += 1,
            Ok(Err(r)) => {
                let e = crate::api::refusal(&app, &name, r);
                return Err(from_body(&e.body));
            }
        }
    };
    let timeout = Duration::from_millis(v.rec.timeout_ms).min(left());
    let id = hex::encode(rand::random::<[u8; 12]>());
    let pool = app.pool.clone();
    let (_lease, done) = pool
        .run_in_chain(lease, event, timeout, id, Some(ctx))
        .await;
    match done.reply.map(|i| i.output) {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(e)) => Err(from_body(
            &crate::api::function_failure(&e, v.rec.timeout_ms).1,
        )),
        Err(e) => Err(failure("instance_failed", e)),
    }
}

fn from_body(body: &Value) -> CallFailure {
    let s = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("");
    let message = match s("type") {
        "" => s("message").to_string(),
        ty => format!("{ty}: {}", s("message")),
    };
    failure(s("error"), message)
}
