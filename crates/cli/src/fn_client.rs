//! `thaw fn ...`: the daemon's client over its Unix socket.
use anyhow::{bail, Context, Result};
use base64::Engine as _;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use thaw_client::{Client, Target};

#[derive(Args)]
pub struct DeployArgs {
    /// Code directory, or a .py, .js or .jar file
    pub path: PathBuf,
    /// python, nodejs, java or provided (a directory with an executable `bootstrap`; default: nodejs for a .js, .mjs or .cjs file, java for a .jar, else python)
    #[arg(long)]
    pub runtime: Option<String>,
    /// module.function (Python, Node.js); package.Class::method or package.Class (Java)
    #[arg(long)]
    pub handler: String,
    /// Function name (default: the directory's or file's name)
    #[arg(long)]
    pub name: Option<String>,
    /// module.function run once at deploy, before the snapshot
    #[arg(long)]
    pub init: Option<String>,
    /// module.function run once after init, before the snapshot is taken
    #[arg(long)]
    pub before_snapshot: Option<String>,
    /// module.function run after every restore with the instance id
    #[arg(long)]
    pub after_restore: Option<String>,
    /// `required`: refuse the deploy (422) if the instance cannot be
    /// snapshotted, instead of deploying it with fresh starts
    #[arg(long)]
    pub snapshot: Option<String>,
    #[arg(long)]
    pub memory_mb: Option<u64>,
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    #[arg(long)]
    pub max_instances: Option<u32>,
    /// KEY=VALUE (repeatable)
    #[arg(long)]
    pub env: Vec<String>,
    /// KEY=VALUE, never shown by the daemon (repeatable)
    #[arg(long)]
    pub secret_env: Vec<String>,
    /// mmap, eager, uffd, reap, or boot (no snapshot); left out: chosen by
    /// the daemon's placement
    #[arg(long)]
    pub strategy: Option<thaw_worker::StartStrategy>,
    /// One of the daemon's two snapshot tiers (`--snapshot-tiers`, default
    /// tmpfs,disk); left out: chosen by the daemon's placement
    #[arg(long)]
    pub tier: Option<String>,
    /// JSON event invoked once before the snapshot
    #[arg(long)]
    pub sample_event: Option<String>,
    /// Debian package for this function only (repeatable; resolved against the runtime root)
    #[arg(long)]
    pub package: Vec<String>,
    /// Network destination the function may reach: CIDR[:PORT[-PORT]], IPv6
    /// as V6CIDR or [V6CIDR]:PORTS (repeatable). Without --egress or --dns:
    /// loopback only
    #[arg(long, value_name = "CIDR[:PORTS]")]
    pub egress: Vec<String>,
    /// The function's DNS resolver (an IPv4 or IPv6 address; port 53 elsewhere is refused)
    #[arg(long, value_name = "IP")]
    pub dns: Option<String>,
    /// Connections one instance may hold open at once (with --egress)
    #[arg(long)]
    pub max_connections: Option<u32>,
    /// Bandwidth cap per instance and direction, Mbit/s (with --egress)
    #[arg(long)]
    pub bandwidth_mbit: Option<u32>,
}

#[derive(Subcommand)]
pub enum FnCmd {
    /// Deploy a directory (packed as tar.gz) or a single .py or .js file
    Deploy(Box<DeployArgs>),
    /// Invoke NAME with an event (JSON, or @FILE); prints the result
    Invoke {
        name: String,
        #[arg(long)]
        data: Option<String>,
        /// Skip warm instances
        #[arg(long)]
        cold: bool,
        /// Print the response headers (start type, timing) to stderr
        #[arg(long, short)]
        verbose: bool,
    },
    /// List deployed functions
    List,
    /// Show one function
    Get { name: String },
    /// Remove a function, its instances and snapshots
    Rm { name: String },
    /// Restore COUNT instances ahead of traffic
    Prewarm { name: String, count: u32 },
    /// What the function printed, per invocation
    Logs {
        name: String,
        #[arg(long, default_value_t = 50)]
        tail: usize,
        /// Keep printing new output
        #[arg(long, short)]
        follow: bool,
    },
}

fn kv(list: &[String]) -> Result<serde_json::Map<String, Value>> {
    list.iter()
        .map(|s| {
            let (k, v) = s
                .split_once('=')
                .with_context(|| format!("{s:?} is not KEY=VALUE"))?;
            Ok((k.to_string(), Value::String(v.to_string())))
        })
        .collect()
}

fn read_data(d: &str) -> Result<Vec<u8>> {
    match d.strip_prefix('@') {
        Some(p) => std::fs::read(p).with_context(|| format!("reading {p}")),
        None => Ok(d.as_bytes().to_vec()),
    }
}

/// Prints a response body; a non-2xx status is an error naming it.
fn finish(r: thaw_client::Response) -> Result<()> {
    let text = match r.json() {
        Ok(v) => serde_json::to_string_pretty(&v)?,
        Err(_) => String::from_utf8_lossy(&r.body).into_owned(),
    };
    if !(200..300).contains(&r.status) {
        bail!("the daemon answered {}: {text}", r.status);
    }
    if !text.is_empty() {
        println!("{text}");
    }
    Ok(())
}

