//! The one `thaw` binary.
use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use thaw_bench::start::{Start, StartType};
use thaw_runtime::InputSize;
use thaw_worker::RestoreRequest;
use thaw_worker::StrategyKind;

mod concurrency;
mod cri;
mod demo;
mod hierarchy;
mod place;
mod runtime;
mod serve;
mod store_cmds;
mod tiers;
mod xdt;

#[derive(Parser)]
#[command(
    name = "thaw",
    version,
    about = "serverless function snapshots: sandbox, restore strategies, bench and fleet simulator"
)]
struct Cli {
    /// State directory (runtime roots, disk-tier snapshots); default $THAW_HOME or /var/lib/thaw
    #[arg(long, global = true)]
    home: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build what is needed, snapshot and restore real functions, print a results table
    Demo {
        /// Comma-separated functions (default: the whole suite)
        #[arg(long)]
        functions: Option<String>,
        #[arg(long, default_value = "tmpfs")]
        tier: String,
        #[arg(long, value_enum, default_value = "I")]
        size: InputSize,
    },
    /// Runtime root and function suite: build, verify, functions, check, info, figures
    Runtime {
        #[command(subcommand)]
        cmd: runtime::RuntimeCmd,
    },
    /// Start FUNCTION, run its init and snapshot it onto a tier
    Deploy {
        function: String,
        #[arg(long, default_value = "tmpfs")]
        tier: String,
    },
    /// Restore FUNCTION from its snapshot (deploying it if needed) and invoke it once
    Invoke {
        function: String,
        #[arg(long, value_enum, default_value = "I")]
        size: InputSize,
        /// A restore strategy, or a start type without a snapshot
        #[arg(long, value_enum, default_value = "mmap")]
        strategy: Start,
        /// A local tier, or the remote one: then the restore streams
        /// (working set first; uffd or reap)
        #[arg(long, default_value = "tmpfs")]
        tier: String,
        /// Verify the output with the function's checker
        #[arg(long)]
        check: bool,
    },
    /// Storage tiers: list, setup, teardown, probe (`thaw tier --help`)
    Tier {
        #[command(subcommand)]
        cmd: tiers::TierCmd,
    },
    /// TOSS: profile FUNCTION's snapshot and split its pages between a fast and a slow tier
    Split {
        function: String,
        /// Tier holding the snapshot and the fast file (byte-addressable: dram or pmem)
        #[arg(long, default_value = "tmpfs")]
        fast: String,
        /// Tier holding the slow file: pmem (mapped in place) or a block tier
        /// (disk, nvme, sata, hdd: its pages fault in)
        #[arg(long, default_value = "disk")]
        slow: String,
        /// Input sizes to profile with (default: all of the function's)
        #[arg(long)]
        sizes: Option<String>,
        /// Invocations per size (each one is a profiling epoch)
        #[arg(long, default_value_t = 2)]
        reps: usize,
        /// Fast-tier price per MiB relative to the slow tier [default: the
        /// tiers' configured prices]
        #[arg(long)]
        price_ratio: Option<f64>,
        /// Time a slow-tier page costs on first touch, in microseconds
        /// [default: the slow tier's probed page fault (`thaw tier probe`),
        /// else its declared 4K latency]
        #[arg(long)]
        slow_fault_us: Option<f64>,
        /// Bound on the estimated slowdown ("inf": TOSS's plain minimum-cost placement)
        #[arg(long, default_value_t = 1.10)]
        max_slowdown: f64,
    },
    /// Choose each function's tier and restore strategy from its measured profile
    Place {
        /// Functions, comma-separated (or --all)
        functions: Option<String>,
        /// The whole suite
        #[arg(long)]
        all: bool,
        /// Print every tier's estimate and the reasoning
        #[arg(long)]
        explain: bool,
        /// Expected cold starts per hour per function
        #[arg(long, default_value_t = 60.0)]
        rate: f64,
        /// A tier qualifies if its estimated cold start is within this factor of the fastest
        #[arg(long, default_value_t = 1.3)]
        max_slowdown: f64,
        /// Tier the profile is measured on
        #[arg(long, default_value = "disk")]
        profile_tier: String,
        /// Write the measured profiles and the tiers to this file, for
        /// `thaw sim --placement FILE`
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// Inspect snapshots
    Snapshot {
        #[command(subcommand)]
        cmd: SnapCmd,
    },
    /// Crash cleanup: remove what dead workers left (cgroups, logs, staging, unused versions)
    Gc,
    /// Benchmarks
    Bench {
        #[command(subcommand)]
        cmd: BenchCmd,
    },
    /// Open-loop load generator against an invoke API (docs/LOAD.md)
    ///
    /// Requests leave at their scheduled times whether or not earlier ones
    /// have answered, and latency is measured from the scheduled time, so a
    /// stalled target shows its stall.
    Load(Box<thaw_load::cli::Args>),
    /// Run the worker daemon: HTTP API for deploying and invoking functions (docs/API.md)
    Serve(serve::ServeArgs),
    /// Client of a running `thaw serve`: deploy, invoke, list, rm, logs
    Fn {
        /// The daemon's socket (default HOME/serve/thaw.sock)
        #[arg(long)]
        socket: Option<PathBuf>,
        #[command(subcommand)]
        cmd: serve::FnCmd,
    },
    /// Functions as OCI images (for the containerd shim, docs/KUBERNETES.md)
    Image {
        #[command(subcommand)]
        cmd: ImageCmd,
    },
    /// AWS Lambda's API on the daemon's TCP listener (docs/LAMBDA.md)
    Lambda {
        #[command(subcommand)]
        cmd: LambdaCmd,
    },
    /// Trace-driven fleet simulator: one run, or `thaw sim sweep` over several (docs/SIMULATOR.md)
    Sim(Box<thaw_sim::cli::SimCmd>),
}

#[derive(Subcommand)]
enum LambdaCmd {
    /// Print the access key Lambda clients sign with (made on first use),
    /// as environment assignments: `export $(thaw lambda credentials)`
    Credentials,
}

#[derive(Subcommand)]
enum ImageCmd {
    /// Pack a function's code directory into an OCI image archive
    /// (`ctr images import` accepts it): thaw's runtime root as its base
    /// layer (the function runs on the image's root filesystem) and the code
    Build {
        /// The function's code (the handler's module at its top)
        dir: PathBuf,
        /// module.function
        #[arg(long)]
        handler: String,
        /// module.function run once before the snapshot
        #[arg(long)]
        init: Option<String>,
        /// The image's reference (default thaw.local/DIRNAME:latest)
        #[arg(long)]
        tag: Option<String>,
        /// The archive to write (default DIRNAME.oci.tar)
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Only the code: the node's daemon supplies the root filesystem
        /// (its runtime root)
        #[arg(long)]
        code_only: bool,
    },
}

#[derive(Subcommand)]
enum SnapCmd {
    /// Check a snapshot's ownership and its manifest, state and memory checksums
    /// (DIR: a version directory, or a function's directory for its published version)
    Verify { dir: PathBuf },
    /// List snapshots on a tier
    List {
        #[arg(long, default_value = "tmpfs")]
        tier: String,
    },
    /// Move a snapshot between tiers (copy, verify, switch, delete; crash-safe)
    Move {
        /// Function (or snapshot directory name)
        function: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
    },
    /// Copy a snapshot onto another tier, keeping the source (e.g. fetch from remote to restore);
    /// what a cold start reads first travels first
    Get {
        function: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        /// Tiers to copy from instead, in order, when --from fails (down, slow, dropped
        /// mid-transfer, or a copy that fails verification)
        #[arg(long)]
        fallback: Option<String>,
    },
    /// The tiers holding a function's snapshot (finishing interrupted moves first)
    Where { function: String },
}

/// What every benchmark takes: inputs, repetitions, outputs.
#[derive(clap::Args)]
pub(crate) struct RunOpts {
    /// Input sizes, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_value = "I")]
    pub(crate) sizes: Vec<InputSize>,
    #[arg(long, default_value_t = 10)]
    pub(crate) runs: usize,
    /// Write one JSON object per run here
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Write the markdown report here (it is printed either way)
    #[arg(long)]
    pub(crate) markdown: Option<PathBuf>,
    /// Take fresh snapshots first
    #[arg(long)]
    pub(crate) redeploy: bool,
}

impl RunOpts {
    /// Prints the report and writes it where asked.
    pub(crate) fn emit(&self, md: &str) -> Result<()> {
        thaw_output::outln!("{md}");
        if let Some(p) = &self.markdown {
            std::fs::write(p, md).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    }
}

#[derive(Subcommand)]
enum BenchCmd {
    /// First use of a DRAM-tier image: hash only (baseline) vs. hash + copy into a sealed memfd
    Store {
        #[arg(long, default_value = "helloworld,lr_serving,matmul")]
        functions: String,
        #[arg(long, default_value_t = 10)]
        runs: usize,
        /// Write the markdown table here (it is printed either way)
        #[arg(long)]
        markdown: Option<PathBuf>,
    },
    /// Decode time of each function's snapshot process state (header, checksum, parse, checks)
    StateDecode {
        #[arg(long, default_value = "helloworld,node_helloworld")]
        functions: String,
        #[arg(long, default_value_t = 1000)]
        runs: usize,
        /// Write the markdown table here (it is printed either way)
        #[arg(long)]
        markdown: Option<PathBuf>,
    },
    /// N simultaneous cold starts (N = 1, 2, 4, ...) per strategy, tier and mode
    Concurrency(concurrency::Args),
    /// The study of "FaaS in the Age of (sub-)µs I/O" over the storage hierarchy: cold/warm starts per tier, device ratios, REAP vs mmap
    Hierarchy(hierarchy::Args),
    /// The daemon: warm latency and throughput over HTTP vs. in-process, restore via the API vs. direct
    Serve(serve::BenchServeArgs),
    /// Placement's cold-start estimates against the restores the daemon serves, at deploy and recalibrated, per function and tier
    Estimates(serve::BenchEstimatesArgs),
    /// Idle instances one node holds: hello-world functions prewarmed, measured memory per instance beside the kernel's, declared accounting as the baseline
    Density(serve::BenchDensityArgs),
    /// Requests sent at once to a function with no live instance, against a prewarm of the same count
    Burst(serve::BenchBurstArgs),
    /// Network egress: cold start with and without, streaming from a test host, connect + first byte vs a plain process
    Egress(serve::BenchEgressArgs),
    /// Lambda's API through boto3 against thaw's own API on one Python hello
    /// world: cold (restore) invokes alternating, warm req/s from N threads
    Lambda(serve::BenchLambdaArgs),
    /// Simulated vs live: one synthetic day through `thaw sim` and through `thaw load` against a `thaw serve` it starts
    Simlive(thaw_simlive::Args),
    /// Keep-alive live: an Azure 2021 trace replayed through `thaw load` against the daemon with idle instances charged their declared memory, then what they hold; start types counted
    Keepalive(thaw_simlive::keepalive::Args),
    /// XDT: 1-1 transfers between functions by reference vs. inline in the event
    Xdt(xdt::BenchXdtArgs),
    /// Kubernetes' path: pod start to first HTTP response through CRI (gRPC, as the kubelet; or crictl), runc vs thaw; pods at once; a node restoring another node's snapshot
    Cri(cri::BenchCriArgs),
    /// Kubernetes' path through a real kubelet: `kubectl scale` 0 -> 1 to the first HTTP answer via the pod IP, a function on thaw vs on runc vs a runc pod that answers at once; with --two-nodes, a node restoring another node's snapshot and the snapshot labels' affinity
    Kube(cri::BenchKubeArgs),
    /// Cold starts from snapshots per strategy vs. a fresh start
    Restore {
        #[arg(long, default_value = "helloworld,lr_serving")]
        functions: String,
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "eager,mmap,uffd"
        )]
        strategies: Vec<StrategyKind>,
        /// Baselines measured beside the strategies (fresh is always measured)
        #[arg(long, value_enum, value_delimiter = ',', default_value = "fresh")]
        start_types: Vec<StartType>,
        /// A tier name (thaw tier list)
        #[arg(long, default_value = "tmpfs")]
        tier: String,
        /// `tiered`: the tier its slow file goes on (pmem: mapped in place;
        /// disk or another block tier: faulted in); --tier holds the fast one
        #[arg(long, default_value = "disk")]
        slow: String,
        #[command(flatten)]
        run: RunOpts,
        /// Run the checker on every output, not just the first
        #[arg(long)]
        check_all: bool,
        /// Sandboxes built ahead of restores (namespaces, mounts, cgroups, the
        /// restorer waiting for its plan), refilled in the background and
        /// waited for before each measured restore; 0 builds each on the
        /// critical path
        #[arg(long, default_value_t = 2)]
        pool: usize,
    },
}

