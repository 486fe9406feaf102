//! `thaw bench restore`: functions x strategies x runs on one tier, page cache
//! of the snapshot dropped before every cold run, and fresh starts of the same
//! functions as the baseline, all in one process. `zygote` (a fork of a live,
//! initialised template into new namespaces: the floor of a local start) is a
//! start type like `fresh`, measured interleaved with the strategies.
use crate::error::{BenchError, Result, SinkResult};
use crate::start::{Start, StartType};
use crate::stats::{summarize, Summary};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use thaw_error::{fail, ResultExt};
use thaw_sandbox::Sandbox;
use thaw_worker::InputSize;
use thaw_worker::RestoreRequest;
use thaw_worker::{invoke, ms, StrategyKind, Worker, INVOKE_TIMEOUT};

#[derive(Debug, Clone)]
pub struct Options {
    pub functions: Vec<String>,
    pub strategies: Vec<StrategyKind>,
    /// baselines beside the strategies (`fresh` is always measured)
    pub start_types: Vec<StartType>,
    pub tier: String,
    /// `tiered`: the tier its slow file goes on (`tier` holds the fast one)
    pub slow: String,
    /// input sizes; each function is measured at every one
    pub sizes: Vec<InputSize>,
    pub runs: usize,
    /// also re-deploy the snapshot before measuring
    pub redeploy: bool,
    /// check every output with the function's checker (first run always is)
    pub check_all: bool,
    /// warm invocations on each started instance (1: the first warm only;
    /// "FaaS in the Age of (sub-)µs I/O" also reports the 51st)
    pub warm_calls: usize,
}

/// One measured run: a JSON line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub function: String,
    pub input: String,
    pub strategy: Start,
    pub tier: String,
    pub emulated: bool,
    pub run: usize,
    /// restore (or start) request to the first response of the function
    pub cold_ms: f64,
    pub state_load_ms: f64,
    pub sandbox_ms: f64,
    /// the restore took a sandbox built ahead (`--pool`)
    pub pooled: bool,
    pub memory_setup_ms: f64,
    /// of `memory_setup_ms`: page tables built and write sets copied ahead
    pub populate_ms: f64,
    /// bytes of mapped image copied on write before resume (a write set)
    pub populated_bytes: u64,
    /// recreating the snapshot's /tmp and /dev/shm files (beside the
    /// restorer's memory setup, before resume)
    pub files_ms: f64,
    /// content bytes of those files
    pub file_bytes: u64,
    pub resume_ms: f64,
    /// the first invocation, resume to response
    pub first_response_ms: f64,
    pub exec_ms: f64,
    /// the second invocation on the same instance
    pub warm_ms: f64,
    /// the last of `warm_calls` warm invocations (`warm_ms` when 1)
    pub warm_calls: usize,
    pub warm_last_ms: f64,
    /// the tier device's readahead during the run (emulated block tiers)
    pub read_ahead_kb: Option<u32>,
    /// faults served by the page server
    pub faults: u64,
    pub minflt: u64,
    pub majflt: u64,
    /// bytes brought in from the memory image
    pub bytes_read: u64,
    pub image_bytes: u64,
    pub rss_kb: u64,
    /// memory charged to the sandbox's cgroup after the first response
    pub rss_added_kb: u64,
    /// tiered: share of saved memory on the slow tier
    pub slow_tier_share: f64,
    /// tiered: the slow tier, labelled ("pmem (pmem, emulated)", "disk (block)")
    pub slow_tier: String,
    /// tiered: memory price of the split over all of it on the fast tier,
    /// at the tiers' configured prices (TOSS's cost before the slowdown)
    pub price_share: f64,
    /// reap: "record" or "prefetch" ("" for other starts)
    pub ws_mode: thaw_sandbox::WsMode,
    pub ws_pages: u64,
    pub prefetch_ms: f64,
    /// reap: waiting for the working-set read after the restorer reported
    pub ws_wait_ms: f64,
    /// block tiers: the page-cache hints before the sandbox build
    pub hint_ms: f64,
    /// read requests the tier's block device completed during the cold
    /// start (its own counters; `None` off a block device)
    pub dev_reads: Option<u64>,
    /// KiB the tier's block device read during the cold start
    pub dev_read_kib: Option<u64>,
    /// reap: faults after the prefetch exceeded the drift share
    pub drift: bool,
    /// remote (streamed): from the start until the whole image had arrived
    /// and verified, in the background (0 for local tiers)
    pub background_ms: f64,
}

