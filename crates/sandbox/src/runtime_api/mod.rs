//! Lambda's Runtime API for a custom runtime: the function's `bootstrap`
//! is the instance, and asks the worker for events over HTTP
//! (`AWS_LAMBDA_RUNTIME_API`). The worker listens inside the sandbox's own
//! network namespace (nothing of another sandbox can reach it) and stands in
//! for an agent: the sandbox's agent requests (`load`, `invoke`,
//! `prepare_checkpoint`, `restored`...) are answered from what the
//! bootstrap does through the API, in the calling thread, so the rest of the
//! worker sees one more runtime and no new protocol.
//!
//! A snapshot is taken while the bootstrap's `next` waits. Its connection to
//! the API (TCP, from the bootstrap's side) is kept as a socket that the
//! restorer connects again, to an abstract unix address the worker also
//! listens on in the clone's namespace (one per [`Waiting`], so the worker
//! knows what the call was): the clone wakes with its call still pending,
//! on a live connection, which the worker answers. A runtime that knows
//! SnapStart (`AWS_LAMBDA_INITIALIZATION_TYPE=snap-start`) waits in
//! `/runtime/restore/next`, answered at the restore (its after-restore
//! hooks run then), before its `next`. See docs/ARCHITECTURE.md.
mod connections;
pub mod http;

pub(crate) use connections::Listeners;
pub use connections::{is_pending_connection, PendingConn, Waiting};

use crate::agent::{ChannelError, Request};
use http::{HttpRequest, Parsed};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant, SystemTime};

/// Where the bootstrap finds the API (`AWS_LAMBDA_RUNTIME_API`).
pub const ADDRESS: &str = "127.0.0.1:9001";
pub(crate) const PORT: u16 = 9001;

/// Largest body the bootstrap may send (Lambda's response limit).
pub const MAX_BODY: usize = 6 << 20;
/// Most connections of one bootstrap the worker keeps (each may buffer a
/// body); past it a new one is closed at once.
pub const MAX_CONNS: usize = 16;
const PREFIX: &str = "/2018-06-01/runtime/";

/// Who the instance serves, for the `Lambda-Runtime-*` headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeApiSpec {
    pub function_name: String,
    /// `Lambda-Runtime-Invoked-Function-Arn`
    pub function_arn: String,
}

trait Stream: Read + Write + AsRawFd + Send {}
impl<T: Read + Write + AsRawFd + Send> Stream for T {}

struct Conn {
    id: u64,
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    /// the bootstrap's port (TCP connections)
    port: Option<u16>,
}

/// What the bootstrap did that the current agent request waits for.
enum Happened {
    Next,
    Response(Vec<u8>),
    Error(Vec<u8>, Option<String>),
    InitError(Vec<u8>, Option<String>),
    Exited,
}

/// One custom-runtime sandbox's Runtime API, served from the worker.
pub(crate) struct RuntimeApi {
    spec: RuntimeApiSpec,
    listeners: Option<Listeners>,
    pidfd: Option<OwnedFd>,
    conns: Vec<Conn>,
    next_id: u64,
    /// the connection whose call waits, and for what
    pending: Option<(u64, Waiting)>,
    /// the request id of the invocation in flight
    current: Option<String>,
    /// the bootstrap asked for an event at least once: init is over
    loaded: bool,
    invocations: u64,
}

impl RuntimeApi {
    pub(crate) fn new(spec: RuntimeApiSpec) -> RuntimeApi {
        RuntimeApi {
            spec,
            listeners: None,
            pidfd: None,
            conns: Vec::new(),
            next_id: 1,
            pending: None,
            current: None,
            loaded: false,
            invocations: 0,
        }
    }

    pub(crate) fn set_listeners(&mut self, l: Listeners) {
        self.listeners = Some(l);
    }

    /// The TCP connection whose call waits, which a checkpoint keeps live.
    pub(crate) fn pending_conn(&self) -> Option<PendingConn> {
        let (id, waiting) = self.pending?;
        let port = self.conns.iter().find(|c| c.id == id)?.port?;
        Some(PendingConn { port, waiting })
    }

