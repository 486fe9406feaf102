//! The one `thaw` binary: parses the command line and hands each command
//! to its module (one file per command, `bench/` one per benchmark).
use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;

mod bench;
mod demo;
mod deploy;
mod fn_client;
mod gc;
mod image;
mod invoke;
mod lambda;
mod place;
mod runtime;
mod serve;
mod snapshot;
mod split;
mod tiers;

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
    Demo(demo::Args),
    /// Runtime root and function suite: build, verify, functions, check, info, figures
    Runtime {
        #[command(subcommand)]
        cmd: runtime::RuntimeCmd,
    },
    /// Start FUNCTION, run its init and snapshot it onto a tier
    Deploy(deploy::Args),
    /// Restore FUNCTION from its snapshot (deploying it if needed) and invoke it once
    Invoke(invoke::Args),
    /// Storage tiers: list, setup, teardown, probe (`thaw tier --help`)
    Tier {
        #[command(subcommand)]
        cmd: tiers::TierCmd,
    },
    /// TOSS: profile FUNCTION's snapshot and split its pages between a fast and a slow tier
    Split(split::Args),
    /// Choose each function's tier and restore strategy from its measured profile
    Place(place::Args),
    /// Inspect snapshots
    Snapshot {
        #[command(subcommand)]
        cmd: snapshot::SnapCmd,
    },
    /// Crash cleanup: remove what dead workers left (cgroups, logs, staging, unused versions)
    Gc,
    /// Benchmarks
    Bench {
        #[command(subcommand)]
        cmd: bench::BenchCmd,
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
        cmd: fn_client::FnCmd,
    },
    /// Functions as OCI images (for the containerd shim, docs/KUBERNETES.md)
    Image {
        #[command(subcommand)]
        cmd: image::ImageCmd,
    },
    /// AWS Lambda's API on the daemon's TCP listener (docs/LAMBDA.md)
    Lambda {
        #[command(subcommand)]
        cmd: lambda::LambdaCmd,
    },
    /// Trace-driven fleet simulator: one run, or `thaw sim sweep` over several (docs/SIMULATOR.md)
    Sim(Box<thaw_sim::cli::SimCmd>),
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

fn run(cli: Cli, matches: &clap::ArgMatches) -> Result<()> {
    let home = cli.home.clone().unwrap_or_else(thaw_runtime::default_home);
    // The demo and the benchmarks build everything they need and may create
    // a missing home; the other commands refuse one, so a mistyped --home is
    // an error, not a new runtime build somewhere else.
    let builds = matches!(cli.cmd, Cmd::Demo(_) | Cmd::Bench { .. });
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
        Cmd::Load(args) => {
            thaw_load::cli::execute(&args)?;
            Ok(())
        }
        Cmd::Runtime { cmd } => runtime::run(&home, cmd),
        Cmd::Serve(args) => serve::serve(cli.home, args),
        Cmd::Fn { socket, cmd } => fn_client::client(&home, socket, cmd),
        Cmd::Lambda { cmd } => lambda::run(&home, cmd),
        Cmd::Image { cmd } => image::run(&home, cmd),
        Cmd::Demo(a) => demo::run(&home, a),
        Cmd::Deploy(a) => deploy::run(&home, a),
        Cmd::Invoke(a) => invoke::run(&home, a),
        Cmd::Tier { cmd } => tiers::run(&home, cmd),
        Cmd::Place(a) => place::run_cmd(&home, a),
        Cmd::Split(a) => split::run(&home, a),
        Cmd::Snapshot { cmd } => snapshot::run(&home, cmd),
        Cmd::Gc => gc::run(&home),
        Cmd::Bench { cmd } => bench::run(&home, cmd),
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
