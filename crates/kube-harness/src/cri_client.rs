//! The CRI's gRPC API (`runtime.v1.RuntimeService`) as the kubelet calls
//! it: one HTTP/2 connection to containerd's socket, kept open, and one
//! unary call per step, with no process started per call (unlike
//! `crictl`). Only the calls and fields a pod start needs are encoded:
//! RunPodSandbox, CreateContainer, StartContainer, PodSandboxStatus,
//! StopPodSandbox and RemovePodSandbox, and ListPodSandbox to find a pod
//! the kubelet started.
use bytes::Bytes;
use std::path::Path;
use std::time::Duration;

/// What went wrong talking to the CRI.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// the connection, the HTTP/2 exchange or the runtime for it
    #[error("the CRI connection to {socket}: {message}")]
    Transport { socket: String, message: String },
    /// the call failed: its gRPC status and message
    #[error("CRI {method}: gRPC status {status}: {message}")]
    Status {
        method: &'static str,
        status: String,
        message: String,
    },
    /// the answer is not the message it should be
    #[error("CRI {method}: {message}")]
    Malformed {
        method: &'static str,
        message: String,
    },
    /// no answer in time
    #[error("CRI {method}: no answer after {after:?}")]
    Timeout {
        method: &'static str,
        after: Duration,
    },
}

type Result<T, E = CriError> = std::result::Result<T, E>;

/// How long one call may take (crictl's configured timeout in the harness).
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// A protobuf message being written: the fields the calls use (strings,
/// booleans, unsigned integers, nested messages, string maps).
#[derive(Debug, Default, Clone)]
pub struct Msg(Vec<u8>);

impl Msg {
    #[allow(clippy::cast_possible_truncation)] // the low 7 bits each time: the encoding
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn bytes(mut self, field: u32, b: &[u8]) -> Msg {
        self.varint(u64::from(field) << 3 | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    /// A string field (proto3: an empty one is not written).
    pub fn str(self, field: u32, s: &str) -> Msg {
        if s.is_empty() {
            return self;
        }
        self.bytes(field, s.as_bytes())
    }

    /// An unsigned integer or boolean field (0 / false is not written).
    pub fn uint(mut self, field: u32, v: u64) -> Msg {
        if v == 0 {
            return self;
        }
        self.varint(u64::from(field) << 3);
        self.varint(v);
        self
    }

    /// A nested message (written even when empty: it is present).
    pub fn msg(self, field: u32, m: &Msg) -> Msg {
        self.bytes(field, &m.0)
    }

    /// One entry of a `map<string, string>` field.
    pub fn entry(self, field: u32, k: &str, v: &str) -> Msg {
        self.msg(field, &Msg::default().str(1, k).str(2, v))
    }
}

/// The length-delimited field `field` of a protobuf message (the last one,
/// as protobuf merges), if present.
fn field(mut buf: &[u8], field: u32) -> Result<Option<&[u8]>, String> {
    fn varint(buf: &mut &[u8]) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = buf.split_first().ok_or("a truncated varint")?;
            *buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err("a varint over 64 bits".into())
    }
    let mut found = None;
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let skip = match key & 7 {
            0 => {
                varint(&mut buf)?;
                0
            }
            1 => 8,
            5 => 4,
            2 => {
                let n = usize::try_from(varint(&mut buf)?).map_err(|_| "a huge length")?;
                if n > buf.len() {
                    return Err(format!("a field of {n} bytes in {} left", buf.len()));
                }
                if key >> 3 == u64::from(field) {
                    found = Some(&buf[..n]);
                }
                n
            }
            w => return Err(format!("wire type {w}")),
        };
        if skip > buf.len() {
            return Err("a truncated field".into());
        }
        buf = &buf[skip..];
    }
    Ok(found)
}

/// The string at `path` (field numbers, outer first) of a message; empty
/// if a field on the way is absent.
fn string_at(msg: &[u8], path: &[u32]) -> Result<String, String> {
    let mut cur = msg;
    for &f in path {
        match field(cur, f)? {
            Some(b) => cur = b,
            None => return Ok(String::new()),
        }
    }
    String::from_utf8(cur.to_vec()).map_err(|_| "a string that is not UTF-8".to_string())
}

/// A connection to a CRI runtime's socket.
pub struct CriClient {
    socket: String,
    rt: tokio::runtime::Runtime,
    send: h2::client::SendRequest<Bytes>,
}

impl CriClient {
    /// Connects to the CRI socket (HTTP/2 without TLS, as gRPC's `unix:`).
    pub fn connect(socket: &Path) -> Result<CriClient> {
        let name = socket.display().to_string();
        let transport = |message: String| CriError::Transport {
            socket: name.clone(),
            message,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| transport(format!("its event loop: {e}")))?;
        let send = rt.block_on(async {
            let io = tokio::net::UnixStream::connect(socket)
                .await
                .map_err(|e| transport(format!("connecting: {e}")))?;
            let (send, conn) = h2::client::handshake(io)
                .await
                .map_err(|e| transport(format!("the HTTP/2 handshake: {e}")))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok::<_, CriError>(send)
        })?;
        Ok(CriClient {
            socket: name,
            rt,
            send,
        })
    }

