//! The worker's side of the agent protocol (docs/AGENT_PROTOCOL.md): frames of
//! a 4-byte little-endian length and a JSON object, over the sandbox's one
//! socket. Requests and replies are the typed [`Request`] and [`Reply`]; every
//! client (sandbox, zygote, tests) speaks through this module. Replies come
//! from untrusted code: lengths are bounded, the body must be a JSON object,
//! and every read has a deadline.
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use thaw_error::{fail, Context, ResultExt};

/// Largest reply the worker accepts.
pub const MAX_REPLY_BYTES: usize = 16 << 20;
/// Most descriptors the agent may pass with one frame.
pub const MAX_FDS_PER_FRAME: usize = 4;

/// A request to the agent; on the wire `{"op": "<variant>", ...fields}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Health,
    /// Import the function and run its init.
    Load,
    /// One invocation on a sized input of the suite or on an explicit event.
    Invoke {
        #[serde(flatten)]
        event: Event,
        /// the agent's own (soft) limit; absent means its default
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<f64>,
        /// the invocation's id (a Lambda-style handler's
        /// `context.aws_request_id`); absent: the agent makes one
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    PrepareCheckpoint,
    /// First request after a restore: re-seed (64 hex chars) and unmap the
    /// restorer's trampoline (address, length), which a restore with
    /// several threads leaves mapped instead (a checkpoint leaves it out).
    Restored {
        seed: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unmap: Option<(u64, u64)>,
    },
    AfterRestore {
        instance_id: String,
    },
    /// Zygote templates only; travels with descriptors (see `zygote`).
    ZygoteFork {
        uid: u32,
        tmp_bytes: u64,
        /// size of the private /dev/shm
        #[serde(default)]
        shm_bytes: u64,
        rlimits: Vec<(u32, u64)>,
        /// the seccomp BPF program, hex
        filter: String,
    },
    Exit,
}

/// What an invocation runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// One of the suite's input sizes (`I` to `IV`).
    Size(String),
    /// Any JSON value, passed to the handler as is.
    Input(Value),
}

impl Request {
    /// An invocation of the suite's input `size`.
    pub fn invoke_size(size: &str) -> Request {
        Request::Invoke {
            event: Event::Size(size.to_string()),
            timeout_ms: None,
            request_id: None,
        }
    }

    /// An invocation with an explicit event.
    pub fn invoke_input(input: Value) -> Request {
        Request::Invoke {
            event: Event::Input(input),
            timeout_ms: None,
            request_id: None,
        }
    }

    /// The wire name of this request's op.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Health => "health",
            Request::Load => "load",
            Request::Invoke { .. } => "invoke",
            Request::PrepareCheckpoint => "prepare_checkpoint",
            Request::Restored { .. } => "restored",
            Request::AfterRestore { .. } => "after_restore",
            Request::ZygoteFork { .. } => "zygote_fork",
            Request::Exit => "exit",
        }
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a request always serialises")
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_value())
    }
}

/// A successful (`"ok": true`) reply, by the op it answers. The agent tags
/// some replies with their op and not others; [`Reply::decode`] takes the op
/// from the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Reply {
    Health {
        /// `idle` (not loaded) or `ready`
        state: String,
        function: String,
        invocations: u64,
        pid: i64,
        agent_version: u64,
    },
    Load(Loaded),
    Invoke {
        output: Value,
        /// time inside the handler, as the agent measured it
        exec_ms: f64,
    },
    PrepareCheckpoint,
    Restored {
        state: String,
        /// the generators re-seeded (`random`, `numpy.random`, `function`...)
        reseeded: Vec<String>,
    },
    AfterRestore {
        hook: bool,
        hook_ms: f64,
    },
    ZygoteFork {
        /// the child, in the template's pid namespace
        pid: i64,
    },
    Exit,
}

/// The reply to `load`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Loaded {
    pub function: String,
    pub import_ms: f64,
    pub init_ms: f64,
    /// peak resident set (`ru_maxrss`)
    pub rss_kb: u64,
    #[serde(default)]
    pub already_loaded: bool,
}

