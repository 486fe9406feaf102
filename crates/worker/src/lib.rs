//! thaw-worker: the invocation path. Starts fresh instances, deploys
//! functions (start, init, snapshot onto a tier), restores instances with a
//! named strategy and invokes them.
pub use error::WorkerError;
use error::{checkpoint_error, Result};
pub use request::{RestoreRequest, SandboxFrom};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_checkpoint::{checkpoint, CheckpointReport, RestoreArgs, RestoreError, RestoreReport};
use thaw_error::ResultExt;
use thaw_memory::tiering::{self, CostParams};
use thaw_runtime::RootInfo;
pub use thaw_sandbox::agent::Invoked;
use thaw_sandbox::agent::Request;
use thaw_sandbox::{Sandbox, SandboxConfig, SandboxError, SandboxPool};
pub use thaw_sandbox::{StartStrategy, StrategyKind, WsMode};
use thaw_store::{Snapshot, Tier};

pub use thaw_runtime::{FunctionInfo, InputSize, Runtime};

mod calls;
pub mod error;
mod request;
pub mod suite;

pub use calls::{after_restore, invoke, invoke_event, invoke_event_as, invoke_event_serving};

/// Default time one invocation may take before its sandbox is killed.
pub const INVOKE_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Worker {
    pub home: PathBuf,
    pub root: RootInfo,
    pub cfg: SandboxConfig,
    functions: Vec<FunctionInfo>,
    /// What the crash cleanup at start removed (see [`Worker::gc`]).
    pub cleaned_at_start: Vec<PathBuf>,
    /// Sandboxes built ahead for restores with `cfg` (see [`Worker::set_pool`]).
    pool: Option<SandboxPool>,
}

/// A fresh start: exec, import and init, timed.
#[derive(Debug, Clone, Serialize)]
pub struct FreshReport {
    pub spawn_ms: f64,
    pub load_ms: f64,
    pub import_ms: f64,
    pub init_ms: f64,
    pub total_ms: f64,
}

/// One invocation's result.
#[derive(Debug, Clone, Serialize)]
pub struct Invocation {
    pub output: Value,
    /// time inside the sandbox, as the agent measured it
    pub exec_ms: f64,
    /// request to response, as the worker measured it
    pub latency_ms: f64,
}

impl Worker {
    /// Opens the worker on `home`, building the runtime root if needed.
    /// Opens the worker on `home`, building the runtime root if needed, and
    /// cleans up what dead workers left (see [`Worker::gc`]; failures there
    /// are reported through `progress`, not fatal).
    pub fn new(home: &Path, progress: &mut dyn FnMut(&str)) -> Result<Worker> {
        Worker::with_runtime_home(home, home, progress)
    }