    /// One agent request (an encoded frame) answered as an agent would.
    pub(crate) fn exchange(
        &mut self,
        frame: &[u8],
        pid: i32,
        timeout: Duration,
    ) -> std::result::Result<Value, ChannelError> {
        let deadline = Instant::now() + timeout;
        if self.pidfd.is_none() {
            self.pidfd = Some(pidfd_open(pid)?);
        }
        // the frame's 4-byte length is the caller's own
        let req: Request = match frame.get(4..).map(serde_json::from_slice) {
            Some(Ok(r)) => r,
            _ => return Ok(refused("bad_request", "not a request frame".into())),
        };
        match req {
            Request::Health => Ok(json!({
                "ok": true, "op": "health",
                "state": if self.loaded { "ready" } else { "idle" },
                "function": self.spec.function_name, "invocations": self.invocations,
                "pid": pid, "agent_version": 1,
            })),
            Request::Load => self.load(pid, deadline),
            Request::Invoke {
                event, request_id, ..
            } => {
                let event = match event {
                    crate::agent::Event::Input(v) => v,
                    crate::agent::Event::Size(s) => {
                        return Ok(refused(
                            "bad_request",
                            format!("a custom runtime has no suite input {s}"),
                        ))
                    }
                };
                self.invoke(&event, request_id, timeout, deadline)
            }
            Request::PrepareCheckpoint => self.prepare_checkpoint(deadline),
            Request::Restored { .. } => self.restored(deadline),
            Request::AfterRestore { .. } => Ok(json!({"ok": true, "hook": false, "hook_ms": 0.0})),
            Request::ZygoteFork { .. } => Ok(refused(
                "bad_request",
                "a custom runtime is not a zygote".into(),
            )),
            Request::Exit => {
                self.conns.clear();
                self.listeners = None;
                Ok(json!({"ok": true}))
            }
        }
    }

    fn load(&mut self, pid: i32, deadline: Instant) -> std::result::Result<Value, ChannelError> {
        let t0 = Instant::now();
        let already = self.loaded;
        while self.pending.is_none() {
            match self.serve(deadline)? {
                Happened::InitError(body, ty) => return Ok(error_reply(&body, ty, "init")),
                Happened::Exited => return Err(ChannelError::Closed),
                _ => {}
            }
        }
        Ok(json!({
            "ok": true, "function": self.spec.function_name,
            "import_ms": t0.elapsed().as_secs_f64() * 1e3, "init_ms": 0.0,
            "rss_kb": peak_rss_kb(pid), "already_loaded": already,
        }))
    }

    /// A snapshot is taken while the bootstrap's `next` waits on a TCP
    /// connection of its own (one a restore remade has no port to find).
    fn prepare_checkpoint(
        &mut self,
        deadline: Instant,
    ) -> std::result::Result<Value, ChannelError> {
        while self.pending.is_none() {
            if let Happened::Exited = self.serve(deadline)? {
                return Err(ChannelError::Closed);
            }
        }
        Ok(match self.pending_conn() {
            Some(_) => json!({"ok": true}),
            None => refused(
                "not_checkpointable",
                "the bootstrap's waiting call is not on a TCP connection".into(),
            ),
        })
    }

    /// Serves until the bootstrap's `next` waits (answering a waiting
    /// `restore/next` on the way: an instance that goes on after its
    /// snapshot resumes as a restored one would). Its exit closes the
    /// channel; an error it posts is the reply to give instead.
    fn wait_next(&mut self, deadline: Instant) -> std::result::Result<Option<Value>, ChannelError> {
        loop {
            match self.pending {
                Some((_, Waiting::Event)) => return Ok(None),
                Some((id, Waiting::Restore)) => {
                    self.pending = None;
                    if !self.send(id, &http::response(200, &[], b"{}"), deadline) {
                        return Err(ChannelError::Closed);
                    }
                }
                None => match self.serve(deadline)? {
                    Happened::Exited => return Err(ChannelError::Closed),
                    Happened::InitError(body, ty) => {
                        return Ok(Some(error_reply(&body, ty, "restore")))
                    }
                    _ => {}
                },
            }
        }
    }

