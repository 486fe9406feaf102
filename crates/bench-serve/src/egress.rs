//! `thaw bench egress`: what network egress costs a function, measured
//! against a host the bench makes (a network namespace with an HTTP server,
//! see `thaw_egress::nethost`), never any other address:
//!
//! * cold start: helloworld restored through the API (`?force=cold`, into
//!   a pooled sandbox) with egress and without, interleaved;
//! * streaming: one function reading a large HTTP body from the test host;
//! * connect + first byte: a fresh TCP connection, a request and the first
//!   byte of the answer, from the function and from a plain process in a
//!   second namespace of the same kind (a veth routed through this machine);
//!   over IPv4, and over IPv6 when the host has it.
use crate::error::{BenchServeError, OrFail, Result};
use base64::Engine as _;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Instant;
use thaw_bench::stats::{summarize, Summary};
use thaw_egress::nethost::NetHost;
use thaw_error::{fail, ResultExt};

use thaw_client::{Client, Target};

pub struct Options {
    pub cold_runs: usize,
    pub stream_mib: u64,
    pub stream_runs: usize,
    pub connect_runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub cold_plain_ms: Summary,
    pub cold_egress_ms: Summary,
    /// median with egress - median without
    pub cold_added_ms: f64,
    pub stream_gb_per_s: Summary,
    pub stream_mib: u64,
    pub connect_sandbox_ms: Summary,
    pub connect_plain_ms: Summary,
    /// median sandbox / median plain process
    pub connect_ratio: f64,
    /// The same over IPv6 (none when the host has no IPv6).
    pub connect6_sandbox_ms: Option<Summary>,
    pub connect6_plain_ms: Option<Summary>,
    pub connect6_ratio: Option<f64>,
}

/// The function of the streaming and connect runs; the same code runs as
/// the plain process (`python3 -c CLIENT '{event}'`).
const CLIENT: &str = r#"
import json, socket, sys, time
def handler(event):
    host, port = event["host"], event["port"]
    if event["op"] == "stream":
        s = socket.create_connection((host, port), timeout=30)
        s.sendall(b"GET /bytes/%d HTTP/1.0\r\n\r\n" % event["bytes"])
        buf, got = bytearray(1 << 20), 0
        t = time.perf_counter()
        while True:
            n = s.recv_into(buf)
            if not n:
                break
            got += n
        dt = time.perf_counter() - t
        s.close()
        return {"bytes": got, "seconds": dt}
    out = []
    for _ in range(event["runs"]):
        t = time.perf_counter()
        s = socket.create_connection((host, port), timeout=30)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        s.recv(1)
        out.append((time.perf_counter() - t) * 1e3)
        s.close()
    return {"ms": out}
if __name__ == "__main__":
    print(json.dumps(handler(json.loads(sys.argv[1]))))
"#;

fn stats(xs: &[f64]) -> Result<Summary> {
    summarize(xs).or_fail("no samples")
}

fn b64(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(d)
}

/// Runs the benchmark on a temporary state home; the runtime root comes
/// from `runtime_home`.
pub fn run(runtime_home: &std::path::Path, o: &Options) -> Result<Report> {
    let mut server = NetHost::create().context("creating the test host namespace")?;
    server.http_server(0, 8080)?;
    if thaw_egress::ipv6_unavailable().is_none() {
        server.http_server6(0, 8080)?;
    }
    let client_ns = NetHost::create().context("creating the baseline's namespace")?;
    thaw_server::on_temp_daemon_with(
        runtime_home,
        "egress",
        |cfg| {
            cfg.limits.sandbox_pool = 1;
            Ok(())
        },
        |app, socket| measure(app, socket, &server, &client_ns, o),
    )
}