    /// Opens the worker on `home` with the runtime root kept under
    /// `runtime_home` (which may be another home, so that a temporary state
    /// home reuses an already built root).
    pub fn with_runtime_home(
        home: &Path,
        runtime_home: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Worker> {
        let root = thaw_runtime::ensure_root(runtime_home, progress)?;
        let functions = root.functions()?;
        let mut w = Worker {
            home: home.to_owned(),
            root,
            cfg: SandboxConfig::default(),
            functions,
            cleaned_at_start: Vec::new(),
            pool: None,
        };
        match w.gc() {
            Ok(removed) => w.cleaned_at_start = removed,
            Err(e) => progress(&format!(
                "warning: crash cleanup incomplete: {}",
                thaw_error::chain(&e)
            )),
        }
        Ok(w)
    }

    /// Crash cleanup: removes what dead workers left (their cgroups and any
    /// sandbox still in them, their logs, staging and trash directories) and
    /// snapshot versions no reader holds, on every tier of this home. State
    /// of live workers is never touched. Returns what was removed.
    pub fn gc(&self) -> Result<Vec<PathBuf>> {
        let mut removed =
            thaw_sandbox::cleanup::gc(&self.cfg.log_dir).context("cleaning up dead sandboxes")?;
        let mut errors = Vec::new();
        let mut tiers = Vec::new();
        for name in thaw_store::TIER_NAMES {
            // a tier never set up here has nothing to clean (and is not made)
            let res = Tier::existing(name, &self.home)
                .map_err(thaw_store::StoreError::from)
                .and_then(|t| match t {
                    Some(t) => Ok(Some((thaw_store::gc_tier(&t)?, t))),
                    None => Ok(None),
                });
            match res {
                Ok(Some((r, t))) => {
                    removed.extend(r);
                    tiers.push(t);
                }
                Ok(None) => {}
                Err(e) => errors.push(format!("tier {name}: {}", thaw_error::chain(&e))),
            }
        }
        match remove_orphan_slow_files(&tiers) {
            Ok(r) => removed.extend(r),
            Err(e) => errors.push(format!("TOSS slow-tier files: {}", thaw_error::chain(&e))),
        }
        if !errors.is_empty() {
            return Err(WorkerError::Cleanup(errors.join("; ")));
        }
        Ok(removed)
    }

    pub fn functions(&self) -> &[FunctionInfo] {
        &self.functions
    }

    /// Checks a function name (test-only `_test_*` functions are allowed too).
    pub fn check_function(&self, function: &str) -> Result<()> {
        let test_only = function.starts_with("_test_")
            && function[6..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if test_only || self.functions.iter().any(|f| f.name == function) {
            return Ok(());
        }
        let names: Vec<_> = self.functions.iter().map(|f| f.name.as_str()).collect();
        Err(WorkerError::UnknownFunction {
            name: function.into(),
            known: names.join(", "),
        })
    }

    pub fn tier(&self, name: &str) -> Result<Tier> {
        Ok(Tier::by_name(name, &self.home)?)
    }

    /// Starts a fresh instance of `function` and runs its init.
    pub fn start_fresh(&self, function: &str) -> Result<(Sandbox, FreshReport)> {
        self.check_function(function)?;
        let t0 = Instant::now();
        let (argv, env) = self.root.agent_command(function);
        let sb = Sandbox::start(&self.cfg, &self.root.path, &argv, &env)
            .with_context(|| format!("starting a sandbox for {function}"))?;
        Ok(load_timed(sb, t0, INVOKE_TIMEOUT).with_context(|| format!("loading {function}"))?)
    }

    /// A zygote template of `function` (imported and initialised), the
    /// benchmarks' floor of a local cold start: see [`thaw_sandbox::zygote`].
    pub fn start_zygote(&self, function: &str) -> Result<thaw_sandbox::Zygote> {
        self.check_function(function)?;
        let (argv, env) = self.root.agent_command(function);
        Ok(
            thaw_sandbox::Zygote::start(&self.cfg, &self.root.path, &argv, &env, INVOKE_TIMEOUT)
                .with_context(|| format!("starting a zygote template of {function}"))?,
        )
    }

    /// One instance forked from a zygote template into a new sandbox.
    pub fn fork_zygote(&self, zygote: &mut thaw_sandbox::Zygote) -> Result<Sandbox> {
        Ok(zygote
            .fork(&self.cfg, INVOKE_TIMEOUT)
            .context("forking the zygote template")?)
    }

    /// The name `function`'s snapshots go by on a tier (one per runtime root).
    pub fn snapshot_name(&self, function: &str) -> String {
        format!("{function}-{}", &self.root.hash[..16])
    }

    /// A directory to checkpoint `function` into by hand (tests); deployed
    /// snapshots are versions under `tier.function_dir(snapshot_name)`.
    pub fn snapshot_dir(&self, tier: &Tier, function: &str) -> PathBuf {
        tier.path.join(self.snapshot_name(function))
    }

    /// Starts, initialises and snapshots `function` onto `tier` as a new
    /// version, and publishes it atomically (readers of the old version keep
    /// it until they are done). One deployer per function at a time.
    pub fn deploy(&self, function: &str, tier: &Tier) -> Result<(Snapshot, CheckpointReport)> {
        self.check_function(function)?;
        let lock = tier.lock_deploy(&self.snapshot_name(function))?;
        self.deploy_locked(function, lock)
    }

    fn deploy_locked(
        &self,
        function: &str,
        lock: thaw_store::DeployLock,
    ) -> Result<(Snapshot, CheckpointReport)> {
        let (mut sb, _) = self.start_fresh(function)?;
        self.checkpoint_locked(&mut sb, lock, function)
    }

    /// Snapshots a loaded instance as a new version under `lock` and
    /// publishes it atomically.
    fn checkpoint_locked(
        &self,
        sb: &mut Sandbox,
        lock: thaw_store::DeployLock,
        label: &str,
    ) -> Result<(Snapshot, CheckpointReport)> {
        self.checkpoint_over(sb, lock, label, &self.root.hash)
    }

    /// [`Worker::checkpoint_locked`] of an instance running on the root
    /// whose hash is `root_hash` (what the snapshot records).
    fn checkpoint_over(
        &self,
        sb: &mut Sandbox,
        lock: thaw_store::DeployLock,
        label: &str,
        root_hash: &str,
    ) -> Result<(Snapshot, CheckpointReport)> {
        let dir = lock.new_version_dir()?;
        let (snap, rep) = checkpoint(sb, &dir, label, root_hash)
            .map_err(|e| checkpoint_error(&format!("checkpointing {label}"), e))?;
        Ok((lock.publish(&snap)?, rep))
    }

    /// The published snapshot of `function` on `tier`, deploying it first if
    /// there is none. Concurrent first calls deploy once: the others wait for
    /// the deploy lock and then find the new version.
    pub fn snapshot(&self, function: &str, tier: &Tier) -> Result<Snapshot> {
        self.check_function(function)?;
        let name = self.snapshot_name(function);
        if let Some(s) = tier
            .open_current(&name)?
            .filter(|s| !thaw_checkpoint::restore::of_another_version(s))
        {
            return Ok(s);
        }
        let lock = tier.lock_deploy(&name)?;
        if let Some(s) = lock
            .current()?
            .filter(|s| !thaw_checkpoint::restore::of_another_version(s))
        {
            return Ok(s);
        }
        Ok(self.deploy_locked(function, lock)?.0)
    }

    /// Restores an instance as `req` says (see [`RestoreRequest`]).
    pub fn restore(
        &self,
        req: RestoreRequest<'_>,
    ) -> Result<(Sandbox, RestoreReport), RestoreError> {
        let cfg = match req.function {
            Some(f) => std::borrow::Cow::Owned(f.sandbox_config(&self.cfg)),
            None => std::borrow::Cow::Borrowed(&self.cfg),
        };
        let pool = match req.sandbox {
            SandboxFrom::WorkerPool => self.pool.as_ref(),
            SandboxFrom::Pool(p) => Some(p),
            SandboxFrom::BuiltNow => None,
        };
        let (root, root_hash) = self.root_of(req.function);
        let mut args = RestoreArgs::new(req.snapshot, root, root_hash, req.strategy, &cfg);
        args.prebuilt = take_prebuilt(pool, &cfg);
        args.streamed = req.streamed;
        thaw_checkpoint::restore(args)
    }

    /// Keeps `size` sandboxes built ahead for restores (0: none, each restore
    /// builds its own), refilled by a background thread as restores take
    /// them. Set the pool before sharing the worker; set it again to resize
    /// (the old pool's waiting sandboxes are dropped). Sandboxes restored
    /// from the pool must be dropped before the pool is (see [`SandboxPool`]).
    pub fn set_pool(&mut self, size: usize) -> Result<()> {
        self.pool = None;
        if size > 0 {
            let pool = SandboxPool::start(&self.root.path, &self.cfg, size)
                .context("starting the sandbox pool")?;
            self.pool = Some(pool);
        }
        Ok(())
    }

    /// The pool of sandboxes built ahead, if one is set.
    pub fn pool(&self) -> Option<&SandboxPool> {
        self.pool.as_ref()
    }

    /// Checks an output with the function's checker (test-only `_test_*`
    /// functions have none: their outputs are not checked).
    pub fn check(&self, function: &str, size: InputSize, output: &Value) -> Result<()> {
        if function.starts_with("_test_") {
            return Ok(());
        }
        Ok(self.root.check_output(function, size, output)?)
    }
}

/// TOSS slow-tier files live in `TIER/tiered/<version id>`, apart from their
/// version: removes those whose version no longer exists on any tier (only
/// names that are version ids: older layouts' files are left alone).
fn remove_orphan_slow_files(tiers: &[Tier]) -> Result<Vec<PathBuf>> {
    let mut live = std::collections::HashSet::new();
    for t in tiers {
        for f in std::fs::read_dir(&t.path).into_iter().flatten().flatten() {
            let versions = f.path().join("versions");
            for v in std::fs::read_dir(versions).into_iter().flatten().flatten() {
                live.insert(v.file_name());
            }
        }
    }
    let mut removed = Vec::new();
    for t in tiers {
        for e in std::fs::read_dir(t.path.join("tiered"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name();
            if thaw_store::is_version_id(&name.to_string_lossy()) && !live.contains(&name) {
                thaw_store::secure::remove_tree(&e.path())?;
                removed.push(e.path());
            }
        }
    }
    Ok(removed)
}

/// What `Worker::tier` did.
#[derive(Debug, Clone, Serialize)]
pub struct TierReport {
    pub epochs: u32,
    pub profiled_pages: usize,
    pub base_ms: f64,
    pub slow_share: f64,
    pub est_slowdown: f64,
    /// mappings the split adds to a one-file restore's
    pub extra_mappings: u64,
    pub cost: f64,
    pub cost_all_fast: f64,
    pub fast_bytes: u64,
    pub slow_bytes: u64,
    pub slow_tier: String,
    pub slow_path: PathBuf,
    /// the model's inputs: prices and fault costs as used
    pub params: CostParams,
}

impl Worker {
    /// TOSS: profiles `function`'s snapshot on `fast` over `reps` invocations
    /// of each input size, places its pages with the cost model and writes the
    /// fast file beside the snapshot and the slow file on `slow`.
    pub fn make_tiered(
        &self,
        function: &str,
        fast: &Tier,
        slow: &Tier,
        sizes: &[InputSize],
        reps: usize,
        params: &CostParams,
    ) -> Result<TierReport> {
        let snap = self.snapshot(function, fast)?;
        let requests: Vec<(String, Request)> = sizes
            .iter()
            .flat_map(|s| {
                std::iter::repeat_n((s.to_string(), Request::invoke_size(s.name())), reps.max(1))
            })
            .collect();
        let mut profile = thaw_checkpoint::profile::profile(
            &snap,
            &self.root.path,
            &self.root.hash,
            &self.cfg,
            &requests,
            INVOKE_TIMEOUT,
        )
        .with_context(|| format!("profiling {function}"))?;
        // the all-DRAM baseline per size: a cold start (restore with a
        // sandbox ready, then the first invocation) with everything mapped
        // from the fast tier (median of three); the split's bound is on it
        for c in &mut profile.classes {
            let mut t = Vec::new();
            for _ in 0..3 {
                let (mut sb, rep) = self.restore(RestoreRequest::new(&snap, StrategyKind::Mmap))?;
                let first = invoke(&mut sb, c.name.parse()?, INVOKE_TIMEOUT)?.latency_ms;
                t.push(rep.total_ms - rep.sandbox_ms + first);
            }
            t.sort_by(f64::total_cmp);
            c.base_ms = t[1];
        }
        let base_ms = profile
            .classes
            .iter()
            .map(|c| c.base_ms)
            .fold(f64::INFINITY, f64::min);
        let params = CostParams {
            base_ms,
            ..params.clone()
        };
        let state = thaw_snapshot_format::ProcessState::decode(&snap.load_state()?)
            .context("decoding the snapshot's state")?;
        let image = snap.open_image()?;
        let slow_dir = slow
            .path
            .join("tiered")
            .join(snap.dir.file_name().unwrap_or_default());
        let key = thaw_checkpoint::restore::snapshot_key(&snap);
        let earlier = tiering::load(&snap.dir, &key, &state.memory).ok().flatten();
        let tl = tiering::write(
            &snap.dir,
            &slow_dir,
            slow.name,
            &key,
            &state.memory,
            &image,
            &profile,
            &params,
        )?;
        // a split onto another tier leaves the earlier slow file behind: remove it
        if let Some(old_dir) = earlier
            .and_then(|e| e.slow.path.parent().map(Path::to_owned))
            .filter(|d| *d != slow_dir && d.file_name() == slow_dir.file_name())
        {
            thaw_store::secure::remove_tree(&old_dir)?;
        }
        Ok(TierReport {
            epochs: profile.epochs,
            profiled_pages: profile.counts.len(),
            base_ms,
            slow_share: tl.slow_share,
            est_slowdown: tl.est_slowdown,
            extra_mappings: tl.extra_mappings,
            cost: tl.cost,
            cost_all_fast: tl.cost_all_fast,
            fast_bytes: tl.fast.len,
            slow_bytes: tl.slow.len,
            slow_tier: tl.slow_tier,
            slow_path: tl.slow.path,
            params: tl.params,
        })
    }
}

/// A deployed (user) function: its code directory on the host, mounted
/// read-only in every sandbox, and the entry points the agent resolves.
#[derive(Debug, Clone)]
pub struct UserFunction {
    /// the function's name (its agent tells it to the code: Lambda's
    /// `context.functionName`)
    pub name: String,
    /// the language it is written in: which agent serves it
    pub runtime: thaw_runtime::Runtime,
    pub code_dir: PathBuf,
    /// `module.function`
    pub handler: String,
    pub init: Option<String>,
    /// runs once before the snapshot is taken
    pub before_snapshot: Option<String>,
    pub after_restore: Option<String>,
    /// extra environment for the function (on top of the agent's)
    pub env: Vec<(String, String)>,
    /// The root filesystem it runs on (none: the runtime root).
    pub root: Option<FunctionRoot>,
    pub memory_bytes: u64,
    /// CPU quota in thousandths of a CPU (None: unlimited).
    pub cpu_millis: Option<u64>,
    /// CPU weight under contention, cgroup v2 units (None: the default).
    pub cpu_weight: Option<u64>,
    /// The function's own extracted Debian packages (a tree with `usr/`),
    /// mounted read-only at [`thaw_sandbox::PACKAGES_DIR`].
    pub packages_dir: Option<PathBuf>,
    /// Network egress (none: loopback only).
    pub egress: Option<thaw_egress::Egress>,
}

/// A root filesystem a function runs on instead of the runtime root (an
/// image's, which the daemon imported), with the runtime root's agent
/// directory mounted read-only beside it at [`thaw_sandbox::AGENT_DIR`].
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionRoot {
    /// The root directory (what the sandbox pivots into).
    pub path: PathBuf,
    /// What the function's snapshots record as their root, and restores
    /// check.
    pub hash: String,
    /// The runtime root's agent directory (`/opt/thaw`).
    pub agent_dir: PathBuf,
}

/// The program that runs `runtime`'s agent on a function's own root: the
/// distribution's usual path, which the daemon checks the root has.
pub fn root_program(runtime: thaw_runtime::Runtime) -> &'static str {
    match runtime {
        thaw_runtime::Runtime::Python => "/usr/bin/python3",
        thaw_runtime::Runtime::Nodejs => thaw_runtime::NODE,
        thaw_runtime::Runtime::Java => thaw_runtime::java::JAVA,
        thaw_runtime::Runtime::Provided => thaw_runtime::BOOTSTRAP,
    }
}

/// The dynamic loader's search path into a function's packages (Python's
/// path is the agent's: it adds the packages' site directory itself).
pub fn packages_library_path() -> String {
    let d = thaw_sandbox::PACKAGES_DIR;
    let arch = std::env::consts::ARCH;
    format!("{d}/usr/lib/{arch}-linux-gnu:{d}/usr/lib")
}

impl UserFunction {
    /// A function of `runtime` with its code in `code_dir`, and nothing
    /// else of its own: no hooks, environment, packages, network or root,
    /// 256 MiB, no CPU limit.
    pub fn plain(
        name: &str,
        runtime: thaw_runtime::Runtime,
        code_dir: PathBuf,
        handler: &str,
    ) -> Self {
        UserFunction {
            name: name.into(),
            runtime,
            code_dir,
            handler: handler.into(),
            init: None,
            before_snapshot: None,
            after_restore: None,
            env: Vec::new(),
            root: None,
            memory_bytes: 256 << 20,
            cpu_millis: None,
            cpu_weight: None,
            packages_dir: None,
            egress: None,
        }
    }

    fn sandbox_config(&self, base: &SandboxConfig) -> SandboxConfig {
        SandboxConfig {
            code_dir: Some(self.code_dir.clone()),
            packages_dir: self.packages_dir.clone(),
            agent_dir: self.root.as_ref().map(|r| r.agent_dir.clone()),
            memory_bytes: self.memory_bytes,
            cpu_millis: self.cpu_millis,
            cpu_weight: self.cpu_weight,
            egress: self.egress.clone(),
            runtime_api: (self.runtime == thaw_runtime::Runtime::Provided)
                .then(|| self.runtime_api_spec()),
            ..base.clone()
        }
    }

    /// Who a custom runtime's Runtime API says it serves: Lambda's name and
    /// ARN (a published version `NAME--N` is version N of `NAME`).
    fn runtime_api_spec(&self) -> thaw_sandbox::RuntimeApiSpec {
        let (name, version) = self.lambda_name();
        let region = self
            .env
            .iter()
            .find(|(k, _)| k == "AWS_REGION")
            .map_or("us-east-1", |(_, v)| v.as_str());
        let arn = format!("arn:aws:lambda:{region}:000000000000:function:{name}");
        thaw_sandbox::RuntimeApiSpec {
            function_name: name.to_string(),
            function_arn: match version {
                "$LATEST" => arn,
                v => format!("{arn}:{v}"),
            },
        }
    }

    /// (function name, version) as Lambda names them.
    fn lambda_name(&self) -> (&str, &str) {
        self.name
            .split_once("--")
            .unwrap_or((&self.name, "$LATEST"))
    }

    /// The environment Lambda gives a custom runtime's `bootstrap`.
    fn lambda_env(&self) -> Vec<(String, String)> {
        let (name, version) = self.lambda_name();
        let mb = (self.memory_bytes >> 20).to_string();
        [
            ("AWS_LAMBDA_RUNTIME_API", thaw_sandbox::runtime_api::ADDRESS),
            ("AWS_LAMBDA_FUNCTION_NAME", name),
            ("AWS_LAMBDA_FUNCTION_VERSION", version),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", &mb),
            ("AWS_LAMBDA_LOG_GROUP_NAME", &format!("/aws/lambda/{name}")),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "thaw"),
            // every instance is restored from the snapshot of one
            ("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start"),
            ("_HANDLER", &self.handler),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

/// What a user function's after-restore step did.
#[derive(Debug, Clone, Serialize)]
pub struct AfterRestore {
    pub hook: bool,
    pub hook_ms: f64,
}

impl Worker {
    /// Starts a fresh instance of a user function and loads it (import + init).
    pub fn start_user(
        &self,
        func: &UserFunction,
        timeout: Duration,
    ) -> Result<(Sandbox, FreshReport), StartError> {
        let t0 = Instant::now();
        let (mut argv, mut env) = self.root.agent_command_for(func.runtime, "--user");
        if func.root.is_some() {
            argv[0] = root_program(func.runtime).to_string();
        }
        if func.runtime == thaw_runtime::Runtime::Java {
            let heap = thaw_runtime::java::heap_mb(func.memory_bytes >> 20);
            thaw_runtime::java::set_heap(&mut argv, heap);
        }
        if func.runtime == thaw_runtime::Runtime::Provided {
            env.extend(func.lambda_env());
        }
        env.push(("THAW_HANDLER".into(), func.handler.clone()));
        env.push(("THAW_FUNCTION_NAME".into(), func.name.clone()));
        env.push((
            "THAW_MEMORY_MB".into(),
            (func.memory_bytes >> 20).to_string(),
        ));
        for (k, v) in [
            ("THAW_INIT", &func.init),
            ("THAW_BEFORE_SNAPSHOT", &func.before_snapshot),
            ("THAW_AFTER_RESTORE", &func.after_restore),
        ] {
            if let Some(v) = v {
                env.push((k.into(), v.clone()));
            }
        }
        if func.packages_dir.is_some() {
            env.push(("LD_LIBRARY_PATH".into(), packages_library_path()));
        }
        env.extend(func.env.iter().cloned());
        let (root, _) = self.root_of(Some(func));
        let sb = Sandbox::start(&func.sandbox_config(&self.cfg), root, &argv, &env)
            .map_err(|e| StartError::Sandbox(e.into()))?;
        Ok(load_timed(sb, t0, timeout)?)
    }

    /// Snapshots a loaded instance as the published version of snapshot
    /// `name` on `tier` (the store's deploy lock and atomic publish).
    pub fn checkpoint_as(
        &self,
        sb: &mut Sandbox,
        tier: &Tier,
        name: &str,
        label: &str,
    ) -> Result<(Snapshot, CheckpointReport)> {
        self.checkpoint_locked(sb, tier.lock_deploy(name)?, label)
    }

    /// [`Worker::checkpoint_as`] of an instance of `func` (the snapshot
    /// records the root it runs on).
    pub fn checkpoint_user_as(
        &self,
        sb: &mut Sandbox,
        tier: &Tier,
        name: &str,
        func: &UserFunction,
    ) -> Result<(Snapshot, CheckpointReport)> {
        let (_, root_hash) = self.root_of(Some(func));
        self.checkpoint_over(sb, tier.lock_deploy(name)?, &func.name, root_hash)
    }

    /// The root (path, hash) `func`'s instances run on: its own, else the
    /// runtime root.
    pub fn root_of<'a>(&'a self, func: Option<&'a UserFunction>) -> (&'a Path, &'a str) {
        match func.and_then(|f| f.root.as_ref()) {
            Some(r) => (&r.path, &r.hash),
            None => (&self.root.path, &self.root.hash),
        }
    }

    /// A pool of `size` sandboxes built ahead for restores of `func` (its
    /// code mount and limits); dropping it kills the waiting ones.
    pub fn user_pool(&self, func: &UserFunction, size: usize) -> Result<SandboxPool> {
        Ok(SandboxPool::start(
            self.root_of(Some(func)).0,
            &func.sandbox_config(&self.cfg),
            size,
        )
        .with_context(|| format!("starting a sandbox pool for {}", func.name))?)
    }
}

/// A sandbox from `pool` if it was built for `cfg` and has one waiting.
fn take_prebuilt(
    pool: Option<&SandboxPool>,
    cfg: &SandboxConfig,
) -> Option<thaw_sandbox::Prebuilt> {
    pool.filter(|p| p.config() == cfg)
        .and_then(SandboxPool::take)
}

/// Loads (import + init) a just-started runtime, timing it from `t0`, the
/// moment its start began.
fn load_timed(
    mut sb: Sandbox,
    t0: Instant,
    timeout: Duration,
) -> Result<(Sandbox, FreshReport), SandboxError> {
    let spawn_ms = ms(t0);
    let t1 = Instant::now();
    let r = sb
        .call(&Request::Load, timeout)?
        .into_loaded()
        .map_err(reply_error)?;
    let rep = FreshReport {
        spawn_ms,
        load_ms: ms(t1),
        import_ms: r.import_ms,
        init_ms: r.init_ms,
        total_ms: ms(t0),
    };
    Ok((sb, rep))
}

/// A reply the agent sent that does not say what it should: the agent's
/// own error as [`SandboxError::Agent`], the rest as a reply error.
pub(crate) fn reply_error(e: thaw_sandbox::agent::ReplyError) -> SandboxError {
    e.into()
}

/// Why a user function's fresh instance did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// the sandbox could not be built (the host's side)
    #[error("starting the sandbox: {}", thaw_error::chain(&**.0))]
    Sandbox(thaw_error::BoxError),
    /// import or init failed, timed out or killed the runtime (the code's side)
    #[error(transparent)]
    Load(#[from] SandboxError),
}

pub fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