/// Runs the benchmark; every record goes to `sink` as it is measured.
pub fn run(
    w: &Worker,
    o: &Options,
    sink: &mut dyn FnMut(&Record) -> SinkResult,
) -> Result<Vec<Record>> {
    if o.runs == 0 {
        fail!(BenchError::Config, "--runs must be at least 1");
    }
    if o.warm_calls == 0 {
        fail!(
            BenchError::Config,
            "at least one warm invocation per instance"
        );
    }
    // fresh first, then the other start types, then the strategies, each once per run
    let mut order = vec![Start::FRESH];
    let starts = o.start_types.iter().map(|t| Start::Baseline(*t));
    for s in starts.chain(o.strategies.iter().map(|s| Start::Restore(*s))) {
        if !order.contains(&s) {
            order.push(s);
        }
    }
    for f in &o.functions {
        w.check_function(f)?;
    }
    let tier = w.tier(&o.tier)?;
    let split = if o.strategies.contains(&StrategyKind::Tiered) {
        let cfg = thaw_tiers::TiersConfig::load(&w.home)?;
        let costs = thaw_tiers::split::costs(&w.home, &cfg, &o.tier, &o.slow)?;
        Some((w.tier(&o.slow)?, costs))
    } else {
        None
    };
    let mut out = Vec::new();
    for f in &o.functions {
        let snap = if o.redeploy {
            w.deploy(f, &tier).map(|d| d.0)
        } else {
            w.snapshot(f, &tier)
        };
        let snap = snap?;
        let image_bytes = snap.manifest.memory.len;
        if let Some((slow, c)) = split
            .as_ref()
            .filter(|(slow, _)| o.redeploy || split_onto(&snap).as_deref() != Some(slow.name))
        {
            thaw_output::errln!(
                "bench: {f}: profiling for the tiered strategy (slow tier: {}; page fault costs: {})",
                c.slow_label,
                c.fault_source.join(", ")
            );
            let rep = w.make_tiered(f, &tier, slow, &all_sizes(w, f), 2, &cost_params(c))?;
            thaw_output::errln!(
                "bench: {f}: {:.1}% of memory on the slow tier, {} more mappings, estimated slowdown {:.3} of a {:.2} ms cold start",
                rep.slow_share * 100.0,
                rep.extra_mappings,
                rep.est_slowdown,
                rep.base_ms
            );
        }
        thaw_output::errln!(
            "bench: {f}: snapshot {} ({} MiB image) on {}",
            snap.dir.display(),
            image_bytes >> 20,
            tier.description
        );
        // the template lives for the whole function (untimed), like a snapshot
        // (the Node agent has no zygote: its template would be Python's)
        let python = w.root.runtime_of(f) == thaw_worker::Runtime::Python;
        let mut zygote = if order.contains(&Start::ZYGOTE) && python {
            Some(w.start_zygote(f)?)
        } else {
            None
        };
        for &size in &o.sizes {
            // one untimed warm-up per strategy so first-use costs (image verify, memfd) stay out
            for &s in &order {
                let mut sb = match s {
                    Start::Baseline(StartType::Fresh) => continue,
                    Start::Baseline(StartType::Zygote) => match zygote.as_mut() {
                        Some(z) => w.fork_zygote(z)?,
                        None => continue,
                    },
                    Start::Restore(k) => w.restore(RestoreRequest::new(&snap, k))?.0,
                };
                let inv = invoke(&mut sb, size, INVOKE_TIMEOUT)?;
                w.check(f, size, &inv.output)
                    .with_context(|| format!("{f} started with {s} gave a wrong output"))?;
            }
            for run in 0..o.runs {
                thaw_output::err!("\rbench: {f} {size}: run {}/{}   ", run + 1, o.runs);
                let _ = std::io::stderr().flush();
                for &s in &order {
                    snap.drop_page_cache()?;
                    drop_tier_cache(&snap)?;
                    let rec = match (s, zygote.as_mut()) {
                        (Start::Baseline(StartType::Fresh), _) => {
                            measure_fresh(w, f, size, o, run)?
                        }
                        (Start::Baseline(StartType::Zygote), Some(z)) => {
                            measure_zygote(w, z, f, size, o, run)?
                        }
                        (Start::Baseline(StartType::Zygote), None) => continue,
                        // dax stands in tmpfs for byte-addressable persistent memory
                        (Start::Restore(k), _) => measure_restore(
                            w,
                            &snap,
                            f,
                            size,
                            k,
                            o,
                            run,
                            image_bytes,
                            tier.emulated || k == StrategyKind::Dax,
                        )?,
                    };
                    let rec = Record {
                        tier: tier.name.to_string(),
                        ..with_split(rec, split.as_ref().map(|(_, c)| c))
                    };
                    sink(&rec).map_err(|e| thaw_error::Context::new("writing a record", e))?;
                    out.push(rec);
                }
            }
        }
        thaw_output::errln!();
    }
    Ok(out)
}