    fn invoke(
        &mut self,
        event: &Value,
        request_id: Option<String>,
        timeout: Duration,
        deadline: Instant,
    ) -> std::result::Result<Value, ChannelError> {
        if let Some(failed) = self.wait_next(deadline)? {
            return Ok(failed);
        }
        let id = request_id.unwrap_or_else(|| random_hex(16));
        let (conn, _) = self.pending.take().expect("waited for");
        let epoch_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let deadline_ms = (epoch_ms + timeout.as_millis()).to_string();
        let trace = format!(
            "Root=1-{:08x}-{};Parent={};Sampled=0",
            epoch_ms / 1000,
            random_hex(12),
            random_hex(8)
        );
        let body = serde_json::to_vec(event).expect("a JSON value serialises");
        let answer = http::response(
            200,
            &[
                ("Lambda-Runtime-Aws-Request-Id", &id),
                ("Lambda-Runtime-Deadline-Ms", &deadline_ms),
                (
                    "Lambda-Runtime-Invoked-Function-Arn",
                    &self.spec.function_arn,
                ),
                ("Lambda-Runtime-Trace-Id", &trace),
            ],
            &body,
        );
        self.current = Some(id.clone());
        self.invocations += 1;
        let t0 = Instant::now();
        if !self.send(conn, &answer, deadline) {
            self.current = None;
            return Err(ChannelError::Closed);
        }
        loop {
            match self.serve(deadline)? {
                Happened::Response(out) => {
                    let output = serde_json::from_slice(&out)
                        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out).into()));
                    return Ok(json!({
                        "ok": true, "output": output,
                        "exec_ms": t0.elapsed().as_secs_f64() * 1e3,
                    }));
                }
                Happened::Error(body, ty) => return Ok(error_reply(&body, ty, "invocation")),
                Happened::Exited => {
                    self.current = None;
                    return Err(ChannelError::Closed);
                }
                Happened::InitError(..) | Happened::Next => {}
            }
        }
    }

    /// The restorer connected the snapshot's waiting connection again, to
    /// the listener of what it waits for. A `restore/next` is answered now:
    /// the runtime's after-restore hooks run before its first event.
    fn restored(&mut self, deadline: Instant) -> std::result::Result<Value, ChannelError> {
        let accepted = self.listeners.as_ref().and_then(|l| {
            Waiting::ALL
                .iter()
                .zip(&l.unix)
                .find_map(|(w, u)| u.accept().ok().map(|(s, _)| (s, *w)))
        });
        let Some((stream, waiting)) = accepted else {
            return Ok(refused(
                "bad_request",
                "the restored bootstrap's Runtime API connection did not come back".into(),
            ));
        };
        let _ = stream.set_nonblocking(false);
        let Some(id) = self.add(Box::new(stream), None) else {
            return Ok(refused(
                "bad_request",
                "no room for the restored connection".into(),
            ));
        };
        self.pending = Some((id, waiting));
        self.loaded = true;
        if waiting == Waiting::Restore {
            self.pending = None;
            if !self.send(id, &http::response(200, &[], b"{}"), deadline) {
                return Err(ChannelError::Closed);
            }
        }
        Ok(json!({"ok": true, "state": "ready", "reseeded": []}))
    }

    /// Keeps a new connection; None (and it closed) past [`MAX_CONNS`].
    fn add(&mut self, stream: Box<dyn Stream>, port: Option<u16>) -> Option<u64> {
        if self.conns.len() >= MAX_CONNS {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.conns.push(Conn {
            id,
            stream,
            buf: Vec::new(),
            port,
        });
        Some(id)
    }

    /// Serves the bootstrap until something the caller waits for happens.
    fn serve(&mut self, deadline: Instant) -> std::result::Result<Happened, ChannelError> {
        loop {
            if let Some(h) = self.take_buffered(deadline) {
                return Ok(h);
            }
            let mut polled: Vec<libc::pollfd> = Vec::new();
            let mut push = |fd: i32| {
                polled.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
            };
            push(self.pidfd.as_ref().map_or(-1, |p| p.as_raw_fd()));
            match &self.listeners {
                Some(l) => {
                    push(l.tcp.as_raw_fd());
                    l.unix.iter().for_each(|u| push(u.as_raw_fd()));
                }
                None => (0..3).for_each(|_| push(-1)),
            }
            for c in &self.conns {
                push(c.stream.as_raw_fd());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ChannelError::Timeout);
            }
            let ms = i32::try_from(left.as_millis()).map_or(i32::MAX, |ms| ms.max(1));
            // SAFETY: poll over our own array of pollfd.
            let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(ChannelError::Io {
                    what: "polling the Runtime API",
                    source: e,
                });
            }
            // connections first: an init error sent just before the exit counts
            let ready: Vec<u64> = polled[4..]
                .iter()
                .zip(&self.conns)
                .filter(|(p, _)| p.revents != 0)
                .map(|(_, c)| c.id)
                .collect();
            for id in ready {
                self.read_conn(id);
            }
            if let Some(h) = self.take_buffered(deadline) {
                return Ok(h);
            }
            if polled[1].revents != 0 {
                self.accept_tcp();
            }
            if polled[2].revents != 0 || polled[3].revents != 0 {
                self.accept_unix();
            }
            if polled[0].revents != 0 {
                // what the bootstrap sent before it exited still counts (an
                // error posted on a new connection, then the exit)
                self.accept_tcp();
                self.accept_unix();
                for id in self.conns.iter().map(|c| c.id).collect::<Vec<_>>() {
                    self.read_conn(id);
                }
                return Ok(self.take_buffered(deadline).unwrap_or(Happened::Exited));
            }
        }
    }

    fn accept_tcp(&mut self) {
        while let Some(Ok((s, peer))) = self.listeners.as_ref().map(|l| l.tcp.accept()) {
            let _ = s.set_nonblocking(false);
            let _ = self.add(Box::new(s), Some(peer.port()));
        }
    }

    /// A connection the bootstrap makes to a reconnect name itself is one
    /// more connection to the API.
    fn accept_unix(&mut self) {
        for i in 0..Waiting::ALL.len() {
            while let Some(Ok((s, _))) = self.listeners.as_ref().map(|l| l.unix[i].accept()) {
                let _ = s.set_nonblocking(false);
                let _ = self.add(Box::new(s), None);
            }
        }
    }

    /// Reads what connection `id` has (it is readable, or its peer is
    /// gone); a closed one goes.
    fn read_conn(&mut self, id: u64) {
        let Some(i) = self.conns.iter().position(|c| c.id == id) else {
            return;
        };
        let mut chunk = vec![0u8; 64 << 10];
        let c = &mut self.conns[i];
        // poll said readable: this read does not block
        match c.stream.read(&mut chunk) {
            Ok(0) | Err(_) => self.drop_conn(id),
            Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
        }
    }

    fn drop_conn(&mut self, id: u64) {
        self.conns.retain(|c| c.id != id);
        if self.pending.is_some_and(|(p, _)| p == id) {
            self.pending = None;
        }
    }

    /// Handles the first whole request any connection holds.
    fn take_buffered(&mut self, deadline: Instant) -> Option<Happened> {
        for i in 0..self.conns.len() {
            let id = self.conns[i].id;
            match http::parse(&self.conns[i].buf, MAX_BODY) {
                Parsed::Partial => continue,
                Parsed::Bad(status, why) => {
                    let body = json!({"errorMessage": why, "errorType": "InvalidRequest"});
                    let _ = self.send(
                        id,
                        &http::response(status, &[], body.to_string().as_bytes()),
                        deadline,
                    );
                    self.drop_conn(id);
                    return None;
                }
                Parsed::Request(req, used) => {
                    self.conns[i].buf.drain(..used);
                    return self.route(id, req, deadline);
                }
            }
        }
        None
    }

    /// Answers one request of the bootstrap's.
    fn route(&mut self, conn: u64, req: HttpRequest, deadline: Instant) -> Option<Happened> {
        let path = req.path.split('?').next().unwrap_or("").to_string();
        let rest = path.strip_prefix(PREFIX).unwrap_or("");
        let error_type = req
            .header("lambda-runtime-function-error-type")
            .map(String::from);
        let (status, body, happened) = match (req.method.as_str(), rest) {
            ("GET", "invocation/next") if self.current.is_some() => (
                403,
                api_error(
                    "InvalidStateTransition",
                    "the invocation in flight is not answered yet",
                ),
                None,
            ),
            ("GET", "invocation/next" | "restore/next") if self.pending.is_some() => (
                400,
                api_error("InvalidStateTransition", "another call already waits"),
                None,
            ),
            ("GET", "invocation/next") => {
                self.pending = Some((conn, Waiting::Event));
                self.loaded = true;
                // answered with the event, later
                return Some(Happened::Next);
            }
            ("GET", "restore/next") if !self.loaded => {
                // init is over: the snapshot is taken while this waits
                self.pending = Some((conn, Waiting::Restore));
                self.loaded = true;
                return Some(Happened::Next);
            }
            ("POST", "restore/error") => (
                202,
                json!({"status": "OK"}),
                Some(Happened::InitError(req.body, error_type)),
            ),
            ("POST", "init/error") if !self.loaded => (
                202,
                json!({"status": "OK"}),
                Some(Happened::InitError(req.body, error_type)),
            ),
            ("POST", "init/error") => (
                403,
                api_error("InvalidStateTransition", "init is over"),
                None,
            ),
            ("POST", r) if r.starts_with("invocation/") => {
                let parts: Vec<&str> = r.split('/').collect();
                match (parts.as_slice(), &self.current) {
                    ([_, id, what], Some(cur)) if id == cur && *what == "response" => {
                        self.current = None;
                        (
                            202,
                            json!({"status": "OK"}),
                            Some(Happened::Response(req.body)),
                        )
                    }
                    ([_, id, what], Some(cur)) if id == cur && *what == "error" => {
                        self.current = None;
                        (
                            202,
                            json!({"status": "OK"}),
                            Some(Happened::Error(req.body, error_type)),
                        )
                    }
                    ([_, _, "response" | "error"], _) => (
                        404,
                        api_error(
                            "InvalidRequestID",
                            "no invocation of this instance has that id",
                        ),
                        None,
                    ),
                    _ => (404, api_error("NotFound", "no such Runtime API path"), None),
                }
            }
            _ => (404, api_error("NotFound", "no such Runtime API path"), None),
        };
        let _ = self.send(
            conn,
            &http::response(status, &[], body.to_string().as_bytes()),
            deadline,
        );
        happened
    }

    /// Writes `bytes` to connection `id`; false (and the connection gone)
    /// if it could not.
    fn send(&mut self, id: u64, bytes: &[u8], deadline: Instant) -> bool {
        let Some(c) = self.conns.iter_mut().find(|c| c.id == id) else {
            return false;
        };
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let ok = set_send_timeout(c.stream.as_raw_fd(), left)
            .and_then(|()| c.stream.write_all(bytes))
            .is_ok();
        if !ok {
            self.drop_conn(id);
        }
        ok
    }
}