fn main() {
    // the matches go along: `thaw sim` tells flags given from defaults
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if !matches!(cli.cmd, Cmd::Serve(_)) {
        init_warnings();
    }
    if let Err(e) = run(cli, &matches) {
        thaw_output::errln!("thaw: error: {e:#}");
        std::process::exit(1);
    }
}

/// Libraries report warnings through `tracing`; outside the daemon (which
/// sets up its own logging) they go to stderr, `THAW_LOG` overriding the level.
fn init_warnings() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("THAW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}

fn split(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn progress(msg: &str) {
    thaw_output::errln!("thaw: {msg}");
}

fn worker(home: &std::path::Path) -> Result<thaw_worker::Worker> {
    Ok(thaw_worker::Worker::new(home, &mut progress)?)
}

/// Writes each benchmark record as one JSON line to `path`, if given.
fn record_sink(
    path: Option<&std::path::Path>,
) -> Result<impl FnMut(&thaw_bench::restore::Record) -> thaw_bench::SinkResult> {
    let mut out = match path {
        Some(p) => {
            Some(std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?)
        }
        None => None,
    };
    Ok(move |r: &thaw_bench::restore::Record| {
        if let Some(f) = out.as_mut() {
            writeln!(f, "{}", serde_json::to_string(r)?)?;
        }
        Ok(())
    })
}

fn run(cli: Cli, matches: &clap::ArgMatches) -> Result<()> {
    let home = cli.home.clone().unwrap_or_else(thaw_runtime::default_home);
    // The demo and the benchmarks build everything they need and may create
    // a missing home; the other commands refuse one, so a mistyped --home is
    // an error, not a new runtime build somewhere else.
    let builds = matches!(cli.cmd, Cmd::Demo { .. } | Cmd::Bench { .. });
    if !matches!(
        cli.cmd,
        Cmd::Sim(_)
            | Cmd::Load(_)
            | Cmd::Runtime { .. }
            | Cmd::Serve(_)
            | Cmd::Fn { .. }
            | Cmd::Image { .. }
    ) {
        thaw_runtime::check_home(&home, builds)?;
    }
    match cli.cmd {
        Cmd::Sim(cmd) => {
            let m = matches
                .subcommand_matches("sim")
                .expect("the sim subcommand matched");
            Ok(thaw_sim::cli::run_cmd(*cmd, m)?)
        }
        Cmd::Runtime { cmd } => runtime::run(&home, cmd),
        Cmd::Load(args) => {
            thaw_load::cli::execute(&args)?;
            Ok(())
        }
        Cmd::Serve(args) => serve::serve(cli.home.clone(), args),
        Cmd::Fn { socket, cmd } => serve::client(&home, socket, cmd),
        Cmd::Lambda {
            cmd: LambdaCmd::Credentials,
        } => {
            let state = thaw_server::Config {
                home: home.clone(),
                ..Default::default()
            }
            .state_dir();
            thaw_server::registry::mkdir_private(&state)?;
            let c = thaw_server::lambda::sigv4::load_or_create(&state).with_context(|| {
                format!(
                    "reading {}",
                    thaw_server::lambda::sigv4::key_file(&state).display()
                )
            })?;
            thaw_output::outln!("AWS_ACCESS_KEY_ID={}", c.access_key_id);
            thaw_output::outln!("AWS_SECRET_ACCESS_KEY={}", c.secret_access_key);
            thaw_output::outln!("AWS_DEFAULT_REGION={}", c.region);
            Ok(())
        }
        Cmd::Image {
            cmd:
                ImageCmd::Build {
                    dir,
                    handler,
                    init,
                    tag,
                    output,
                    code_only,
                },
        } => image_build(
            &home,
            &dir,
            &handler,
            init.as_deref(),
            tag,
            output,
            code_only,
        ),
        Cmd::Demo {
            functions,
            tier,
            size,
        } => demo::run(
            &worker(&home)?,
            functions.as_deref().map(split),
            &tier,
            size,
        ),
        Cmd::Deploy { function, tier } => {
            let w = worker(&home)?;
            let (snap, rep) = w.deploy(&function, &w.tier(&tier)?)?;
            thaw_output::outln!("{}", snap.dir.display());
            thaw_output::outln!("{}", serde_json::to_string_pretty(&rep)?);
            Ok(())
        }
        Cmd::Invoke {
            function,
            size,
            strategy,
            tier,
            check,
        } => {
            let w = worker(&home)?;
            if let Some(s) = strategy.strategy() {
                if tiers::is_remote(&home, &tier)? {
                    let inv = tiers::Invocation {
                        function: &function,
                        size,
                        strategy: s,
                        tier: &tier,
                        check,
                    };
                    return tiers::invoke_streamed(&home, &w, &inv);
                }
            }
            let t0 = std::time::Instant::now();
            let mut sb = match strategy {
                Start::Baseline(StartType::Fresh) => w.start_fresh(&function)?.0,
                Start::Baseline(StartType::Zygote) => {
                    let mut z = w.start_zygote(&function)?;
                    w.fork_zygote(&mut z)?
                }
                Start::Restore(s) => {
                    let snap = w.snapshot(&function, &w.tier(&tier)?)?;
                    let _slot = tiers::restore_slot(&home, &tier)?;
                    w.restore(RestoreRequest::new(&snap, s))?.0
                }
            };
            let inv = thaw_worker::invoke(&mut sb, size, thaw_worker::INVOKE_TIMEOUT)?;
            let cold = thaw_worker::ms(t0);
            if check {
                w.check(&function, size, &inv.output)?;
            }
            thaw_output::outln!(
                "{}",
                serde_json::json!({"function": function, "size": size, "strategy": strategy,
                    "cold_ms": cold, "exec_ms": inv.exec_ms, "output": inv.output, "checked": check})
            );
            Ok(())
        }
        Cmd::Tier { cmd } => tiers::run(&home, cmd),
        Cmd::Place {
            functions,
            all,
            explain,
            rate,
            max_slowdown,
            profile_tier,
            json,
        } => {
            let functions = match (functions, all) {
                (Some(f), false) => split(&f),
                (None, true) => worker(&home)?
                    .functions()
                    .iter()
                    .map(|f| f.name.clone())
                    .collect(),
                _ => anyhow::bail!("name functions or pass --all (not both)"),
            };
            place::run(
                &home,
                &place::Options {
                    functions,
                    explain,
                    cold_starts_per_hour: rate,
                    max_slowdown,
                    profile_tier,
                    json,
                },
            )
        }
        Cmd::Split {
            function,
            fast,
            slow,
            sizes,
            reps,
            price_ratio,
            slow_fault_us,
            max_slowdown,
        } => {
            if !(price_ratio.is_none_or(|p| p.is_finite() && p > 0.0)
                && slow_fault_us.is_none_or(|u| u.is_finite() && u >= 0.0)
                && max_slowdown >= 1.0)
            {
                anyhow::bail!(
                    "--price-ratio must be positive, --slow-fault-us non-negative and --max-slowdown at least 1"
                );
            }
            // the tiers first: a bad pair fails before any runtime work
            let mut costs = tiers::split_costs(&home, &fast, &slow)?;
            if let Some(p) = price_ratio {
                costs.price_ratio = p;
            }
            if let Some(us) = slow_fault_us {
                costs.slow_fault_us = us;
                costs.fault_source[1] = format!("{slow}: --slow-fault-us {us}");
            }
            let (fast_tier, slow_tier) = (
                thaw_store::Tier::by_name(&fast, &home)?,
                thaw_store::Tier::by_name(&slow, &home)?,
            );
            let w = worker(&home)?;
            w.check_function(&function)?;
            let sizes = match sizes {
                Some(s) => split(&s)
                    .iter()
                    .map(|z| z.parse())
                    .collect::<Result<Vec<InputSize>, _>>()?,
                None => w
                    .functions()
                    .iter()
                    .find(|f| f.name == function)
                    .map(|f| f.sizes.clone())
                    .unwrap_or_else(|| vec![InputSize::I]),
            };
            let params = thaw_memory::tiering::CostParams {
                max_slowdown,
                ..thaw_bench::restore::cost_params(&costs)
            };
            let rep = w.make_tiered(&function, &fast_tier, &slow_tier, &sizes, reps, &params)?;
            let out = serde_json::json!({"split": rep, "tiers": costs});
            thaw_output::outln!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Cmd::Snapshot {
            cmd: SnapCmd::Verify { dir },
        } => store_cmds::verify(&dir),
        Cmd::Snapshot {
            cmd: SnapCmd::Move { function, from, to },
        } => tiers::snapshot_transfer(&home, &function, &from, &to, false, &[]),
        Cmd::Snapshot {
            cmd:
                SnapCmd::Get {
                    function,
                    from,
                    to,
                    fallback,
                },
        } => tiers::snapshot_transfer(
            &home,
            &function,
            &from,
            &to,
            true,
            &fallback.as_deref().map(split).unwrap_or_default(),
        ),
        Cmd::Snapshot {
            cmd: SnapCmd::Where { function },
        } => tiers::snapshot_where(&home, &function),
        Cmd::Snapshot {
            cmd: SnapCmd::List { tier },
        } => store_cmds::list(&home, &tier),
        Cmd::Gc => store_cmds::gc(&worker(&home)?),
        Cmd::Bench {
            cmd:
                BenchCmd::Store {
                    functions,
                    runs,
                    markdown,
                },
        } => store_cmds::bench(&worker(&home)?, &split(&functions), runs, markdown),
        Cmd::Bench {
            cmd:
                BenchCmd::StateDecode {
                    functions,
                    runs,
                    markdown,
                },
        } => store_cmds::bench_state_decode(&worker(&home)?, &split(&functions), runs, markdown),
        Cmd::Bench {
            cmd: BenchCmd::Concurrency(a),
        } => concurrency::run(&worker(&home)?, a),
        Cmd::Bench {
            cmd: BenchCmd::Hierarchy(a),
        } => hierarchy::run(&worker(&home)?, a),
        Cmd::Bench {
            cmd: BenchCmd::Serve(args),
        } => serve::bench(&home, args),
        Cmd::Bench {
            cmd: BenchCmd::Egress(args),
        } => serve::bench_egress(&home, args),
        Cmd::Bench {
            cmd: BenchCmd::Estimates(args),
        } => serve::bench_estimates(&home, args),
        Cmd::Bench {
            cmd: BenchCmd::Density(args),
        } => serve::bench_density(&home, args),
        Cmd::Bench {
            cmd: BenchCmd::Burst(args),
        } => serve::bench_burst(&home, args),
        Cmd::Bench {
            cmd: BenchCmd::Lambda(args),
        } => serve::bench_lambda(&home, args),
        Cmd::Bench {
            cmd: BenchCmd::Simlive(a),
        } => Ok(thaw_simlive::main(&home, &a)?),
        Cmd::Bench {
            cmd: BenchCmd::Keepalive(a),
        } => Ok(thaw_simlive::keepalive::main(&home, &a)?),
        Cmd::Bench {
            cmd: BenchCmd::Xdt(args),
        } => xdt::bench(&home, args),
        Cmd::Bench {
            cmd: BenchCmd::Cri(args),
        } => cri::bench(&home, args),
        Cmd::Bench {
            cmd: BenchCmd::Kube(args),
        } => cri::bench_kube(&home, args),
        Cmd::Bench {
            cmd:
                BenchCmd::Restore {
                    functions,
                    strategies,
                    start_types,
                    tier,
                    slow,
                    run,
                    check_all,
                    pool,
                },
        } => {
            if strategies.contains(&StrategyKind::Tiered) {
                // a pair of tiers that makes no split fails before any
                // runtime work; both are probed here if they never were
                tiers::split_costs(&home, &tier, &slow)?;
            }
            let mut w = worker(&home)?;
            w.set_pool(pool)?;
            // the title names the tier's emulation; dax rows name their own
            let emulated = w.tier(&tier)?.emulated;
            let o = thaw_bench::restore::Options {
                functions: split(&functions),
                strategies,
                start_types,
                tier: tier.clone(),
                slow,
                sizes: run.sizes.clone(),
                runs: run.runs,
                redeploy: run.redeploy,
                check_all,
                warm_calls: 1,
            };
            let mut sink = record_sink(run.json.as_deref())?;
            let recs = thaw_bench::restore::run(&w, &o, &mut sink)?;
            let rows = thaw_bench::restore::summarize_rows(&recs);
            let sandboxes = match pool {
                0 => "Sandboxes: built on the critical path (--pool 0)".to_string(),
                n => format!("Sandboxes: built ahead (--pool {n}, full before each restore)"),
            };
            let md = thaw_bench::restore::markdown(&rows, &tier, emulated, run.runs);
            let thp = thaw_store::shmem_thp_mode().unwrap_or_else(|| "unavailable".into());
            let images = format!("DRAM-tier image memfds: shmem THP {thp}");
            run.emit(&format!("{sandboxes}\n{images}\n\n{md}"))
        }
    }
}

fn image_build(
    home: &std::path::Path,
    dir: &std::path::Path,
    handler: &str,
    init: Option<&str>,
    tag: Option<String>,
    output: Option<PathBuf>,
    code_only: bool,
) -> Result<()> {
    let base = dir
        .canonicalize()
        .with_context(|| format!("{}", dir.display()))?
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_else(|| "function".into());
    let reference = tag.unwrap_or_else(|| format!("thaw.local/{base}:latest"));
    let spec = thaw_server::image::ImageSpec {
        code: dir,
        handler,
        init,
        reference: &reference,
    };
    let out = output.unwrap_or_else(|| PathBuf::from(format!("{base}.oci.tar")));
    let (manifest_digest, base_layer) = if code_only {
        let built = thaw_server::image::build(&spec)?;
        std::fs::write(&out, &built.archive)
            .with_context(|| format!("writing {}", out.display()))?;
        (built.manifest_digest, None)
    } else {
        let root = thaw_runtime::ensure_root(home, &mut |m| eprintln!("runtime: {m}"))?;
        let layer =
            thaw_server::image::runtime_layer(&root.path, &root.hash, &home.join("images"))?;
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?,
        );
        let digest = thaw_server::image::build_on(&spec, std::slice::from_ref(&layer), &mut f)?;
        f.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .with_context(|| format!("writing {}", out.display()))?;
        (digest, Some(layer.digest))
    };
    println!(
        "{}",
        serde_json::json!({"image": reference, "manifest_digest": manifest_digest, "base_layer": base_layer, "archive": out})
    );
    Ok(())
}
