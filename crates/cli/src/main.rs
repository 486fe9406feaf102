//! The one `thaw` binary.
use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;

mod demo;
mod serve;

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
        #[arg(long, default_value = "I")]
        size: String,
    },
    /// Runtime root and function suite: build, verify, functions, check
    #[command(disable_help_flag = true)]
    Runtime {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
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
        #[arg(long, default_value = "I")]
        size: String,
        /// eager, mmap, uffd, or fresh (no snapshot)
        #[arg(long, default_value = "mmap")]
        strategy: String,
        #[arg(long, default_value = "tmpfs")]
        tier: String,
        /// Verify the output with the function's checker
        #[arg(long)]
        check: bool,
    },
    /// TOSS: profile FUNCTION's snapshot and split its pages between a fast and a slow tier
    Tier {
        function: String,
        /// Tier holding the snapshot and the fast file
        #[arg(long, default_value = "tmpfs")]
        fast: String,
        /// Tier holding the slow file
        #[arg(long, default_value = "disk")]
        slow: String,
        /// Input sizes to profile with (default: all of the function's)
        #[arg(long)]
        sizes: Option<String>,
        /// Invocations per size (each one is a profiling epoch)
        #[arg(long, default_value_t = 2)]
        reps: usize,
        /// Fast-tier price per MiB relative to the slow tier
        #[arg(long, default_value_t = 2.5)]
        price_ratio: f64,
        /// Extra time a slow-tier page costs on first touch, in microseconds
        #[arg(long, default_value_t = 61.0)]
        slow_fault_us: f64,
        /// Bound on the estimated slowdown ("inf": TOSS's plain minimum-cost placement)
        #[arg(long, default_value_t = 1.10)]
        max_slowdown: f64,
    },
    /// Inspect snapshots
    Snapshot {
        #[command(subcommand)]
        cmd: SnapCmd,
    },
    /// Benchmarks
    Bench {
        #[command(subcommand)]
        cmd: BenchCmd,
    },
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
    /// Trace-driven fleet simulator (`thaw sim --help`)
    #[command(disable_help_flag = true)]
    Sim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum SnapCmd {
    /// Check a snapshot's manifest, state and memory checksums
    Verify { dir: PathBuf },
    /// List snapshots on a tier
    List {
        #[arg(long, default_value = "tmpfs")]
        tier: String,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// The daemon: warm latency and throughput over HTTP vs. in-process, restore via the API vs. direct
    Serve(serve::BenchServeArgs),
    /// Cold starts from snapshots per strategy vs. a fresh start
    Restore {
        #[arg(long, default_value = "helloworld,lr_serving")]
        functions: String,
        #[arg(long, default_value = "eager,mmap,uffd")]
        strategies: String,
        /// tmpfs or disk
        #[arg(long, default_value = "tmpfs")]
        tier: String,
        /// Input sizes, comma-separated (I..IV)
        #[arg(long, default_value = "I")]
        sizes: String,
        #[arg(long, default_value_t = 10)]
        runs: usize,
        /// Write one JSON object per run here
        #[arg(long)]
        json: Option<PathBuf>,
        /// Write the markdown table here (it is printed either way)
        #[arg(long)]
        markdown: Option<PathBuf>,
        /// Take fresh snapshots first
        #[arg(long)]
        redeploy: bool,
        /// Run the checker on every output, not just the first
        #[arg(long)]
        check_all: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("thaw: error: {e:#}");
        std::process::exit(1);
    }
}

fn split(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn progress(msg: &str) {
    eprintln!("thaw: {msg}");
}

fn worker(home: &std::path::Path) -> Result<thaw_worker::Worker> {
    thaw_worker::Worker::new(home, &mut progress)
}

fn run(cli: Cli) -> Result<()> {
    let home = cli.home.clone().unwrap_or_else(thaw_runtime::default_home);
    match cli.cmd {
        Cmd::Sim { args } => thaw_sim::cli_main(&args),
        Cmd::Serve(args) => serve::serve(cli.home.clone(), args),
        Cmd::Fn { socket, cmd } => serve::client(&home, socket, cmd),
        Cmd::Runtime { args } => thaw_runtime::cli_main(&args),
        Cmd::Demo {
            functions,
            tier,
            size,
        } => demo::run(
            &worker(&home)?,
            functions.as_deref().map(split),
            &tier,
            &size,
        ),
        Cmd::Deploy { function, tier } => {
            let w = worker(&home)?;
            let (snap, rep) = w.deploy(&function, &w.tier(&tier)?)?;
            println!("{}", snap.dir.display());
            println!("{}", serde_json::to_string_pretty(&rep)?);
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
            let t0 = std::time::Instant::now();
            let mut sb = if strategy == "fresh" {
                w.start_fresh(&function)?.0
            } else {
                let snap = w.snapshot(&function, &w.tier(&tier)?)?;
                w.restore(&snap, &strategy)?.0
            };
            let inv = thaw_worker::invoke(&mut sb, &size, thaw_worker::INVOKE_TIMEOUT)?;
            let cold = thaw_worker::ms(t0);
            if check {
                w.check(&function, &size, &inv.output)?;
            }
            println!(
                "{}",
                serde_json::json!({"function": function, "size": size, "strategy": strategy,
                    "cold_ms": cold, "exec_ms": inv.exec_ms, "output": inv.output, "checked": check})
            );
            Ok(())
        }
        Cmd::Tier {
            function,
            fast,
            slow,
            sizes,
            reps,
            price_ratio,
            slow_fault_us,
            max_slowdown,
        } => {
            let w = worker(&home)?;
            w.check_function(&function)?;
            if !(price_ratio.is_finite()
                && price_ratio > 0.0
                && slow_fault_us.is_finite()
                && slow_fault_us >= 0.0
                && max_slowdown >= 1.0)
            {
                anyhow::bail!(
                    "--price-ratio must be positive, --slow-fault-us non-negative and --max-slowdown at least 1"
                );
            }
            let sizes = match sizes {
                Some(s) => split(&s),
                None => w
                    .functions()
                    .iter()
                    .find(|f| f.name == function)
                    .map(|f| f.sizes.clone())
                    .unwrap_or_else(|| vec!["I".into()]),
            };
            let params = thaw_memory::tiering::CostParams {
                price_ratio,
                slow_fault_us,
                max_slowdown,
                ..Default::default()
            };
            let rep = w.make_tiered(
                &function,
                &w.tier(&fast)?,
                &w.tier(&slow)?,
                &sizes,
                reps,
                &params,
            )?;
            println!("{}", serde_json::to_string_pretty(&rep)?);
            Ok(())
        }
        Cmd::Snapshot {
            cmd: SnapCmd::Verify { dir },
        } => {
            let s = thaw_store::Snapshot::open(&dir)?;
            s.load_state()?;
            s.verify_memory()?;
            println!(
                "ok: {} ({} bytes of memory image)",
                dir.display(),
                s.manifest.memory.len
            );
            Ok(())
        }
        Cmd::Snapshot {
            cmd: SnapCmd::List { tier },
        } => {
            let t = thaw_store::Tier::by_name(&tier, &home)?;
            let Ok(rd) = std::fs::read_dir(&t.path) else {
                println!("no snapshots on {tier} ({})", t.path.display());
                return Ok(());
            };
            for e in rd.flatten() {
                match thaw_store::Snapshot::open(&e.path()) {
                    Ok(s) => println!(
                        "{}\t{}\t{} MiB",
                        s.manifest.function,
                        e.path().display(),
                        s.manifest.memory.len >> 20
                    ),
                    Err(err) if !e.file_name().to_string_lossy().starts_with('.') => {
                        println!("BROKEN\t{}\t{err:#}", e.path().display())
                    }
                    Err(_) => {}
                }
            }
            Ok(())
        }
        Cmd::Bench {
            cmd: BenchCmd::Serve(args),
        } => serve::bench(&home, args),
        Cmd::Bench {
            cmd:
                BenchCmd::Restore {
                    functions,
                    strategies,
                    tier,
                    sizes,
                    runs,
                    json,
                    markdown,
                    redeploy,
                    check_all,
                },
        } => {
            let w = worker(&home)?;
            let o = thaw_bench::restore::Options {
                functions: split(&functions),
                strategies: split(&strategies),
                tier: tier.clone(),
                sizes: split(&sizes),
                runs,
                redeploy,
                check_all,
            };
            let mut out = match &json {
                Some(p) => Some(
                    std::fs::File::create(p)
                        .with_context(|| format!("creating {}", p.display()))?,
                ),
                None => None,
            };
            let recs = thaw_bench::restore::run(&w, &o, &mut |r| {
                if let Some(f) = out.as_mut() {
                    writeln!(f, "{}", serde_json::to_string(r)?)?;
                }
                Ok(())
            })?;
            let rows = thaw_bench::restore::summarize_rows(&recs);
            let emulated = recs.iter().any(|r| r.emulated);
            let md = thaw_bench::restore::markdown(&rows, &tier, emulated, runs);
            println!("{md}");
            if let Some(p) = markdown {
                std::fs::write(&p, &md).with_context(|| format!("writing {}", p.display()))?;
            }
            Ok(())
        }
    }
}
