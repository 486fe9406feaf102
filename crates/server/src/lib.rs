//! thaw-server: the `thaw serve` daemon. An HTTP API (axum, over a Unix
//! socket under the state home and optionally TCP) for deploying user
//! functions and invoking them; an instance pool that keeps instances warm
//! or drops them as `thaw_policy::Engine` decides on the real clock; state
//! under `HOME/serve` that survives restarts. See docs/API.md.

pub mod app;
pub mod archive;
pub mod calibration;
pub mod config;
pub mod deploy;
pub mod http;
pub mod image;
pub mod instances;
pub mod invoke;
pub mod lambda;
pub mod logs;
pub mod metrics;
pub mod nested;
pub mod outcome;
pub mod placement;
pub mod pressure;
pub mod provided;
pub mod registry;
pub mod roots;
pub mod shared;
pub mod stored;
pub mod temp_daemon;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tiering;
pub mod xdt;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use thaw_sandbox::StartStrategy;
use thaw_worker::Worker;

pub use app::App;
pub use config::Config;
pub use temp_daemon::TempDaemon;

use instances::{FnVersion, Instances};
use registry::Registry;
use thaw_error::{fail, Context, ResultExt};

/// Why the daemon did not open, recover, start or serve, or a function
/// was not found.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// settings that do not make a daemon (a token too short, a listener
    /// off loopback without one)
    #[error("{0}")]
    Config(String),
    /// another daemon serves this home
    #[error("{0}")]
    Busy(String),
    /// no function of that name is deployed
    #[error("no function {0:?}")]
    NotFound(String),
    /// a snapshot that cannot be trusted (taken on another runtime root)
    #[error("{0}")]
    Untrusted(String),
    #[error(transparent)]
    Settings(#[from] config::ConfigError),
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    #[error(transparent)]
    Worker(#[from] thaw_worker::WorkerError),
    #[error(transparent)]
    Tiers(#[from] thaw_tiers::TiersError),
    #[error(transparent)]
    Store(#[from] thaw_store::StoreError),
    #[error(transparent)]
    Runtime(#[from] thaw_runtime::RuntimeError),
    #[error(transparent)]
    Path(#[from] thaw_store::PathError),
    #[error(transparent)]
    Tier(#[from] thaw_store::TierError),
    #[error(transparent)]
    Instances(#[from] instances::InstancesError),
    #[error(transparent)]
    Moves(#[from] tiering::Error),
    #[error(transparent)]
    Xdt(#[from] xdt::Error),
    #[error(transparent)]
    Deploy(Box<deploy::Error>),
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = ServeError> = std::result::Result<T, E>;

impl From<deploy::Error> for ServeError {
    fn from(e: deploy::Error) -> Self {
        ServeError::Deploy(Box::new(e))
    }
}

/// This node's tag (random, made once and kept in the state home): its
/// own snapshots' names on a bucket other nodes share.
fn node_tag(state: &std::path::Path) -> Result<String> {
    let p = state.join("node-tag");
    if let Ok(t) = std::fs::read_to_string(&p) {
        let t = t.trim();
        if t.len() == 16 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(t.to_string());
        }
    }
    let t = hex::encode(rand::random::<[u8; 8]>());
    let tmp = p.with_extension("tmp");
    std::fs::write(&tmp, &t).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))?;
    Ok(t)
}

/// Opens the state home, the worker and the pool, and brings back every
/// deployed function (re-snapshotting those whose snapshot cannot be trusted).
pub fn open(cfg: Config) -> Result<Arc<App>> {
    cfg.validate()?;
    let state = cfg.state_dir();
    // a new home is the daemon's alone; an existing one (shared with the
    // runtime root, other commands) keeps its mode: HOME/serve is 0700
    if !cfg.home.exists() {
        registry::mkdir_private(&cfg.home)?;
    }
    registry::mkdir_private(&state)?;
    registry::mkdir_private(&cfg.packages_dir())?;
    let mut worker = Worker::with_runtime_home(&cfg.home, &cfg.runtime_home(), &mut |m| {
        tracing::info!("runtime: {m}")
    })?;
    let log_dir = state.join("run");
    registry::mkdir_private(&log_dir)?;
    worker.cfg.log_dir = log_dir;
    let worker = Arc::new(worker);
    let remote = stored::open_remote(&cfg.home, &cfg.snapshot_tiers)?;
    let node = match cfg.shared_snapshots {
        true => Some(node_tag(&state)?),
        false => None,
    };
    tiering::recover_moves(&cfg.home, &remote)?;
    let metrics = Arc::new(metrics::Metrics::new());
    let (mover_tx, mover_rx) = std::sync::mpsc::channel();
    let instances = Arc::new(Instances::new(
        worker.clone(),
        metrics.clone(),
        cfg.snapshot_tiers.clone(),
        cfg.policy_config()?,
        &cfg.limits,
        cfg.memory_accounting == "measured",
        mover_tx,
    )?);
    let app = Arc::new(App {
        registry: Registry::open(&state)?,
        cfg,
        worker,
        instances,
        metrics,
        functions: RwLock::new(HashMap::new()),
        deploy_locks: Mutex::new(HashMap::new()),
        move_locks: Mutex::new(HashMap::new()),
        rings: Mutex::new(HashMap::new()),
        draining: AtomicBool::new(false),
        mover_busy: Mutex::new(()),
        remote,
        node,
        network: Mutex::new(None),
        root_pins: roots::Pins::default(),
        calibrations: Default::default(),
    });
    let rt = tokio::runtime::Handle::try_current().context(
        "the daemon opens inside a tokio runtime (the SDK's nested invocations run on it)",
    )?;
    let host = Arc::new(xdt::XdtHost::new(
        &app.cfg.xdt,
        &app.cfg.home,
        app.metrics.clone(),
        rt,
    )?);
    let daemon: std::sync::Weak<dyn xdt::Daemon> = Arc::downgrade(&app) as _;
    host.attach(daemon);
    let _ = app.instances.xdt.set(host);
    recover(&app)?;
    drop_unused_packages(&app);
    // roots of functions deleted while the daemon was down, and what root
    // imports a dead daemon left
    roots::gc(&app.cfg, &app.registry.dir, &app.root_pins, true);
    tiering::spawn_mover(Arc::downgrade(&app), mover_rx)?;
    tiering::spawn_warmer(Arc::downgrade(&app))?;
    pressure::spawn_monitor(
        Arc::downgrade(&app),
        app.cfg.memory_pressure_stall_pct,
        &app.cfg.memory_pressure_file,
    )?;
    Ok(app)
}

/// Restart: every published function comes back; leftovers of deploys that
/// never published are removed; a snapshot that is missing, for another
/// runtime root, or fails its checksums is taken again from the code.
fn recover(app: &App) -> Result<()> {
    for registry::Scanned {
        name,
        current,
        stale,
    } in app.registry.scan()?
    {
        for dir in stale {
            let ver = dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix('v'))
                .and_then(|v| v.parse().ok());
            if let Some(v) = ver {
                deploy::remove_version(app, &name, v);
            }
        }
        let Some(version) = current else {
            let _ = std::fs::remove_dir_all(app.registry.function_dir(&name));
            continue;
        };
        let (mut rec, secrets) = match app.registry.load(&name, version) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(function = %name, "cannot load the deployed record, skipping: {e:#}");
                continue;
            }
        };
        let vdir = app.registry.version_dir(&name, version);
        let repacked = match recover_packages(app, &mut rec) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(function = %name, "cannot bring back its packages, skipping: {e:#}");
                continue;
            }
        };
        if repacked {
            app.registry.write_record(&rec, &secrets)?;
        }
        let func = match deploy::user_function(app, &vdir, &rec, &secrets) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(function = %name, "cannot set up its network, skipping: {e}");
                continue;
            }
        };
        // the policy may have moved the snapshot off its deploy tier
        let found = match tiering::locate(app, &name, version) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(function = %name, "looking for the snapshot: {e:#}");
                None
            }
        };
        // a version restored from another node's shared copy that has not
        // kept it here yet restores from that copy still
        let found = found.or_else(|| {
            let info = rec.shared.as_ref()?;
            if info.role != shared::Role::Fetched {
                return None;
            }
            match shared::lookup(app, &info.key, &app.root_hash(&rec)) {
                Ok(shared::Found::Usable { copy, .. }) => Some(instances::Placed {
                    tier: app.cfg.snapshot_tiers.slow.clone(),
                    stored: stored::Stored::Remote(Arc::new(shared::shared_copy(app, &rec, &copy))),
                }),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(function = %name, "looking for the shared snapshot: {e:#}");
                    None
                }
            }
        });
        // a snapshot taken over other packages cannot be trusted
        let found = found.filter(|_| !repacked);
        // a remote copy is opened (authenticated) and checked as it streams
        let root_hash = app.worker.root_of(Some(&func)).1.to_string();
        let trusted = found.and_then(|p| match p.stored.local().map(|s| trust(&root_hash, &s.dir)) {
            None => Some(p),
            Some(Ok(snap)) => Some(instances::Placed {
                tier: p.tier,
                stored: stored::Stored::Local(snap),
            }),
            Some(Err(e)) => {
                tracing::warn!(function = %name, "snapshot not trusted ({e:#}); taking it again");
                None
            }
        });
        let placed = match trusted {
            _ if rec.strategy == StartStrategy::Boot => None,
            Some(p) => Some(p),
            None => {
                // taken again onto the fast tier (the slow one may be
                // remote, or the daemon's tiers may have changed since)
                rec.tier = app.cfg.snapshot_tiers.fast.clone();
                if let Some(info) = rec
                    .shared
                    .as_mut()
                    .filter(|i| i.role == shared::Role::Fetched)
                {
                    info.role = shared::Role::Unshared;
                    info.reason = Some(
                        "the shared copy could not be restored at a restart: taken here".into(),
                    );
                }
                // one copy only: what is left on another tier goes first
                let sname = tiering::snapshot_name(app, &name, version);
                for t in app.cfg.snapshot_tiers.names() {
                    // a store that does not answer keeps its copy: the next
                    // start removes it as a second one
                    if let Err(e) = tiering::remove_copy(app, t, &sname) {
                        tracing::warn!(function = %name, tier = t, "removing the old snapshot: {e:#}");
                    }
                }
                let taken = deploy::snapshot(app, &rec, &func, None)
                    .with_context(|| format!("{name}: re-snapshot failed"))?;
                let placed = match taken {
                    Ok((snap, info)) => {
                        rec.snapshot = Some(info);
                        Some(instances::Placed {
                            tier: rec.tier.clone(),
                            stored: stored::Stored::Local(snap),
                        })
                    }
                    Err(reasons) => {
                        deploy::boot_instead(&mut rec, reasons);
                        None
                    }
                };
                app.registry.write_record(&rec, &secrets)?;
                placed
            }
        };
        tracing::info!(function = %name, version, "recovered");
        deploy::install(
            app,
            Arc::new(FnVersion {
                ring: deploy::ring_for(app, &name),
                sandboxes: deploy::sandboxes_ahead(app, placed.is_some()),
                rec,
                func,
                placed: RwLock::new(placed),
            }),
        );
    }
    Ok(())
}

