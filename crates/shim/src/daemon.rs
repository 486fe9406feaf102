//! The node's `thaw serve`, as the shim and the front talk to it: its Unix
//! socket, deploying an image's function once, invoking it, and the
//! function's output of one invocation.
use base64::Engine as _;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_client::{Client, Response, Target};
use thaw_error::{fail, Context, ResultExt};
use thaw_pack::image;

/// Why the node's daemon did not deploy, invoke or answer as asked.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// nothing answers on the daemon's socket
    #[error("the node's thaw daemon does not answer on {} (is `thaw serve` running there?)", socket.display())]
    Unreachable {
        socket: PathBuf,
        #[source]
        source: thaw_client::Error,
    },
    /// the daemon answered with an error (its status and message)
    #[error("{0}")]
    Refused(String),
    /// the image holds no function's code
    #[error("{0}")]
    NoCode(String),
    /// the daemon kept answering 503 with a Retry-After (the function's
    /// lock held by another deploy of it or a snapshot move, its memory
    /// budget full, or another import copying the same root) until the
    /// shim's deadline
    #[error("the node's thaw daemon stayed busy with {what}: {attempts} attempts in {:.1} s, the shim's limit for a busy daemon; its last answer: {reason}", waited.as_secs_f64())]
    Busy {
        /// what was asked for: `function NAME`, or the image's root
        what: String,
        attempts: u32,
        waited: Duration,
        reason: String,
    },
    /// packing the code or reading an answer
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = DaemonError> = std::result::Result<T, E>;

/// The daemon's socket: `$THAW_SOCKET`, else `$THAW_HOME/serve/thaw.sock`,
/// else the default home's (containerd passes its environment to shims).
pub fn socket() -> PathBuf {
    if let Some(s) = std::env::var_os("THAW_SOCKET").filter(|s| !s.is_empty()) {
        return PathBuf::from(s);
    }
    let home = std::env::var_os("THAW_HOME")
        .filter(|s| !s.is_empty())
        .map_or_else(|| PathBuf::from("/var/lib/thaw"), PathBuf::from);
    home.join("serve").join("thaw.sock")
}

fn request(socket: &Path, method: &str, path: &str, body: Option<&[u8]>) -> Result<Response> {
    Client::new(Target::Unix(socket.to_path_buf()))
        .request(method, path, body)
        .map_err(|source| DaemonError::Unreachable {
            socket: socket.to_path_buf(),
            source,
        })
}

/// The daemon's error message of a failed answer.
pub fn error_message(r: &Response) -> String {
    r.json()
        .ok()
        .and_then(|v| {
            let msg = v["message"].as_str()?.to_string();
            Some(match v["error"].as_str() {
                Some(code) => format!("{code}: {msg}"),
                None => msg,
            })
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&r.body).into_owned())
}

/// The JSON of a 200 answer to `what`; any other is refused with the
/// daemon's message.
fn answer_json(r: &Response, what: &str) -> Result<Value> {
    if r.status != 200 {
        fail!(DaemonError::Refused, "{what}: {}", error_message(r));
    }
    Ok(r.json()
        .with_context(|| format!("the daemon's answer to {what}"))?)
}

/// The function a container runs.
pub struct Function {
    pub handler: String,
    pub init: Option<String>,
    /// memory_mb, timeout_ms, max_instances as the container gives them.
    pub settings: Value,
    /// The key of the image's root filesystem the daemon imported
    /// ([`import_root`]); none: the function runs on thaw's runtime root.
    pub root: Option<String>,
}

