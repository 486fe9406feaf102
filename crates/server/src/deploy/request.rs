//! A deploy request and its checks: what is wrong with it is answered
//! before any work starts (the pipeline is `deploy`'s).
use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use thaw_pack::cpu::{CPU_WEIGHT_MAX, CPU_WEIGHT_MIN};
use thaw_restore::Need;
use thaw_runtime::Runtime;
use thaw_sandbox::{StartStrategy, StrategyKind};

use super::error::{bad, Error};
use crate::app::App;
use crate::archive::Format;
use crate::config::Config;
use crate::registry::{check_name, NetworkRequest};

/// The smallest CPU quota a function may have (the kernel's CFS quota is
/// at least 1 ms per 100 ms period), and the largest accepted.
pub const MIN_CPU_MILLIS: u64 = 10;
pub const MAX_CPU_MILLIS: u64 = 1_000_000;

/// `POST /v1/functions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployRequest {
    pub name: String,
    /// `python` (the default), `nodejs` or `java`
    pub runtime: Option<String>,
    pub handler: String,
    pub code: Code,
    pub init: Option<String>,
    /// Runs once after init, before the snapshot (close what must not be
    /// snapshotted).
    pub before_snapshot: Option<String>,
    pub after_restore: Option<String>,
    /// `auto` (default): an instance that cannot be snapshotted deploys with
    /// fresh starts (`boot`) and the reasons; `required`: it is refused (422).
    pub snapshot: Option<String>,
    #[serde(default)]
    pub packages: Vec<String>,
    pub memory_mb: Option<u64>,
    /// CPU quota of each instance, in thousandths of a CPU (none: unlimited).
    pub cpu_millis: Option<u64>,
    /// CPU weight of each instance against others under contention, in
    /// cgroup v2 `cpu.weight` units (none: the host's default).
    pub cpu_weight: Option<u64>,
    pub timeout_ms: Option<u64>,
    pub max_instances: Option<u32>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Given to the function like `env`, never shown or logged.
    #[serde(default)]
    pub secret_env: BTreeMap<String, String>,
    /// A strategy the daemon restores with ([`daemon_strategies`]) or
    /// `boot` (none: chosen by placement).
    #[serde(default, deserialize_with = "daemon_strategy")]
    pub strategy: Option<StartStrategy>,
    pub tier: Option<String>,
    /// Invoked once before the snapshot (warms the instance up).
    pub sample_event: Option<Value>,
    /// Who the function belongs to (default `default`): only functions of
    /// one owner may invoke each other or read each other's objects.
    pub owner: Option<String>,
    /// Network egress (default none: loopback only, no IP sockets).
    pub network: Option<NetworkRequest>,
    /// The key of a root filesystem imported with `POST /v1/roots` (an
    /// image's) to run on instead of the runtime root.
    pub root: Option<String>,
    /// Deploy only if no function of this name exists (409 `exists`
    /// otherwise): two clients that deploy one function at once, such as
    /// the shims of two pods of one image, make one version, not two.
    #[serde(default)]
    pub only_if_absent: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Code {
    /// `tar.gz`, `zip` or `file`
    pub format: String,
    pub data_base64: String,
    /// `file` only: the file's name (default: the handler's module + `.py`,
    /// or `.js` for Node.js)
    pub filename: Option<String>,
}

/// The strategies the daemon restores with: those that need nothing beyond
/// a verified snapshot ([`thaw_restore::Strategy::needs`]). A deploy may
/// also name `boot`: no snapshot, every new instance boots (for code that
/// cannot be checkpointed).
pub fn daemon_strategies() -> impl Iterator<Item = StrategyKind> {
    thaw_restore::kinds_where(|s| s.needs().is_none())
}

/// Why the daemon cannot give a strategy what it needs.
fn unmet(need: Need) -> &'static str {
    match need {
        Need::ByteAddressableTier => {
            "the daemon's policy moves snapshots between its tiers, block and remote ones included"
        }
        Need::TierLayout => "the daemon makes no tier layouts",
    }
}

/// A deploy's `strategy`, checked as it is read: a daemon strategy or
/// `boot`; anything else is refused naming the daemon's strategies, and
/// the known ones the daemon does not run, with why.
fn daemon_strategy<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<StartStrategy>, D::Error> {
    let Some(name) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    let usable: Vec<_> = daemon_strategies()
        .map(StrategyKind::name)
        .chain([StartStrategy::Boot.name()])
        .collect();
    let usable = usable.join(", ");
    let unsupported = |k: StrategyKind| {
        thaw_restore::strategy(k).needs().map(|r| {
            format!(
                "{k} needs {} and {}; {} restores the same way without it",
                r.needs,
                unmet(r.needs),
                r.otherwise
            )
        })
    };
    let refuse = |why: String| Err(serde::de::Error::custom(why));
    match name.parse::<StartStrategy>() {
        Err(_) => {
            let others: Vec<_> = StrategyKind::ALL
                .into_iter()
                .filter_map(unsupported)
                .collect();
            refuse(format!(
                "unknown strategy {name:?}: use one of {usable} (not supported by the daemon: {})",
                others.join("; ")
            ))
        }
        Ok(s) => match s.restore().and_then(unsupported) {
            Some(why) => refuse(format!(
                "strategy {name:?} is not supported by the daemon: {why} (use one of {usable})"
            )),
            None => Ok(Some(s)),
        },
    }
}