/// Removes package trees no deployed function uses (a deploy or delete
/// leaves them: another function may share one until the next start).
fn drop_unused_packages(app: &App) {
    let used: std::collections::HashSet<String> = app
        .functions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter_map(|v| v.rec.packages.as_ref().map(|p| p.hash.clone()))
        .collect();
    let Ok(rd) = std::fs::read_dir(app.cfg.packages_dir()) else {
        return;
    };
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        let tree = n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit());
        if tree && !used.contains(&n) {
            tracing::info!("removing unused package tree {}", &n[..16]);
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A function's package tree must be in the cache; if it went, it is built
/// again from the requested names. Returns whether it changed (the resolved
/// versions moved on), which makes the record's snapshot stale.
fn recover_packages(app: &App, rec: &mut registry::Record) -> Result<bool> {
    let Some(p) = &rec.packages else {
        return Ok(false);
    };
    if thaw_runtime::packages::open(&app.cfg.packages_dir(), &p.hash).is_ok() {
        return Ok(false);
    }
    tracing::warn!(function = %rec.name, "package tree {} is gone; building it again", &p.hash[..16]);
    let info = deploy::prepare_packages(app, &rec.name, &p.requested.clone())?;
    let changed = info.hash != p.hash;
    rec.packages = Some(info);
    Ok(changed)
}

/// The live version of a function.
pub fn api_lookup(app: &App, name: &str) -> Result<Arc<FnVersion>> {
    app.function(name)
        .ok_or_else(|| ServeError::NotFound(name.to_string()))
}

/// Opens a snapshot and checks every checksum (state and memory image) and
/// that it was taken over the root the function runs on (`root_hash`).
fn trust(root_hash: &str, dir: &std::path::Path) -> Result<thaw_store::Snapshot> {
    let snap = thaw_store::Snapshot::open(dir)?;
    if snap.manifest.runtime_root != root_hash {
        fail!(ServeError::Untrusted, "taken from another root");
    }
    // a state of another version (one that carried less) is taken again;
    // decoded once here, the restores reuse it
    if let Err(e) = thaw_checkpoint::restore::snapshot_state(&snap) {
        fail!(ServeError::Untrusted, "{e}");
    }
    // verified once and then unchangeable (sealed on DRAM, immutable on disk)
    snap.open_image()?;
    Ok(snap)
}

/// Removes a throw-away state home (a test's or a benchmark's) with every
/// snapshot on its tiers: the DRAM tier's tmpfs is unmounted first, and
/// block-tier snapshot files are immutable until the store's removal clears
/// the flag.
pub fn remove_home(home: &std::path::Path) -> Result<()> {
    thaw_store::Tier::unmount_dram(home)?;
    Ok(thaw_store::secure::remove_tree(home)?)
}

/// Runs `measure` against a daemon serving a throw-away state home (removed
/// afterwards) that reuses the runtime root of `runtime_home`: what the
/// benchmarks (`thaw bench serve`, thaw-bench-serve) and tests run on.
pub fn on_temp_daemon<T, E: From<ServeError>>(
    runtime_home: &std::path::Path,
    tag: &str,
    measure: impl FnOnce(&App, &std::path::Path) -> Result<T, E>,
) -> Result<T, E> {
    on_temp_daemon_with(runtime_home, tag, |_| Ok(()), measure)
}

/// [`on_temp_daemon`] with the daemon's configuration adjusted by
/// `configure` (which may also prepare the new home: the tier
/// configuration, say).
pub fn on_temp_daemon_with<T, E: From<ServeError>>(
    runtime_home: &std::path::Path,
    tag: &str,
    configure: impl FnOnce(&mut Config) -> Result<(), E>,
    measure: impl FnOnce(&App, &std::path::Path) -> Result<T, E>,
) -> Result<T, E> {
    let home = std::env::temp_dir().join(format!("thaw-bench-{tag}-{}", std::process::id()));
    let _ = remove_home(&home);
    let mut cfg = Config {
        home: home.clone(),
        runtime_home: Some(runtime_home.to_path_buf()),
        ..Config::default()
    };
    let res = (|| {
        configure(&mut cfg)?;
        let d = TempDaemon::serve(cfg, None)?;
        let res = measure(d.app(), d.socket());
        let _ = d.close();
        res
    })();
    // also when the daemon did not start (`configure` may have made files)
    let _ = remove_home(&home);
    res
}

/// A running daemon (for tests and `thaw serve`).
pub struct Running {
    pub app: Arc<App>,
    pub socket: PathBuf,
    pub tcp: Option<std::net::SocketAddr>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Drains (bounded by the grace period) and stops.
    pub async fn stop(mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            let _ = d.await;
        }
    }

    /// Waits until the daemon stops by itself (a signal).
    pub async fn wait(mut self) {
        if let Some(d) = self.done.take() {
            let _ = d.await;
        }
    }
}

