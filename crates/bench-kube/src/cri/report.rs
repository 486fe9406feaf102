//! The report as markdown, and the shim's own steps read from its log.
use super::{summary, Report};
use crate::error::Result;
use serde::Serialize;
use thaw_bench::stats::Summary;

/// One step of the shim's Create or Start, over the pods it logged.
#[derive(Debug, Clone, Serialize)]
pub struct ShimStep {
    /// `create spec`, `create mount`, ..., `start spawn`
    pub step: String,
    pub ms: Summary,
}

/// The shim's `thaw timing: CALL ID STEP=MSms ...` lines in containerd's
/// log: each step's times (pause containers' and functions' alike).
pub(super) fn shim_steps(log: &str) -> Result<Vec<ShimStep>> {
    let mut by: Vec<(String, Vec<f64>)> = Vec::new();
    for line in log.lines() {
        let Some((_, rest)) = line.split_once("thaw timing: ") else {
            continue;
        };
        let mut words = rest.split(|c: char| c.is_whitespace() || c == '"');
        let call = words.next().unwrap_or_default().to_string();
        for w in words.skip(1) {
            let Some((step, ms)) = w.split_once('=') else {
                continue;
            };
            let Some(ms) = ms.strip_suffix("ms").and_then(|m| m.parse::<f64>().ok()) else {
                continue;
            };
            let name = format!("{call} {step}");
            match by.iter_mut().find(|(n, _)| *n == name) {
                Some((_, v)) => v.push(ms),
                None => by.push((name, vec![ms])),
            }
        }
    }
    by.into_iter()
        .map(|(step, v)| {
            Ok(ShimStep {
                step,
                ms: summary(&v)?,
            })
        })
        .collect()
}

/// The report as markdown.
pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "Pod start to first HTTP response through CRI (RunPodSandbox + CreateContainer + StartContainer + PodSandboxStatus + POST to the pod IP; calls made with {}), input size {}; {} CPUs, load average {:.2} at the start, {:.2} at the end (compare the ratios, measured in the same run: on a loaded machine the absolute times grow). Remote tier: MinIO in a network namespace (emulated: 0.5 ms RTT, 10 Gbit/s).\n\n",
        match r.calls.as_str() {
            "grpc" => "gRPC on one connection, as the kubelet",
            _ => "one crictl process per call",
        },
        r.size, r.cpus, r.loadavg_1m_start, r.loadavg_1m_end
    );
    let ms = |x: &Summary| format!("{:.0} / {:.0} / {:.0}", x.min, x.median, x.p99);
    s += "| function | runs | runc ms (min / median / p99) | thaw ms (min / median / p99) | runc / thaw (median) | (min) | first pods: runc / thaw (deploy) ms |\n|---|---|---|---|---|---|---|\n";
    for f in &r.functions {
        s += &format!(
            "| {} | {} | {} | {} | {:.1}x | {:.1}x | {:.0} / {:.0} |\n",
            f.function,
            f.runc.n,
            ms(&f.runc),
            ms(&f.thaw),
            f.speedup_median,
            f.speedup_min,
            f.first_runc_ms,
            f.first_thaw_ms
        );
    }
    s += "\nMedians, ms. First request: until the pod accepted the connection, and (thaw) the daemon's own time and the handler's run in it; restore: the one the daemon made for the pod (asked for at its sandbox when its template ran the function before, else at the container's Create, so it overlaps the other phases).\n\n| function | runtime | runp | create + start | status | first request | connect | daemon | handler | restore |\n|---|---|---|---|---|---|---|---|---|---|\n";
    for f in &r.functions {
        for (rt, p) in [("runc", &f.runc_phases), ("thaw", &f.thaw_phases)] {
            s += &format!(
                "| {} | {rt} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
                f.function,
                p.runp_ms,
                p.create_start_ms,
                p.status_ms,
                p.first_response_ms,
                p.connect_ms,
                p.daemon_ms,
                p.exec_ms,
                p.restore_ms
            );
        }
        let kinds: Vec<String> = f
            .thaw_starts
            .iter()
            .map(|s| {
                format!(
                    "{} ({})",
                    s.start_type.as_deref().unwrap_or("-"),
                    s.restores.join(" ")
                )
            })
            .collect();
        s += &format!(
            "| {} | thaw starts | {} |||||||||\n",
            f.function,
            kinds.join(", ")
        );
    }
    if !r.shim_steps.is_empty() {
        s += "\nThe shim's steps (its log; every thaw pod's pause and function container), ms (min / median / p99):\n\n| step | pods | ms |\n|---|---|---|\n";
        for st in &r.shim_steps {
            s += &format!("| {} | {} | {} |\n", st.step, st.ms.n, ms(&st.ms));
        }
    }
    if !r.density.is_empty() {
        s += "\n| runtime | pods at once | functions | answered | first response ms (min / median / p99) | all answered after ms | restores |\n|---|---|---|---|---|---|---|\n";
        for d in &r.density {
            s += &format!(
                "| {} | {} | {} | {} | {} | {:.0} | {} |\n",
                d.runtime,
                d.pods,
                d.functions,
                d.answered,
                ms(&d.first_response),
                d.wall_ms,
                d.restores
            );
        }
    }
    if !r.remote.is_empty() {
        s += "\n| function (second node) | runs | remote: never saw it, ms (min / median / p99) | local restore ms | remote / local (median) |\n|---|---|---|---|---|\n";
        for x in &r.remote {
            s += &format!(
                "| {} | {} | {} | {} | {:.2}x |\n",
                x.function,
                x.remote.n,
                ms(&x.remote),
                ms(&x.local),
                x.remote_over_local
            );
        }
    }
    s
}