/// The model's inputs for a split onto the tiers `c` describes.
pub fn cost_params(c: &thaw_tiers::split::SplitCosts) -> thaw_memory::tiering::CostParams {
    thaw_memory::tiering::CostParams {
        price_ratio: c.price_ratio,
        slow_fault_us: c.slow_fault_us,
        fast_fault_us: c.fast_fault_us,
        map_us: c.map_us,
        ..Default::default()
    }
}

/// The tier `snap`'s split put its slow file on ("" for older layouts), if
/// it was split.
fn split_onto(snap: &thaw_store::Snapshot) -> Option<String> {
    let raw = std::fs::read(snap.dir.join(thaw_memory::tiering::TIERS_FILE)).ok()?;
    let tl: thaw_memory::tiering::TierLayout = serde_json::from_slice(&raw).ok()?;
    Some(tl.slow_tier)
}

/// A tiered restore's record, labelled with its slow tier and priced.
fn with_split(rec: Record, split: Option<&thaw_tiers::split::SplitCosts>) -> Record {
    match split {
        Some(c) if rec.strategy == Start::Restore(StrategyKind::Tiered) => Record {
            slow_tier: c.slow_label.clone(),
            price_share: 1.0 - rec.slow_tier_share + rec.slow_tier_share / c.price_ratio,
            ..rec
        },
        _ => rec,
    }
}

/// The slow tier file lives apart from the snapshot: drop it too.
fn drop_tier_cache(snap: &thaw_store::Snapshot) -> Result<()> {
    let p = snap.dir.join(thaw_memory::tiering::TIERS_FILE);
    if let Ok(raw) = std::fs::read(&p) {
        if let Ok(tl) = serde_json::from_slice::<thaw_memory::tiering::TierLayout>(&raw) {
            let _ = thaw_store::drop_file_cache(&tl.slow.path);
        }
    }
    Ok(())
}

fn all_sizes(w: &Worker, f: &str) -> Vec<InputSize> {
    w.functions()
        .iter()
        .find(|x| x.name == f)
        .map(|x| x.sizes.clone())
        .unwrap_or_else(|| vec![InputSize::I])
}

fn faults(sb: &Sandbox) -> (u64, u64) {
    sb.fault_counters().unwrap_or((0, 0))
}

fn measure_fresh(w: &Worker, f: &str, size: InputSize, o: &Options, run: usize) -> Result<Record> {
    let t0 = Instant::now();
    let (sb, fresh) = w.start_fresh(f)?;
    let phases = [0.0, fresh.spawn_ms, fresh.load_ms, 0.0];
    measure_started(w, sb, t0, phases, Start::FRESH, f, size, o, run)
}

/// A child of the function's zygote template; its sandbox phase is the fork,
/// from the request to the child's hello.
fn measure_zygote(
    w: &Worker,
    zygote: &mut thaw_sandbox::Zygote,
    f: &str,
    size: InputSize,
    o: &Options,
    run: usize,
) -> Result<Record> {
    let t0 = Instant::now();
    let sb = w.fork_zygote(zygote)?;
    let phases = [0.0, ms(t0), 0.0, 0.0];
    measure_started(w, sb, t0, phases, Start::ZYGOTE, f, size, o, run)
}