/// Binds the listeners and serves until `stop` (or SIGTERM/SIGINT when
/// `signals` is set): then stops accepting, lets in-flight requests finish
/// within the grace period, and drops every instance.
pub async fn start(app: Arc<App>, signals: bool) -> Result<Running> {
    let socket = app.cfg.socket_path();
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if socket.exists() {
        // a live daemon still answers on it: do not steal its socket
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            fail!(
                ServeError::Busy,
                "another daemon is serving on {}",
                socket.display()
            );
        }
        std::fs::remove_file(&socket)?;
    }
    let unix = tokio::net::UnixListener::bind(&socket)
        .with_context(|| format!("binding {}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
    let tcp_addr = app.cfg.tcp_listen(std::env::var("PORT").ok().as_deref())?;
    let token = match &app.cfg.token_file {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("reading token file {}", p.display()))?;
            let t = t.trim().to_string();
            if t.len() < 16 {
                fail!(
                    ServeError::Config,
                    "the token in {} is shorter than 16 characters",
                    p.display()
                );
            }
            Some(t)
        }
        None => None,
    };
    if let Some(a) = tcp_addr {
        if !a.ip().is_loopback() && token.is_none() {
            fail!(
                ServeError::Config,
                "listening on {a} (not loopback) needs --token-file"
            );
        }
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (drain_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut servers = vec![tokio::spawn(http::serve(
        unix,
        http::router(app.clone(), None),
        drain_tx.subscribe(),
    ))];
    let mut tcp_bound = None;
    if let Some(a) = tcp_addr {
        let l = tokio::net::TcpListener::bind(a)
            .await
            .with_context(|| format!("binding {a}"))?;
        tcp_bound = Some(l.local_addr()?);
        // Lambda's API beside the native one: signed with SigV4, not the token
        let lambda = lambda::router(app.clone()).with_context(|| {
            format!(
                "reading or making the Lambda key file {}",
                lambda::sigv4::key_file(&app.cfg.state_dir()).display()
            )
        })?;
        servers.push(tokio::spawn(http::serve(
            l,
            http::router(app.clone(), token).merge(lambda),
            drain_tx.subscribe(),
        )));
    }
    // the XDT peer plane: other workers pull this one's objects over h2c
    if let Some(host) = app.instances.xdt.get() {
        if let Some(a) = host.peers().and_then(|p| p.listen) {
            let l = tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("binding the peer listener {a}"))?;
            servers.push(tokio::spawn(xdt::peer::serve(
                host.clone(),
                l,
                drain_tx.subscribe(),
            )));
        }
    }
    let ticker = {
        let instances = app.instances.clone();
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(Duration::from_millis(500));
            loop {
                iv.tick().await;
                instances.tick();
            }
        })
    };
    let app2 = app.clone();
    let sock2 = socket.clone();
    let done = tokio::spawn(async move {
        wait_for_stop(stop_rx, signals).await;
        tracing::info!("stopping: no new requests, draining in-flight ones");
        app2.draining.store(true, Ordering::SeqCst);
        let _ = drain_tx.send(());
        let grace = Duration::from_secs(app2.cfg.drain_grace_s);
        let all = futures_join(servers);
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!("grace period of {grace:?} over; stopping with requests in flight");
        }
        ticker.abort();
        app2.instances.drain();
        // a snapshot move under way finishes; queued ones are dropped
        let app3 = app2.clone();
        let _ = tokio::task::spawn_blocking(move || {
            drop(app3.mover_busy.lock());
        })
        .await;
        // busy instances end when their invocation does (bounded above)
        app2.instances
            .wait_for_instances(Duration::from_secs(10))
            .await;
        let _ = std::fs::remove_file(&sock2);
        tracing::info!("stopped");
    });
    tracing::info!(socket = %socket.display(), tcp = ?tcp_bound, "thaw serve ready");
    Ok(Running {
        app,
        socket,
        tcp: tcp_bound,
        shutdown: Some(stop_tx),
        done: Some(done),
    })
}

async fn futures_join(handles: Vec<tokio::task::JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

async fn wait_for_stop(stop: tokio::sync::oneshot::Receiver<()>, signals: bool) {
    if !signals {
        let _ = stop.await;
        return;
    }
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        let _ = stop.await;
        return;
    };
    tokio::select! {
        _ = stop => {}
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Runs `thaw serve` until a signal: sets up logging, opens, serves.
pub fn serve_forever(cfg: Config) -> Result<()> {
    init_logging(&cfg.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let app = tokio::task::spawn_blocking(move || open(cfg)).await??;
        let running = start(app, true).await?;
        running.wait().await;
        Ok(())
    })
}

pub fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("THAW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        b.json().try_init()
    } else {
        b.try_init()
    };
}
