//! Deploy, redeploy and delete: the pipeline (unpack, start, init,
//! snapshot, place, publish) of a request `request` has checked.
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use thaw_error::Context;
use thaw_runtime::Runtime;
use thaw_sandbox::StartStrategy;
use thaw_store::Snapshot;
use thaw_worker::{RestoreRequest, UserFunction};
use tokio::sync::OwnedMutexGuard;

use crate::app::App;
use crate::archive::{self, Format};
use crate::instances::{FnVersion, Placed, SandboxesAhead};
use crate::logs::Ring;
use crate::placement::{self, PlacementInfo};
pub use crate::registry::NetworkRequest;
use crate::registry::{mkdir_private, PackagesInfo, Record, SnapshotInfo};
use crate::stored::Stored;
use crate::tiering::{self, snapshot_name};

mod error;
pub(crate) mod request;

pub use error::Error;
use error::{bad, internal};
use request::Checked;
pub use request::{
    daemon_strategies, is_entry_point, is_java_handler, Code, DeployRequest, MAX_CPU_MILLIS,
    MIN_CPU_MILLIS,
};
/// A function's CPU weight range (cgroup v2 `cpu.weight` units).
pub use thaw_pack::cpu::{CPU_WEIGHT_MAX, CPU_WEIGHT_MIN};

/// Validates, unpacks, starts, initialises and snapshots a function, then
/// publishes it. Returns the record and whether it replaced a version.
pub async fn run(app: &Arc<App>, req: DeployRequest) -> Result<(Record, bool), Error> {
    let checked = request::check(&app.cfg, &req)?;
    let runtime = checked.runtime;
    // the root stays until the record naming it is written (or the deploy
    // fails)
    let root_pin = req.root.as_ref().map(|k| app.root_pins.deploy(k));
    let root = match &req.root {
        Some(key) => {
            let info = crate::roots::open(&app.cfg, key).map_err(|e| bad(format!("root: {e}")))?;
            crate::roots::check_runtime(&info, runtime).map_err(|e| bad(e.to_string()))?;
            Some(crate::roots::RootRef {
                key: info.key,
                tree: info.tree,
            })
        }
        None => None,
    };
    let (format, data, filename) = request::code(app, &req, runtime)?;

    // one deploy per function at a time; invocations keep running meanwhile
    let _guard = lock_function(app, &req.name, false).await?;
    let app2 = app.clone();
    let replaced = app
        .functions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(&req.name);
    if replaced && req.only_if_absent {
        return Err(Error::Exists(req.name));
    }
    let v = tokio::task::spawn_blocking(move || {
        build(&app2, &req, format, &data, &filename, &checked, root)
    })
    .await
    .map_err(internal)??;
    let rec = v.rec.clone();
    install(app, Arc::new(v));
    tracing::info!(function = %rec.name, version = rec.version, "deployed");
    drop(root_pin);
    // the versions this deploy removed may have been the last on a root
    if replaced {
        let app2 = app.clone();
        let _ = tokio::task::spawn_blocking(move || app2.drop_unused_roots()).await;
    }
    Ok((rec, replaced))
}

/// Publishes a built version: the registry's `current`, then the pool and
/// the in-memory map.
pub fn install(app: &App, v: Arc<FnVersion>) {
    let name = v.rec.name.clone();
    app.instances.set_version(&v);
    app.functions
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name, v);
}

