//! `thaw runtime ...`: build, verify, list and check the runtime root and its
//! function suite. Functions run in real sandboxes (`thaw_worker::suite`).
use anyhow::{Context, Result};
use clap::Subcommand;
use std::io::Read;
use std::path::Path;
use std::time::Instant;
use thaw_runtime::{current_root, recipe};
use thaw_sandbox::SandboxConfig;
use thaw_worker::suite;

#[derive(Subcommand, Debug)]
pub enum RuntimeCmd {
    /// Build the runtime root from Debian packages (no-op if already built)
    Build {
        /// Rebuild even if a root with the same content hash exists
        #[arg(long)]
        force: bool,
    },
    /// Check the built root: its manifest, or with --full a re-hash of the
    /// tree and every function x size run in a sandbox and checked
    Verify {
        #[arg(long)]
        full: bool,
    },
    /// List the function suite
    Functions {
        /// JSON output
        #[arg(long)]
        json: bool,
    },
    /// Check a function's output (JSON on stdin) for an input size
    Check {
        function: String,
        #[arg(value_enum)]
        size: thaw_runtime::InputSize,
    },
    /// Print the current root's hash, path and manifest
    Info,
    /// Measure fresh start, RSS after init and warm latency of every function in a sandbox (JSON)
    Figures {
        /// Warm invocations per size
        #[arg(long, default_value_t = 10)]
        reps: usize,
        /// Only these functions (default: all)
        functions: Vec<String>,
    },
}

pub fn run(home: &Path, cmd: RuntimeCmd) -> Result<()> {
    thaw_runtime::check_home(home, matches!(cmd, RuntimeCmd::Build { .. }))?;
    match cmd {
        RuntimeCmd::Build { force } => {
            let t = Instant::now();
            let mut progress = |m: &str| thaw_output::errln!("thaw runtime: {m}");
            let info = recipe::ensure_root(home, force, &mut progress)?;
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
        RuntimeCmd::Verify { full } => {
            let info = current_root(home)?;
            thaw_output::outln!("manifest ok: {} at {}", info.hash, info.path.display());
            if full {
                let t = Instant::now();
                info.verify_full()?;
                thaw_output::outln!("tree hash ok ({:.1}s)", t.elapsed().as_secs_f64());
                let cfg = SandboxConfig::default();
                for f in info.functions()? {
                    let fig = suite::measure(&cfg, &info, &f.name, 0)
                        .with_context(|| format!("function {}", f.name))?;
                    thaw_output::outln!(
                        "{:<14} all sizes pass their checker in a sandbox (fresh start {:.0} ms)",
                        f.name,
                        fig.fresh_start_ms
                    );
                }
            }
        }
        RuntimeCmd::Functions { json } => {
            let fs = current_root(home)?.functions()?;
            if json {
                thaw_output::outln!("{}", serde_json::to_string_pretty(&fs)?);
            } else {
                for f in fs {
                    thaw_output::outln!(
                        "{:<14} {:<16} {}",
                        f.name,
                        f.sizes
                            .iter()
                            .map(|z| z.name())
                            .collect::<Vec<_>>()
                            .join(","),
                        f.mirrors
                    );
                }
            }
        }
        RuntimeCmd::Check { function, size } => {
            let info = current_root(home)?;
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
            info.check_output(&function, size, &out)?;
            thaw_output::outln!("ok");
        }
        RuntimeCmd::Info => {
            let info = current_root(home)?;
            thaw_output::outln!("hash {}", info.hash);
            thaw_output::outln!("path {}", info.path.display());
            thaw_output::outln!("{}", serde_json::to_string_pretty(&info.manifest)?);
        }
        RuntimeCmd::Figures { reps, functions } => {
            let info = current_root(home)?;
            let names: Vec<String> = if functions.is_empty() {
                info.functions()?.into_iter().map(|f| f.name).collect()
            } else {
                functions
            };
            let cfg = SandboxConfig::default();
            let mut all = Vec::new();
            for n in names {
                let f = suite::measure(&cfg, &info, &n, reps)
                    .with_context(|| format!("function {n}"))?;
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
