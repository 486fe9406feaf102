//! `thaw runtime ...`: build, verify, list and check.

use crate::{default_home, harness, recipe, RootInfo};
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::io::Read;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "thaw runtime",
    about = "runtime root filesystem, agent and function suite"
)]
struct Cli {
    /// thaw home (default: $THAW_HOME or /var/lib/thaw)
    #[arg(long, global = true)]
    home: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build the runtime root from Debian packages (no-op if already built).
    Build {
        /// Rebuild even if a root with the same content hash exists.
        #[arg(long)]
        force: bool,
    },
    /// Check the built root: manifest (default) or a full re-hash of the tree plus
    /// every function x size run under the agent and checked (--full).
    Verify {
        #[arg(long)]
        full: bool,
    },
    /// List the function suite.
    Functions {
        /// JSON output
        #[arg(long)]
        json: bool,
    },
    /// Check a function's output (JSON on stdin) for an input size.
    Check { function: String, size: String },
    /// Print the current root's hash, path and manifest.
    Info,
    /// Measure fresh start, RSS after init and warm latency of every function (JSON).
    Figures {
        /// Warm invocations per size.
        #[arg(long, default_value_t = 10)]
        reps: usize,
        /// Only these functions (default: all).
        functions: Vec<String>,
    },
}

fn current_root(home: &std::path::Path) -> Result<RootInfo> {
    let mut quiet = |_: &str| {};
    let r = recipe::recipe()?;
    let pkgs = recipe::resolve(home, &r, &mut quiet)?;
    let hash = recipe::input_hash(&r, &pkgs)?;
    RootInfo::open(home, &hash)
}

/// Entry point of `thaw runtime ARGS...` (args exclude "runtime").
pub fn cli_main(args: &[String]) -> Result<()> {
    let argv = std::iter::once("thaw runtime".to_string()).chain(args.iter().cloned());
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                thaw_output::out!("{e}");
                return Ok(());
            }
            bail!("{e}");
        }
    };
    let home = cli.home.unwrap_or_else(default_home);
    crate::check_home(&home, matches!(cli.cmd, Cmd::Build { .. }))?;
    match cli.cmd {
        Cmd::Build { force } => {
            let t = Instant::now();
            let mut progress = |m: &str| thaw_output::errln!("thaw runtime: {m}");
            let info = recipe::ensure_root(&home, force, &mut progress)?;
            thaw_output::outln!("hash {}", info.hash);
            thaw_output::outln!("path {}", info.path.display());
            thaw_output::outln!(
                "size {} bytes in {} files, {} packages",
                info.manifest.size_bytes,
                info.manifest.files,
                info.manifest.packages.len()
            );
            thaw_output::outln!("elapsed {:.2}s", t.elapsed().as_secs_f64());
        }
        Cmd::Verify { full } => {
            let info = current_root(&home)?;
            thaw_output::outln!("manifest ok: {} at {}", info.hash, info.path.display());
            if full {
                let t = Instant::now();
                info.verify_full()?;
                thaw_output::outln!("tree hash ok ({:.1}s)", t.elapsed().as_secs_f64());
                for f in info.functions()? {
                    let fig = harness::measure(&info, &f.name, 0)
                        .with_context(|| format!("function {}", f.name))?;
                    thaw_output::outln!(
                        "{:<14} all sizes pass their checker (fresh start {:.0} ms)",
                        f.name,
                        fig.fresh_start_ms
                    );
                }
            }
        }
        Cmd::Functions { json } => {
            let info = current_root(&home)?;
            let fs = info.functions()?;
            if json {
                thaw_output::outln!("{}", serde_json::to_string_pretty(&fs)?);
            } else {
                for f in fs {
                    thaw_output::outln!("{:<14} {:<16} {}", f.name, f.sizes.join(","), f.mirrors);
                }
            }
        }
        Cmd::Check { function, size } => {
            let info = current_root(&home)?;
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            let v: serde_json::Value =
                serde_json::from_str(&s).context("stdin is not a JSON document")?;
            // Accept either the bare output or a whole invoke reply.
            let out = if v.get("ok").is_some() && v.get("output").is_some() {
                v["output"].clone()
            } else {
                v
            };
            info.check_output(&function, &size, &out)?;
            thaw_output::outln!("ok");
        }
        Cmd::Info => {
            let info = current_root(&home)?;
            thaw_output::outln!("hash {}", info.hash);
            thaw_output::outln!("path {}", info.path.display());
            thaw_output::outln!("{}", serde_json::to_string_pretty(&info.manifest)?);
        }
        Cmd::Figures { reps, functions } => {
            let info = current_root(&home)?;
            let names: Vec<String> = if functions.is_empty() {
                info.functions()?.into_iter().map(|f| f.name).collect()
            } else {
                functions
            };
            let mut all = Vec::new();
            for n in names {
                let f = harness::measure(&info, &n, reps)?;
                thaw_output::errln!(
                    "{:<14} fresh {:>7.1} ms (import {:>6.1}, init {:>6.1}) rss {:>6} KiB warm {}",
                    f.function,
                    f.fresh_start_ms,
                    f.import_ms,
                    f.init_ms,
                    f.rss_after_init_kb,
                    f.sizes
                        .iter()
                        .map(|(s, _, w, _)| format!("{s}={w:.2}ms"))
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                all.push(f);
            }
            thaw_output::outln!("{}", serde_json::to_string_pretty(&all)?);
        }
    }
    Ok(())
}