/// The first and a warm invocation of an instance started at `t0` by a start
/// type; `phases`: state load, sandbox, memory setup (fresh: import and
/// init), resume.
#[allow(clippy::too_many_arguments)]
fn measure_started(
    w: &Worker,
    mut sb: Sandbox,
    t0: Instant,
    phases: [f64; 4],
    start_type: Start,
    f: &str,
    size: InputSize,
    o: &Options,
    run: usize,
) -> Result<Record> {
    let inv = invoke(&mut sb, size, INVOKE_TIMEOUT)?;
    let cold_ms = ms(t0);
    if run == 0 || o.check_all {
        w.check(f, size, &inv.output)?;
    }
    let rss_added = sb.memory_usage().unwrap_or(0) / 1024;
    let warm = invoke(&mut sb, size, INVOKE_TIMEOUT)?;
    let warm_last_ms = more_warm(&mut sb, size, o.warm_calls, warm.latency_ms)?;
    let (minflt, majflt) = faults(&sb);
    let [state_load_ms, sandbox_ms, memory_setup_ms, resume_ms] = phases;
    Ok(Record {
        function: f.into(),
        input: size.to_string(),
        strategy: start_type,
        tier: String::new(),
        emulated: false,
        run,
        cold_ms,
        state_load_ms,
        sandbox_ms,
        pooled: false,
        memory_setup_ms,
        populate_ms: 0.0,
        populated_bytes: 0,
        files_ms: 0.0,
        file_bytes: 0,
        resume_ms,
        first_response_ms: inv.latency_ms,
        exec_ms: inv.exec_ms,
        warm_ms: warm.latency_ms,
        warm_calls: o.warm_calls,
        warm_last_ms,
        read_ahead_kb: None,
        faults: 0,
        minflt,
        majflt,
        bytes_read: 0,
        image_bytes: 0,
        rss_kb: sb.rss_kb().unwrap_or(0),
        rss_added_kb: rss_added,
        slow_tier_share: 0.0,
        slow_tier: String::new(),
        price_share: 0.0,
        ws_mode: Default::default(),
        ws_pages: 0,
        prefetch_ms: 0.0,
        ws_wait_ms: 0.0,
        hint_ms: 0.0,
        dev_reads: None,
        dev_read_kib: None,
        drift: false,
        background_ms: 0.0,
    })
}

#[allow(clippy::too_many_arguments)]
fn measure_restore(
    w: &Worker,
    snap: &thaw_store::Snapshot,
    f: &str,
    size: InputSize,
    s: StrategyKind,
    o: &Options,
    run: usize,
    image_bytes: u64,
    emulated: bool,
) -> Result<Record> {
    // a pool refills in the background: let it finish the previous run's
    // refill, so the restore measured does not share the CPU with it
    if let Some(p) = w.pool() {
        p.wait_full(std::time::Duration::from_secs(10));
    }
    measure_start(
        w,
        &mut || Ok(w.restore(RestoreRequest::new(snap, s))?),
        f,
        size,
        s,
        o.check_all,
        run,
        image_bytes,
        emulated,
        o.warm_calls,
        block_stat(&snap.dir).as_deref(),
    )
}

/// The `stat` file of the block device `dir` is on (none for tmpfs and
/// other filesystems without one).
fn block_stat(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dev = thaw_store::block_device_dir(std::fs::metadata(dir).ok()?.dev())?;
    Some(dev.join("stat"))
}

/// (read requests completed, sectors read) from a block device's `stat`.
fn read_counters(stat: &Path) -> Option<(u64, u64)> {
    let raw = std::fs::read_to_string(stat).ok()?;
    let v: Vec<u64> = raw
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    Some((*v.first()?, *v.get(2)?))
}

/// Warm invocations 2..=`calls` on the instance; the last one's latency
/// (`first`, the first warm's, when there is no other).
fn more_warm(sb: &mut Sandbox, size: InputSize, calls: usize, first: f64) -> Result<f64> {
    let mut last = first;
    for _ in 1..calls {
        last = invoke(sb, size, INVOKE_TIMEOUT)?.latency_ms;
    }
    Ok(last)
}

