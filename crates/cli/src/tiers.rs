//! `thaw tier ...`: the storage tiers as configured, their emulated devices,
//! and the probe that measures them.
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thaw_tiers::moves::{self, Place};
use thaw_tiers::objects::RemoteStore;
use thaw_tiers::probe;
use thaw_tiers::{device, Kind, TierConfig, TiersConfig};
use thaw_worker::RestoreRequest;

#[derive(Subcommand)]
pub enum TierCmd {
    /// The configured tiers ($THAW_HOME/tiers.json or the defaults), their state and use
    List {
        /// Print JSON (configuration, state, use, last probe) instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Write the default configuration to $THAW_HOME/tiers.json for editing (refuses to overwrite)
    Init,
    /// Create the emulated devices (pmem tmpfs, loop devices, the remote object store); idempotent
    Setup {
        /// Comma-separated tiers (default: every emulated tier)
        #[arg(long)]
        tiers: Option<String>,
    },
    /// Remove the emulated devices and everything setup made; idempotent
    Teardown {
        #[arg(long)]
        tiers: Option<String>,
        /// Also when snapshots are still on a tier (they are destroyed)
        #[arg(long)]
        force: bool,
    },
    /// Measure sequential read bandwidth and 4 KiB random read latency (O_DIRECT) per tier,
    /// from the worker and from a reader in sandbox-like cgroups (remote: GET bandwidth, HEAD round trip)
    Probe {
        #[arg(long)]
        tiers: Option<String>,
        /// Size of the probe file, MiB
        #[arg(long, default_value_t = 128)]
        mib: usize,
        /// Random 4 KiB reads per reader
        #[arg(long, default_value_t = 256)]
        reads: usize,
        /// Write the results as JSON here too
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// (internal) the emulated remote's delay relay, run inside its namespace
    #[command(hide = true)]
    Relay {
        #[arg(long)]
        listen: String,
        #[arg(long)]
        upstream: String,
        #[arg(long)]
        delay_us: u64,
        /// identifies the relay's home in its command line
        #[arg(long)]
        tag: String,
    },
    /// Stall an emulated block device (every request held, failing with EIO after the
    /// tier's I/O timeout), or end the stall with --off
    Stall {
        tier: String,
        #[arg(long)]
        off: bool,
    },
    /// (internal) an emulated block device's per-I/O latency layer (FUSE)
    #[command(hide = true)]
    LatencyDevice {
        #[arg(long)]
        backing: PathBuf,
        #[arg(long)]
        mount: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long)]
        latency_ns: u64,
        #[arg(long)]
        queue_depth: usize,
        #[arg(long)]
        io_timeout_ms: u64,
    },
    /// (internal) the probe's second reader
    #[command(hide = true)]
    ProbeReader {
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        reads: usize,
        #[arg(long, default_value = "direct")]
        kind: String,
    },
}

fn names(s: &Option<String>) -> Option<Vec<String>> {
    s.as_deref().map(crate::split)
}

pub fn run(home: &Path, cmd: TierCmd) -> Result<()> {
    match cmd {
        // runs inside the namespace and needs no configuration
        TierCmd::Relay {
            listen,
            upstream,
            delay_us,
            tag: _,
        } => Ok(thaw_tiers::relay::serve(
            &listen,
            &upstream,
            std::time::Duration::from_micros(delay_us),
        )?),
        TierCmd::LatencyDevice {
            backing,
            mount,
            name,
            latency_ns,
            queue_depth,
            io_timeout_ms,
        } => Ok(thaw_tiers::latency::serve(
            &backing,
            &mount,
            &name,
            thaw_tiers::latency::Timing {
                access_latency: std::time::Duration::from_nanos(latency_ns),
                queue_depth,
                io_timeout: std::time::Duration::from_millis(io_timeout_ms),
            },
        )?),
        cmd => run_configured(home, &TiersConfig::load(home)?, cmd),
    }
}