impl Reply {
    /// Decodes the agent's reply `v` to `req`: `"ok": false` becomes an
    /// [`AgentError`]; a success must have the fields of `req`'s reply.
    pub fn decode(req: &Request, v: Value) -> Result<Reply, ReplyError> {
        let Value::Object(mut m) = check_ok(v)? else {
            fail!(ReplyError::Protocol, "agent reply is not a JSON object");
        };
        m.remove("ok");
        let op = req.op();
        match m.get("op") {
            None => {
                m.insert("op".into(), op.into());
            }
            Some(got) if got == op => {}
            Some(got) => fail!(
                ReplyError::Protocol,
                "agent answered {op} with a {got} reply"
            ),
        }
        Ok(serde_json::from_value(Value::Object(m))
            .with_context(|| format!("agent reply to {op} is malformed"))?)
    }

    /// The output and exec time of an `invoke` reply.
    pub fn into_invoke(self) -> Result<(Value, f64), ReplyError> {
        match self {
            Reply::Invoke { output, exec_ms } => Ok((output, exec_ms)),
            other => fail!(
                ReplyError::Protocol,
                "expected an invoke reply, got {other:?}"
            ),
        }
    }

    /// The figures of a `load` reply.
    pub fn into_loaded(self) -> Result<Loaded, ReplyError> {
        match self {
            Reply::Load(l) => Ok(l),
            other => fail!(ReplyError::Protocol, "expected a load reply, got {other:?}"),
        }
    }
}

/// What kind of failure the agent reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    BadRequest,
    FunctionError,
    Timeout,
    BadOutput,
    NotCheckpointable,
    /// a kind this worker does not know
    Other,
}

impl ErrorKind {
    fn parse(s: &str) -> ErrorKind {
        match s {
            "bad_request" => ErrorKind::BadRequest,
            "function_error" => ErrorKind::FunctionError,
            "timeout" => ErrorKind::Timeout,
            "bad_output" => ErrorKind::BadOutput,
            "not_checkpointable" => ErrorKind::NotCheckpointable,
            _ => ErrorKind::Other,
        }
    }
}

/// A reply the agent marked `"ok": false`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentError {
    /// the agent's `error` field as sent (bounded)
    pub kind: String,
    pub message: String,
    /// the function's traceback, for `function_error`
    pub traceback: Option<String>,
    /// `function_error`: the exception apart (Lambda's error shape)
    pub detail: Option<Box<ErrorDetail>>,
}

/// A function's exception: its type and text, and the function's own
/// frames, one string each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorDetail {
    pub error_type: String,
    pub error_message: String,
    pub stack_trace: Vec<String>,
}

impl AgentError {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::parse(&self.kind)
    }
}

impl std::fmt::Display for AgentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "agent error {}: {}", self.kind, self.message)
    }
}

impl std::error::Error for AgentError {}

/// Encodes one frame.
// a message's body is what the daemon built from inputs capped far below 4 GiB
#[allow(clippy::cast_possible_truncation)]
pub fn encode_frame(msg: &impl Serialize) -> Vec<u8> {
    let body = serde_json::to_vec(msg).expect("protocol messages always serialise");
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// Parses a frame length prefix, refusing anything over `max`.
pub fn frame_len(prefix: [u8; 4], max: usize) -> Result<usize, ReplyError> {
    let n = u32::from_le_bytes(prefix) as usize;
    if n > max {
        fail!(
            ReplyError::Protocol,
            "agent reply of {n} bytes exceeds the {max}-byte limit"
        );
    }
    Ok(n)
}

/// Parses a frame body: a JSON object, or an error saying why not.
pub fn parse_body(body: &[u8]) -> Result<Value, ReplyError> {
    let v: Value = serde_json::from_slice(body).context("agent reply is not valid JSON")?;
    if !v.is_object() {
        fail!(ReplyError::Protocol, "agent reply is not a JSON object");
    }
    Ok(v)
}

/// Longest `message` or `traceback` kept from an error reply, in characters.
pub const MAX_ERROR_TEXT: usize = 64 << 10;
/// Most frames of a `stack_trace` kept.
pub const MAX_STACK_FRAMES: usize = 50;

/// Splits a reply by its `ok`: the reply itself, or the agent's
/// [`AgentError`]; an error if `ok` is missing.
pub fn split_ok(v: Value) -> Result<Result<Value, AgentError>, ReplyError> {
    match v.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(Ok(v)),
        Some(false) => {
            let s = |k: &str| {
                v.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .chars()
                    .take(MAX_ERROR_TEXT)
                    .collect::<String>()
            };
            Ok(Err(AgentError {
                kind: s("error"),
                message: s("message"),
                traceback: v.get("traceback").map(|_| s("traceback")),
                detail: v.get("error_type").map(|_| {
                    Box::new(ErrorDetail {
                        error_type: s("error_type"),
                        error_message: s("error_message"),
                        stack_trace: v
                            .get("stack_trace")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .take(MAX_STACK_FRAMES)
                                    .filter_map(Value::as_str)
                                    .map(|f| f.chars().take(MAX_ERROR_TEXT).collect())
                                    .collect()
                            })
                            .unwrap_or_default(),
                    })
                }),
            }))
        }
        None => fail!(
            ReplyError::Protocol,
            "agent reply has no boolean \"ok\" field"
        ),
    }
}