/// A restore's cold start (`start` is timed with the first invocation),
/// its phases and `warm_calls` warm invocations on the same instance.
#[allow(clippy::too_many_arguments)]
pub(crate) fn measure_start(
    w: &Worker,
    start: &mut dyn FnMut() -> Result<(Sandbox, thaw_checkpoint::RestoreReport)>,
    f: &str,
    size: InputSize,
    s: StrategyKind,
    check: bool,
    run: usize,
    image_bytes: u64,
    emulated: bool,
    warm_calls: usize,
    dev_stat: Option<&Path>,
) -> Result<Record> {
    let before = dev_stat.and_then(read_counters);
    let t0 = Instant::now();
    let (mut sb, rep) = start()?;
    let inv = invoke(&mut sb, size, INVOKE_TIMEOUT)?;
    let cold_ms = ms(t0);
    let dev = before
        .zip(dev_stat.and_then(read_counters))
        .map(|(a, b)| (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1) / 2));
    if check {
        w.check(f, size, &inv.output)?;
    }
    let (minflt, majflt) = faults(&sb);
    let served = sb.pager().map(|p| p.stats.faults()).unwrap_or(0);
    let served_bytes = sb.pager().map(|p| p.stats.bytes_read()).unwrap_or(0);
    let mapped_in = image_rss_bytes(sb.pid()).unwrap_or(0);
    let rss_added = sb.memory_usage().unwrap_or(0) / 1024;
    let drift = sb.first_response().is_some_and(|o| o.drift);
    let warm = invoke(&mut sb, size, INVOKE_TIMEOUT)?;
    let warm_last_ms = more_warm(&mut sb, size, warm_calls, warm.latency_ms)?;
    Ok(Record {
        function: f.into(),
        input: size.to_string(),
        strategy: Start::Restore(s),
        tier: String::new(),
        emulated,
        run,
        cold_ms,
        state_load_ms: rep.state_load_ms,
        sandbox_ms: rep.sandbox_ms,
        pooled: rep.pooled,
        memory_setup_ms: rep.memory_setup_ms,
        populate_ms: rep.populate_ms,
        populated_bytes: rep.populated_bytes,
        files_ms: rep.files_ms,
        file_bytes: rep.file_bytes,
        resume_ms: rep.resume_ms,
        first_response_ms: inv.latency_ms,
        exec_ms: inv.exec_ms,
        warm_ms: warm.latency_ms,
        warm_calls,
        warm_last_ms,
        read_ahead_kb: None,
        faults: served,
        minflt,
        majflt,
        bytes_read: rep.copied_bytes + served_bytes + mapped_in + rep.figures.ws_bytes,
        image_bytes,
        rss_kb: sb.rss_kb().unwrap_or(0),
        rss_added_kb: rss_added,
        slow_tier_share: rep.figures.slow_tier_share,
        slow_tier: String::new(),
        price_share: 0.0,
        ws_mode: rep.figures.ws_mode,
        ws_pages: rep.figures.ws_pages,
        prefetch_ms: rep.figures.prefetch_ms,
        ws_wait_ms: rep.figures.ws_wait_ms,
        hint_ms: rep.hint_ms,
        dev_reads: dev.map(|d| d.0),
        dev_read_kib: dev.map(|d| d.1),
        drift,
        background_ms: 0.0,
    })
}

/// Resident bytes of the memory-image mappings: what the kernel faulted in
/// from the image for the `mmap` strategy.
fn image_rss_bytes(pid: i32) -> Result<u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut in_image = false;
    let mut total = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            in_image = ["/memory.img", "/fast.img", "/slow.img"]
                .iter()
                .any(|n| line.ends_with(n));
        } else if in_image {
            if let Some(v) = line.strip_prefix("Rss:") {
                total += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0)
                    * 1024;
            }
        }
    }
    Ok(total)
}