fn measure(
    app: &thaw_server::App,
    socket: &std::path::Path,
    server: &NetHost,
    client_ns: &NetHost,
    o: &Options,
) -> Result<Report> {
    let mut c = Client::new(Target::Unix(socket.to_path_buf()));
    let mut post = |path: &str, body: &Value| -> Result<(Value, f64)> {
        let t = Instant::now();
        let r = c.request("POST", path, Some(&serde_json::to_vec(body)?))?;
        let dt = t.elapsed().as_secs_f64() * 1e3;
        if r.status != 200 && r.status != 201 {
            fail!(
                BenchServeError::Failed,
                "{path}: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
        }
        Ok((r.json()?, dt))
    };
    let dest = server.addr(0);
    let network = json!({"egress": [format!("{dest}/32:8080")]});
    let dest6 = thaw_egress::ipv6_unavailable()
        .is_none()
        .then(|| server.addr6(0));
    let mut client_net = network.clone();
    if let Some(d6) = dest6 {
        client_net["egress"] = json!([format!("{dest}/32:8080"), format!("[{d6}]:8080")]);
    }
    let hello = std::fs::read(
        app.worker
            .root
            .path
            .join("opt/thaw/functions/helloworld.py"),
    )?;
    for (name, net) in [("plain", Value::Null), ("egress", network.clone())] {
        let mut req = json!({
            "name": name, "handler": "helloworld.handler", "memory_mb": 64,
            "strategy": "mmap", "tier": "tmpfs",
            "code": {"format": "file", "filename": "helloworld.py", "data_base64": b64(&hello)},
        });
        if !net.is_null() {
            req["network"] = net;
        }
        post("/v1/functions", &req)?;
    }
    let event = json!({"name": "bench"});
    let (mut plain, mut egress) = (Vec::new(), Vec::new());
    for i in 0..o.cold_runs {
        // alternate the order: neither always follows the other's teardown
        let order = if i % 2 == 0 {
            ["plain", "egress"]
        } else {
            ["egress", "plain"]
        };
        for name in order {
            // the pool refills between restores, as it does between users'
            let pool = thaw_server::api_lookup(app, name)?;
            if let Some(p) = pool.sandboxes.get() {
                p.wait_full(std::time::Duration::from_secs(10));
            }
            let (_, dt) = post(&format!("/v1/functions/{name}/invoke?force=cold"), &event)?;
            if name == "plain" {
                plain.push(dt)
            } else {
                egress.push(dt)
            }
        }
    }

    let req = json!({
        "name": "client", "handler": "client.handler", "memory_mb": 256, "timeout_ms": 120000,
        "strategy": "mmap", "tier": "tmpfs", "network": client_net,
        "code": {"format": "file", "filename": "client.py", "data_base64": b64(CLIENT.as_bytes())},
    });
    post("/v1/functions", &req)?;
    let bytes = o.stream_mib << 20;
    let stream_ev = json!({"op": "stream", "host": dest.to_string(), "port": 8080, "bytes": bytes});
    let mut rates = Vec::new();
    for _ in 0..o.stream_runs {
        let (out, _) = post("/v1/functions/client/invoke", &stream_ev)?;
        // the body and the response's header
        let got = out["bytes"].as_u64().unwrap_or(0);
        if got < bytes {
            fail!(
                BenchServeError::Failed,
                "streamed {got} bytes of {bytes}: {out}"
            );
        }
        rates.push(got as f64 / out["seconds"].as_f64().unwrap_or(f64::MAX) / 1e9);
    }

    let ms_of = |v: &Value| -> Vec<f64> {
        v["ms"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .collect()
    };
    // (function, plain process) connect + first byte to `host`
    let mut connects = |host: String| -> Result<(Summary, Summary)> {
        let conn_ev = json!({"op": "connect", "host": host, "port": 8080, "runs": o.connect_runs});
        let (out, _) = post("/v1/functions/client/invoke", &conn_ev)?;
        let sandbox = ms_of(&out);
        let plain_out = client_ns.exec(&["python3", "-c", CLIENT, &conn_ev.to_string()])?;
        let plain_conn = ms_of(&serde_json::from_str(plain_out.trim())?);
        Ok((stats(&sandbox)?, stats(&plain_conn)?))
    };
    let (connect_sandbox_ms, connect_plain_ms) = connects(dest.to_string())?;
    let (connect6_sandbox_ms, connect6_plain_ms) = match dest6 {
        Some(d6) => {
            let (s, p) = connects(d6.to_string())?;
            (Some(s), Some(p))
        }
        None => (None, None),
    };
    let (cold_plain_ms, cold_egress_ms) = (stats(&plain)?, stats(&egress)?);
    Ok(Report {
        connect6_ratio: connect6_sandbox_ms
            .as_ref()
            .zip(connect6_plain_ms.as_ref())
            .map(|(s, p)| s.median / p.median),
        connect6_sandbox_ms,
        connect6_plain_ms,
        cold_added_ms: cold_egress_ms.median - cold_plain_ms.median,
        cold_plain_ms,
        cold_egress_ms,
        stream_gb_per_s: stats(&rates)?,
        stream_mib: o.stream_mib,
        connect_ratio: connect_sandbox_ms.median / connect_plain_ms.median,
        connect_sandbox_ms,
        connect_plain_ms,
    })
}

pub fn markdown(r: &Report) -> String {
    let row = |name: &str, s: &Summary, unit: &str| {
        format!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} | {unit} |\n",
            s.n, s.min, s.median, s.p99
        )
    };
    let mut m = String::from(
        "thaw bench egress: one run, against a test host in a network namespace\n\n\
         | measure | n | min | median | p99 | unit |\n|---|---|---|---|---|---|\n",
    );
    m += &row(
        "helloworld cold start (API, pooled sandbox), no network",
        &r.cold_plain_ms,
        "ms",
    );
    m += &row(
        "helloworld cold start (API, pooled sandbox), with egress",
        &r.cold_egress_ms,
        "ms",
    );
    m += &row(
        &format!(
            "streaming {} MiB over HTTP from the test host",
            r.stream_mib
        ),
        &r.stream_gb_per_s,
        "GB/s",
    );
    m += &row(
        "connect + first byte, function with egress",
        &r.connect_sandbox_ms,
        "ms",
    );
    m += &row(
        "connect + first byte, plain process in a namespace",
        &r.connect_plain_ms,
        "ms",
    );
    if let (Some(s), Some(p)) = (&r.connect6_sandbox_ms, &r.connect6_plain_ms) {
        m += &row(
            "connect + first byte over IPv6, function with egress",
            s,
            "ms",
        );
        m += &row(
            "connect + first byte over IPv6, plain process in a namespace",
            p,
            "ms",
        );
    }
    m += &format!(
        "\ncold start added by egress (medians): {:+.3} ms; connect + first byte, function / plain process (medians): {:.2}x",
        r.cold_added_ms, r.connect_ratio
    );
    match r.connect6_ratio {
        Some(x) => m += &format!("; over IPv6: {x:.2}x\n"),
        None => m += "; IPv6: not measured (the host has no IPv6)\n",
    }
    m
}