/// Turns an `"ok": false` reply into an [`AgentError`], and checks `ok` is there.
pub fn check_ok(v: Value) -> Result<Value, ReplyError> {
    Ok(split_ok(v)??)
}

/// The agent's answer to an invocation: the handler's output, or the
/// function's failure (raised, timed out, bad output).
#[derive(Debug, Clone, PartialEq)]
pub struct Invoked {
    /// time inside the handler; 0 when the agent did not say
    pub exec_ms: f64,
    pub output: std::result::Result<Value, AgentError>,
}

impl Invoked {
    /// Decodes the reply to an invoke request; an error only for a reply
    /// that is not one.
    pub fn decode(v: Value) -> Result<Invoked, ReplyError> {
        let exec_ms = v.get("exec_ms").and_then(Value::as_f64).unwrap_or(0.0);
        Ok(match split_ok(v)? {
            Ok(v) => {
                let (output, exec_ms) =
                    Reply::decode(&Request::invoke_input(Value::Null), v)?.into_invoke()?;
                Invoked {
                    exec_ms,
                    output: Ok(output),
                }
            }
            Err(e) => Invoked {
                exec_ms,
                output: Err(e),
            },
        })
    }
}

/// The framed channel to one agent.
pub struct AgentChannel {
    sock: UnixStream,
}

impl AgentChannel {
    pub fn new(sock: UnixStream) -> Self {
        AgentChannel { sock }
    }

    pub fn send(&mut self, msg: &impl Serialize) -> Result<(), ChannelError> {
        self.send_bytes(&encode_frame(msg))
    }

    /// Sends bytes as they are: a whole frame, or a deliberately broken one.
    pub fn send_bytes(&mut self, bytes: &[u8]) -> Result<(), ChannelError> {
        self.sock.set_write_timeout(Some(Duration::from_secs(10)))?;
        self.sock
            .write_all(bytes)
            .map_err(|source| ChannelError::Io {
                what: "sending to the agent",
                source,
            })
    }

    /// Receives one frame before `deadline`.
    pub fn recv(&mut self, timeout: Duration) -> Result<Value, ChannelError> {
        let deadline = Instant::now() + timeout;
        let mut prefix = [0u8; 4];
        self.read_exact_by(&mut prefix, deadline)?;
        let n = frame_len(prefix, MAX_REPLY_BYTES)?;
        let mut body = vec![0u8; n];
        self.read_exact_by(&mut body, deadline)?;
        Ok(parse_body(&body)?)
    }

    /// Receives one frame before `deadline`, with the descriptors the agent
    /// passed along it (SCM_RIGHTS; more than [`MAX_FDS_PER_FRAME`] is an
    /// error). They are owned: dropped means closed.
    pub fn recv_with_fds(
        &mut self,
        deadline: Instant,
    ) -> Result<(Value, Vec<OwnedFd>), ChannelError> {
        let mut fds = Vec::new();
        let mut prefix = [0u8; 4];
        self.recvmsg_exact_by(&mut prefix, deadline, &mut fds)?;
        let n = frame_len(prefix, MAX_REPLY_BYTES)?;
        let mut body = vec![0u8; n];
        self.recvmsg_exact_by(&mut body, deadline, &mut fds)?;
        Ok((parse_body(&body)?, fds))
    }

    /// Sends one frame, passing `fd` with it (SCM_RIGHTS) if given.
    pub fn send_with_fd(&mut self, msg: &Value, fd: Option<&OwnedFd>) -> Result<(), ChannelError> {
        let Some(fd) = fd else {
            return self.send(msg);
        };
        self.sock.set_write_timeout(Some(Duration::from_secs(10)))?;
        crate::cmsg::send_with_fds(&self.sock, &encode_frame(msg), &[fd.as_raw_fd()]).map_err(
            |source| ChannelError::Io {
                what: "sending to the agent",
                source,
            },
        )
    }

