//! XDT across workers: a consumer's worker pulls another
//! worker's object over HTTP/2 (h2c, prior knowledge: the peer link is a
//! private one) and hands it to the consumer as a sealed memfd, as for a
//! local object.
//!
//! * Who is who: a reference carries its producer's worker id (random per
//!   daemon start, readable; everything else sealed). Each worker lists its
//!   peers' addresses (`[xdt.peering] peers`); it learns their ids by asking
//!   them (`GET /peer/v1/hello`) when it meets an id it does not know yet.
//!   A reference of a worker that is not among the peers cannot be pulled.
//! * Trust: every peer request carries `thaw-peer-auth: TS.HMAC`, an
//!   HMAC-SHA256 under the key all workers share (`key_file`) of the
//!   method, path, time and body, accepted within [`SKEW_MS`]; it must also
//!   come from the address of a configured peer. The producer's worker then
//!   checks the reference exactly as for a local `get` (authentication,
//!   owner, expiry, retrievals, the consumer's size limit), for the owner
//!   the consumer's worker names.
//! * Data: the producer's worker maps the sealed memfd and sends it as
//!   HTTP/2 DATA frames straight from the mapping; the consumer's worker
//!   writes each frame into the consumer's memfd as it arrives (cut-through).
//!   Buffers are bounded by HTTP/2 flow control (the stream window) on both
//!   sides. A pull that stalls for `stall_ms`, ends short, or outlives the
//!   invocation's deadline fails with `peer_failed`; nothing of it is kept.
use super::{PeerConfig, XdtHost};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thaw_error::{fail, Context, ResultExt};
use thaw_xdt::sdk::Host as _;
use thaw_xdt::table::{now_ms, Retrieved};
use thaw_xdt::{WorkerId, XdtError};

/// Why the peer plane's settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// an address, key or limit out of range (the message names it)
    #[error("{0}")]
    Config(String),
    /// the key file could not be read
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = PeerError> = std::result::Result<T, E>;

/// How far a request's time may be from the receiver's clock.
pub const SKEW_MS: u64 = 60_000;
/// HTTP/2 stream and connection window: the bytes in flight per pull.
const WINDOW: u32 = 16 << 20;
/// Largest DATA frame either side sends.
const FRAME: u32 = 1 << 20;
/// Largest request body a peer may send, and error body a peer may answer.
const SMALL_BODY: usize = 64 << 10;
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
const HEADER_SIZE: &str = "thaw-object-size";
const HEADER_REMAINING: &str = "thaw-remaining";
const HEADER_AUTH: &str = "thaw-peer-auth";

type Body = BoxBody<Bytes, Infallible>;
type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

pub struct Peers {
    key: Vec<u8>,
    pub listen: Option<SocketAddr>,
    peers: Vec<SocketAddr>,
    stall: Duration,
    pub prefetch: bool,
    ids: Mutex<HashMap<WorkerId, SocketAddr>>,
    conns: tokio::sync::Mutex<HashMap<SocketAddr, Sender>>,
    /// pulls under way (in either direction), for tests and shutdown
    pub in_flight: Arc<AtomicUsize>,
}

fn addr(s: &str, what: &str) -> Result<SocketAddr> {
    s.parse()
        .map_err(|e| PeerError::Config(format!("[xdt.peering] {what} {s:?} is not ADDR:PORT: {e}")))
}

/// Reads the shared key: hex, at least 32 bytes, readable by root only.
fn read_key(p: &std::path::Path) -> Result<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(p).with_context(|| format!("peer key {}", p.display()))?;
    if md.mode() & 0o077 != 0 {
        fail!(
            PeerError::Config,
            "peer key {} is readable by others (mode {:o}); chmod 600 it",
            p.display(),
            md.mode() & 0o777
        );
    }
    let raw = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let key =
        hex::decode(raw.trim()).with_context(|| format!("peer key {}: not hex", p.display()))?;
    if key.len() < 32 {
        fail!(
            PeerError::Config,
            "peer key {}: {} bytes, at least 32 needed",
            p.display(),
            key.len()
        );
    }
    Ok(key)
}

