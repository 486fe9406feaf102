//! `thaw serve` and `thaw fn ...` (the daemon's client).
use anyhow::{bail, Context, Result};
use base64::Engine as _;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use thaw_client::{Client, Target};

#[derive(Args)]
pub struct ServeArgs {
    /// TOML configuration file (flags override it)
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also listen on TCP, ADDR:PORT (default: $PORT on 127.0.0.1 if set)
    #[arg(long)]
    listen: Option<String>,
    /// Bearer token file for the TCP listener (required off loopback)
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Unix socket path (default HOME/serve/thaw.sock)
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Where the runtime root is built/cached (default: HOME)
    #[arg(long)]
    runtime_home: Option<PathBuf>,
    /// text or json
    #[arg(long)]
    log_format: Option<String>,
    /// RAM for instances, MiB
    #[arg(long)]
    memory_budget_mb: Option<u64>,
    /// What idle instances are charged in that budget: measured (their own
    /// pages, the snapshot's shared pages once per function) or declared
    /// (their memory_mb)
    #[arg(long)]
    memory_accounting: Option<String>,
    /// Keep-alive policy: ttl, lru-mem, tiered-lru, greedy-dual, tiered-greedy-dual
    #[arg(long)]
    policy: Option<String>,
    /// ttl: seconds an idle instance stays warm
    #[arg(long)]
    keep_alive_s: Option<u64>,
    /// The two snapshot tiers, FAST,SLOW (default tmpfs,disk; SLOW may be
    /// remote: restores from it stream)
    #[arg(long)]
    snapshot_tiers: Option<String>,
    /// Share snapshots with other nodes through the remote SLOW tier:
    /// publish what this node takes, restore what another node published
    /// (every node needs the same HOME/remote.key)
    #[arg(long)]
    shared_snapshots: bool,
    /// A directory whose subdirectories (containers' root filesystems) the
    /// containerd shim may have the daemon import (repeatable; default
    /// /run/containerd)
    #[arg(long = "image-roots-from")]
    image_roots_from: Vec<PathBuf>,
}

pub fn serve(home: Option<PathBuf>, a: ServeArgs) -> Result<()> {
    let mut cfg = match &a.config {
        Some(p) => thaw_server::Config::from_file(p)?,
        None => thaw_server::Config::default(),
    };
    if let Some(h) = home {
        cfg.home = h;
    }
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = a.$f { cfg.$f = v.into(); } )* };
    }
    set!(listen, token_file, socket, runtime_home);
    if let Some(v) = a.log_format {
        cfg.log_format = v;
    }
    if let Some(v) = a.memory_budget_mb {
        cfg.memory_budget_mb = v;
    }
    if let Some(v) = a.memory_accounting {
        cfg.memory_accounting = v;
    }
    if let Some(v) = a.policy {
        cfg.policy = v;
    }
    if let Some(v) = a.keep_alive_s {
        cfg.keep_alive_s = v;
    }
    if let Some(v) = a.snapshot_tiers {
        cfg.snapshot_tiers = thaw_server::config::SnapshotTiers::parse(&v)?;
    }
    if a.shared_snapshots {
        cfg.shared_snapshots = true;
    }
    if !a.image_roots_from.is_empty() {
        cfg.image_roots_from = a.image_roots_from;
    }
    Ok(thaw_server::serve_forever(cfg)?)
}

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