    /// Like `read_exact_by`, through recvmsg, collecting passed descriptors.
    fn recvmsg_exact_by(
        &mut self,
        mut buf: &mut [u8],
        deadline: Instant,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<(), ChannelError> {
        while !buf.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ChannelError::Timeout);
            }
            self.sock.set_read_timeout(Some(left))?;
            match crate::cmsg::recv(&self.sock, buf) {
                Ok(got) if got.read == 0 => return Err(ChannelError::Closed),
                Ok(got) => {
                    fds.extend(got.fds);
                    let rest = std::mem::take(&mut buf);
                    buf = &mut rest[got.read..];
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                        return Err(ChannelError::Timeout)
                    }
                    _ => {
                        return Err(ChannelError::Io {
                            what: "reading from the agent",
                            source: e,
                        })
                    }
                },
            }
            if fds.len() > MAX_FDS_PER_FRAME {
                return Err(ReplyError::Protocol(format!(
                    "the agent passed more than {MAX_FDS_PER_FRAME} descriptors with one frame"
                ))
                .into());
            }
        }
        Ok(())
    }

    fn read_exact_by(&mut self, mut buf: &mut [u8], deadline: Instant) -> Result<(), ChannelError> {
        while !buf.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ChannelError::Timeout);
            }
            self.sock.set_read_timeout(Some(left))?;
            match self.sock.read(buf) {
                Ok(0) => return Err(ChannelError::Closed),
                Ok(n) => buf = &mut buf[n..],
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(ChannelError::Timeout)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(ChannelError::Io {
                        what: "reading from the agent",
                        source: e,
                    })
                }
            }
        }
        Ok(())
    }

    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }
}