/// Per (function, strategy): summaries of cold start and its phases, and the
/// ratio of each median to the baseline strategy's median.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub function: String,
    pub input: String,
    pub strategy: Start,
    pub cold: Summary,
    pub first_response: Summary,
    pub warm: Summary,
    pub faults_median: f64,
    pub bytes_read_median: f64,
    pub rss_added_kb_median: f64,
    pub slow_share_median: f64,
    /// tiered: the slow tier, labelled
    pub slow_tier: String,
    /// tiered: the split's memory price over all-fast (median)
    pub price_share_median: f64,
    pub speedup_vs_fresh: f64,
    pub ratio_to_mmap: Option<f64>,
    /// cold start median / the zygote's (the floor), when zygote was measured
    pub ratio_to_zygote: Option<f64>,
    /// medians of the phases (ms): state load, sandbox, memory setup, resume
    pub phases_median: [f64; 4],
    /// medians: saved /tmp and /dev/shm recreated (ms) and their bytes
    pub files_ms_median: f64,
    pub file_bytes_median: f64,
}

pub fn summarize_rows(recs: &[Record]) -> Vec<Row> {
    let mut keys: Vec<(String, String, Start)> = Vec::new();
    for r in recs {
        let k = (r.function.clone(), r.input.clone(), r.strategy);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let pick = |f: &str, i: &str, s: Start, g: &dyn Fn(&Record) -> f64| -> Vec<f64> {
        recs.iter()
            .filter(|r| r.function == f && r.input == i && r.strategy == s)
            .map(g)
            .collect()
    };
    let med =
        |f: &str, i: &str, s: Start| summarize(&pick(f, i, s, &|r| r.cold_ms)).map(|x| x.median);
    keys.iter()
        .filter_map(|(f, i, s)| {
            let s = *s;
            let col = |g: &dyn Fn(&Record) -> f64| summarize(&pick(f, i, s, g));
            let cold = col(&|r| r.cold_ms)?;
            Some(Row {
                function: f.clone(),
                input: i.clone(),
                strategy: s,
                cold,
                first_response: col(&|r| r.first_response_ms)?,
                warm: col(&|r| r.warm_ms)?,
                faults_median: col(&|r| r.faults as f64)?.median,
                bytes_read_median: col(&|r| r.bytes_read as f64)?.median,
                rss_added_kb_median: col(&|r| r.rss_added_kb as f64)?.median,
                slow_share_median: col(&|r| r.slow_tier_share)?.median,
                slow_tier: recs
                    .iter()
                    .find(|r| r.function == *f && r.input == *i && r.strategy == s)
                    .map(|r| r.slow_tier.clone())
                    .unwrap_or_default(),
                price_share_median: col(&|r| r.price_share)?.median,
                speedup_vs_fresh: med(f, i, Start::FRESH)
                    .map(|m| m / cold.median)
                    .unwrap_or(f64::NAN),
                ratio_to_mmap: med(f, i, Start::Restore(StrategyKind::Mmap))
                    .map(|m| cold.median / m),
                ratio_to_zygote: med(f, i, Start::ZYGOTE).map(|m| cold.median / m),
                phases_median: [
                    col(&|r| r.state_load_ms)?.median,
                    col(&|r| r.sandbox_ms)?.median,
                    col(&|r| r.memory_setup_ms)?.median,
                    col(&|r| r.resume_ms)?.median,
                ],
                files_ms_median: col(&|r| r.files_ms)?.median,
                file_bytes_median: col(&|r| r.file_bytes as f64)?.median,
            })
        })
        .collect()
}

/// The markdown table of a run.
pub fn markdown(rows: &[Row], tier: &str, emulated: bool, runs: usize) -> String {
    let mut s = format!(
        "Tier: {tier}{} · {runs} runs per cell · times in ms (min / median / p99)\n\n",
        if emulated { " (emulated)" } else { "" }
    );
    s.push_str("| function | input | strategy | cold start | first response | warm | faults served | MiB read | MiB added | slow tier | speed-up vs fresh | ratio to mmap | ratio to zygote |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let t = |x: &Summary| format!("{:.2} / {:.2} / {:.2}", x.min, x.median, x.p99);
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {}{} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {} | {:.1}x | {} | {} |\n",
            r.function,
            r.input,
            r.strategy,
            match r.strategy {
                Start::Restore(StrategyKind::Dax) => " (pmem emulated by tmpfs)".to_string(),
                Start::Restore(StrategyKind::Tiered) if !r.slow_tier.is_empty() =>
                    format!(", slow tier {}", r.slow_tier),
                _ => String::new(),
            },
            t(&r.cold),
            t(&r.first_response),
            t(&r.warm),
            r.faults_median,
            r.bytes_read_median / (1 << 20) as f64,
            r.rss_added_kb_median / 1024.0,
            if r.strategy == Start::Restore(StrategyKind::Tiered) {
                format!("{:.0}%", r.slow_share_median * 100.0)
            } else {
                "-".into()
            },
            r.speedup_vs_fresh,
            ratio(r.ratio_to_mmap),
            ratio(r.ratio_to_zygote),
        ));
    }
    s.push_str("\nPhases (median ms; fresh: sandbox = spawn, memory = import + init; zygote: sandbox = fork to the child's hello):\n\n");
    s.push_str("| function | input | strategy | state load | sandbox | memory setup | resume | state + sandbox + resume | first response |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let [state, sandbox, memory, resume] = r.phases_median;
        s.push_str(&format!(
            "| {} | {} | {} | {state:.2} | {sandbox:.2} | {memory:.2} | {resume:.2} | {:.2} | {:.2} |\n",
            r.function,
            r.input,
            r.strategy,
            state + sandbox + resume,
            r.first_response.median,
        ));
    }
    let with_files: Vec<&Row> = rows.iter().filter(|r| r.file_bytes_median > 0.0).collect();
    if !with_files.is_empty() {
        s.push_str("\nSaved /tmp and /dev/shm, recreated before resume beside the restorer's memory setup (medians):\n\n");
        s.push_str("| function | input | strategy | MiB of files | recreate ms | ms per MiB |\n");
        s.push_str("|---|---|---|---|---|---|\n");
        for r in with_files {
            let mib = r.file_bytes_median / (1 << 20) as f64;
            s.push_str(&format!(
                "| {} | {} | {} | {mib:.1} | {:.2} | {:.3} |\n",
                r.function,
                r.input,
                r.strategy,
                r.files_ms_median,
                r.files_ms_median / mib,
            ));
        }
    }
    s.push_str(&toss_table(rows));
    s
}