fn run_configured(home: &Path, cfg: &TiersConfig, cmd: TierCmd) -> Result<()> {
    match cmd {
        TierCmd::List { json } => list(home, cfg, json),
        TierCmd::Init => {
            let p = home.join(thaw_tiers::CONFIG_FILE);
            if p.exists() {
                bail!("{} exists; edit it or remove it first", p.display());
            }
            std::fs::create_dir_all(home)?;
            TiersConfig::defaults(home).save(home)?;
            thaw_output::outln!("{}", p.display());
            Ok(())
        }
        TierCmd::Setup { tiers } => {
            let sel = selected_emulated(cfg, &names(&tiers))?;
            for t in sel {
                crate::progress(&format!("tier {}: setting up", t.label()));
                let st = device::setup(home, t).with_context(|| format!("tier {}", t.name))?;
                thaw_output::outln!(
                    "{}\t{}\t{}",
                    t.name,
                    if st.ready { "ready" } else { "NOT READY" },
                    st.detail
                );
            }
            Ok(())
        }
        TierCmd::Teardown { tiers, force } => {
            let sel = selected_emulated(cfg, &names(&tiers))?;
            let mut failed = Vec::new();
            // every tier is attempted; the errors are reported together
            for t in sel.iter().rev() {
                match device::teardown(home, t, force) {
                    Ok(()) => thaw_output::outln!("{}\tremoved", t.name),
                    Err(e) => {
                        thaw_output::errln!("thaw: tier {}: {e:#}", t.name);
                        failed.push(t.name.clone());
                    }
                }
            }
            device::tidy(home);
            if !failed.is_empty() {
                bail!("teardown failed for {}", failed.join(", "));
            }
            Ok(())
        }
        TierCmd::Probe {
            tiers,
            mib,
            reads,
            json,
        } => probe_tiers(home, cfg, names(&tiers), mib, reads, json, false),
        TierCmd::ProbeReader { file, reads, kind } => Ok(probe::reader_main(&file, reads, &kind)?),
        TierCmd::Stall { tier, off } => {
            device::stall(home, cfg.get(&tier)?, !off)?;
            thaw_output::outln!("{tier}\t{}", if off { "resumed" } else { "stalled" });
            Ok(())
        }
        TierCmd::Relay { .. } | TierCmd::LatencyDevice { .. } => {
            bail!("internal command takes no configuration")
        }
    }
}

/// The named tiers, or every emulated one; naming a real tier is an error
/// (there is nothing to set up or tear down).
fn selected_emulated<'a>(
    cfg: &'a TiersConfig,
    names: &Option<Vec<String>>,
) -> Result<Vec<&'a TierConfig>> {
    let sel = cfg.select(names.as_deref())?;
    if names.is_some() {
        if let Some(t) = sel.iter().find(|t| !t.emulated) {
            bail!(
                "tier {} is a real device: there is nothing to set up or tear down",
                t.name
            );
        }
    }
    Ok(sel.into_iter().filter(|t| t.emulated).collect())
}

fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

