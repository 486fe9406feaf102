//! What the shim reads from a container's bundle (`config.json`, the OCI
//! runtime spec containerd writes): the process's args and environment,
//! the root filesystem, the annotations and the network namespace.
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thaw_error::{fail, Context, ResultExt};

/// Why a container's bundle does not make a thaw container.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// a command, event, port or setting the container gives that thaw
    /// cannot run (the message names it)
    #[error("{0}")]
    Invalid(String),
    /// `config.json` could not be read or is not JSON
    #[error(transparent)]
    Unreadable(#[from] Context),
}

type Result<T, E = SpecError> = std::result::Result<T, E>;

/// The pod a container belongs to (the CRI plugin sets it on every
/// container of a pod): one shim serves the whole pod.
pub const SANDBOX_ID_ANNOTATION: &str = "io.kubernetes.cri.sandbox-id";
/// `sandbox` on a pod's first container (the pause container), which
/// only holds the pod's namespaces.
const CONTAINER_TYPE_ANNOTATION: &str = "io.kubernetes.cri.container-type";

/// Function settings a container may give, as an annotation (pods) or an
/// environment variable (`ctr run --env`); the annotation wins.
const SETTINGS: [(&str, &str, &str); 3] = [
    ("dev.thaw.memory-mb", "THAW_MEMORY_MB", "memory_mb"),
    ("dev.thaw.timeout-ms", "THAW_TIMEOUT_MS", "timeout_ms"),
    (
        "dev.thaw.max-instances",
        "THAW_MAX_INSTANCES",
        "max_instances",
    ),
];

/// Whether the shim has an instance of a `serve` function made ready at
/// the container's Create (annotation, environment variable).
pub const PREWARM: (&str, &str) = ("dev.thaw.prewarm", "THAW_PREWARM");

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Netns {
    /// No network namespace in the spec: the host's.
    Host,
    /// A namespace without a path: a new one of the container's own.
    New,
    /// The pod's (made by the CRI plugin) or any named one.
    Path(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// HTTP on the port, every request one invocation (the image's default command).
    Serve { port: u16 },
    /// One invocation with this event (JSON text), then exit.
    Invoke { event: String },
    /// The pod's sandbox: no function; it holds the pod's namespaces
    /// (the network one it is given, new UTS and IPC ones when the spec
    /// asks for them) for the pod's other containers to join, and waits
    /// until it is signalled.
    Pause {
        new_uts: bool,
        new_ipc: bool,
        hostname: Option<String>,
    },
}

/// How a container runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// The pod's pause container: the shim's front holds its namespaces.
    PodSandbox,
    /// The image names a handler: the function runs in thaw's sandbox.
    Function,
    /// Anything else (a pod's sidecar, Knative's queue-proxy): runc runs
    /// it natively, from its bundle.
    Native,
}

#[derive(Debug)]
pub struct ContainerSpec {
    pub args: Vec<String>,
    pub env: Vec<String>,
    /// Absolute path of the root filesystem.
    pub root: PathBuf,
    pub annotations: BTreeMap<String, String>,
    pub netns: Netns,
    /// Namespace types the spec asks to be new (no path).
    pub new_namespaces: Vec<String>,
    pub hostname: Option<String>,
    pub resources: Resources,
}

/// The limits of the spec's `linux.resources` (the kubelet's, from the
/// pod's `resources.limits`) that thaw applies to the function.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resources {
    /// `memory.limit`, bytes
    pub memory_limit: Option<u64>,
    /// `cpu.quota` over `cpu.period` (µs), as thousandths of a CPU
    pub cpu_millis: Option<u64>,
    /// `cpu.shares` (the pod's CPU request), as the cgroup v2 `cpu.weight`
    /// runc and containerd give it
    pub cpu_weight: Option<u64>,
}

