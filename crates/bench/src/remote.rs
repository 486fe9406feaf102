//! The remote tier in `thaw bench hierarchy`: streamed restores (manifest,
//! state and the REAP working set first, the image on demand and in the
//! background; see `thaw_tiers::stream`), measured like local restores.
//! A cold start runs from the first request to the remote until the first
//! response; "state load" is the fetch of what the restore needs first; the
//! background fill is timed to its end (whole image arrived and verified)
//! and every run waits for it, so no run overlaps the previous one's fill.
use crate::error::{BenchError, Result, SinkResult};
use crate::restore::{measure_start, Record};
use std::sync::Arc;
use thaw_error::ResultExt;
use thaw_tiers::moves::{self, Place};
use thaw_tiers::objects::RemoteStore;
use thaw_tiers::stream::Stream;
use thaw_worker::InputSize;
use thaw_worker::RestoreRequest;
use thaw_worker::{invoke, StrategyKind, Worker, INVOKE_TIMEOUT};

pub struct Options<'a> {
    pub functions: &'a [String],
    pub strategies: &'a [StrategyKind],
    pub sizes: &'a [InputSize],
    pub tier: &'a str,
    /// the local tier the snapshot is copied from (and its working set
    /// recorded on) when the remote lacks it or holds another version
    pub source: &'a str,
    pub run: usize,
    pub warm_calls: usize,
    /// the worker's client, kept from round to round (a real worker keeps
    /// its connections to the store)
    pub store: &'a Arc<RemoteStore>,
}

/// The client a study's rounds share.
pub fn open_store(w: &Worker, tier: &str) -> Result<Arc<RemoteStore>> {
    let cfg = thaw_tiers::TiersConfig::load(&w.home)?;
    Ok(Arc::new(RemoteStore::open(&w.home, cfg.get(tier)?)?))
}

/// One round (one run per function, size and streamable strategy).
pub fn run(
    w: &Worker,
    o: &Options,
    sink: &mut dyn FnMut(&Record) -> SinkResult,
) -> Result<Vec<Record>> {
    let cfg = thaw_tiers::TiersConfig::load(&w.home)?;
    let t = cfg.get(o.tier)?;
    let store = o.store;
    // as a worker does before its pool's idle timeout: the connections a
    // stream's first round needs are open
    store.warm(thaw_tiers::stream::FIRST_ROUND)?;
    // a streamed restore needs a strategy that restores from an arriving image
    let streams = |s: &StrategyKind| thaw_restore::strategy(*s).streams();
    let strategies: Vec<StrategyKind> = o.strategies.iter().copied().filter(streams).collect();
    if strategies.is_empty() {
        thaw_output::errln!(
            "bench: tier {}: a streamed restore needs one of {}; nothing to measure",
            o.tier,
            thaw_restore::names_of(thaw_restore::kinds_where(|s| s.streams()))
        );
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for f in o.functions {
        let name = w.snapshot_name(f);
        upload(w, store, o, f, &name)?;
        for &size in o.sizes {
            if o.run == 0 {
                // untimed warm-up (first-use costs of the client and the restorer)
                for &s in &strategies {
                    let mut stream = Stream::open(&w.home, store.clone(), &name)?;
                    let (mut sb, _) = w.restore(
                        RestoreRequest::new(&stream.snapshot, s).streamed(stream.inputs()?),
                    )?;
                    let inv = invoke(&mut sb, size, INVOKE_TIMEOUT)?;
                    w.check(f, size, &inv.output)
                        .with_context(|| format!("{f} streamed with {s} gave a wrong output"))?;
                    stream.finish()?;
                }
            }
            for &s in &strategies {
                let mut stream = None;
                let mut start = || {
                    let st = stream.insert(Stream::open(&w.home, store.clone(), &name)?);
                    Ok(w.restore(RestoreRequest::new(&st.snapshot, s).streamed(st.inputs()?))?)
                };
                let rec = measure_start(
                    w,
                    &mut start,
                    f,
                    size,
                    s,
                    o.run == 0,
                    o.run,
                    0,
                    t.emulated,
                    o.warm_calls,
                    None,
                );
                let mut stream =
                    stream.ok_or_else(|| BenchError::Failed("the stream was not opened".into()))?;
                let rec = rec.map_err(|e| stream.explain(e.into()))?;
                let bg = stream.finish()?;
                let rec = Record {
                    tier: o.tier.to_string(),
                    state_load_ms: bg.first_ms,
                    background_ms: bg.complete_ms,
                    image_bytes: bg.image_bytes,
                    ..rec
                };
                sink(&rec).map_err(|e| thaw_error::Context::new("writing a record", e))?;
                out.push(rec);
            }
        }
    }
    Ok(out)
}

/// Makes sure the remote holds the source tier's current version of `f`
/// with a working set (recorded on the source tier first if missing).
fn upload(w: &Worker, store: &RemoteStore, o: &Options, f: &str, name: &str) -> Result<()> {
    let local = w.tier(o.source)?;
    let snap = w.snapshot(f, &local)?;
    if !snap.dir.join(thaw_memory::working_set::WS_INDEX).exists() {
        thaw_output::errln!("bench: {f}: recording its REAP working set on {}", o.source);
        let (mut sb, _) = w.restore(RestoreRequest::new(&snap, StrategyKind::Reap))?;
        invoke(&mut sb, o.sizes[0], INVOKE_TIMEOUT)?;
    }
    let remote = Place::Remote {
        tier: o.tier.to_string(),
        store,
    };
    if moves::holds(&remote, name)? {
        let id = serde_json::from_slice::<serde_json::Value>(
            &store.get(&format!("{name}/manifest.json"), 1 << 20)?,
        )
        .with_context(|| format!("the remote manifest of {name}"))?
        .get("id")
        .and_then(|v| v.as_str().map(String::from));
        let ws = store.exists(&format!("{name}/{}", thaw_memory::working_set::WS_INDEX))?;
        let pack = store.exists(&format!("{name}/{}", thaw_tiers::stream::FIRST_PACK))?;
        if id.as_deref() == Some(snap.manifest.id.as_str()) && ws && pack {
            return Ok(());
        }
        moves::delete_snapshot(&remote, name)?;
    }
    drop(snap);
    thaw_output::errln!(
        "bench: {f}: copying its snapshot from {} to {}",
        o.source,
        o.tier
    );
    let from = Place::Local {
        tier: o.source.to_string(),
        store: local,
    };
    moves::copy_snapshot(&w.home, name, &from, &remote)?;
    Ok(())
}