pub use thaw_pack::image::is_entry_point;

/// `package.Class::method` or `package.Class` (its `handleRequest`), the
/// package possibly empty: a Java handler as Lambda names it.
pub fn is_java_handler(s: &str) -> bool {
    let ident = |p: &str| {
        !p.is_empty()
            && !p.as_bytes()[0].is_ascii_digit()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
    };
    let (class, method) = s.split_once("::").unwrap_or((s, "handleRequest"));
    s.len() <= 200 && ident(method) && class.split('.').all(ident)
}

/// The agent's hooks (`init`, `before_snapshot`, `after_restore`) are
/// Python's and Node's: for another runtime, the first one given is
/// refused, with what that runtime has `instead`.
pub(crate) fn refuse_hooks(hooks: &[(&str, &Option<String>)], instead: &str) -> Result<(), String> {
    match hooks.iter().find(|(_, h)| h.is_some()) {
        Some((what, _)) => Err(format!(
            "{what} is for python and nodejs functions{instead}"
        )),
        None => Ok(()),
    }
}

/// The handler and hooks a deploy names, checked for its runtime.
fn check_entry_points(req: &DeployRequest, runtime: Runtime) -> Result<(), Error> {
    let hooks = [
        ("init", &req.init),
        ("before_snapshot", &req.before_snapshot),
        ("after_restore", &req.after_restore),
    ];
    if runtime == Runtime::Provided {
        crate::provided::check_handler(&req.handler).map_err(bad)?;
        return crate::provided::check_no_hooks(&hooks).map_err(bad);
    }
    if runtime == Runtime::Java {
        if !is_java_handler(&req.handler) {
            return Err(bad(format!(
                "handler {:?} is not of the form package.Class::method or package.Class",
                req.handler
            )));
        }
        return refuse_hooks(
            &hooks,
            ": a Java function's init is its class's constructor, and its hooks are CRaC \
             resources (org.crac)",
        )
        .map_err(bad);
    }
    check_entry("handler", &req.handler)?;
    for (what, h) in hooks {
        if let Some(h) = h {
            check_entry(what, h)?;
        }
    }
    Ok(())
}

fn check_entry(what: &str, s: &str) -> Result<(), Error> {
    if !is_entry_point(s) {
        return Err(bad(format!(
            "{what} {s:?} is not of the form module.function"
        )));
    }
    Ok(())
}

fn check_env(env: &BTreeMap<String, String>) -> Result<(), Error> {
    if env.len() > 256 {
        return Err(bad("more than 256 environment variables"));
    }
    for (k, v) in env {
        let key_ok = !k.is_empty()
            && k.len() <= 128
            && !k.as_bytes()[0].is_ascii_digit()
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !key_ok {
            return Err(bad(format!("environment variable name {k:?} is invalid")));
        }
        if k.starts_with("THAW_") || thaw_runtime::reserved_env(k) {
            return Err(bad(format!(
                "environment variable {k} is reserved by the runtime"
            )));
        }
        if v.len() > 32 << 10 || v.contains('\0') {
            return Err(bad(format!(
                "environment variable {k}: value too long or contains NUL"
            )));
        }
    }
    Ok(())
}

/// What a request's checks settle, its defaults filled in from the
/// daemon's limits.
pub(super) struct Checked {
    pub runtime: Runtime,
    pub memory_mb: u64,
    pub timeout_ms: u64,
    pub max_instances: u32,
    pub strategy: StartStrategy,
    /// the instance must be snapshotted (else the deploy is refused)
    pub required: bool,
    pub tier: String,
}