fn build(
    app: &App,
    req: &DeployRequest,
    format: Format,
    data: &[u8],
    filename: &str,
    c: &Checked,
    root: Option<crate::roots::RootRef>,
) -> Result<FnVersion, Error> {
    let version = app.registry.next_version(&req.name).map_err(internal)?;
    let vdir = app.registry.version_dir(&req.name, version);
    mkdir_private(&vdir).map_err(internal)?;
    let result = (|| {
        let code_dir = vdir.join("code");
        std::fs::create_dir(&code_dir).map_err(internal)?;
        let stats = archive::unpack(format, data, filename, &code_dir, &app.cfg.limits)
            .map_err(|e| bad(format!("{e:#}")))?;
        if c.runtime == Runtime::Provided {
            crate::provided::check_bootstrap(&code_dir).map_err(bad)?;
        }
        let packages = match req.packages.is_empty() {
            true => None,
            false => Some(prepare_packages(app, &req.name, &req.packages)?),
        };
        let mut rec = Record {
            name: req.name.clone(),
            version,
            runtime: c.runtime,
            owner: req
                .owner
                .clone()
                .unwrap_or_else(crate::registry::default_owner),
            handler: req.handler.clone(),
            init: req.init.clone(),
            before_snapshot: req.before_snapshot.clone(),
            after_restore: req.after_restore.clone(),
            snapshot_refused: None,
            env: req.env.clone(),
            secret_env: req.secret_env.keys().cloned().collect(),
            memory_mb: c.memory_mb,
            cpu_millis: req.cpu_millis,
            cpu_weight: req.cpu_weight,
            timeout_ms: c.timeout_ms,
            max_instances: c.max_instances,
            strategy: c.strategy,
            // a snapshot is taken onto a local tier (`place` moves it on)
            tier: match tiering::is_remote(app, &c.tier) {
                true => app.cfg.snapshot_tiers.fast.clone(),
                false => c.tier.clone(),
            },
            snapshot: None,
            placement: None,
            packages,
            network: req.network.clone(),
            shared: None,
            root,
            code_bytes: stats.bytes,
            code_files: stats.files,
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        let func = user_function(app, &vdir, &rec, &req.secret_env)?;
        let share = match app.cfg.shared_snapshots {
            true => share(app, &mut rec, &code_dir, req),
            false => Share::None,
        };
        let placed = match share {
            Share::Fetched(stored) => Some(Placed {
                tier: rec.tier.clone(),
                stored,
            }),
            Share::Publish(key) => take(app, &mut rec, &func, req, &c.tier, c.required, Some(key))?,
            Share::None => take(app, &mut rec, &func, req, &c.tier, c.required, None)?,
        };
        if let Some(s) = &rec.shared {
            app.metrics
                .shared
                .get_or_create(&crate::metrics::OutcomeLabel {
                    outcome: s.role.name().into(),
                })
                .inc();
        }
        app.registry
            .write_record(&rec, &req.secret_env)
            .map_err(internal)?;
        app.registry.publish(&rec.name, version).map_err(internal)?;
        // the previous version may still be serving in-flight invocations;
        // anything older goes
        for old in 1..version.saturating_sub(1) {
            remove_version(app, &rec.name, old);
        }
        Ok(FnVersion {
            ring: ring_for(app, &rec.name),
            sandboxes: sandboxes_ahead(app, placed.is_some()),
            rec,
            func,
            placed: RwLock::new(placed),
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&vdir);
    }
    result
}

/// What a deploy does about the snapshot shared across nodes (one per
/// deploy: its size does not matter).
#[allow(clippy::large_enum_variant)]
enum Share {
    /// nothing (not shared, or a copy this node cannot restore)
    None,
    /// nothing is published yet: take the snapshot, then publish it as KEY
    Publish(String),
    /// another node's copy, which this node restores
    Fetched(Stored),
}

/// Looks for the function's shared snapshot (`crate::shared`) and records
/// what was found in `rec.shared`.
fn share(app: &App, rec: &mut Record, code_dir: &Path, req: &DeployRequest) -> Share {
    use crate::shared::{self, Found, Role, SharedInfo};
    let info = |key: &str, role, reason| SharedInfo {
        key: key.to_string(),
        role,
        reason,
    };
    let key = match shared::key(
        app,
        rec,
        code_dir,
        req.strategy.map(|s| s.name()),
        req.sample_event.as_ref(),
        !req.secret_env.is_empty(),
    ) {
        Ok(k) => k,
        Err(why) => {
            rec.shared = Some(info("", Role::Unshared, Some(why)));
            return Share::None;
        }
    };
    match shared::lookup(app, &key, &app.root_hash(rec)) {
        Ok(Found::Absent) => Share::Publish(key),
        Ok(Found::Usable { copy, manifest }) => {
            let stored = shared::fetched(app, rec, &copy, &manifest);
            let mut pl = PlacementInfo::requested(rec.strategy, &rec.tier);
            pl.chosen_by = "shared".into();
            pl.reason = vec![format!(
                "restored from the snapshot another node published as {copy} (streamed from tier {}, then kept on {})",
                rec.tier,
                app.cfg.snapshot_tiers.fast
            )];
            rec.placement = Some(pl);
            tracing::info!(function = %rec.name, key = %key, "restoring the snapshot another node published");
            rec.shared = Some(info(&key, Role::Fetched, None));
            Share::Fetched(stored)
        }
        Ok(Found::Refused(why)) => {
            let why = format!(
                "the published snapshot {} cannot resume here ({why}); this node takes its own and keeps it to itself",
                shared::object_name(&key)
            );
            tracing::warn!(function = %rec.name, "{why}");
            rec.shared = Some(info(&key, Role::Refused, Some(why)));
            Share::None
        }
        Err(e) => {
            let why = format!("the shared tier could not be read: {e:#}");
            tracing::warn!(function = %rec.name, "{why}; taking the snapshot here");
            rec.shared = Some(info(&key, Role::Unshared, Some(why)));
            Share::None
        }
    }
}

/// Takes the version's snapshot (none for `boot`, or an instance that
/// cannot be snapshotted), publishes it as `publish` (a share key) if
/// given, and places it.
#[allow(clippy::too_many_arguments)]
fn take(
    app: &App,
    rec: &mut Record,
    func: &UserFunction,
    req: &DeployRequest,
    tier: &str,
    snapshot_required: bool,
    publish: Option<String>,
) -> Result<Option<Placed>, Error> {
    use crate::shared::{Role, SharedInfo};
    let taken = match rec.strategy {
        StartStrategy::Boot => {
            check_boots(app, rec, func, req.sample_event.as_ref())?;
            None
        }
        StartStrategy::Restore(_) => match snapshot(app, rec, func, req.sample_event.as_ref())? {
            Ok(taken) => Some(taken),
            Err(reasons) if snapshot_required => return Err(Error::NotCheckpointable(reasons)),
            Err(reasons) => {
                tracing::info!(function = %rec.name, "no snapshot, fresh starts: {}", thaw_checkpoint::NotCheckpointable { reasons: reasons.clone() });
                boot_instead(rec, reasons);
                None
            }
        },
    };
    let Some((snap, info)) = taken else {
        rec.placement = Some(PlacementInfo::requested(rec.strategy, tier));
        if let Some(key) = publish {
            rec.shared = Some(SharedInfo {
                key,
                role: Role::Unshared,
                reason: Some("the function has no snapshot".into()),
            });
        }
        return Ok(None);
    };
    rec.snapshot = Some(info);
    if let Some(key) = publish {
        let t = std::time::Instant::now();
        let (role, reason) = match crate::shared::publish(app, &key, &snap) {
            Ok(true) => {
                tracing::info!(function = %rec.name, key = %key, ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX), "published the snapshot for other nodes");
                (Role::Published, None)
            }
            Ok(false) => (
                Role::Unshared,
                Some("another node published it first; this node keeps its own".to_string()),
            ),
            Err(e) => {
                tracing::warn!(function = %rec.name, "publishing the snapshot for other nodes: {e:#}");
                (Role::Unshared, Some(format!("publishing failed: {e:#}")))
            }
        };
        rec.shared = Some(SharedInfo { key, role, reason });
    }
    let stored = place(app, rec, snap, func, req)?;
    Ok(Some(Placed {
        tier: rec.tier.clone(),
        stored,
    }))
}

/// A function whose instance cannot be snapshotted starts fresh every
/// time; `reasons` say what stopped the snapshot.
pub fn boot_instead(rec: &mut Record, reasons: Vec<thaw_checkpoint::Refusal>) {
    rec.strategy = StartStrategy::Boot;
    rec.snapshot = None;
    rec.snapshot_refused = Some(reasons);
}

/// Records how strategy and tier were chosen: the request's, or the
/// placement model's on the measured profile (the snapshot moves to the
/// chosen tier before the version is published).
fn place(
    app: &App,
    rec: &mut Record,
    snap: Snapshot,
    func: &UserFunction,
    req: &DeployRequest,
) -> Result<Stored, Error> {
    let (strategy, tier) = (req.strategy, req.tier.as_deref());
    let pl = match (strategy, tier) {
        (Some(s), Some(t)) => PlacementInfo::requested(s, t),
        _ => {
            let pl = tier_options(app)
                .and_then(|tiers| {
                    placement::decide(
                        &app.worker,
                        &tiers,
                        rec,
                        &snap,
                        func,
                        req.sample_event.as_ref(),
                        strategy,
                        tier,
                    )
                })
                .map_err(|e| bad(thaw_error::chain(&e)))?;
            tracing::info!(function = %rec.name, strategy = %pl.strategy, tier = %pl.tier, "placed: {}", pl.reason.join("; "));
            pl
        }
    };
    let mut stored = Stored::Local(snap);
    if pl.tier != rec.tier {
        let sname = snapshot_name(app, &rec.name, rec.version);
        stored = tiering::copy_to(app, &sname, &rec.tier, &pl.tier)?;
        tiering::remove_copy(app, &rec.tier, &sname)?;
        if let (Some(info), Some(snap)) = (rec.snapshot.as_mut(), stored.local()) {
            info.dir = snap.dir.clone();
        }
    }
    rec.strategy = pl.strategy;
    rec.tier = pl.tier.clone();
    rec.placement = Some(pl);
    Ok(stored)
}

/// What `GET /v1/functions/NAME` shows as `calibration` for `v`
/// ([`crate::calibration::report`] against the daemon's tiers now).
pub fn calibration(app: &App, v: &FnVersion) -> Option<Value> {
    crate::calibration::report(&app.calibrations, v, || tier_options(app).ok())
}

/// The daemon's tiers for the model, with the room its budgets leave.
pub(crate) fn tier_options(
    app: &App,
) -> Result<Vec<thaw_policy::placement::TierOption>, placement::PlacementError> {
    let cfg = thaw_tiers::TiersConfig::load(&app.cfg.home)?;
    let probes = thaw_tiers::probe::load(&app.cfg.home);
    let mut used: BTreeMap<String, u64> = BTreeMap::new();
    for v in app
        .functions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
    {
        if let (Some(p), Some(s)) = (v.placed(), &v.rec.snapshot) {
            *used.entry(p.tier).or_default() += s.size_bytes;
        }
    }
    let tiers = &app.cfg.snapshot_tiers;
    tiers
        .names()
        .iter()
        .map(|name| {
            let t = cfg.tiers.iter().find(|t| t.name == *name).ok_or_else(|| {
                thaw_tiers::TiersError::Config(format!(
                    "tier {name} is not in the tier configuration"
                ))
            })?;
            let budget_mb = match *name == tiers.fast {
                true => app.cfg.dram_snapshot_mb,
                false => app.cfg.disk_budget_mb,
            };
            let used_mib = *used.get(*name).unwrap_or(&0) >> 20;
            Ok(placement::tier_option(
                t,
                &probes,
                budget_mb.saturating_sub(used_mib) as f64,
            ))
        })
        .collect()
}

pub fn ring_for(app: &App, name: &str) -> Arc<Ring> {
    let mut rings = app.rings.lock().unwrap_or_else(|p| p.into_inner());
    rings
        .entry(name.to_string())
        .or_insert_with(|| {
            Arc::new(Ring::open(
                app.registry.function_dir(name).join("logs"),
                app.cfg.limits.log_bytes,
            ))
        })
        .clone()
}

/// Resolves, fetches and unpacks a function's own Debian packages (or finds
/// them in the cache), logging progress.
pub fn prepare_packages(
    app: &App,
    function: &str,
    names: &[String],
) -> Result<PackagesInfo, Error> {
    use thaw_runtime::packages::PackagesError;
    let t = std::time::Instant::now();
    let mut progress = |m: &str| tracing::info!(function, "packages: {m}");
    let tree = thaw_runtime::packages::ensure(
        &app.cfg.runtime_home(),
        &app.cfg.packages_dir(),
        &app.worker.root,
        names,
        app.cfg.limits.packages_bytes,
        &mut progress,
    )
    .map_err(|e| match e {
        PackagesError::Host(e) => internal(Context::new("preparing the function's packages", e)),
        PackagesError::Refused(r) => Error::Packages(r),
    })?;
    let info = PackagesInfo::new(&tree, t.elapsed().as_secs_f64() * 1e3);
    tracing::info!(
        function,
        packages = %info.resolved.join(" "),
        reused = info.reused,
        "packages: tree {}",
        &info.hash[..16]
    );
    Ok(info)
}

/// Where a function's package tree is (what its sandboxes mount).
pub fn packages_tree(app: &App, p: &PackagesInfo) -> std::path::PathBuf {
    app.cfg.packages_dir().join(&p.hash).join("tree")
}

/// A version's function as the worker runs it; a function given egress gets
/// its rules (and the daemon its network, at the first such function): the
/// host's error when they cannot be set up.
pub fn user_function(
    app: &App,
    vdir: &Path,
    rec: &Record,
    secrets: &BTreeMap<String, String>,
) -> Result<UserFunction, Error> {
    let egress = match &rec.network {
        Some(n) => Some(
            attach_network(app, vdir, n)
                .map_err(|e| internal(Context::new("setting up the function's network", e)))?,
        ),
        None => None,
    };
    Ok(UserFunction {
        name: rec.name.clone(),
        runtime: rec.runtime,
        packages_dir: rec.packages.as_ref().map(|p| packages_tree(app, p)),
        code_dir: vdir.join("code"),
        handler: rec.handler.clone(),
        init: rec.init.clone(),
        before_snapshot: rec.before_snapshot.clone(),
        after_restore: rec.after_restore.clone(),
        env: identity_env(rec)
            .into_iter()
            .chain(
                rec.env
                    .iter()
                    .chain(secrets.iter())
                    .map(|(k, v)| (k.clone(), v.clone())),
            )
            .collect(),
        memory_bytes: rec.memory_mb << 20,
        cpu_millis: rec.cpu_millis,
        cpu_weight: rec.cpu_weight,
        egress,
        root: rec.root.as_ref().map(|r| thaw_worker::FunctionRoot {
            path: crate::roots::root_path(&app.cfg, &r.key),
            hash: crate::roots::function_root_hash(&r.tree, &app.worker.root.hash),
            agent_dir: app
                .worker
                .root
                .path
                .join(thaw_sandbox::AGENT_DIR.trim_start_matches('/')),
        }),
    })
}

fn attach_network(
    app: &App,
    vdir: &Path,
    n: &NetworkRequest,
) -> Result<thaw_egress::Egress, thaw_error::BoxError> {
    let policy = n.policy()?;
    let resolv = match policy.dns {
        Some(d) => {
            let f = vdir.join("resolv.conf");
            std::fs::write(&f, format!("nameserver {d}\n"))?;
            // read through its bind mount by the sandbox's own uid
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644))?;
            Some(f)
        }
        None => None,
    };
    let network = {
        let mut held = app.network.lock().unwrap_or_else(|p| p.into_inner());
        match &*held {
            Some(n) => n.clone(),
            None => held.insert(thaw_egress::Network::open()?).clone(),
        }
    };
    Ok(network.attach(&policy, resolv)?)
}