#[derive(Args)]
pub struct BenchServeArgs {
    /// Function of the suite, deployed through the API as a user function
    #[arg(long, default_value = "helloworld")]
    function: String,
    /// Sequential warm invocations per path
    #[arg(long, default_value_t = 2000)]
    warm_runs: usize,
    /// Restore starts per path
    #[arg(long, default_value_t = 30)]
    restore_runs: usize,
    /// Concurrent clients for the throughput run
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// Length of the throughput run
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn bench(home: &Path, a: BenchServeArgs) -> Result<()> {
    let o = thaw_bench_serve::serve::Options {
        function: a.function,
        warm_runs: a.warm_runs.max(1),
        restore_runs: a.restore_runs.max(1),
        clients: a.clients.max(1),
        seconds: a.seconds.max(0.1),
    };
    let r = thaw_bench_serve::serve::run(home, &o)?;
    emit_report(
        &thaw_bench_serve::serve::markdown(&r),
        &r,
        a.json,
        a.markdown,
    )
}

#[derive(Args)]
pub struct BenchEstimatesArgs {
    /// Suite functions, comma-separated (each with a built-in sample event)
    #[arg(long, default_value = "helloworld,matmul,linpack")]
    functions: String,
    /// Tiers to deploy on, comma-separated [default: the daemon's snapshot tiers]
    #[arg(long)]
    tiers: Option<String>,
    /// Restore starts per function and tier: the first half recalibrates, the second is measured
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn bench_estimates(home: &Path, a: BenchEstimatesArgs) -> Result<()> {
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    };
    let o = thaw_bench_serve::estimates::Options {
        functions: list(&a.functions),
        tiers: a.tiers.as_deref().map(list).unwrap_or_default(),
        runs: a.runs,
    };
    let r = thaw_bench_serve::estimates::run(home, &o)?;
    emit_report(
        &thaw_bench_serve::estimates::markdown(&r),
        &r,
        a.json,
        a.markdown,
    )
}

#[derive(Args)]
pub struct BenchDensityArgs {
    /// Hello-world functions deployed
    #[arg(long, default_value_t = 40)]
    functions: u32,
    /// Instances prewarmed per function (at most 64, the prewarm limit)
    #[arg(long, default_value_t = 50)]
    per_function: u32,
    /// MiB of state each function makes at import (random bytes)
    #[arg(long, default_value_t = 0)]
    state_mb: u32,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn bench_density(home: &Path, a: BenchDensityArgs) -> Result<()> {
    if a.functions == 0 || !(1..=64).contains(&a.per_function) || a.state_mb > 4096 {
        bail!("--functions must be > 0, --per-function in 1..=64 and --state-mb at most 4096");
    }
    let o = thaw_bench_serve::capacity::DensityOptions {
        functions: a.functions,
        per_function: a.per_function,
        state_mb: a.state_mb,
    };
    let r = thaw_bench_serve::capacity::density(home, &o)?;
    let md = thaw_bench_serve::capacity::density_markdown(&r);
    emit_report(&md, &r, a.json, a.markdown)
}

#[derive(Args)]
pub struct BenchBurstArgs {
    /// Requests sent at once, one burst per size and run
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    sizes: Vec<usize>,
    /// Runs per size (each beside a prewarm of the same count)
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// The function's max_instances
    #[arg(long, default_value_t = 64)]
    max_instances: u32,
    /// The function's memory_mb (default: the daemon's)
    #[arg(long)]
    memory_mb: Option<u32>,
    /// Send every request with ?force=cold, so each restores an instance of
    /// its own rather than reusing one that went idle
    #[arg(long)]
    cold: bool,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn bench_burst(home: &Path, a: BenchBurstArgs) -> Result<()> {
    if a.runs == 0 || a.sizes.iter().any(|&n| n == 0 || n > 4096) {
        bail!("--runs must be > 0 and every size in 1..=4096");
    }
    let o = thaw_bench_serve::capacity::BurstOptions {
        sizes: a.sizes,
        runs: a.runs,
        max_instances: a.max_instances,
        memory_mb: a.memory_mb,
        cold: a.cold,
    };
    let r = thaw_bench_serve::capacity::burst(home, &o)?;
    let md = thaw_bench_serve::capacity::burst_markdown(&r);
    emit_report(&md, &r, a.json, a.markdown)
}

#[derive(Args)]
pub struct BenchEgressArgs {
    /// Cold starts per variant (with egress, without)
    #[arg(long, default_value_t = 40)]
    cold_runs: usize,
    /// Size of each streamed HTTP body
    #[arg(long, default_value_t = 1024)]
    stream_mib: u64,
    #[arg(long, default_value_t = 5)]
    stream_runs: usize,
    /// Connections per path for connect + first byte
    #[arg(long, default_value_t = 300)]
    connect_runs: usize,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn bench_egress(home: &Path, a: BenchEgressArgs) -> Result<()> {
    let o = thaw_bench_serve::egress::Options {
        cold_runs: a.cold_runs.max(1),
        stream_mib: a.stream_mib.max(1),
        stream_runs: a.stream_runs.max(1),
        connect_runs: a.connect_runs.max(1),
    };
    let r = thaw_bench_serve::egress::run(home, &o)?;
    emit_report(
        &thaw_bench_serve::egress::markdown(&r),
        &r,
        a.json,
        a.markdown,
    )
}

#[derive(Args)]
pub struct BenchLambdaArgs {
    /// Cold invokes per API (alternating)
    #[arg(long, default_value_t = 40)]
    cold_runs: usize,
    /// Seconds of warm load on each API (in two halves, alternating with the other API)
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Client threads of the warm load
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Fresh start / restore pairs of each custom runtime (Go, Rust); 0 skips them
    #[arg(long, default_value_t = 30)]
    custom_runs: usize,
    /// Only the custom runtimes (no boto3 phases)
    #[arg(long, conflicts_with = "peers_only")]
    custom_only: bool,
    /// Cold rounds beside AWS's Runtime Interface Emulator (each function
    /// restored on thaw, started on RIE); 0 skips the peer
    #[arg(long, default_value_t = 20)]
    peer_runs: usize,
    /// Warm calls of each function on thaw and on RIE
    #[arg(long, default_value_t = 200)]
    peer_warm_calls: usize,
    /// The peer's daemon's `limits.sandbox_pool` (sandboxes built ahead of restores)
    #[arg(long, default_value_t = 0)]
    peer_sandbox_pool: usize,
    /// Only the peer (RIE beside thaw)
    #[arg(long)]
    peers_only: bool,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn bench_lambda(home: &Path, a: BenchLambdaArgs) -> Result<()> {
    use thaw_bench_serve::lambda;
    let o = lambda::Options {
        cold_runs: a.cold_runs.max(1),
        warm_seconds: a.seconds.max(1.0),
        threads: a.threads.clamp(1, 64),
    };
    let api = match a.custom_only || a.peers_only {
        true => None,
        false => Some(lambda::run(home, &o)?),
    };
    let custom = match a.custom_runs {
        _ if a.peers_only => Vec::new(),
        0 => Vec::new(),
        n => {
            // snapshots on tmpfs, as the daemon's DRAM tier
            let scratch = PathBuf::from(format!(
                "/dev/shm/thaw-bench-lambda-custom-{}",
                std::process::id()
            ));
            thaw_store::secure::ensure_private_dir(&scratch)?;
            let r = thaw_bench_serve::lambda_provided::run(home, &scratch, n);
            let _ = thaw_store::secure::remove_tree(&scratch);
            r?
        }
    };
    let peers = match a.peer_runs {
        _ if a.custom_only => None,
        0 => None,
        runs => Some(thaw_bench_serve::lambda_peers::run(
            home,
            &thaw_bench_serve::lambda_peers::Options {
                runs,
                warm_calls: a.peer_warm_calls.max(1),
                sandbox_pool: a.peer_sandbox_pool,
            },
        )?),
    };
    let mut md = api.as_ref().map(lambda::markdown).unwrap_or_default();
    if !custom.is_empty() {
        md += &format!("\n{}", thaw_bench_serve::lambda_provided::markdown(&custom));
    }
    if let Some(p) = &peers {
        md += &format!("\n{}", thaw_bench_serve::lambda_peers::markdown(p));
    }
    #[derive(serde::Serialize)]
    struct LambdaBench {
        api: Option<lambda::Report>,
        custom: Vec<thaw_bench_serve::lambda_provided::ProvidedReport>,
        peers: Option<thaw_bench_serve::lambda_peers::PeersReport>,
    }
    emit_report(&md, &LambdaBench { api, custom, peers }, a.json, a.markdown)
}

/// Prints a benchmark's markdown table and writes it and the JSON report
/// where asked.
pub fn emit_report(
    md: &str,
    report: &impl serde::Serialize,
    json: Option<PathBuf>,
    markdown: Option<PathBuf>,
) -> Result<()> {
    thaw_bench::report::emit(md, report, json.as_deref(), markdown.as_deref())?;
    Ok(())
}
