//! The worker's side of the agent protocol (docs/AGENT_PROTOCOL.md): frames of
//! a 4-byte little-endian length and a JSON object, over the sandbox's one
//! socket. Replies come from untrusted code: lengths are bounded, the body
//! must be a JSON object, and every read has a deadline.
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Largest reply the worker accepts.
pub const MAX_REPLY_BYTES: usize = 16 << 20;
/// Most descriptors the agent may pass with one frame.
pub const MAX_FDS_PER_FRAME: usize = 4;

/// A reply the agent marked `"ok": false`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentError {
    pub kind: String,
    pub message: String,
}

impl std::fmt::Display for AgentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "agent error {}: {}", self.kind, self.message)
    }
}

impl std::error::Error for AgentError {}

/// Encodes one frame.
pub fn encode_frame(msg: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(msg).expect("a Value always serialises");
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// Parses a frame length prefix, refusing anything over `max`.
pub fn frame_len(prefix: [u8; 4], max: usize) -> Result<usize> {
    let n = u32::from_le_bytes(prefix) as usize;
    if n > max {
        bail!("agent reply of {n} bytes exceeds the {max}-byte limit");
    }
    Ok(n)
}

/// Parses a frame body: a JSON object, or an error saying why not.
pub fn parse_body(body: &[u8]) -> Result<Value> {
    let v: Value = serde_json::from_slice(body).context("agent reply is not valid JSON")?;
    if !v.is_object() {
        bail!("agent reply is not a JSON object");
    }
    Ok(v)
}

/// Turns an `"ok": false` reply into an [`AgentError`], and checks `ok` is there.
pub fn check_ok(v: Value) -> Result<Value> {
    match v.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(v),
        Some(false) => {
            let s = |k: &str| {
                v.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .chars()
                    .take(4096)
                    .collect::<String>()
            };
            Err(AgentError {
                kind: s("error"),
                message: s("message"),
            }
            .into())
        }
        None => bail!("agent reply has no boolean \"ok\" field"),
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

    pub fn send(&mut self, msg: &Value) -> Result<()> {
        self.sock.set_write_timeout(Some(Duration::from_secs(10)))?;
        self.sock
            .write_all(&encode_frame(msg))
            .context("sending to the agent")
    }

    /// Receives one frame before `deadline`.
    pub fn recv(&mut self, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        let mut prefix = [0u8; 4];
        self.read_exact_by(&mut prefix, deadline)?;
        let n = frame_len(prefix, MAX_REPLY_BYTES)?;
        let mut body = vec![0u8; n];
        self.read_exact_by(&mut body, deadline)?;
        parse_body(&body)
    }

    /// Receives one frame before `deadline`, with the descriptors the agent
    /// passed along it (SCM_RIGHTS; at most [`MAX_FDS_PER_FRAME`], the
    /// kernel closes any beyond). They are owned: dropped means closed.
    pub fn recv_with_fds(&mut self, deadline: Instant) -> Result<(Value, Vec<OwnedFd>)> {
        let mut fds = Vec::new();
        let mut prefix = [0u8; 4];
        self.recvmsg_exact_by(&mut prefix, deadline, &mut fds)?;
        let n = frame_len(prefix, MAX_REPLY_BYTES)?;
        let mut body = vec![0u8; n];
        self.recvmsg_exact_by(&mut body, deadline, &mut fds)?;
        Ok((parse_body(&body)?, fds))
    }

    /// Sends one frame, passing `fd` with it (SCM_RIGHTS) if given.
    pub fn send_with_fd(&mut self, msg: &Value, fd: Option<&OwnedFd>) -> Result<()> {
        let Some(fd) = fd else {
            return self.send(msg);
        };
        self.sock.set_write_timeout(Some(Duration::from_secs(10)))?;
        crate::cmsg::send_with_fds(&self.sock, &encode_frame(msg), &[fd.as_raw_fd()])
            .context("sending to the agent")
    }

    /// Like `read_exact_by`, through recvmsg, collecting passed descriptors.
    fn recvmsg_exact_by(
        &mut self,
        mut buf: &mut [u8],
        deadline: Instant,
        fds: &mut Vec<OwnedFd>,
    ) -> Result<()> {
        while !buf.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(anyhow!(Timeout));
            }
            self.sock.set_read_timeout(Some(left))?;
            let mut cmsg = [0u64; 8];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            };
            // SAFETY: an all-zero msghdr is valid; the pointers set below
            // outlive the call.
            let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
            mh.msg_iov = &mut iov;
            mh.msg_iovlen = 1;
            mh.msg_control = cmsg.as_mut_ptr() as *mut libc::c_void;
            // SAFETY: a pure size computation; it fits the 64-byte buffer.
            mh.msg_controllen = unsafe { libc::CMSG_SPACE(4 * MAX_FDS_PER_FRAME as u32) } as usize;
            // SAFETY: mh describes live buffers of the stated sizes.
            let n =
                unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut mh, libc::MSG_CMSG_CLOEXEC) };
            if n >= 0 {
                // SAFETY: the kernel filled mh's control buffer; the CMSG
                // macros walk only within msg_controllen.
                unsafe {
                    let mut c = libc::CMSG_FIRSTHDR(&mh);
                    while !c.is_null() {
                        if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS
                        {
                            let data = libc::CMSG_DATA(c);
                            let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                            for i in 0..len / 4 {
                                let mut fd = 0i32;
                                std::ptr::copy_nonoverlapping(
                                    data.add(i * 4),
                                    &mut fd as *mut i32 as *mut u8,
                                    4,
                                );
                                // installed for us by the kernel: ours to own
                                fds.push(OwnedFd::from_raw_fd(fd));
                            }
                        }
                        c = libc::CMSG_NXTHDR(&mh, c);
                    }
                }
            }
            match n {
                0 => bail!("the agent closed its socket (sandbox died?)"),
                n if n > 0 => {
                    let rest = std::mem::take(&mut buf);
                    buf = &mut rest[n as usize..];
                }
                _ => {
                    let e = std::io::Error::last_os_error();
                    match e.kind() {
                        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                            return Err(anyhow!(Timeout))
                        }
                        ErrorKind::Interrupted => {}
                        _ => return Err(e).context("reading from the agent"),
                    }
                }
            }
            if fds.len() > MAX_FDS_PER_FRAME {
                bail!("the agent passed more than {MAX_FDS_PER_FRAME} descriptors with one frame");
            }
        }
        Ok(())
    }

    /// One request, one reply; `"ok": false` becomes an error.
    pub fn call(&mut self, msg: &Value, timeout: Duration) -> Result<Value> {
        self.send(msg)?;
        check_ok(self.recv(timeout)?)
    }

    fn read_exact_by(&mut self, mut buf: &mut [u8], deadline: Instant) -> Result<()> {
        while !buf.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(anyhow!(Timeout));
            }
            self.sock.set_read_timeout(Some(left))?;
            match self.sock.read(buf) {
                Ok(0) => bail!("the agent closed its socket (sandbox died?)"),
                Ok(n) => buf = &mut buf[n..],
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(anyhow!(Timeout))
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading from the agent"),
            }
        }
        Ok(())
    }

    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }
}

/// The agent did not answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout;

impl std::fmt::Display for Timeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the agent did not answer in time")
    }
}

impl std::error::Error for Timeout {}

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
        assert_eq!(e.downcast_ref::<AgentError>().unwrap().kind, "timeout");
        // nothing arrives: a deadline, not a hang
        let e = cb.recv(Duration::from_millis(50)).unwrap_err();
        assert!(e.downcast_ref::<Timeout>().is_some());
    }

    #[test]
    fn hostile_replies_are_refused() {
        assert!(frame_len(u32::MAX.to_le_bytes(), MAX_REPLY_BYTES).is_err());
        assert!(parse_body(b"[1,2]").is_err());
        assert!(parse_body(b"\xff\xfe").is_err());
        assert!(check_ok(json!({"x": 1})).is_err());
        let (a, b) = UnixStream::pair().unwrap();
        let mut cb = AgentChannel::new(b);
        let mut a = a;
        a.write_all(&(MAX_REPLY_BYTES as u32 + 1).to_le_bytes())
            .unwrap();
        assert!(cb.recv(Duration::from_secs(1)).is_err());
        drop(a);
        assert!(cb
            .recv(Duration::from_secs(1))
            .unwrap_err()
            .to_string()
            .contains("closed"));
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
