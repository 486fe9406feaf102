//! The HTTP/1.1 client: a loopback TCP or Unix-socket target, a pool of
//! keep-alive connections (one request at a time each, opened on demand so an
//! open-loop burst never waits for a free connection), one invoke request.

use crate::error::{LoadError, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;
use thaw_error::fail;

/// Where requests go. Only loopback: a load generator must not be pointed at
/// someone else's service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Tcp(a) => write!(f, "http://{a}"),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl Target {
    /// `http://127.0.0.1:PORT`, `http://[::1]:PORT`, `http://localhost:PORT`
    /// (a trailing `/` is allowed), or `unix:/path/to/api.sock`.
    pub fn parse(s: &str) -> Result<Target> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                fail!(LoadError::Config, "--target unix: needs a socket path");
            }
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        let Some(rest) = s.strip_prefix("http://") else {
            fail!(
                LoadError::Config,
                "--target {s:?}: expected http://HOST:PORT or unix:/PATH (https is not supported)"
            );
        };
        let hostport = rest.strip_suffix('/').unwrap_or(rest);
        if hostport.contains('/') {
            fail!(
                LoadError::Config,
                "--target {s:?}: give the server's root, without a path"
            );
        }
        let Some((host, port)) = hostport.rsplit_once(':') else {
            fail!(LoadError::Config, "--target {s:?}: no port");
        };
        let Some(port) = port.parse::<u16>().ok().filter(|&p| p != 0) else {
            fail!(LoadError::Config, "--target {s:?}: bad port {port:?}");
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ip: IpAddr = if host == "localhost" {
            IpAddr::from([127, 0, 0, 1])
        } else {
            host.parse().map_err(|_| {
                LoadError::Config(format!(
                    "--target {s:?}: host must be localhost or a loopback address"
                ))
            })?
        };
        if !ip.is_loopback() {
            fail!(LoadError::Config, "--target {s:?}: {ip} is not a loopback address; thaw load only sends to this machine");
        }
        Ok(Target::Tcp(SocketAddr::new(ip, port)))
    }
}

/// Why a request got no HTTP response. The name is its status in the records.
#[derive(Debug)]
pub enum Failure {
    Connect(std::io::Error),
    Http(hyper::Error),
    /// The response body broke off or was larger than [`MAX_RESPONSE_BYTES`].
    Body(String),
    Timeout,
}

/// Largest response body read; a larger one is a failure, not a memory hog.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

impl Failure {
    pub fn status(&self) -> &'static str {
        match self {
            Failure::Connect(_) => "connect",
            Failure::Http(_) | Failure::Body(_) => "io",
            Failure::Timeout => "timeout",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Connect(e) => write!(f, "connect: {e}"),
            Failure::Http(e) => write!(f, "http: {e}"),
            Failure::Body(e) => write!(f, "response body: {e}"),
            Failure::Timeout => write!(f, "timed out"),
        }
    }
}

/// What the generator keeps of a response.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub start_type: Option<String>,
    pub server_timing: Option<String>,
    pub body_bytes: usize,
}

type Sender = SendRequest<Full<Bytes>>;

pub struct Client {
    target: Target,
    idle: Mutex<Vec<Sender>>,
}

impl Client {
    pub fn new(target: Target) -> Client {
        Client {
            target,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    async fn connect(&self) -> std::io::Result<Sender> {
        let handshake = |e: hyper::Error| std::io::Error::other(e);
        match &self.target {
            Target::Tcp(a) => {
                let s = tokio::net::TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                let (tx, conn) = http1::handshake(TokioIo::new(s)).await.map_err(handshake)?;
                tokio::spawn(conn);
                Ok(tx)
            }
            Target::Unix(p) => {
                let s = tokio::net::UnixStream::connect(p).await?;
                let (tx, conn) = http1::handshake(TokioIo::new(s)).await.map_err(handshake)?;
                tokio::spawn(conn);
                Ok(tx)
            }
        }
    }

    /// Checks that the target accepts a connection within `within`; the
    /// connection is kept for the first request.
    pub async fn probe(&self, within: Duration) -> Result<()> {
        match tokio::time::timeout(within, self.connect()).await {
            Ok(Ok(tx)) => {
                self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(tx);
                Ok(())
            }
            Ok(Err(e)) => fail!(LoadError::Unreachable, "cannot reach {}: {e}", self.target),
            Err(_) => fail!(
                LoadError::Unreachable,
                "cannot reach {}: no connection within {:?}",
                self.target,
                within
            ),
        }
    }

    fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(tx) = idle.pop() {
            if !tx.is_closed() && tx.is_ready() {
                return Some(tx);
            }
        }
        None
    }

    /// `POST /v1/functions/{function}/invoke` with `body`; `seq` goes in a
    /// `Thaw-Load-Seq` header so a server can match requests to records.
    pub async fn invoke(&self, function: &str, body: Bytes, seq: u64) -> Result<Answer, Failure> {
        let mut tx = match self.take_idle() {
            Some(tx) => tx,
            None => self.connect().await.map_err(Failure::Connect)?,
        };
        let host = match &self.target {
            Target::Tcp(a) => a.to_string(),
            Target::Unix(_) => "localhost".to_string(),
        };
        let req = hyper::Request::post(format!("/v1/functions/{function}/invoke"))
            .header(hyper::header::HOST, host)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header("thaw-load-seq", seq)
            .body(Full::new(body))
            .expect("a request built from a validated function name");
        let resp = tx.send_request(req).await.map_err(Failure::Http)?;
        let (parts, body) = resp.into_parts();
        let header = |name: &str| {
            parts
                .headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let start_type = Some(header("thaw-start-type")).filter(|s| !s.is_empty());
        let server_timing = Some(header("server-timing")).filter(|s| !s.is_empty());
        let body = http_body_util::Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| Failure::Body(e.to_string()))?
            .to_bytes();
        if !tx.is_closed() {
            self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(tx);
        }
        Ok(Answer {
            status: parts.status.as_u16(),
            start_type,
            server_timing,
            body_bytes: body.len(),
        })
    }
}

/// Parses a `Server-Timing` header into (metric, milliseconds) pairs; metrics
/// without a `dur` are left out, and so is anything malformed.
pub fn parse_server_timing(h: &str) -> Vec<(String, f64)> {
    h.split(',')
        .filter_map(|metric| {
            let mut parts = metric.split(';').map(str::trim);
            let name = parts.next()?;
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return None;
            }
            let dur = parts.find_map(|p| {
                let (k, v) = p.split_once('=')?;
                (k.trim().eq_ignore_ascii_case("dur"))
                    .then(|| v.trim().trim_matches('"').parse::<f64>().ok())
                    .flatten()
            })?;
            dur.is_finite().then(|| (name.to_string(), dur))
        })
        .collect()
}

/// A function name goes into the URL path: keep it to characters that need no
/// escaping.
pub fn check_function_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 128
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || name.starts_with('.')
    {
        fail!(
            LoadError::Config,
            "function name {name:?}: use 1-128 of [A-Za-z0-9._-], not starting with '.'"
        );
    }
    Ok(())
}