/// Checks all of `req` but its root and its code.
pub(super) fn check(cfg: &Config, req: &DeployRequest) -> Result<Checked, Error> {
    check_name(&req.name).map_err(|e| bad(format!("{e:#}")))?;
    let runtime: Runtime = match &req.runtime {
        None => Runtime::default(),
        Some(r) => r.parse().map_err(|e| bad(format!("{e:#}")))?,
    };
    check_entry_points(req, runtime)?;
    thaw_runtime::packages::check_names(&req.packages).map_err(|e| bad(e.to_string()))?;
    check_env(&req.env)?;
    let lib_path = "LD_LIBRARY_PATH";
    if !req.packages.is_empty()
        && (req.env.contains_key(lib_path) || req.secret_env.contains_key(lib_path))
    {
        return Err(bad(format!(
            "{lib_path} is set by the runtime for functions with packages"
        )));
    }
    check_env(&req.secret_env)?;
    if let Some(k) = req.env.keys().find(|k| req.secret_env.contains_key(*k)) {
        return Err(bad(format!("{k} is both in env and secret_env")));
    }
    let lim = &cfg.limits;
    let memory_mb = req.memory_mb.unwrap_or(lim.default_memory_mb);
    if !(64..=lim.max_memory_mb).contains(&memory_mb) {
        return Err(bad(format!(
            "memory_mb must be in 64..={}",
            lim.max_memory_mb
        )));
    }
    if let Some(c) = req.cpu_millis {
        if !(MIN_CPU_MILLIS..=MAX_CPU_MILLIS).contains(&c) {
            return Err(bad(format!(
                "cpu_millis must be in {MIN_CPU_MILLIS}..={MAX_CPU_MILLIS} (thousandths of a CPU)"
            )));
        }
    }
    if let Some(w) = req.cpu_weight {
        if !(CPU_WEIGHT_MIN..=CPU_WEIGHT_MAX).contains(&w) {
            return Err(bad(format!(
                "cpu_weight must be in {CPU_WEIGHT_MIN}..={CPU_WEIGHT_MAX} (cgroup v2 cpu.weight)"
            )));
        }
    }
    let timeout_ms = req.timeout_ms.unwrap_or(lim.default_timeout_ms);
    if !(1..=lim.max_timeout_ms).contains(&timeout_ms) {
        return Err(bad(format!(
            "timeout_ms must be in 1..={}",
            lim.max_timeout_ms
        )));
    }
    let max_instances = req.max_instances.unwrap_or(lim.instances_per_function);
    if !(1..=lim.max_instances_per_function).contains(&max_instances) {
        return Err(bad(format!(
            "max_instances must be in 1..={}",
            lim.max_instances_per_function
        )));
    }
    if runtime == Runtime::Java && !req.packages.is_empty() {
        return Err(bad(
            "packages are for python and nodejs functions: a Java function brings its jars",
        ));
    }
    if runtime == Runtime::Java && req.root.is_some() {
        return Err(bad(
            "a Java function runs on the runtime root (its JVM and agent), not an image's",
        ));
    }
    // what the request leaves open is placed after the snapshot (see
    // `placement`); until then it is taken with mmap on tmpfs. A Node.js
    // process the checkpoint refuses (its threads and descriptors) deploys
    // with fresh starts and the reasons, as any other.
    let strategy = req
        .strategy
        .unwrap_or(StartStrategy::Restore(StrategyKind::Mmap));
    let required = match req.snapshot.as_deref() {
        None | Some("auto") => false,
        Some("required") => true,
        Some(o) => return Err(bad(format!("snapshot {o:?}: use auto or required"))),
    };
    if required && strategy == StartStrategy::Boot {
        return Err(bad("snapshot \"required\" contradicts strategy \"boot\""));
    }
    let tiers = cfg.snapshot_tiers.names();
    let tier = req.tier.clone().unwrap_or_else(|| tiers[0].into());
    if !tiers.contains(&tier.as_str()) {
        return Err(bad(format!(
            "tier {tier:?}: use one of {} (the daemon's snapshot tiers)",
            tiers.join(", ")
        )));
    }
    if let Some(owner) = &req.owner {
        check_name(owner).map_err(|e| bad(format!("owner: {e:#}")))?;
    }
    if let Some(n) = &req.network {
        n.policy().map_err(|e| bad(format!("network: {e}")))?;
    }
    Ok(Checked {
        runtime,
        memory_mb,
        timeout_ms,
        max_instances,
        strategy,
        required,
        tier,
    })
}

/// The request's code: its format, its bytes (within the limit) and the
/// name a single file is given.
pub(super) fn code(
    app: &App,
    req: &DeployRequest,
    runtime: Runtime,
) -> Result<(Format, Vec<u8>, String), Error> {
    let lim = &app.cfg.limits;
    let format = Format::parse(&req.code.format).map_err(|e| bad(format!("{e:#}")))?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(req.code.data_base64.as_bytes())
        .map_err(|e| bad(format!("code.data_base64 is not base64: {e}")))?;
    if data.len() as u64 > lim.code_bytes {
        app.metrics.reject("payload_too_large");
        return Err(Error::TooLarge {
            what: "code",
            len: data.len(),
            max: lim.code_bytes,
        });
    }
    let filename = match (&req.code.filename, format) {
        (Some(f), Format::File) => f.clone(),
        (None, Format::File) if runtime == Runtime::Java => "function.jar".into(),
        (None, Format::File) => {
            let module = req.handler.rsplit_once('.').map_or("", |(m, _)| m);
            format!("{}.{}", module.replace('.', "/"), runtime.extension())
        }
        (Some(_), _) => return Err(bad("code.filename is for format \"file\" only")),
        (None, _) => String::new(),
    };
    Ok((format, data, filename))
}