/// Why a frame could not be exchanged with the agent.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// no whole frame before the deadline
    #[error("the agent did not answer in time")]
    Timeout,
    /// the agent closed its socket
    #[error("the agent closed its socket (sandbox died?)")]
    Closed,
    /// the socket failed
    #[error("{what}")]
    Io {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// the frame broke the protocol
    #[error(transparent)]
    Protocol(#[from] ReplyError),
}

impl From<io::Error> for ChannelError {
    fn from(source: io::Error) -> Self {
        ChannelError::Io {
            what: "setting the socket's timeout",
            source,
        }
    }
}

/// What the agent sent that is not the answer asked for.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    /// the agent answered `"ok": false`
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// a frame or reply that breaks the protocol (too long, not a JSON
    /// object, no `ok`, another op's reply)
    #[error("{0}")]
    Protocol(String),
    /// a reply whose fields do not decode
    #[error(transparent)]
    Malformed(#[from] Context),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_round_trip_and_errors_are_typed() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut ca = AgentChannel::new(a);
        let mut cb = AgentChannel::new(b);
        ca.send(&json!({"ok": true, "x": 1})).unwrap();
        assert_eq!(cb.recv(Duration::from_secs(1)).unwrap()["x"], 1);
        ca.send(&json!({"ok": false, "error": "timeout", "message": "slow"}))
            .unwrap();
        let e = check_ok(cb.recv(Duration::from_secs(1)).unwrap()).unwrap_err();
        let ReplyError::Agent(e) = e else {
            panic!("not the agent's error: {e}")
        };
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert_eq!(e.traceback, None);
        // nothing arrives: a deadline, not a hang
        let e = cb.recv(Duration::from_millis(50)).unwrap_err();
        assert!(matches!(e, ChannelError::Timeout));
    }

    #[test]
    fn hostile_replies_are_refused() {
        let protocol = |r: Result<Value, ReplyError>| matches!(r, Err(ReplyError::Protocol(_)));
        assert!(matches!(
            frame_len(u32::MAX.to_le_bytes(), MAX_REPLY_BYTES),
            Err(ReplyError::Protocol(_))
        ));
        assert!(protocol(parse_body(b"[1,2]")));
        assert!(matches!(
            parse_body(b"\xff\xfe"),
            Err(ReplyError::Malformed(_))
        ));
        assert!(protocol(check_ok(json!({"x": 1}))));
        let (a, b) = UnixStream::pair().unwrap();
        let mut cb = AgentChannel::new(b);
        let mut a = a;
        a.write_all(&(u32::try_from(MAX_REPLY_BYTES).unwrap() + 1).to_le_bytes())
            .unwrap();
        assert!(matches!(
            cb.recv(Duration::from_secs(1)),
            Err(ChannelError::Protocol(ReplyError::Protocol(_)))
        ));
        drop(a);
        assert!(matches!(
            cb.recv(Duration::from_secs(1)),
            Err(ChannelError::Closed)
        ));
    }

    #[test]
    fn requests_keep_the_wire_format() {
        let cases = [
            (Request::Health, json!({"op": "health"})),
            (Request::Load, json!({"op": "load"})),
            (
                Request::invoke_size("II"),
                json!({"op": "invoke", "size": "II"}),
            ),
            (
                Request::Invoke {
                    event: Event::Input(json!({"x": 1})),
                    timeout_ms: Some(5.0),
                    request_id: Some("r1".into()),
                },
                json!({"op": "invoke", "input": {"x": 1}, "timeout_ms": 5.0, "request_id": "r1"}),
            ),
            (
                Request::PrepareCheckpoint,
                json!({"op": "prepare_checkpoint"}),
            ),
            (
                Request::Restored {
                    seed: "00".into(),
                    unmap: Some((4096, 8192)),
                },
                json!({"op": "restored", "seed": "00", "unmap": [4096, 8192]}),
            ),
            (
                Request::Restored {
                    seed: "00".into(),
                    unmap: None,
                },
                json!({"op": "restored", "seed": "00"}),
            ),
            (
                Request::AfterRestore {
                    instance_id: "i".into(),
                },
                json!({"op": "after_restore", "instance_id": "i"}),
            ),
            (
                Request::ZygoteFork {
                    uid: 7,
                    tmp_bytes: 9,
                    shm_bytes: 8,
                    rlimits: vec![(1, 2)],
                    filter: "ab".into(),
                },
                json!({"op": "zygote_fork", "uid": 7, "tmp_bytes": 9, "shm_bytes": 8, "rlimits": [[1, 2]], "filter": "ab"}),
            ),
            (Request::Exit, json!({"op": "exit"})),
        ];
        for (req, wire) in cases {
            assert_eq!(req.to_value(), wire);
            assert_eq!(wire["op"], req.op());
            let back: Request = serde_json::from_value(wire).unwrap();
            assert_eq!(back, req);
        }
    }

    #[test]
    fn replies_decode_by_the_request_op() {
        let r = Reply::decode(
            &Request::invoke_size("I"),
            json!({"ok": true, "output": {"a": 1}, "exec_ms": 1.5}),
        )
        .unwrap();
        assert_eq!(r.into_invoke().unwrap(), (json!({"a": 1}), 1.5));
        let l = Reply::decode(
            &Request::Load,
            json!({"ok": true, "op": "load", "function": "f", "import_ms": 1.0, "init_ms": 0.0, "rss_kb": 9}),
        )
        .unwrap()
        .into_loaded()
        .unwrap();
        assert_eq!(
            (l.function.as_str(), l.rss_kb, l.already_loaded),
            ("f", 9, false)
        );
        // a reply for another op, or one missing fields, is refused
        assert!(matches!(
            Reply::decode(&Request::Load, json!({"ok": true, "op": "exit"})),
            Err(ReplyError::Protocol(_))
        ));
        assert!(matches!(
            Reply::decode(&Request::invoke_size("I"), json!({"ok": true})),
            Err(ReplyError::Malformed(_))
        ));
        let e = Reply::decode(
            &Request::Load,
            json!({"ok": false, "error": "function_error", "message": "m", "traceback": "T"}),
        )
        .unwrap_err();
        let ReplyError::Agent(e) = e else {
            panic!("not the agent's error: {e}")
        };
        assert_eq!(e.kind(), ErrorKind::FunctionError);
        assert_eq!(e.traceback.as_deref(), Some("T"));
        // an invocation's failure is an answer, not an error
        let i = Invoked::decode(
            json!({"ok": false, "error": "timeout", "message": "m", "exec_ms": 7.0}),
        )
        .unwrap();
        assert_eq!(i.exec_ms, 7.0);
        assert_eq!(i.output.unwrap_err().kind(), ErrorKind::Timeout);
        let i = Invoked::decode(json!({"ok": true, "output": [1], "exec_ms": 2.0})).unwrap();
        assert_eq!((i.output.unwrap(), i.exec_ms), (json!([1]), 2.0));
        assert!(Invoked::decode(json!({"ok": true, "exec_ms": 2.0})).is_err());
        assert!(Invoked::decode(json!({"error": "timeout"})).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_reply_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse_body(&data).and_then(check_ok);
            if data.len() >= 4 {
                let _ = frame_len([data[0], data[1], data[2], data[3]], 1024);
            }
        }
    }
}