impl Peers {
    /// `None` when peering is not configured.
    pub fn from_config(c: &PeerConfig) -> Result<Option<Peers>> {
        if c.listen.is_none() && c.peers.is_empty() {
            return Ok(None);
        }
        let key_file = c.key_file.as_ref().ok_or_else(|| {
            PeerError::Config(
                "[xdt.peering] needs key_file (the key shared by every worker)".into(),
            )
        })?;
        if c.stall_ms == 0 {
            fail!(
                PeerError::Config,
                "[xdt.peering] stall_ms must be at least 1"
            );
        }
        Ok(Some(Peers {
            key: read_key(key_file)?,
            listen: c.listen.as_deref().map(|l| addr(l, "listen")).transpose()?,
            peers: c
                .peers
                .iter()
                .map(|p| addr(p, "peer"))
                .collect::<Result<_>>()?,
            stall: Duration::from_millis(c.stall_ms),
            prefetch: c.prefetch,
            ids: Mutex::new(HashMap::new()),
            conns: tokio::sync::Mutex::new(HashMap::new()),
            in_flight: Arc::new(AtomicUsize::new(0)),
        }))
    }

    fn mac(&self, method: &str, path: &str, ts: u64, body: &[u8]) -> hmac::Hmac<sha2::Sha256> {
        use hmac::Mac;
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.key).expect("any key length");
        m.update(format!("thaw-peer-v1\n{method}\n{path}\n{ts}\n").as_bytes());
        m.update(body);
        m
    }

    fn sign(&self, method: &str, path: &str, body: &[u8]) -> String {
        use hmac::Mac;
        let ts = now_ms();
        let tag = self.mac(method, path, ts, body).finalize().into_bytes();
        format!("{ts}.{}", hex::encode(tag))
    }

    /// Checks a request's signature and its sender's address.
    fn verify(
        &self,
        remote: IpAddr,
        method: &str,
        path: &str,
        header: Option<&str>,
        body: &[u8],
    ) -> std::result::Result<(), (StatusCode, &'static str, String)> {
        use hmac::Mac;
        let unauthorized = |m: &str| (StatusCode::UNAUTHORIZED, "unauthorized", m.to_string());
        let (ts, tag) = header
            .and_then(|h| h.split_once('.'))
            .ok_or_else(|| unauthorized("no thaw-peer-auth header"))?;
        let ts: u64 = ts.parse().map_err(|_| unauthorized("bad time"))?;
        let tag = hex::decode(tag).map_err(|_| unauthorized("bad signature"))?;
        // constant-time comparison
        self.mac(method, path, ts, body)
            .verify_slice(&tag)
            .map_err(|_| unauthorized("wrong signature (another key?)"))?;
        if now_ms().abs_diff(ts) > SKEW_MS {
            return Err(unauthorized("the request's time is too far from ours"));
        }
        if !self.peers.iter().any(|p| p.ip() == remote) {
            return Err((
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("{remote} is not one of this worker's configured peers"),
            ));
        }
        Ok(())
    }

    /// The peer that holds worker `w`'s objects.
    async fn resolve(&self, w: WorkerId) -> std::result::Result<SocketAddr, XdtError> {
        if let Some(a) = self.ids.lock().unwrap_or_else(|p| p.into_inner()).get(&w) {
            return Ok(*a);
        }
        // ask every peer who it is (one may have restarted with a new id)
        let asks = self.peers.iter().map(|&p| async move {
            let r = tokio::time::timeout(HELLO_TIMEOUT, self.hello(p)).await;
            (p, r)
        });
        for (p, r) in futures::future::join_all(asks).await {
            match r {
                Ok(Ok(id)) => {
                    let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
                    ids.retain(|_, a| *a != p);
                    ids.insert(id, p);
                }
                Ok(Err(e)) => tracing::debug!("peer {p}: hello failed: {e}"),
                Err(_) => tracing::debug!("peer {p}: no hello within {HELLO_TIMEOUT:?}"),
            }
        }
        let ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        ids.get(&w).copied().ok_or(XdtError::OtherWorker(w))
    }

    async fn hello(&self, peer: SocketAddr) -> std::result::Result<WorkerId, XdtError> {
        let (status, body) = self
            .small_request(peer, "GET", "/peer/v1/hello", b"")
            .await?;
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if status != StatusCode::OK {
            return Err(wire_error(&v));
        }
        v.get("worker")
            .and_then(Value::as_str)
            .and_then(|s| hex::decode(s).ok())
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(WorkerId)
            .ok_or_else(|| XdtError::Peer(format!("peer {peer} sent a bad hello")))
    }

    /// A connection to `peer` (one HTTP/2 connection per peer, shared).
    async fn sender(&self, peer: SocketAddr) -> std::result::Result<Sender, XdtError> {
        let mut conns = self.conns.lock().await;
        if let Some(s) = conns.get(&peer) {
            if !s.is_closed() {
                return Ok(s.clone());
            }
        }
        let fail = |e: String| XdtError::Peer(format!("connecting to peer {peer}: {e}"));
        let tcp = tokio::time::timeout(HELLO_TIMEOUT, tokio::net::TcpStream::connect(peer))
            .await
            .map_err(|_| fail("timed out".into()))?
            .map_err(|e| fail(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(WINDOW)
            .initial_connection_window_size(WINDOW)
            .max_frame_size(FRAME)
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| fail(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        conns.insert(peer, send.clone());
        Ok(send)
    }

    async fn send(
        &self,
        peer: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> std::result::Result<Response<Incoming>, XdtError> {
        let mut s = self.sender(peer).await?;
        let req = Request::builder()
            .method(method)
            .uri(format!("http://{peer}{path}"))
            .header(HEADER_AUTH, self.sign(method, path, body))
            .body(Full::new(Bytes::copy_from_slice(body)))
            .map_err(|e| XdtError::Internal(e.to_string()))?;
        s.ready()
            .await
            .map_err(|e| XdtError::Peer(format!("peer {peer}: {e}")))?;
        s.send_request(req)
            .await
            .map_err(|e| XdtError::Peer(format!("peer {peer}: {e}")))
    }

    /// One request to `peer` with a small answer (status, body).
    pub async fn small_request(
        &self,
        peer: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> std::result::Result<(StatusCode, Vec<u8>), XdtError> {
        let r = self.send(peer, method, path, body).await?;
        let status = r.status();
        let b = http_body_util::Limited::new(r.into_body(), SMALL_BODY)
            .collect()
            .await
            .map_err(|e| XdtError::Peer(format!("peer {peer}: {e}")))?
            .to_bytes();
        Ok((status, b.to_vec()))
    }

    /// One retrieval of another worker's object for `owner`, written into
    /// a new sealed memfd here as its frames arrive.
    pub async fn pull(
        &self,
        owner: &str,
        token: &str,
        max_bytes: u64,
    ) -> std::result::Result<Retrieved, XdtError> {
        let w = thaw_xdt::reference::worker_of(token)?;
        let peer = self.resolve(w).await?;
        let _count = Counted::new(&self.in_flight);
        let body =
            serde_json::to_vec(&json!({"ref": token, "owner": owner, "max_bytes": max_bytes}))
                .map_err(|e| XdtError::Internal(e.to_string()))?;
        let r = self.send(peer, "POST", "/peer/v1/pull", &body).await?;
        if r.status() != StatusCode::OK {
            let b = http_body_util::Limited::new(r.into_body(), SMALL_BODY)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            return Err(wire_error(
                &serde_json::from_slice(&b).unwrap_or(Value::Null),
            ));
        }
        let num = |h: &str| {
            r.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
        };
        let (Some(size), Some(remaining)) = (num(HEADER_SIZE), num(HEADER_REMAINING)) else {
            return Err(XdtError::Peer(format!("peer {peer} sent no object size")));
        };
        if size > max_bytes {
            return Err(XdtError::Peer(format!(
                "peer {peer} sent an object of {size} bytes, more than the {max_bytes} asked for"
            )));
        }
        let fd = thaw_xdt::memfd::create_named("thaw-pulled", size)?;
        let file = std::fs::File::from(fd);
        let mut body = r.into_body();
        let mut got = 0u64;
        let short = |got: u64, why: String| {
            XdtError::Peer(format!(
                "the producer's worker {peer} stopped after {got} of {size} bytes: {why}"
            ))
        };
        loop {
            let frame = match tokio::time::timeout(self.stall, body.frame()).await {
                Err(_) => return Err(short(got, format!("nothing for {:?}", self.stall))),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(short(got, e.to_string())),
                Ok(Some(Ok(f))) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let end = got + data.len() as u64;
            if end > size {
                return Err(short(got, "it sent more than the object's size".into()));
            }
            // cut-through: this frame goes into the consumer's memfd now
            file.write_all_at(&data, got)
                .map_err(|e| XdtError::Internal(format!("writing a pulled object: {e}")))?;
            got = end;
        }
        if got != size {
            return Err(short(got, "the stream ended early".into()));
        }
        let fd = OwnedFd::from(file);
        thaw_xdt::memfd::seal_object(&fd)?;
        Ok(Retrieved {
            fd: thaw_xdt::memfd::reopen_read_only(&fd)?,
            size,
            remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        })
    }
}

fn wire_error(v: &Value) -> XdtError {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    if s("error").is_empty() {
        return XdtError::Peer("the peer answered without an error kind".into());
    }
    XdtError::from_wire(s("error"), s("message"))
}

/// Counts something under way for as long as it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(n: &Arc<AtomicUsize>) -> Counted {
        n.fetch_add(1, Ordering::SeqCst);
        Counted(n.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A read-only shared mapping of a sealed object (what a pull sends from).
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
    _counted: Counted,
}

// SAFETY: the mapping is read-only and of a sealed memfd (its bytes never
// change), so sharing it between threads is sharing immutable memory.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(fd: &OwnedFd, len: usize, counted: Counted) -> std::io::Result<Mapping> {
        // SAFETY: a fresh read-only shared mapping of a descriptor we hold;
        // the result is checked, and the mapping is unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr,
            len,
            _counted: counted,
        })
    }
}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is mapped readable for as long as self lives.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

fn json_response(status: StatusCode, v: Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    *r.status_mut() = status;
    r
}

fn error_response(status: StatusCode, kind: &str, message: String) -> Response<Body> {
    json_response(status, json!({"error": kind, "message": message}))
}

fn status_of(e: &XdtError) -> StatusCode {
    match e {
        XdtError::Forbidden => StatusCode::FORBIDDEN,
        XdtError::Gone(_) | XdtError::Exhausted(_) | XdtError::Expired(_) => StatusCode::GONE,
        XdtError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        XdtError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// Serves one peer request (the producer's side).
async fn handle(host: Arc<XdtHost>, remote: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let Some(peers) = host.peers() else {
        return error_response(StatusCode::NOT_FOUND, "not_found", "no peering".into());
    };
    let (method, path) = (req.method().to_string(), req.uri().path().to_string());
    let auth = req
        .headers()
        .get(HEADER_AUTH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match http_body_util::Limited::new(req.into_body(), SMALL_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => return error_response(StatusCode::BAD_REQUEST, "bad_request", e.to_string()),
    };
    if let Err((st, kind, m)) = peers.verify(remote.ip(), &method, &path, auth.as_deref(), &body) {
        tracing::warn!(%remote, "peer request refused: {m}");
        return error_response(st, kind, m);
    }
    match (method.as_str(), path.as_str()) {
        ("GET", "/peer/v1/hello") => json_response(
            StatusCode::OK,
            json!({"worker": host.table().worker().to_string()}),
        ),
        ("POST", "/peer/v1/pull") => match serve_pull(&host, peers, &body) {
            Ok(r) => r,
            Err(e) => error_response(status_of(&e), e.kind(), e.to_string()),
        },
        _ => error_response(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no peer route {method} {path}"),
        ),
    }
}

fn serve_pull(
    host: &XdtHost,
    peers: &Peers,
    body: &[u8],
) -> std::result::Result<Response<Body>, XdtError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| XdtError::BadRequest(format!("the pull request is not JSON: {e}")))?;
    let field = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| XdtError::BadRequest(format!("the pull request needs {k:?}")))
    };
    let (token, owner) = (field("ref")?, field("owner")?);
    let max_bytes = v
        .get("max_bytes")
        .and_then(Value::as_u64)
        .ok_or_else(|| XdtError::BadRequest("the pull request needs \"max_bytes\"".into()))?;
    // the same checks as a local get, for the consumer's owner and size
    let got = host.table().get(owner, token, max_bytes, now_ms())?;
    let len = usize::try_from(got.size)
        .map_err(|_| XdtError::TooLarge(format!("an object of {} bytes", got.size)))?;
    let data = if len == 0 {
        Bytes::new()
    } else {
        let m = Mapping::new(&got.fd, len, Counted::new(&peers.in_flight))
            .map_err(|e| XdtError::Internal(format!("mapping the object: {e}")))?;
        Bytes::from_owner(m)
    };
    // frames straight from the mapping; h2 sends them as the window allows
    let chunks = (0..len.div_ceil(FRAME as usize))
        .map(move |i| {
            let at = i * FRAME as usize;
            Ok::<_, Infallible>(Frame::data(data.slice(at..(at + FRAME as usize).min(len))))
        })
        .collect::<Vec<_>>();
    let mut r = Response::new(StreamBody::new(futures::stream::iter(chunks)).boxed());
    let h = r.headers_mut();
    h.insert(HEADER_SIZE, got.size.into());
    h.insert(HEADER_REMAINING, got.remaining.into());
    Ok(r)
}

