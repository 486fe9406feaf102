//! One pod's start measured: its phases through the CRI, its first answer
//! and what the daemon restored for it.
use super::{root_dirs, Node, PodStart, ANSWER_WAIT, POD_MEMORY_MB};
use crate::error::{BenchKubeError, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use thaw_bench::stats::summarize;
use thaw_client::{Client, Target};
use thaw_error::{fail, ResultExt};
use thaw_kube_harness::containerd::Mount;

/// Where a pod start's time went, ms: `RunPodSandbox` (the pod sandbox:
/// its pause container and network), `CreateContainer` + `StartContainer`
/// of the function's container, `PodSandboxStatus` (the pod's IP, as the
/// kubelet reads it), and the first request until its answer; within the
/// last: until the pod accepted the connection, and (thaw) the daemon's
/// own time for the request and the handler's run in it. `restore_ms`:
/// the restore the daemon made for the pod (at Create, or for the request),
/// which overlaps the other phases.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Phases {
    pub runp_ms: f64,
    pub create_start_ms: f64,
    pub status_ms: f64,
    pub first_response_ms: f64,
    pub connect_ms: f64,
    pub daemon_ms: f64,
    pub exec_ms: f64,
    pub restore_ms: f64,
}

impl Phases {
    /// Each phase's median over `ps`.
    pub(super) fn median(ps: &[Phases]) -> Phases {
        let m = |f: fn(&Phases) -> f64| {
            summarize(&ps.iter().map(f).collect::<Vec<_>>()).map_or(0.0, |s| s.median)
        };
        Phases {
            runp_ms: m(|p| p.runp_ms),
            create_start_ms: m(|p| p.create_start_ms),
            status_ms: m(|p| p.status_ms),
            first_response_ms: m(|p| p.first_response_ms),
            connect_ms: m(|p| p.connect_ms),
            daemon_ms: m(|p| p.daemon_ms),
            exec_ms: m(|p| p.exec_ms),
            restore_ms: m(|p| p.restore_ms),
        }
    }
}