/// Whether the image brings a root filesystem of its own: anything at
/// its top besides `/function` (an image of only the code runs on thaw's
/// runtime root).
pub fn has_own_root(root: &Path) -> std::io::Result<bool> {
    for e in std::fs::read_dir(root)? {
        if e?.file_name() != image::CODE_DIR {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Has the daemon copy the container's root filesystem `rootfs` (once per
/// `key`, a digest of the image's layers; none: the daemon names it by its
/// contents) and returns its key there.
pub fn import_root(socket: &Path, rootfs: &Path, key: Option<&str>) -> Result<String> {
    import_root_within(socket, rootfs, key, BUSY_DEADLINE)
}

/// [`import_root`], asking again while another import of the key copies
/// it past the daemon's `limits.lock_wait_ms` (a 503 with a Retry-After),
/// until `deadline` has passed since the first attempt.
pub fn import_root_within(
    socket: &Path,
    rootfs: &Path,
    key: Option<&str>,
    deadline: Duration,
) -> Result<String> {
    let body = serde_json::to_vec(&json!({"path": rootfs, "key": key}))
        .context("encoding the root import request")?;
    let t0 = Instant::now();
    let mut attempts = 0;
    let r = loop {
        attempts += 1;
        let r = request(socket, "POST", "/v1/roots", Some(&body))?;
        if r.status == 200 || r.status == 201 {
            break r;
        }
        let root = || {
            format!(
                "the image's root filesystem ({})",
                key.unwrap_or("by its contents")
            )
        };
        wait_while_busy(
            &r,
            "the image's root filesystem",
            root,
            (t0, deadline, attempts),
        )?;
    };
    let v = r.json().context("the daemon's root import answer")?;
    match v["key"].as_str() {
        Some(k) => Ok(k.to_string()),
        None => fail!(
            DaemonError::Refused,
            "the node's thaw daemon named no key for the imported root: {v}"
        ),
    }
}

/// A function the daemon has, as the shim deployed or found it.
pub struct Deployed {
    pub name: String,
    /// What the container's log should say about its snapshot: why the
    /// node did not restore the one another node published, if it did not.
    pub notice: Option<String>,
}

impl Deployed {
    fn from_answer(name: String, r: &Response) -> Deployed {
        let v = r.json().unwrap_or_default();
        let notice = (v["shared"]["role"] == "refused").then(|| {
            format!(
                "{name}: {}",
                v["shared"]["reason"]
                    .as_str()
                    .unwrap_or("the shared snapshot was refused")
            )
        });
        Deployed { name, notice }
    }
}

/// How long the shim keeps deploying a container's function while the
/// daemon answers 503 with a Retry-After (it waits `limits.lock_wait_ms`
/// itself before each such answer): under the kubelet's two-minute
/// runtime request timeout.
pub const BUSY_DEADLINE: Duration = Duration::from_secs(100);

/// Deploys the function in `root/function` unless the daemon has it. Its
/// name there is `img-` and a digest of its code and settings, so every
/// container of the same image and settings shares one snapshot.
pub fn ensure_deployed(
    socket: &Path,
    root: &Path,
    f: &Function,
    steps: &mut crate::service::Steps,
) -> Result<Deployed> {
    ensure_deployed_within(socket, root, f, steps, BUSY_DEADLINE)
}

/// [`ensure_deployed`], retrying while the daemon is busy (a 503 with a
/// Retry-After: another deploy of the function or a snapshot move holds
/// its lock) until `deadline` has passed since the first attempt: each
/// retry looks the function up again first (another pod's deploy of the
/// same image may have been what held it).
pub fn ensure_deployed_within(
    socket: &Path,
    root: &Path,
    f: &Function,
    steps: &mut crate::service::Steps,
    deadline: Duration,
) -> Result<Deployed> {
    let code_dir = root.join(image::CODE_DIR);
    if !code_dir.is_dir() {
        fail!(
            DaemonError::NoCode,
            "the image has no /{} directory with the function's code (build it with `thaw image build`)",
            image::CODE_DIR
        );
    }
    let code = thaw_pack::pack_dir(&code_dir)
        .map_err(|e| Context::new(format!("packing {}", code_dir.display()), e))?;
    deploy_code(socket, code, f, steps, deadline)
}

/// [`ensure_deployed_within`] for code already packed (the image's
/// `/function` as [`thaw_pack::pack_dir`] packs it).
pub fn deploy_code(
    socket: &Path,
    code: Vec<u8>,
    f: &Function,
    steps: &mut crate::service::Steps,
    deadline: Duration,
) -> Result<Deployed> {
    let mut settings = f.settings.clone();
    settings["handler"] = json!(f.handler);
    settings["init"] = json!(f.init);
    if let Some(k) = &f.root {
        settings["root"] = json!(k);
    }
    let name = format!("img-{}", &image::function_key(&code, &settings)[..24]);
    steps.done("pack");
    // pods of one image starting at once: the first deploy makes the
    // version, the others find it (409 `exists`) and use it
    let mut req = json!({
        "name": name,
        "only_if_absent": true,
        "handler": f.handler,
        "code": {
            "format": "tar.gz",
            "data_base64": base64::engine::general_purpose::STANDARD.encode(&code),
        },
    });
    if let Some(i) = &f.init {
        req["init"] = json!(i);
    }
    if let Some(k) = &f.root {
        req["root"] = json!(k);
    }
    if let Some(s) = f.settings.as_object() {
        for (k, v) in s {
            req[k] = v.clone();
        }
    }
    let body = serde_json::to_vec(&req).context("encoding the function's deploy request")?;
    let t0 = Instant::now();
    let mut attempts = 0;
    loop {
        let existing = request(socket, "GET", &format!("/v1/functions/{name}"), None)?;
        if attempts == 0 {
            steps.done("lookup");
        }
        match existing.status {
            200 => return Ok(Deployed::from_answer(name, &existing)),
            404 => {}
            s => fail!(
                DaemonError::Refused,
                "the node's thaw daemon answered {s} for {name}: {}",
                error_message(&existing)
            ),
        }
        attempts += 1;
        let r = request(socket, "POST", "/v1/functions", Some(&body))?;
        if r.status == 200 || r.status == 201 {
            steps.done("deploy");
            return Ok(Deployed::from_answer(name, &r));
        }
        let exists = r.status == 409 && r.json().is_ok_and(|v| v["error"] == "exists");
        if exists && t0.elapsed() < deadline {
            continue; // another pod's deploy made it meanwhile
        }
        let function = || format!("function {name}");
        wait_while_busy(&r, "the function", function, (t0, deadline, attempts))?;
    }
}

/// After an answer that is neither a success nor settled otherwise: waits
/// out a busy daemon's Retry-After (the caller then asks again), unless
/// that passes `deadline` since `t0` (then [`DaemonError::Busy`] naming
/// `busy_with`); any other answer is the daemon's refusal of `asked`.
fn wait_while_busy(
    r: &Response,
    asked: &str,
    busy_with: impl FnOnce() -> String,
    (t0, deadline, attempts): (Instant, Duration, u32),
) -> Result<()> {
    let Some(pause) = busy_pause(r) else {
        fail!(
            DaemonError::Refused,
            "the node's thaw daemon refused {asked} ({}): {}",
            r.status,
            error_message(r)
        );
    };
    if t0.elapsed() + pause > deadline {
        return Err(DaemonError::Busy {
            what: busy_with(),
            attempts,
            waited: t0.elapsed(),
            reason: error_message(r),
        });
    }
    log::info!(
        "thaw: the daemon is busy with {asked} ({}); asking again in {} s",
        error_message(r),
        pause.as_secs()
    );
    std::thread::sleep(pause);
    Ok(())
}

/// How long to wait before asking again, if the daemon answered busy (a
/// 503 with a Retry-After in seconds; at least one).
fn busy_pause(r: &Response) -> Option<Duration> {
    let secs = (r.status == 503)
        .then(|| r.header("retry-after")?.trim().parse::<u64>().ok())
        .flatten()?;
    Some(Duration::from_secs(secs.max(1)))
}

/// One invocation; the daemon restores an instance if none is warm.
pub fn invoke(socket: &Path, function: &str, event: &[u8]) -> Result<Response> {
    request(
        socket,
        "POST",
        &format!("/v1/functions/{function}/invoke"),
        Some(event),
    )
}

/// A GET that must answer 200 with JSON (`what` names it in errors).
fn get_json(socket: &Path, path: &str, what: &str) -> Result<Value> {
    answer_json(&request(socket, "GET", path, None)?, what)
}

/// Asks the daemon to have an instance of `function` ready (restored and
/// idle) unless one is live already: the pod was started because requests
/// are coming. The daemon decides within its caps and memory budget.
pub fn prewarm(socket: &Path, function: &str) -> Result<()> {
    let r = request(
        socket,
        "PUT",
        &format!("/v1/functions/{function}/prewarm"),
        Some(br#"{"count": 1}"#),
    )?;
    let v = answer_json(&r, &format!("prewarming {function}"))?;
    if let Some(e) = v["errors"].as_array().and_then(|a| a.first()) {
        fail!(DaemonError::Refused, "prewarming {function}: {e}");
    }
    Ok(())
}

/// What the function wrote to stdout/stderr during one invocation.
pub fn invocation_output(socket: &Path, function: &str, invocation_id: &str) -> Result<String> {
    let id: String = invocation_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    let v = get_json(
        socket,
        &format!("/v1/functions/{function}/logs?invocation_id={id}"),
        &format!("logs of {function}"),
    )?;
    Ok(v["entries"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["output"].as_str()).collect())
        .unwrap_or_default())
}

/// What the function's instances on the node use (the daemon's
/// `GET /v1/functions/NAME/stats`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub instances: u64,
    pub memory_bytes: u64,
    /// each instance's memory limit
    pub memory_limit_bytes: u64,
    /// CPU time of all its instances since the daemon started (only grows)
    pub cpu_ns: u64,
}

pub fn usage(socket: &Path, function: &str) -> Result<Usage> {
    let v = get_json(
        socket,
        &format!("/v1/functions/{function}/stats"),
        &format!("stats of {function}"),
    )?;
    let n = |x: &Value| x.as_u64().unwrap_or(0);
    Ok(Usage {
        instances: n(&v["usage"]["instances"]),
        memory_bytes: n(&v["usage"]["memory_bytes"]),
        memory_limit_bytes: n(&v["memory_limit_bytes"]),
        cpu_ns: n(&v["usage"]["cpu_ns"]),
    })
}