    /// One unary call of `runtime.v1.RuntimeService`: the answer's message.
    pub fn call(&self, method: &'static str, req: &Msg) -> Result<Vec<u8>> {
        let transport = |message: String| CriError::Transport {
            socket: self.socket.clone(),
            message: format!("{method}: {message}"),
        };
        let mut frame = Vec::with_capacity(req.0.len() + 5);
        frame.push(0);
        let len = u32::try_from(req.0.len())
            .map_err(|_| transport(format!("a request of {} bytes", req.0.len())))?;
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(&req.0);
        let send = self.send.clone();
        let exchange = async move {
            let mut send = send.ready().await.map_err(|e| transport(e.to_string()))?;
            let request = http::Request::builder()
                .method("POST")
                .uri(format!(
                    "http://localhost/runtime.v1.RuntimeService/{method}"
                ))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .map_err(|e| transport(e.to_string()))?;
            let (answer, mut stream) = send
                .send_request(request, false)
                .map_err(|e| transport(e.to_string()))?;
            stream
                .send_data(Bytes::from(frame), true)
                .map_err(|e| transport(e.to_string()))?;
            let answer = answer.await.map_err(|e| transport(e.to_string()))?;
            let (head, mut body) = answer.into_parts();
            let mut data = Vec::new();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.map_err(|e| transport(e.to_string()))?;
                let _ = body.flow_control().release_capacity(chunk.len());
                data.extend_from_slice(&chunk);
            }
            let trailers = body
                .trailers()
                .await
                .map_err(|e| transport(e.to_string()))?;
            // a failed call may answer with headers only ("trailers-only")
            let status_of = |h: &http::HeaderMap, k: &str| {
                h.get(k)
                    .and_then(|v| v.to_str().ok())
                    .map(|v| v.to_string())
            };
            let headers = [trailers.as_ref(), Some(&head.headers)];
            let status = headers
                .iter()
                .flatten()
                .find_map(|h| status_of(h, "grpc-status"))
                .unwrap_or_else(|| format!("missing (HTTP {})", head.status));
            if status != "0" {
                let message = headers
                    .iter()
                    .flatten()
                    .find_map(|h| status_of(h, "grpc-message"))
                    .unwrap_or_default();
                return Err(CriError::Status {
                    method,
                    status,
                    message: percent_decode(&message),
                });
            }
            let malformed = |message: &str| CriError::Malformed {
                method,
                message: message.into(),
            };
            let (prefix, msg) = data
                .split_at_checked(5)
                .ok_or_else(|| malformed("an answer shorter than its frame header"))?;
            if prefix[0] != 0 {
                return Err(malformed("a compressed answer (none was offered)"));
            }
            let n = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
            if n != msg.len() {
                return Err(malformed(&format!(
                    "a frame of {n} bytes with {} bytes after it",
                    msg.len()
                )));
            }
            Ok(msg.to_vec())
        };
        self.rt.block_on(async {
            tokio::time::timeout(CALL_TIMEOUT, exchange)
                .await
                .map_err(|_| CriError::Timeout {
                    method,
                    after: CALL_TIMEOUT,
                })?
        })
    }

    /// A string field of a call's answer (`path`: field numbers).
    pub fn call_for_string(&self, method: &'static str, req: &Msg, path: &[u32]) -> Result<String> {
        let answer = self.call(method, req)?;
        string_at(&answer, path).map_err(|message| CriError::Malformed { method, message })
    }
}

/// gRPC's percent-encoded `grpc-message`.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h * 16 + l);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let inner = Msg::default().str(1, "10.88.0.5");
        let status = Msg::default()
            .str(1, "abc")
            .uint(3, 1)
            .msg(5, &inner)
            .entry(8, "k", "v");
        let answer = Msg::default().msg(1, &status);
        assert_eq!(string_at(&answer.0, &[1, 5, 1]).unwrap(), "10.88.0.5");
        assert_eq!(string_at(&answer.0, &[1, 1]).unwrap(), "abc");
        assert_eq!(string_at(&answer.0, &[1, 9]).unwrap(), "");
        // a field longer than the message is refused, not read past
        assert!(string_at(&[0x0a, 0x05, b'a'], &[1]).is_err());
        assert!(string_at(&[0x0a, 0xff], &[1]).is_err());
        // a long string needs a two-byte length
        let long = "x".repeat(300);
        assert_eq!(
            string_at(&Msg::default().str(2, &long).0, &[2]).unwrap(),
            long
        );
    }

    #[test]
    fn grpc_messages_are_decoded() {
        assert_eq!(percent_decode("no%20such%20pod"), "no such pod");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
