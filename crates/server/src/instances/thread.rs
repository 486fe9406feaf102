//! One instance's thread: it makes the sandbox (restored from the
//! version's snapshot, else booted) and serves its invocations one at a
//! time until the pool lets it go or the sandbox dies.
use std::collections::HashMap;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use thaw_sandbox::{StartStrategy, StrategyKind};
use thaw_tiers::slots::RestoreSlot;
use thaw_tiers::stream::Stream;
use thaw_worker::{RestoreRequest, Worker};
use tokio::sync::oneshot;

use super::deployed::FnVersion;
use super::job::{Created, Job, JobDone};
use super::memory::MemoryGauge;
use super::versions::keep_shared;
use super::Instances;
use crate::logs::{take_sandbox_output, LogEntry};
use crate::metrics::Metrics;
use crate::stored::{RemoteCopy, Stored};

/// How long a restore waits for one of its tier's restore slots.
const SLOT_WAIT: Duration = Duration::from_secs(60);

/// How often an idle instance's memory is read again.
const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// What an instance thread gets from its daemon besides its jobs.
pub(super) struct InstanceServices {
    /// bytes of output kept per invocation
    pub(super) log_cap: u64,
    pub(super) gauge: MemoryGauge,
    /// serves the in-sandbox SDK
    pub(super) xdt: Option<Arc<crate::xdt::XdtHost>>,
    /// the snapshot tiers' configurations (restore slots)
    pub(super) slot_tiers: Arc<HashMap<String, thaw_tiers::TierConfig>>,
    /// counts the network bytes of functions given egress
    pub(super) metrics: Arc<Metrics>,
    /// told when a streamed shared snapshot is kept on the fast tier
    pub(super) instances: std::sync::Weak<Instances>,
    /// made ahead of its requests (a prewarm): no invocation is coming
    /// soon to read the rest of its snapshot under the restore slot
    pub(super) ahead: bool,
}

/// Counts an instance thread from its spawn to its end.
pub(super) struct ThreadCount(Arc<std::sync::atomic::AtomicUsize>);

impl ThreadCount {
    pub(super) fn new(n: &Arc<std::sync::atomic::AtomicUsize>) -> ThreadCount {
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ThreadCount(n.clone())
    }
}