fn list(home: &Path, cfg: &TiersConfig, json: bool) -> Result<()> {
    let probes = probe::load(home);
    let mut rows = Vec::new();
    for t in &cfg.tiers {
        let st = device::status(home, t)?;
        let used = device::used_bytes(home, t)?;
        rows.push((t, st, used, probes.get(&t.name)));
    }
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(t, st, used, pr)| {
                serde_json::json!({"config": t, "ready": st.ready, "detail": st.detail,
                    "used_bytes": used, "probe": pr})
            })
            .collect();
        thaw_output::outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let faults = thaw_tiers::split::probed_faults(cfg, &probes);
    thaw_output::outln!("| tier | kind | emulated | used / capacity | $/GB-month | declared read MB/s, 4K us | measured read MB/s, 4K us (worker) | measured page fault us (sandbox; TOSS's cost) | restores at once | state |");
    thaw_output::outln!("|---|---|---|---|---|---|---|---|---|---|");
    for (t, st, used, pr) in rows {
        let measured = pr
            .and_then(|v| v.first())
            .map(|r| format!("{:.0}, {:.0}", r.seq_read_mbps, r.rand_read_4k_us_mean))
            .unwrap_or_else(|| "-".into());
        let fault = faults.get(&t.name).map_or_else(
            || "-".into(),
            |us| format!("{us:.2} ({})", thaw_tiers::split::restore_reader(t.kind)),
        );
        thaw_output::outln!(
            "| {} | {} | {} | {} / {} | {} | {:.0}, {} | {} | {} | {} | {} |",
            t.name,
            t.kind.name(),
            if t.emulated { "emulated" } else { "real" },
            gib(used),
            gib(t.capacity_bytes),
            t.price_per_gb_month,
            t.profile.read_mbps,
            t.profile.rand_read_4k_us,
            measured,
            fault,
            t.max_concurrent_restores,
            if st.ready {
                format!("ready: {}", st.detail)
            } else {
                st.detail
            }
        );
    }
    Ok(())
}

/// The TOSS model's inputs for splitting onto `fast` and `slow`
/// (`thaw_tiers::split::costs`); either tier's page-fault cost is measured
/// first if it was never probed, so the two come from the same reader.
pub fn split_costs(home: &Path, fast: &str, slow: &str) -> Result<thaw_tiers::split::SplitCosts> {
    let cfg = TiersConfig::load(home)?;
    // refuse a pair that makes no split before measuring anything
    thaw_tiers::split::costs(home, &cfg, fast, slow)?;
    let probed = probe::load(home);
    let missing: Vec<String> = [fast, slow]
        .into_iter()
        .filter(|t| !probed.contains_key(*t))
        .map(String::from)
        .collect();
    if !missing.is_empty() {
        crate::progress(&format!(
            "probing {} for the split's page-fault costs (once; `thaw tier probe`)",
            missing.join(", ")
        ));
        probe_tiers(home, &cfg, Some(missing), 32, 256, None, true)?;
    }
    Ok(thaw_tiers::split::costs(home, &cfg, fast, slow)?)
}