/// Serves peers on `l` until `stop` fires.
pub async fn serve(
    host: Arc<XdtHost>,
    l: tokio::net::TcpListener,
    mut stop: tokio::sync::broadcast::Receiver<()>,
) {
    loop {
        let (stream, remote) = tokio::select! {
            r = l.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("peer listener: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.recv() => return,
        };
        let _ = stream.set_nodelay(true);
        let host = host.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let host = host.clone();
                async move { Ok::<_, Infallible>(handle(host, remote, req).await) }
            });
            let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            b.initial_stream_window_size(WINDOW)
                .initial_connection_window_size(WINDOW)
                .max_frame_size(FRAME)
                .max_send_buf_size(2 * FRAME as usize);
            if let Err(e) = b.serve_connection(TokioIo::new(stream), svc).await {
                tracing::debug!(%remote, "peer connection: {e}");
            }
        });
    }
}

/// A pull that gives up at `deadline` (the consumer's invocation's).
pub async fn pull_until(
    peers: &Peers,
    owner: &str,
    token: &str,
    max_bytes: u64,
    deadline: Instant,
) -> std::result::Result<Retrieved, XdtError> {
    let at = tokio::time::Instant::from_std(deadline);
    match tokio::time::timeout_at(at, peers.pull(owner, token, max_bytes)).await {
        Ok(r) => r,
        Err(_) => Err(XdtError::Peer(
            "the invocation's deadline passed while pulling the object".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(key: &[u8], peer: &str) -> Peers {
        let dir = std::env::temp_dir().join(format!(
            "thaw-peer-unit-{}-{}",
            std::process::id(),
            hex::encode(rand::random::<[u8; 4]>())
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("key");
        thaw_tiers::seal::create_private(&f, hex::encode(key).as_bytes()).unwrap();
        let p = Peers::from_config(&PeerConfig {
            key_file: Some(f),
            peers: vec![peer.into()],
            ..PeerConfig::default()
        })
        .unwrap()
        .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        p
    }

    #[test]
    fn requests_are_signed_bound_to_their_content_time_and_sender() {
        let p = peers(&[1; 32], "10.0.0.2:7070");
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        let h = p.sign("POST", "/peer/v1/pull", b"{}");
        assert!(p
            .verify(ip, "POST", "/peer/v1/pull", Some(&h), b"{}")
            .is_ok());
        // another body, path or method: the signature does not hold
        for (m, path, body) in [
            ("POST", "/peer/v1/pull", &b"{ }"[..]),
            ("POST", "/peer/v1/hello", b"{}"),
            ("GET", "/peer/v1/pull", b"{}"),
        ] {
            let e = p.verify(ip, m, path, Some(&h), body).unwrap_err();
            assert_eq!(e.0, StatusCode::UNAUTHORIZED, "{m} {path}");
        }
        // another key, no header, garbage, an old time
        let other = peers(&[2; 32], "10.0.0.2:7070");
        let h2 = other.sign("POST", "/peer/v1/pull", b"{}");
        for bad in [Some(h2.as_str()), None, Some("x"), Some("12.zz")] {
            let e = p
                .verify(ip, "POST", "/peer/v1/pull", bad, b"{}")
                .unwrap_err();
            assert_eq!(e.0, StatusCode::UNAUTHORIZED, "{bad:?}");
        }
        use hmac::Mac;
        let old = now_ms() - SKEW_MS - 1_000;
        let tag = p.mac("GET", "/x", old, b"").finalize().into_bytes();
        let h3 = format!("{old}.{}", hex::encode(tag));
        let e = p.verify(ip, "GET", "/x", Some(&h3), b"").unwrap_err();
        assert!(e.2.contains("time"), "{}", e.2);
        // right key, but not from a configured peer
        let e = p
            .verify(
                "10.0.0.9".parse().unwrap(),
                "POST",
                "/peer/v1/pull",
                Some(&h),
                b"{}",
            )
            .unwrap_err();
        assert_eq!(e.0, StatusCode::FORBIDDEN);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(Peers::from_config(&PeerConfig::default())
            .unwrap()
            .is_none());
        let no_key = PeerConfig {
            peers: vec!["10.0.0.2:7070".into()],
            ..PeerConfig::default()
        };
        let e = Peers::from_config(&no_key).err().unwrap();
        assert!(
            matches!(&e, PeerError::Config(m) if m.contains("key_file")),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("thaw-peer-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let short = dir.join("short");
        thaw_tiers::seal::create_private(&short, b"abcd").unwrap();
        let open = dir.join("open");
        std::fs::write(&open, hex::encode([1u8; 32])).unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        for (f, want) in [(&short, "at least 32"), (&open, "readable by others")] {
            let c = PeerConfig {
                key_file: Some(f.clone()),
                ..no_key.clone()
            };
            let e = Peers::from_config(&c).err().unwrap();
            assert!(
                matches!(&e, PeerError::Config(m) if m.contains(want)),
                "{e:#}"
            );
        }
        let good = dir.join("good");
        thaw_tiers::seal::create_private(&good, hex::encode([1u8; 32]).as_bytes()).unwrap();
        let c = PeerConfig {
            key_file: Some(good),
            peers: vec!["not an address".into()],
            ..PeerConfig::default()
        };
        let e = Peers::from_config(&c).err().unwrap();
        assert!(e.to_string().contains("not ADDR:PORT"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