/// A single JavaScript file: a Node.js function.
/// The runtime a single file's extension names (none: the daemon's default).
fn default_runtime(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?;
    match (path.is_file(), ext) {
        (true, "js" | "mjs" | "cjs") => Some("nodejs"),
        (true, "jar") => Some("java"),
        _ => None,
    }
}

fn default_name(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub fn client(home: &Path, socket: Option<PathBuf>, cmd: FnCmd) -> Result<()> {
    let socket = socket.unwrap_or_else(|| home.join("serve").join("thaw.sock"));
    let mut c = Client::new(Target::Unix(socket));
    let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
    match cmd {
        FnCmd::Deploy(args) => {
            let DeployArgs {
                path,
                runtime,
                handler,
                name,
                init,
                before_snapshot,
                after_restore,
                snapshot,
                memory_mb,
                timeout_ms,
                max_instances,
                env,
                secret_env,
                strategy,
                tier,
                sample_event,
                package,
                egress,
                dns,
                max_connections,
                bandwidth_mbit,
            } = *args;
            let code = if path.is_dir() {
                json!({"format": "tar.gz", "data_base64": b64(&thaw_pack::pack_dir(&path)?)})
            } else {
                let data =
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let filename = path.file_name().map(|f| f.to_string_lossy().into_owned());
                json!({"format": "file", "data_base64": b64(&data), "filename": filename})
            };
            let sample: Option<Value> = match sample_event {
                Some(s) => Some(
                    serde_json::from_slice(&read_data(&s)?)
                        .context("--sample-event is not JSON")?,
                ),
                None => None,
            };
            let mut req = json!({
                "name": name.unwrap_or_else(|| default_name(&path)),
                "handler": handler,
                "code": code,
                "env": kv(&env)?,
                "secret_env": kv(&secret_env)?,
                "packages": package,
            });
            let runtime = runtime.or_else(|| default_runtime(&path).map(String::from));
            for (k, v) in [
                ("runtime", json!(runtime)),
                ("init", json!(init)),
                ("before_snapshot", json!(before_snapshot)),
                ("after_restore", json!(after_restore)),
                ("snapshot", json!(snapshot)),
                ("memory_mb", json!(memory_mb)),
                ("timeout_ms", json!(timeout_ms)),
                ("max_instances", json!(max_instances)),
                ("strategy", json!(strategy)),
                ("tier", json!(tier)),
                ("sample_event", json!(sample)),
            ] {
                if !v.is_null() {
                    req[k] = v;
                }
            }
            if !egress.is_empty() || dns.is_some() {
                req["network"] = json!({
                    "egress": egress,
                    "dns": dns,
                    "max_connections": max_connections,
                    "bandwidth_mbit": bandwidth_mbit,
                });
            } else if max_connections.is_some() || bandwidth_mbit.is_some() {
                anyhow::bail!("--max-connections and --bandwidth-mbit need --egress or --dns");
            }
            finish(c.request("POST", "/v1/functions", Some(&serde_json::to_vec(&req)?))?)
        }
        FnCmd::Invoke {
            name,
            data,
            cold,
            verbose,
        } => {
            let body = match data {
                Some(d) => read_data(&d)?,
                None => b"null".to_vec(),
            };
            let q = if cold { "?force=cold" } else { "" };
            let r = c.request(
                "POST",
                &format!("/v1/functions/{name}/invoke{q}"),
                Some(&body),
            )?;
            if verbose {
                for (k, v) in &r.headers {
                    if k.starts_with("thaw-") || k == "server-timing" {
                        eprintln!("{k}: {v}");
                    }
                }
            }
            finish(r)
        }
        FnCmd::List => finish(c.request("GET", "/v1/functions", None)?),
        FnCmd::Get { name } => finish(c.request("GET", &format!("/v1/functions/{name}"), None)?),
        FnCmd::Rm { name } => {
            finish(c.request("DELETE", &format!("/v1/functions/{name}"), None)?)
        }
        FnCmd::Prewarm { name, count } => finish(c.request(
            "PUT",
            &format!("/v1/functions/{name}/prewarm"),
            Some(&serde_json::to_vec(&json!({ "count": count }))?),
        )?),
        FnCmd::Logs { name, tail, follow } => {
            let mut after = 0u64;
            let mut first = true;
            loop {
                let path = if first {
                    format!("/v1/functions/{name}/logs?tail={tail}")
                } else {
                    format!("/v1/functions/{name}/logs?after={after}&tail=10000")
                };
                first = false;
                let r = c.request("GET", &path, None)?;
                if r.status != 200 {
                    return finish(r);
                }
                let v = r.json()?;
                for e in v["entries"].as_array().into_iter().flatten() {
                    after = after.max(e["seq"].as_u64().unwrap_or(0));
                    println!(
                        "--- {} {}",
                        e["invocation_id"].as_str().unwrap_or(""),
                        e["instance"].as_str().unwrap_or("")
                    );
                    print!("{}", e["output"].as_str().unwrap_or(""));
                    if e["truncated"].as_bool() == Some(true) {
                        println!("[output cut at the per-invocation limit]");
                    }
                }
                if !follow {
                    return Ok(());
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        }
    }
}