/// `quiet`: the per-reader lines go to stderr (stdout is another command's).
fn probe_tiers(
    home: &Path,
    cfg: &TiersConfig,
    names: Option<Vec<String>>,
    mib: usize,
    reads: usize,
    json: Option<PathBuf>,
    quiet: bool,
) -> Result<()> {
    if reads == 0 {
        bail!("--reads must be at least 1");
    }
    let explicit = names.is_some();
    let exe = std::env::current_exe().context("locating the thaw binary")?;
    let mut all = probe::load(home);
    let mut out = BTreeMap::new();
    for t in cfg.select(names.as_deref())? {
        let st = device::status(home, t)?;
        if !st.ready {
            if explicit {
                bail!("tier {} is not ready: {}", t.name, st.detail);
            }
            crate::progress(&format!("tier {}: skipped ({})", t.name, st.detail));
            continue;
        }
        let res = if t.kind == Kind::Remote {
            crate::progress(&format!("tier {}: a {mib} MiB probe object", t.label()));
            RemoteStore::open(home, t)
                .and_then(|s| probe::measure_remote(&s, mib, reads))
                .map(|r| vec![r])
        } else {
            let root = t.snapshot_root(home).context("a local tier has a path")?;
            std::fs::create_dir_all(&root)
                .with_context(|| format!("creating {}", root.display()))?;
            let file = root.join(format!(".probe-{}", std::process::id()));
            crate::progress(&format!(
                "tier {}: writing a {mib} MiB probe file",
                t.label()
            ));
            let res = probe::write_probe_file(&file, mib).and_then(|()| {
                // the worker's own O_DIRECT read (REAP's), then every kind
                // of reader from sandbox-like cgroups
                let mut res = vec![probe::measure(&file, reads, "worker direct")?];
                for kind in probe::READER_KINDS {
                    let mut cmd = std::process::Command::new(&exe);
                    cmd.args([
                        "tier",
                        "probe-reader",
                        "--reads",
                        &reads.to_string(),
                        "--kind",
                        kind,
                        "--file",
                    ])
                    .arg(&file);
                    // memory and pids limits like a sandbox's
                    let cg = thaw_sandbox::SandboxCgroups::create(
                        &format!("probe-{}", std::process::id()),
                        1 << 30,
                        32,
                        None,
                        None,
                    )
                    .map_err(|e| {
                        thaw_tiers::TiersError::Failed(format!(
                            "making the probe's cgroups: {:#}",
                            anyhow::Error::new(e)
                        ))
                    })?;
                    res.push(probe::measure_in_sandbox_cgroups(cmd, &cg.procs_files())?);
                }
                Ok(res)
            });
            let _ = std::fs::remove_file(&file);
            res
        };
        let res = res.with_context(|| format!("probing tier {}", t.name))?;
        for r in &res {
            let line = format!(
                "{}\t{}\t{}\tseq {:.0} MB/s ({:.2}x declared)\t4K random mean {:.0} us, median {:.0} us, p99 {:.0} us ({:.2}x declared){}\t{}",
                t.name,
                if t.emulated { "emulated" } else { "real" },
                r.reader,
                r.seq_read_mbps,
                r.seq_read_mbps / t.profile.read_mbps,
                r.rand_read_4k_us_mean,
                r.rand_read_4k_us_median,
                r.rand_read_4k_us_p99,
                r.rand_read_4k_us_mean / t.profile.rand_read_4k_us,
                r.device_kib_per_read
                    .map_or(String::new(), |k| format!(", device read {k:.1} KiB per read")),
                match (t.kind, r.direct) {
                    (Kind::Remote, _) => "over the network, sealed",
                    (_, true) => "O_DIRECT",
                    (_, false) if r.reader.contains("direct") => {
                        "cached (no O_DIRECT on this filesystem)"
                    }
                    (_, false) => "through the page cache",
                }
            );
            if quiet {
                thaw_output::errln!("{line}");
            } else {
                thaw_output::outln!("{line}");
            }
        }
        out.insert(t.name.clone(), res.clone());
        all.insert(t.name.clone(), res);
    }
    let escapees = probe::blkio_escapees();
    if !escapees.is_empty() {
        thaw_output::errln!(
            "thaw: warning: tasks in these blkio cgroups escape the emulated devices' throttles (cgroup v1 throttling is per group): {}",
            escapees.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    std::fs::write(
        home.join(probe::PROBE_FILE),
        serde_json::to_vec_pretty(&all)?,
    )?;
    if let Some(p) = json {
        std::fs::write(&p, serde_json::to_vec_pretty(&out)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Resolves tier names to where their snapshots are; the remote client is
/// opened once, on first use.
struct Places<'h> {
    home: &'h Path,
    cfg: TiersConfig,
    remote: std::cell::OnceCell<(String, RemoteStore)>,
}

impl<'h> Places<'h> {
    fn new(home: &'h Path) -> Result<Places<'h>> {
        Ok(Places {
            home,
            cfg: TiersConfig::load(home)?,
            remote: std::cell::OnceCell::new(),
        })
    }

    fn get(&self, tier: &str) -> Result<Place<'_>> {
        let t = self.cfg.get(tier)?;
        if t.kind != Kind::Remote {
            return Ok(Place::Local {
                tier: tier.into(),
                store: moves::local_store(self.home, t)?,
            });
        }
        if let Some((name, _)) = self.remote.get() {
            if name != tier {
                bail!("one remote tier per command (already using {name})");
            }
        } else {
            let store = RemoteStore::open(self.home, t)?;
            let _ = self.remote.set((tier.to_string(), store));
        }
        let (_, store) = self.remote.get().expect("set above");
        Ok(Place::Remote {
            tier: tier.into(),
            store,
        })
    }

    fn recover(&self) -> Result<()> {
        for line in moves::recover(self.home, &|t| self.get(t))? {
            crate::progress(&line);
        }
        Ok(())
    }
}

/// The snapshot of `function` at `p`: its directory name `FN-<root hash>`,
/// or the name itself.
fn snapshot_name(p: &Place, function: &str) -> Result<Option<String>> {
    let names = moves::list(p)?;
    if names.iter().any(|n| n == function) {
        return Ok(Some(function.to_string()));
    }
    let prefix = format!("{function}-");
    let mut hits = names.into_iter().filter(|n| {
        n.strip_prefix(&prefix)
            .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    let first = hits.next();
    if hits.next().is_some() {
        bail!(
            "{function} has snapshots of several runtime roots on {}: name one",
            p.tier()
        );
    }
    Ok(first)
}

/// `thaw snapshot move` (`keep_source` false) and `thaw snapshot get`; a
/// get tries the `fallback` tiers in order when `from` fails.
pub fn snapshot_transfer(
    home: &Path,
    function: &str,
    from: &str,
    to: &str,
    keep_source: bool,
    fallback: &[String],
) -> Result<()> {
    let places = Places::new(home)?;
    places.recover()?;
    let mut failures = Vec::new();
    for source in std::iter::once(from).chain(fallback.iter().map(String::as_str)) {
        if !failures.is_empty() {
            crate::progress(&format!("falling back to tier {source}"));
        }
        match transfer_one(home, &places, function, source, to, keep_source) {
            Ok(rep) => {
                thaw_output::outln!("{}", serde_json::to_string_pretty(&rep)?);
                return Ok(());
            }
            // nothing else to try: the error as it is
            Err(e) if fallback.is_empty() => return Err(e),
            Err(e) => {
                crate::progress(&format!("tier {source} failed: {e:#}"));
                failures.push(format!("{source}: {e:#}"));
            }
        }
    }
    bail!("no tier could provide {function}: {}", failures.join("; "))
}

fn transfer_one(
    home: &Path,
    places: &Places,
    function: &str,
    from: &str,
    to: &str,
    keep_source: bool,
) -> Result<moves::MoveReport> {
    let (src, dst) = (places.get(from)?, places.get(to)?);
    let name = snapshot_name(&src, function)?
        .with_context(|| format!("no snapshot of {function} on tier {from}"))?;
    // the store accounts each tier's capacity: a move never overfills one
    check_room(home, places.cfg.get(to)?, moves::size_of(&src, &name)?)?;
    let report = if keep_source {
        moves::copy_snapshot(home, &name, &src, &dst)?
    } else {
        moves::move_snapshot(home, &name, &src, &dst)?
    };
    Ok(report)
}

pub fn snapshot_where(home: &Path, function: &str) -> Result<()> {
    let places = Places::new(home)?;
    places.recover()?;
    let mut found = 0;
    for t in &places.cfg.tiers {
        // a tier that is not set up holds nothing
        let Ok(p) = places.get(&t.name) else { continue };
        let listed = if t.kind == Kind::Remote && !device::status(home, t)?.ready && t.emulated {
            None
        } else {
            snapshot_name(&p, function)?
        };
        if let Some(name) = listed {
            found += 1;
            thaw_output::outln!(
                "{}\t{}\t{name}",
                t.name,
                if t.emulated { "emulated" } else { "real" }
            );
        }
    }
    if found == 0 {
        bail!("no snapshot of {function} on any tier");
    }
    Ok(())
}

/// One of `tier`'s restore slots, waited for up to a minute.
pub fn restore_slot(home: &Path, tier: &str) -> Result<thaw_tiers::slots::RestoreSlot> {
    let cfg = TiersConfig::load(home)?;
    let slot = thaw_tiers::slots::RestoreSlot::acquire(
        home,
        cfg.get(tier)?,
        std::time::Duration::from_secs(60),
    )?;
    Ok(slot)
}

/// Whether `tier` is a configured remote tier (restores from it stream).
pub fn is_remote(home: &Path, tier: &str) -> Result<bool> {
    let cfg = TiersConfig::load(home)?;
    Ok(cfg.get(tier).is_ok_and(|t| t.kind == Kind::Remote))
}

/// The remote tier's client, shareable with a stream's fetcher.
pub fn remote_store(home: &Path, tier: &str) -> Result<std::sync::Arc<RemoteStore>> {
    let cfg = TiersConfig::load(home)?;
    Ok(std::sync::Arc::new(RemoteStore::open(
        home,
        cfg.get(tier)?,
    )?))
}

/// One `thaw invoke`.
pub struct Invocation<'a> {
    pub function: &'a str,
    pub size: thaw_worker::InputSize,
    pub strategy: thaw_worker::StrategyKind,
    pub tier: &'a str,
    pub check: bool,
}

/// `thaw invoke FN --tier REMOTE`: a streamed restore (manifest, state and
/// working set first, the image on demand and in the background), one
/// invocation, then the background fill to its end; the phases reported.
/// A stream that fails before the function answered (store down, slow or
/// dropping the connection; a corrupted object) falls back to a copy on a
/// local tier if there is one, else fails naming why. A fully arrived and
/// verified image is published onto the home's local tier (see
/// [`publish_tier`]), so the next restore is local.
pub fn invoke_streamed(home: &Path, w: &thaw_worker::Worker, inv: &Invocation) -> Result<()> {
    use thaw_worker::ms;
    let &Invocation {
        function,
        size,
        strategy,
        tier,
        check,
    } = inv;
    w.check_function(function)?;
    let name = w.snapshot_name(function);
    let t0 = std::time::Instant::now();
    let streamed = (|| {
        let store = remote_store(home, tier)?;
        let _slot = restore_slot(home, tier)?;
        let stream = thaw_tiers::stream::Stream::open(home, store, &name)?;
        let t1 = std::time::Instant::now();
        let started =
            w.restore(RestoreRequest::new(&stream.snapshot, strategy).streamed(stream.inputs()?));
        let (mut sb, rep) = started.map_err(|e| stream.explain(e.into()))?;
        let restore_ms = ms(t1);
        let inv = thaw_worker::invoke(&mut sb, size, thaw_worker::INVOKE_TIMEOUT)
            .map_err(|e| stream.explain(e.into()))?;
        anyhow::Ok((stream, rep, restore_ms, inv, ms(t0)))
    })();
    let (mut stream, rep, restore_ms, inv, cold) = match streamed {
        Ok(s) => s,
        Err(e) => {
            let e = e.context(format!("streaming {function} from tier {tier} failed"));
            return invoke_fallback(home, w, inv, e, t0);
        }
    };
    if check {
        w.check(function, size, &inv.output)?;
    }
    let bg = stream
        .finish()
        .with_context(|| format!("the background fill of {function} from tier {tier} failed"))?
        .clone();
    // the invocation has answered: a publish that fails (another process
    // publishing the same snapshot at once, a full disk) is only reported
    let published = publish_streamed(home, &name, &stream).unwrap_or_else(|e| {
        crate::progress(&format!(
            "{function} arrived whole from tier {tier} but was not published: {e:#}"
        ));
        None
    });
    thaw_output::outln!(
        "{}",
        serde_json::json!({"function": function, "size": size, "strategy": strategy,
            "tier": tier, "cold_ms": cold, "fetch_first_ms": bg.first_ms,
            "restore_ms": restore_ms, "first_response_ms": inv.latency_ms,
            "background_complete_ms": bg.complete_ms, "exec_ms": inv.exec_ms,
            "ws_pages": rep.figures.ws_pages, "stream": bg, "published_to": published,
            "output": inv.output, "checked": check})
    );
    Ok(())
}

/// The local tier a streamed snapshot is published onto: `disk` (the
/// home's default tier, that of `thaw deploy` and `thaw invoke`) if it is
/// configured, else the first configured local tier.
pub fn publish_tier(cfg: &TiersConfig) -> Option<&thaw_tiers::TierConfig> {
    let local = || cfg.tiers.iter().filter(|t| t.kind != Kind::Remote);
    local()
        .find(|t| t.name == "disk")
        .or_else(|| local().next())
}

/// Publishes the arrived snapshot onto [`publish_tier`] unless it holds it
/// already or lacks room (said on stderr); returns the tier published to.
fn publish_streamed(
    home: &Path,
    name: &str,
    stream: &thaw_tiers::stream::Stream,
) -> Result<Option<String>> {
    let places = Places::new(home)?;
    let Some(t) = publish_tier(&places.cfg) else {
        return Ok(None);
    };
    let to = places.get(&t.name)?;
    let staged = thaw_store::Snapshot::open(&stream.snapshot.dir)?;
    let need: u64 = std::fs::read_dir(&staged.dir)?
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    if let Err(e) = check_room(home, t, need) {
        crate::progress(&format!(
            "not publishing {name} onto tier {}: {e:#}",
            t.name
        ));
        return Ok(None);
    }
    Ok(moves::publish_staged(name, staged, &to)?.then(|| t.name.clone()))
}

/// Errs if tier `t` lacks room for `need` more bytes.
fn check_room(home: &Path, t: &thaw_tiers::TierConfig, need: u64) -> Result<()> {
    let used = device::used_bytes(home, t)?;
    if used + need > t.capacity_bytes {
        bail!(
            "tier {} is full: {} MiB used of {} MiB, the snapshot needs {} MiB",
            t.name,
            used >> 20,
            t.capacity_bytes >> 20,
            need >> 20
        );
    }
    Ok(())
}

/// After a failed stream: the same restore from the first local tier (in
/// configuration order, fastest first) holding a copy, or the stream's
/// error saying that none does.
fn invoke_fallback(
    home: &Path,
    w: &thaw_worker::Worker,
    req: &Invocation,
    failure: anyhow::Error,
    t0: std::time::Instant,
) -> Result<()> {
    let (function, size) = (req.function, req.size);
    let cfg = TiersConfig::load(home)?;
    let name = w.snapshot_name(function);
    let copy = cfg
        .tiers
        .iter()
        .filter(|t| t.kind != Kind::Remote)
        // a device tier that is not set up holds nothing
        .filter_map(|t| Some((t, thaw_store::Tier::by_name(&t.name, home).ok()?)))
        .find_map(|(t, st)| Some((t.name.clone(), st.open_current(&name).ok()??)));
    let Some((local, snap)) = copy else {
        return Err(failure.context("no local tier holds a copy to fall back to"));
    };
    crate::progress(&format!(
        "{failure:#}; falling back to the copy on tier {local}"
    ));
    let _slot = restore_slot(home, &local)?;
    let (mut sb, _) = w.restore(RestoreRequest::new(&snap, req.strategy))?;
    let inv = thaw_worker::invoke(&mut sb, size, thaw_worker::INVOKE_TIMEOUT)?;
    let cold = thaw_worker::ms(t0);
    if req.check {
        w.check(function, size, &inv.output)?;
    }
    thaw_output::outln!(
        "{}",
        serde_json::json!({"function": function, "size": size, "strategy": req.strategy,
            "tier": local, "fallback_from": req.tier, "fallback_reason": format!("{failure:#}"),
            "cold_ms": cold, "exec_ms": inv.exec_ms, "output": inv.output, "checked": req.check})
    );
    Ok(())
}