/// The daemon's restores so far (its `restore_duration_seconds`):
/// `strategy:tier` -> (count, seconds).
pub(super) fn restores(n: &Node) -> Result<std::collections::BTreeMap<String, (f64, f64)>> {
    let m = client(n).request("GET", "/metrics", None)?;
    let mut out = std::collections::BTreeMap::new();
    for l in String::from_utf8_lossy(&m.body).lines() {
        let (which, rest) = match (
            l.strip_prefix("thaw_restore_duration_seconds_count{"),
            l.strip_prefix("thaw_restore_duration_seconds_sum{"),
        ) {
            (Some(r), _) => (0, r),
            (_, Some(r)) => (1, r),
            _ => continue,
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |k: &str| {
            labels.split(',').find_map(|kv| {
                let (key, v) = kv.split_once('=')?;
                (key.trim() == k).then(|| v.trim_matches('"').to_string())
            })
        };
        let key = format!(
            "{}:{}",
            label("strategy").unwrap_or_default(),
            label("tier").unwrap_or_default()
        );
        let v: f64 = value.trim().parse().unwrap_or(0.0);
        let e = out.entry(key).or_insert((0.0, 0.0));
        if which == 0 {
            e.0 += v;
        } else {
            e.1 += v;
        }
    }
    Ok(out)
}

/// The restores between two [`restores`] readings: one `strategy:tier`
/// per restore, and their total ms.
pub(super) fn restores_since(
    before: &std::collections::BTreeMap<String, (f64, f64)>,
    after: &std::collections::BTreeMap<String, (f64, f64)>,
) -> (Vec<String>, f64) {
    let (mut made, mut ms) = (Vec::new(), 0.0);
    for (k, (count, secs)) in after {
        let (c0, s0) = before.get(k).copied().unwrap_or((0.0, 0.0));
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a count, saturating
        let new = (count - c0).round().max(0.0) as usize;
        for _ in 0..new {
            made.push(k.clone());
        }
        ms += (secs - s0).max(0.0) * 1e3;
    }
    (made, ms)
}

/// A thaw pod's start, with the restores the daemon made meanwhile (no
/// other pod runs): (ms, answer, phases with the restore's time, the
/// restores made).
pub(super) fn thaw_pod_start(
    n: &Node,
    image: &str,
    event: &str,
) -> Result<(f64, String, Phases, PodStart)> {
    let before = restores(n)?;
    let (ms, a, mut p) = pod_start(n, "thaw", image, event)?;
    let (made, restore_ms) = restores_since(&before, &restores(n)?);
    p.restore_ms = restore_ms;
    let mut s = thaw_start(ms, &a);
    s.restores = made;
    Ok((ms, a, p, s))
}

/// One pod from `runp` to its first answer: (ms, answer, phases).
pub(super) fn pod_start(
    n: &Node,
    runtime: &str,
    image: &str,
    event: &str,
) -> Result<(f64, String, Phases)> {
    let i = n.pods.fetch_add(1, Ordering::SeqCst);
    // named as a Deployment names its pods (the image's name, then a
    // part of each pod's own): the pods of one image share a template
    let stem = image
        .rsplit('/')
        .next()
        .and_then(|s| s.split(':').next())
        .unwrap_or("pod");
    let name = format!("{stem}-{i}");
    let dirs = root_dirs(n.root)?;
    let hosts: Vec<PathBuf> = dirs.iter().map(|d| n.root.path.join(d)).collect();
    let targets: Vec<String> = dirs.iter().map(|d| format!("/{d}")).collect();
    let mounts: Vec<Mount> = match runtime {
        "runc" => hosts
            .iter()
            .zip(&targets)
            .map(|(h, t)| Mount {
                host: h,
                container: t,
                readonly: true,
            })
            .collect(),
        _ => Vec::new(),
    };
    let annotations = match runtime {
        "thaw" => json!({
            "dev.thaw.memory-mb": POD_MEMORY_MB.to_string(),
            "dev.thaw.prewarm": n.prewarm.to_string(),
        }),
        _ => json!({}),
    };
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let t0 = Instant::now();
    let pod = n.cri.run_pod(&name, runtime, annotations)?;
    let mut p = Phases {
        runp_ms: ms(t0),
        ..Phases::default()
    };
    let res: Result<(f64, String, Phases)> = (|| {
        let t = Instant::now();
        n.cri.run_container(&pod, "fn", image, &[], &[], &mounts)?;
        p.create_start_ms = ms(t);
        let t = Instant::now();
        let ip = n.cri.pod_ip(&pod.id)?;
        p.status_ms = ms(t);
        let t = Instant::now();
        let (answer, connected) = n.cri.netns.post_timed(&ip, 8080, event, ANSWER_WAIT)?;
        p.first_response_ms = ms(t);
        p.connect_ms = connected.as_secs_f64() * 1e3;
        let timing = server_timing(&answer);
        p.daemon_ms = timing("total");
        p.exec_ms = timing("exec");
        Ok((ms(t0), answer, p))
    })();
    let removed = n.cri.remove_pod(&pod.id);
    let res = res.with_context(|| format!("pod {name} ({image} on {runtime})"))?;
    removed?;
    Ok(res)
}

/// The status, a header's value and the body of an HTTP answer.
pub(super) fn parse(answer: &str) -> (u16, impl Fn(&str) -> Option<String> + '_, &str) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let header = move |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    (status, header, body)
}

/// The answer's JSON body, which must be a 200.
pub(crate) fn answer_value(what: &str, answer: &str) -> Result<Value> {
    let (status, _, body) = parse(answer);
    if status != 200 {
        fail!(BenchKubeError::Failed, "{what} answered {status}: {answer}");
    }
    Ok(serde_json::from_str(body).with_context(|| format!("{what} answered no JSON: {body}"))?)
}

pub(super) fn thaw_start(ms: f64, answer: &str) -> PodStart {
    let (_, header, _) = parse(answer);
    PodStart {
        ms,
        start_type: header("thaw-start-type"),
        tier: header("thaw-tier"),
        restores: Vec::new(),
    }
}

/// An entry of the answer's `server-timing` (the daemon's: queue,
/// restore, exec, total), ms; 0 if absent (runc's answers have none).
pub(super) fn server_timing(answer: &str) -> impl Fn(&str) -> f64 {
    let (_, header, _) = parse(answer);
    let v = header("server-timing").unwrap_or_default();
    move |name: &str| {
        v.split(',')
            .find_map(|e| {
                let (k, d) = e.trim().split_once(";dur=")?;
                (k == name).then(|| d.parse().ok()).flatten()
            })
            .unwrap_or(0.0)
    }
}

pub(super) fn client(n: &Node) -> Client {
    Client::new(Target::Unix(n.socket.to_path_buf()))
}

/// Waits until the daemon keeps no idle instance (its keep-alive is one
/// second), so the next pod's first request is a restore.
pub(crate) fn no_idle(n: &Node) -> Result<()> {
    let t = Instant::now();
    loop {
        let m = client(n).request("GET", "/metrics", None)?;
        let text = String::from_utf8_lossy(&m.body);
        let idle = text
            .lines()
            .find_map(|l| l.strip_prefix("thaw_instances{state=\"idle\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if idle == 0.0 {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(30) {
            fail!(
                BenchKubeError::Failed,
                "the daemon still keeps {idle} idle instances after 30 s"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
