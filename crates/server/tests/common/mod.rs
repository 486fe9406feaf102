//! What the daemon's tests share besides the in-process daemon
//! (`thaw_server::testing`): deploy requests, errors, metrics. Each test
//! binary uses part of it.
#![allow(dead_code)]
use base64::Engine as _;
use serde_json::{json, Value};
use std::io::Write;
use thaw_client::Response;

/// The daemon in-process (`thaw_server::testing`).
pub use thaw_server::testing::test_config;
pub use thaw_server::TempDaemon as Daemon;

pub fn b64(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(d)
}

/// A deploy request for one source file.
pub fn file_deploy(name: &str, handler: &str, src: &str) -> Value {
    let module = handler.split('.').next().unwrap();
    json!({
        "name": name,
        "handler": handler,
        "code": {"format": "file", "data_base64": b64(src.as_bytes()), "filename": format!("{module}.py")},
    })
}

/// A Node.js function from one file, `m.js`, with handler `m.handler`.
pub fn node_file_deploy(name: &str, src: &str) -> Value {
    json!({
        "name": name,
        "runtime": "nodejs",
        "handler": "m.handler",
        "code": {"format": "file", "data_base64": b64(src.as_bytes()), "filename": "m.js"},
    })
}

pub fn deploy(d: &Daemon, req: &Value) -> Value {
    let r = d.post_json("/v1/functions", req);
    assert!(
        r.status == 201 || r.status == 200,
        "deploy failed: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    r.json().unwrap()
}

pub fn error_of(r: &Response) -> (u16, String, String) {
    let v = r.json().unwrap_or(Value::Null);
    (
        r.status,
        v["error"].as_str().unwrap_or("").to_string(),
        v["message"].as_str().unwrap_or("").to_string(),
    )
}

/// One sample of the daemon's `/metrics`: `series` is the name with its
/// labels as the daemon writes them (`thaw_instances{state="idle"}`).
pub fn metric(d: &Daemon, series: &str) -> u64 {
    let text = String::from_utf8(d.req("GET", "/metrics", None).body).unwrap();
    let key = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

/// A tar.gz written entry by entry (raw ustar headers, so hostile names and
/// link entries can be made too).
pub struct RawTar(Vec<u8>);

impl RawTar {
    pub fn new() -> Self {
        RawTar(Vec::new())
    }
    pub fn entry(&mut self, name: &str, kind: u8, data: &[u8], link: &str) -> &mut Self {
        self.header(name, kind, data.len() as u64, link);
        self.0.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.0.extend(std::iter::repeat_n(0u8, pad));
        self
    }
    fn header(&mut self, name: &str, kind: u8, size: u64, link: &str) {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let oct = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
            let s = format!("{:0w$o}", v, w = len - 1);
            h[at..at + len - 1].copy_from_slice(s.as_bytes());
        };
        oct(&mut h, 100, 8, 0o644);
        oct(&mut h, 108, 8, 0);
        oct(&mut h, 116, 8, 0);
        oct(&mut h, 124, 12, size);
        oct(&mut h, 136, 12, 0);
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| b as u32).sum();
        let s = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(s.as_bytes());
        self.0.extend_from_slice(&h);
    }
    pub fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.entry(name, b'0', data, "")
    }
    pub fn gz(&mut self) -> Vec<u8> {
        self.0.extend(std::iter::repeat_n(0u8, 1024));
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&self.0).unwrap();
        e.finish().unwrap()
    }
}

pub fn archive_deploy(name: &str, handler: &str, format: &str, data: &[u8]) -> Value {
    json!({
        "name": name,
        "handler": handler,
        "code": {"format": format, "data_base64": b64(data)},
    })
}