impl Drop for ThreadCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// One instance's whole life: create the sandbox, then serve jobs until the
/// pool drops the sender or the sandbox dies.
pub(super) fn instance_thread(
    worker: Arc<Worker>,
    v: Arc<FnVersion>,
    name: String,
    jobs: mpsc::Receiver<Job>,
    ready: oneshot::Sender<Result<Created, String>>,
    services: InstanceServices,
) {
    let InstanceServices {
        log_cap,
        mut gauge,
        xdt,
        slot_tiers,
        metrics,
        instances,
        ahead,
    } = services;
    let t0 = Instant::now();
    let init_timeout = Duration::from_millis(v.rec.timeout_ms.max(60_000));
    // the read lock is held while the restore opens the snapshot: a move
    // does not remove this copy under it
    let mut stream = None;
    let mut shared_copy = None;
    // a restore reads from its tier until its first reply: it holds one of
    // the tier's restore slots until then, or until it idles (shared by
    // every thaw process)
    let mut slot = None;
    let restored = {
        let placed = v.placed.read().unwrap_or_else(|p| p.into_inner());
        placed.as_ref().map(|p| {
            let r = v
                .rec
                .strategy
                .restore()
                .ok_or_else(|| -> thaw_error::BoxError {
                    format!("{} boots its instances, yet has a snapshot", v.rec.name).into()
                })
                .and_then(|s| {
                    if let Some(t) = slot_tiers.get(&p.tier) {
                        slot = Some(RestoreSlot::acquire(&worker.home, t, SLOT_WAIT)?);
                    }
                    Ok(s)
                })
                .and_then(|s| match &p.stored {
                    Stored::Local(snap) => Ok(worker.restore(
                        RestoreRequest::new(snap, s)
                            .function(&v.func)
                            .pool(v.sandboxes.get()),
                    )?),
                    Stored::Remote(copy) => {
                        let (started, s) = restore_streamed(&worker, copy, s, &v)?;
                        stream = Some(s);
                        shared_copy = copy.is_shared().then(|| copy.clone());
                        Ok(started)
                    }
                });
            (r, p.tier.clone())
        })
    };
    let was_restored = restored.is_some();
    let made = match restored {
        Some((r, tier)) => r.and_then(|(mut sb, _)| {
            let create_ms = ms(t0);
            // the whole step as the request waits for it (the runtime's
            // page faults included), not only the hook's own time
            let t1 = Instant::now();
            thaw_worker::after_restore(&mut sb, &name, init_timeout)?;
            Ok((
                sb,
                Created {
                    create_ms,
                    hook_ms: ms(t1),
                    strategy: v.rec.strategy,
                    tier,
                },
            ))
        }),
        None => worker
            .start_user(&v.func, init_timeout)
            .map_err(Into::into)
            .map(|(sb, _)| {
                (
                    sb,
                    Created {
                        create_ms: ms(t0),
                        hook_ms: 0.0,
                        strategy: StartStrategy::Boot,
                        tier: "-".into(),
                    },
                )
            }),
    };
    let mut sb = match made {
        Ok((sb, c)) => {
            // a prewarm's instance goes idle at once: measured before, it is
            // charged what it holds then, not its declared memory (a
            // request's is measured right after its reply, off its path)
            if ahead {
                gauge.set(&sb);
            }
            let _ = ready.send(Ok(c));
            if ahead {
                drop(slot.take());
            }
            sb
        }
        Err(e) => {
            let _ = ready.send(Err(thaw_error::chain(&*e)));
            return;
        }
    };
    let mut streamed_whole = false;
    // what the runtime printed while starting is not any invocation's
    let _ = take_sandbox_output(sb.log_path(), 0);
    // a request's instance: its job is on the way, and the instance is
    // measured right after its reply rather than on that job's path
    let mut job_coming = !ahead;
    loop {
        if !std::mem::take(&mut job_coming) {
            gauge.set(&sb);
        }
        let job = match jobs.recv_timeout(MEASURE_EVERY) {
            Ok(job) => job,
            // an instance nobody invoked within a second gives its tier's
            // restore slot back: other restores must not wait behind it
            Err(mpsc::RecvTimeoutError::Timeout) => {
                drop(slot.take());
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let Job {
            event,
            timeout,
            invocation_id,
            chain,
            prefetched,
            reply: job_reply,
        } = job;
        // dropped after the reply is sent: the objects the function got
        // are freed off the invocation's path
        let mut sdk_session = xdt.as_ref().map(|host| {
            let ctx = chain.unwrap_or_else(|| {
                thaw_xdt::CallCtx::root(&v.rec.owner, &v.rec.name, Instant::now() + timeout)
            });
            thaw_xdt::sdk::Session::new(host.as_ref(), ctx, v.rec.memory_mb << 20)
                .with_prefetched(prefetched)
        });
        let net_before = sb.network().map(|n| n.bytes());
        let reply = match &mut sdk_session {
            Some(sdk_session) => thaw_worker::invoke_event_serving(
                &mut sb,
                &event,
                timeout,
                Some(&invocation_id),
                &mut |r, fds| {
                    let out = sdk_session.serve(r, fds);
                    (out.body, out.fd)
                },
            ),
            None => thaw_worker::invoke_event_as(&mut sb, &event, timeout, Some(&invocation_id)),
        }
        .map_err(|e| thaw_error::chain(&e));
        let (output, truncated) = take_sandbox_output(sb.log_path(), log_cap);
        // what the instance received and sent during this invocation
        let net = net_before
            .zip(sb.network().map(|n| n.bytes()))
            .map(|(b, a)| {
                let d = (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1));
                metrics.egress_bytes(&v.rec.name, d);
                d
            });
        if !output.is_empty() || net.is_some_and(|d| d != (0, 0)) {
            let entry = LogEntry {
                seq: 0,
                invocation_id,
                instance: name.clone(),
                unix_ms: crate::logs::now_unix_ms(),
                output,
                truncated,
                net_in_bytes: net.map(|d| d.0),
                net_out_bytes: net.map(|d| d.1),
            };
            if let Err(e) = v.ring.append(entry) {
                tracing::warn!(function = %v.rec.name, "writing the function log: {e:#}");
            }
        }
        // an agent-side timeout leaves the runtime usable, but the contract
        // is that a timed-out instance is replaced
        let timed_out = matches!(&reply, Ok(thaw_worker::Invoked { output: Err(e), .. })
            if e.kind() == thaw_sandbox::agent::ErrorKind::Timeout);
        let alive = sb.is_alive() && !timed_out;
        let _ = job_reply.send(JobDone { reply, alive });
        drop(sdk_session);
        // a restored version is likely to be restored again: from now on
        // its restores take a sandbox built ahead
        if was_restored {
            v.sandboxes.start_once(|size| {
                worker
                    .user_pool(&v.func, size)
                    .inspect_err(|e| tracing::warn!(function = %v.rec.name, "sandbox pool not started: {e:#}"))
                    .ok()
            });
        }
        if !alive {
            break;
        }
        // a streamed restore's image arrives in the background: after the
        // first reply, wait for the rest and check it whole (a chunk that
        // fails kills the instance through its page server)
        drop(slot.take());
        if let Some(s) = stream.as_mut().filter(|_| !streamed_whole) {
            streamed_whole = true;
            if let Err(e) = s.finish() {
                tracing::warn!(function = %v.rec.name, instance = %name, "the streamed snapshot did not arrive whole: {e:#}");
                break;
            }
            if let Some(copy) = shared_copy.take() {
                keep_shared(&worker.home, &v, &copy, &s.snapshot.dir, &instances);
            }
        }
    }
}

/// A restore that streams `copy` from the remote tier (lazily: the
/// function's strategy if it [streams](thaw_restore::Strategy::streams),
/// else `reap`, whose working set travels first, or `uffd` when the
/// snapshot has none). The stream must outlive the instance: it serves the
/// pages that have not arrived yet.
fn restore_streamed(
    worker: &Worker,
    copy: &RemoteCopy,
    strategy: StrategyKind,
    v: &FnVersion,
) -> Result<
    (
        (thaw_sandbox::Sandbox, thaw_checkpoint::RestoreReport),
        Stream,
    ),
    thaw_error::BoxError,
> {
    let stream = Stream::open(&copy.home, copy.store.clone(), &copy.name)?;
    let streams = thaw_restore::strategy(strategy).streams();
    let strategy = match (streams, stream.has_working_set) {
        (true, _) if strategy != StrategyKind::Reap => strategy,
        (_, true) => StrategyKind::Reap,
        // no working set was recorded (no sample event): page by page
        (_, false) => StrategyKind::Uffd,
    };
    let started = worker
        .restore(
            RestoreRequest::new(&stream.snapshot, strategy)
                .function(&v.func)
                .pool(v.sandboxes.get())
                .streamed(stream.inputs()?),
        )
        .map_err(|e| stream.explain(e.into()))?;
    Ok((started, stream))
}