impl Resources {
    fn read(r: &Value) -> Resources {
        let positive = |v: &Value| {
            v.as_i64()
                .and_then(|n| u64::try_from(n).ok())
                .filter(|&n| n > 0)
        };
        let period = positive(&r["cpu"]["period"]).unwrap_or(100_000);
        Resources {
            memory_limit: positive(&r["memory"]["limit"]),
            // a quota the kernel would not take (under 1 ms) stays a
            // request the daemon refuses with its reason
            cpu_millis: positive(&r["cpu"]["quota"])
                .map(|q| q.saturating_mul(1000).div_ceil(period)),
            cpu_weight: r["cpu"]["shares"]
                .as_u64()
                .filter(|&s| s > 0)
                .map(thaw_pack::cpu::cpu_weight_of_shares),
        }
    }
}

fn read_json(bundle: &Path) -> Result<Value> {
    let p = bundle.join("config.json");
    let text = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
    Ok(serde_json::from_slice(&text).with_context(|| format!("{} is not JSON", p.display()))?)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl ContainerSpec {
    pub fn read(bundle: &Path) -> Result<ContainerSpec> {
        let v = read_json(bundle)?;
        let root = v["root"]["path"].as_str().unwrap_or("rootfs");
        let annotations = v["annotations"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let namespaces = v["linux"]["namespaces"].as_array();
        let new_namespaces = namespaces
            .into_iter()
            .flatten()
            .filter(|n| n["path"].as_str().is_none_or(str::is_empty))
            .filter_map(|n| n["type"].as_str().map(str::to_string))
            .collect();
        let netns = namespaces
            .and_then(|ns| ns.iter().find(|n| n["type"] == "network"))
            .map_or(Netns::Host, |n| match n["path"].as_str() {
                Some(p) if !p.is_empty() => Netns::Path(p.to_string()),
                _ => Netns::New,
            });
        Ok(ContainerSpec {
            args: strings(&v["process"]["args"]),
            env: strings(&v["process"]["env"]),
            root: bundle.join(root),
            annotations,
            netns,
            new_namespaces,
            hostname: v["hostname"]
                .as_str()
                .filter(|h| !h.is_empty())
                .map(str::to_string),
            resources: Resources::read(&v["linux"]["resources"]),
        })
    }

    fn env_value(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    }

    /// The pod's pause container: the shim runs no function for it.
    pub fn is_pod_sandbox(&self) -> bool {
        self.annotations
            .get(CONTAINER_TYPE_ANNOTATION)
            .is_some_and(|t| t == "sandbox")
    }

    /// A pod's sandbox, a function (its image names a handler), or a
    /// container runc runs.
    pub fn kind(&self) -> Kind {
        if self.is_pod_sandbox() {
            Kind::PodSandbox
        } else if self
            .env_value(thaw_pack::image::ENV_HANDLER)
            .is_some_and(|h| !h.is_empty())
        {
            Kind::Function
        } else {
            Kind::Native
        }
    }

    /// The container's command: `serve` (or none) or `invoke [EVENT]`.
    pub fn mode(&self) -> Result<Mode> {
        if self.is_pod_sandbox() {
            let new = |t: &str| self.new_namespaces.iter().any(|n| n == t);
            return Ok(Mode::Pause {
                new_uts: new("uts"),
                new_ipc: new("ipc"),
                hostname: self.hostname.clone(),
            });
        }
        match self.args.first().map(String::as_str) {
            None | Some("serve") => {
                let port = match self.env_value("PORT") {
                    None => 8080,
                    Some(p) => p
                        .parse::<u16>()
                        .ok()
                        .filter(|&p| p != 0)
                        .ok_or_else(|| {
                            SpecError::Invalid(format!("PORT={p:?} is not a port number"))
                        })?,
                };
                Ok(Mode::Serve { port })
            }
            Some("invoke") => {
                let event = self.args.get(1).cloned().unwrap_or_else(|| "null".into());
                if let Err(e) = serde_json::from_str::<Value>(&event) {
                    fail!(SpecError::Invalid, "the event {event:?} is not JSON: {e}");
                }
                if self.args.len() > 2 {
                    fail!(
                        SpecError::Invalid,
                        "`invoke` takes one event (JSON), got {}",
                        self.args.len() - 1
                    );
                }
                Ok(Mode::Invoke { event })
            }
            Some(other) => fail!(
                SpecError::Invalid,
                "unknown command {other:?}: a thaw container runs `serve` (the default) or `invoke [EVENT]`"
            ),
        }
    }

    /// Whether the shim asks the daemon for a ready instance at Create
    /// (annotation `dev.thaw.prewarm`, else `THAW_PREWARM`: `true`, the
    /// default, or `false`).
    pub fn prewarm(&self) -> Result<bool> {
        let (source, raw) = match self.annotations.get(PREWARM.0) {
            Some(v) => (PREWARM.0, v.as_str()),
            None => match self.env_value(PREWARM.1) {
                Some(v) => (PREWARM.1, v),
                None => return Ok(true),
            },
        };
        match raw {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => fail!(
                SpecError::Invalid,
                "{source}: {raw:?} is neither true nor false"
            ),
        }
    }

    /// The function's settings for the daemon's deploy request: the
    /// annotations (or variables), then the container's limits: its memory
    /// limit is the function's memory unless a setting gives one (which
    /// must fit in it), its CPU quota and weight the function's.
    pub fn settings(&self) -> Result<Value> {
        let mut out = json!({});
        let mut memory_source = None;
        for (annotation, env, key) in SETTINGS {
            let (source, raw) = match self.annotations.get(annotation) {
                Some(v) => (annotation, v.as_str()),
                None => match self.env_value(env) {
                    Some(v) => (env, v),
                    None => continue,
                },
            };
            let n: u64 = raw.parse().map_err(|e| {
                SpecError::Invalid(format!("{source}: {raw:?} is not a whole number: {e}"))
            })?;
            out[key] = json!(n);
            if key == "memory_mb" {
                memory_source = Some(source);
            }
        }
        if let Some(limit) = self.resources.memory_limit {
            let limit_mb = limit >> 20;
            match (memory_source, out["memory_mb"].as_u64()) {
                (Some(source), Some(m)) if m > limit_mb => fail!(
                    SpecError::Invalid,
                    "{source} = {m} MiB does not fit in the container's memory limit of {limit} bytes ({limit_mb} MiB, the pod's resources.limits.memory): lower one or the other"
                ),
                (Some(_), _) => {}
                (None, _) => out["memory_mb"] = json!(limit_mb),
            }
        }
        if let Some(c) = self.resources.cpu_millis {
            out["cpu_millis"] = json!(c);
        }
        if let Some(w) = self.resources.cpu_weight {
            out["cpu_weight"] = json!(w);
        }
        Ok(out)
    }
}

/// The shim grouping of a bundle: its pod, else the container alone.
pub fn grouping(bundle: &Path, id: &str) -> String {
    read_json(bundle)
        .ok()
        .and_then(|v| {
            v["annotations"][SANDBOX_ID_ANNOTATION]
                .as_str()
                .map(str::to_string)
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(args: &[&str], env: &[&str], ann: &[(&str, &str)]) -> ContainerSpec {
        ContainerSpec {
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env.iter().map(|s| s.to_string()).collect(),
            root: PathBuf::from("/r"),
            annotations: ann
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            netns: Netns::Host,
            new_namespaces: Vec::new(),
            hostname: None,
            resources: Resources::default(),
        }
    }

    #[test]
    fn commands_and_their_errors() {
        assert_eq!(
            spec(&[], &[], &[]).mode().unwrap(),
            Mode::Serve { port: 8080 }
        );
        assert_eq!(
            spec(&["serve"], &["PORT=9000"], &[]).mode().unwrap(),
            Mode::Serve { port: 9000 }
        );
        assert_eq!(
            spec(&["invoke", "{\"a\":1}"], &[], &[]).mode().unwrap(),
            Mode::Invoke {
                event: "{\"a\":1}".into()
            }
        );
        for (args, env) in [
            (&["serve"][..], &["PORT=0"][..]),
            (&["serve"], &["PORT=http"]),
            (&["invoke", "{nope"], &[]),
            (&["invoke", "1", "2"], &[]),
            (&["sh"], &[]),
        ] {
            assert!(
                matches!(spec(args, env, &[]).mode(), Err(SpecError::Invalid(_))),
                "{args:?} {env:?}"
            );
        }
    }

    #[test]
    fn settings_from_annotations_over_env_and_bad_values_refused() {
        let s = spec(
            &[],
            &["THAW_MEMORY_MB=256", "THAW_TIMEOUT_MS=1000"],
            &[("dev.thaw.memory-mb", "128")],
        );
        assert_eq!(
            s.settings().unwrap(),
            json!({"memory_mb": 128, "timeout_ms": 1000})
        );
        let e = spec(&[], &[], &[("dev.thaw.max-instances", "lots")])
            .settings()
            .unwrap_err();
        assert_invalid_naming(&e, "dev.thaw.max-instances");
    }

    fn assert_invalid_naming(e: &SpecError, what: &str) {
        assert!(
            matches!(e, SpecError::Invalid(m) if m.contains(what)),
            "{e}"
        );
    }

    #[test]
    fn the_containers_limits_become_the_functions() {
        let mut s = spec(&[], &[], &[]);
        s.resources = Resources::read(&json!({
            "memory": {"limit": 256i64 << 20},
            "cpu": {"quota": 50_000, "period": 100_000, "shares": 512},
        }));
        assert_eq!(
            s.resources,
            Resources {
                memory_limit: Some(256 << 20),
                cpu_millis: Some(500),
                // runc's conversion of 512 shares
                cpu_weight: Some(20),
            }
        );
        assert_eq!(
            s.settings().unwrap(),
            json!({"memory_mb": 256, "cpu_millis": 500, "cpu_weight": 20})
        );
        // a setting that fits wins; one that does not is refused, named
        s.annotations
            .insert("dev.thaw.memory-mb".into(), "128".into());
        assert_eq!(s.settings().unwrap()["memory_mb"], 128);
        s.annotations
            .insert("dev.thaw.memory-mb".into(), "512".into());
        let e = s.settings().unwrap_err().to_string();
        assert!(
            e.contains("dev.thaw.memory-mb = 512") && e.contains("268435456"),
            "{e}"
        );
        // no limits (quota -1: unlimited; no memory limit; the kubelet's 2
        // shares of a pod without a CPU request: the least weight)
        s.annotations.clear();
        s.resources = Resources::read(&json!({"cpu": {"quota": -1, "shares": 2}}));
        assert_eq!(s.settings().unwrap(), json!({"cpu_weight": 1}));
        // no shares at all: no weight
        s.resources = Resources::read(&json!({"cpu": {"quota": -1}}));
        assert_eq!(s.settings().unwrap(), json!({}));
    }

    #[test]
    fn prewarm_is_on_unless_turned_off_and_bad_values_refused() {
        assert!(spec(&[], &[], &[]).prewarm().unwrap());
        assert!(!spec(&[], &["THAW_PREWARM=false"], &[]).prewarm().unwrap());
        let s = spec(
            &[],
            &["THAW_PREWARM=false"],
            &[("dev.thaw.prewarm", "true")],
        );
        assert!(s.prewarm().unwrap(), "the annotation wins");
        let e = spec(&[], &[], &[("dev.thaw.prewarm", "yes")])
            .prewarm()
            .unwrap_err();
        assert_invalid_naming(&e, "dev.thaw.prewarm");
    }
}