/// TOSS's figures per function (slow-tier share, slowdown, memory cost
/// relative to all-DRAM at the configured prices), their mean, and the
/// paper's beside them; empty without tiered rows.
fn toss_table(rows: &[Row]) -> String {
    let tiered: Vec<&Row> = rows
        .iter()
        .filter(|r| r.strategy == Start::Restore(StrategyKind::Tiered))
        .collect();
    if tiered.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nTOSS (tiered against mmap from DRAM; cost = slowdown x memory price of the split over all-DRAM, at the tiers' configured prices):\n\n",
    );
    s.push_str("| function | input | slow tier | slow-tier share | slowdown (tiered / mmap cold, median) | first response / mmap | memory price | cost |\n");
    s.push_str("|---|---|---|---|---|---|---|---|\n");
    let mmap_first = |r: &Row| {
        rows.iter()
            .find(|m| {
                m.function == r.function
                    && m.input == r.input
                    && m.strategy == Start::Restore(StrategyKind::Mmap)
            })
            .map(|m| r.first_response.median / m.first_response.median)
    };
    let (mut share, mut slowdown, mut cost) = (Vec::new(), Vec::new(), Vec::new());
    for r in &tiered {
        let c = r.ratio_to_mmap.map(|x| x * r.price_share_median);
        share.push(r.slow_share_median);
        slowdown.extend(r.ratio_to_mmap);
        cost.extend(c);
        s.push_str(&format!(
            "| {} | {} | {} | {:.1}% | {} | {} | {:.3} | {} |\n",
            r.function,
            r.input,
            r.slow_tier,
            r.slow_share_median * 100.0,
            ratio(r.ratio_to_mmap),
            ratio(mmap_first(r)),
            r.price_share_median,
            c.map_or_else(|| "-".into(), |c| format!("{c:.3}")),
        ));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    s.push_str(&format!(
        "| mean | | | {:.1}% | {:.3} | | | {:.3} |\n",
        mean(&share) * 100.0,
        mean(&slowdown),
        mean(&cost)
    ));
    s.push_str("| TOSS paper (Optane PMem, 10 functions, price ratio 2.5) | IV | pmem (real) | 92% | 1.067 | | | 0.48 |\n");
    s
}

fn ratio(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}