/// Who the function is, for a Lambda-style handler's context (reserved
/// names: a deploy's own `env` cannot set them).
fn identity_env(rec: &Record) -> Vec<(String, String)> {
    [
        ("THAW_FUNCTION_NAME", rec.name.clone()),
        ("THAW_FUNCTION_VERSION", rec.version.to_string()),
        ("THAW_FUNCTION_MEMORY_MB", rec.memory_mb.to_string()),
        ("THAW_FUNCTION_OWNER", rec.owner.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// `boot` deploys: the code must import and init, then the instance goes.
fn check_boots(
    app: &App,
    rec: &Record,
    func: &UserFunction,
    sample: Option<&Value>,
) -> Result<(), Error> {
    let _held = reserve(app, rec)?;
    let (mut sb, _) = start_loaded(app, func)?;
    warm_up(&mut sb, rec, sample)
}

/// The deploy's sandboxes count in the instance memory budget.
fn reserve(app: &App, rec: &Record) -> Result<crate::instances::Reservation, Error> {
    app.instances.reserve(rec.memory_mb).ok_or_else(|| {
        app.metrics.reject("memory");
        Error::Memory(rec.memory_mb)
    })
}

use thaw_sandbox::SandboxError;
use thaw_worker::StartError;

fn start_loaded(
    app: &App,
    func: &UserFunction,
) -> Result<(thaw_sandbox::Sandbox, thaw_worker::FreshReport), Error> {
    let init_timeout = Duration::from_millis(app.cfg.limits.init_timeout_ms);
    app.worker
        .start_user(func, init_timeout)
        .map_err(|e| match e {
            StartError::Load(SandboxError::Timeout { .. }) => bad(format!(
                "import/init did not finish within {init_timeout:?}: {}",
                thaw_error::chain(&e)
            )),
            // the host could not build a sandbox: not the code's fault
            StartError::Sandbox(e) => internal(Context::new("starting the sandbox", e)),
            e => bad(format!("import/init failed: {}", thaw_error::chain(&e))),
        })
}

fn warm_up(
    sb: &mut thaw_sandbox::Sandbox,
    rec: &Record,
    sample: Option<&Value>,
) -> Result<(), Error> {
    let Some(ev) = sample else { return Ok(()) };
    let r =
        thaw_worker::invoke_event(sb, ev, Duration::from_millis(rec.timeout_ms)).map_err(|e| {
            bad(format!(
                "the sample event killed the instance: {}",
                thaw_error::chain(&e)
            ))
        })?;
    match r.output {
        Ok(_) => Ok(()),
        Err(e) => Err(bad(format!("the sample event failed: {}", e.message))),
    }
}

/// Fresh start (import + init), optional warm-up, checkpoint. `Ok(Err)`:
/// the instance holds what a snapshot cannot keep (every reason).
pub fn snapshot(
    app: &App,
    rec: &Record,
    func: &UserFunction,
    sample: Option<&Value>,
) -> Result<Result<(Snapshot, SnapshotInfo), Vec<thaw_checkpoint::Refusal>>, Error> {
    let _held = reserve(app, rec)?;
    let (mut sb, fresh) = start_loaded(app, func)?;
    warm_up(&mut sb, rec, sample)?;
    let tier = tiering::local_tier(app, &rec.tier)?;
    let sname = snapshot_name(app, &rec.name, rec.version);
    let t = std::time::Instant::now();
    let (snap, _) = match app.worker.checkpoint_user_as(&mut sb, &tier, &sname, func) {
        Ok(taken) => taken,
        Err(thaw_worker::WorkerError::NotCheckpointable(nc)) => return Ok(Err(nc.reasons)),
        Err(e) => {
            return Err(bad(format!(
                "snapshotting the initialised function failed: {}",
                thaw_error::chain(&e)
            )));
        }
    };
    let checkpoint_ms = t.elapsed().as_secs_f64() * 1e3;
    drop(sb);
    let recording = rec
        .strategy
        .restore()
        .filter(|&k| thaw_restore::strategy(k).records_working_set());
    if let (Some(k), Some(ev)) = (recording, sample) {
        // the strategy records its working set at a restore's first
        // invocation: let the sample event be that one, so users' first
        // restores already prefetch; made ready as the pool makes every
        // restore (left out, the after-restore step's pages were served one
        // fault at a time, from the remote tier one chunk request each)
        let timeout = Duration::from_millis(rec.timeout_ms.max(60_000));
        let recorded = app
            .worker
            .restore(RestoreRequest::new(&snap, k).function(func).pool(None))
            .map_err(thaw_worker::WorkerError::from)
            .and_then(|(mut sb, _)| {
                thaw_worker::after_restore(&mut sb, &rec.name, timeout)?;
                Ok(sb)
            });
        let mut sb = recorded.map_err(|e| {
            bad(format!(
                "recording the working set: {}",
                thaw_error::chain(&e)
            ))
        })?;
        warm_up(&mut sb, rec, Some(ev))?;
    }
    let size_bytes = snap.manifest.state.len + snap.manifest.memory.len;
    let info = SnapshotInfo {
        id: snap.manifest.id.clone(),
        dir: snap.dir.clone(),
        size_bytes,
        init_ms: fresh.init_ms,
        import_ms: fresh.import_ms,
        checkpoint_ms,
    };
    Ok(Ok((snap, info)))
}

/// The version's sandboxes built ahead of its restores, if configured and
/// it has a snapshot to restore (started at its first restore).
pub fn sandboxes_ahead(app: &App, restores: bool) -> SandboxesAhead {
    SandboxesAhead::new(match restores {
        true => app.cfg.limits.sandbox_pool,
        false => 0,
    })
}

/// The function's deploy lock (and its move lock too for a delete), waited
/// for at most `limits.lock_wait_ms` in all: a snapshot move holds the
/// move lock for a whole transfer (to or from the remote tier too) and the
/// deploy lock for its switch, and a request answers `Busy` rather than
/// wait behind them unbounded.
async fn lock_function(
    app: &App,
    name: &str,
    moves_too: bool,
) -> Result<(Option<OwnedMutexGuard<()>>, OwnedMutexGuard<()>), Error> {
    let locked = async {
        let moving = match moves_too {
            true => Some(app.move_lock(name).lock_owned().await),
            false => None,
        };
        (moving, app.deploy_lock(name).lock_owned().await)
    };
    app.within_lock_wait(locked)
        .await
        .ok_or_else(|| Error::Busy {
            name: name.to_string(),
            waited_ms: app.cfg.limits.lock_wait_ms,
        })
}

/// Removes a function: instances, every version's code and snapshot.
pub async fn delete(app: &Arc<App>, name: &str) -> Result<(), Error> {
    let _guard = lock_function(app, name, true).await?;
    let removed = app
        .functions
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(name);
    if removed.is_none() {
        return Err(Error::NotFound(name.to_string()));
    }
    app.instances.remove(name);
    app.calibrations.forget(name);
    app.rings
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(name);
    let app2 = app.clone();
    let name2 = name.to_string();
    tokio::task::spawn_blocking(move || {
        let removed = remove_files(&app2, &name2);
        app2.drop_unused_roots();
        removed
    })
    .await
    .map_err(internal)?
}

/// Removes one version's code and snapshot (on whichever tier the policy
/// left it).
pub fn remove_version(app: &App, name: &str, version: u64) {
    let vdir = app.registry.version_dir(name, version);
    let sname = snapshot_name(app, name, version);
    for t in app.cfg.snapshot_tiers.names() {
        if let Err(e) = tiering::remove_copy(app, t, &sname) {
            tracing::warn!(function = %name, version, tier = t, "removing the snapshot: {e:#}");
        }
    }
    let _ = std::fs::remove_dir_all(vdir);
}

fn remove_files(app: &App, name: &str) -> Result<(), Error> {
    let fdir = app.registry.function_dir(name);
    // un-publish first: a crash from here on leaves no function behind
    let _ = std::fs::remove_file(fdir.join("current"));
    let prefix = format!("{name}-v");
    // NAME-vN-HASH: the version must follow the prefix (so deleting "a"
    // keeps "a-b")
    let ours = |n: &str| {
        n.strip_prefix(&prefix)
            .unwrap_or("")
            .split('-')
            .next()
            .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
    };
    for t in app.cfg.snapshot_tiers.names() {
        for sname in tiering::snapshots_on(app, t, &ours)? {
            tiering::remove_copy(app, t, &sname)?;
        }
    }
    std::fs::remove_dir_all(&fdir).map_err(internal)?;
    Ok(())
}