#[allow(clippy::cast_possible_truncation)] // 16 bytes
const TIMEVAL_LEN: libc::socklen_t = std::mem::size_of::<libc::timeval>() as libc::socklen_t;

fn set_send_timeout(fd: i32, t: Duration) -> std::io::Result<()> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(t.as_secs()).map_err(std::io::Error::other)?,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: setsockopt reads the timeval we pass.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            TIMEVAL_LEN,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn api_error(ty: &str, message: &str) -> Value {
    json!({"errorMessage": message, "errorType": ty})
}

/// An agent's `"ok": false` reply.
fn refused(kind: &str, message: String) -> Value {
    json!({"ok": false, "error": kind, "message": message})
}

/// The agent reply for an error the bootstrap posted (Lambda's error shape,
/// `errorMessage`, `errorType`, `stackTrace` (`trace` in Lambda's Node.js
/// runtime client), or anything else as text).
fn error_reply(body: &[u8], header_type: Option<String>, phase: &str) -> Value {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
    let error_type = text("errorType")
        .or(header_type)
        .unwrap_or_else(|| "Runtime.Unknown".into());
    let message = text("errorMessage").unwrap_or_else(|| String::from_utf8_lossy(body).into());
    let stack: Vec<String> = match v.get("stackTrace").or_else(|| v.get("trace")) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|f| f.as_str().map_or_else(|| f.to_string(), String::from))
            .collect(),
        _ => Vec::new(),
    };
    json!({
        "ok": false, "error": "function_error",
        "message": format!("{phase} error {error_type}: {message}"),
        "error_type": error_type, "error_message": message, "stack_trace": stack,
    })
}

/// `n` random bytes in hex.
fn random_hex(n: usize) -> String {
    hex::encode((0..n).map(|_| rand::random::<u8>()).collect::<Vec<u8>>())
}

fn peak_rss_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open of our own child; the descriptor is returned to us.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(std::io::Error::other)?;
    // SAFETY: just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
