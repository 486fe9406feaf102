//! The worker's side of the in-sandbox `thaw` module. While an invocation
//! runs, the agent may send requests (frames with an `"sdk"` field) over
//! its control socket; each gets exactly one reply, which may carry a
//! descriptor (SCM_RIGHTS):
//!
//! | request | fds in | reply | fd out |
//! |---|---|---|---|
//! | `{"sdk":"alloc","size":S}` | | `{"ok":true,"size":S}` | a fresh memfd of S bytes to map and fill |
//! | `{"sdk":"put","retrievals":N,"ttl_s":T?}` | the object's memfd | `{"ok":true,"ref":R,"size":S}` | |
//! | `{"sdk":"get","ref":R}` | | `{"ok":true,"size":S,"remaining":K}` | the object, read-only |
//! | `{"sdk":"invoke","function":F,"event":E,"wait":true}` | | `{"ok":true,"output":..}` | |
//! | `{"sdk":"invoke",...,"wait":false}` | | `{"ok":true,"handle":H}` | |
//! | `{"sdk":"wait","handle":H}` | | `{"ok":true,"output":..}` | |
//! | `{"sdk":"store_put","key":K}` | a memfd (from `alloc`) holding the bytes | `{"ok":true,"size":S}` | |
//! | `{"sdk":"store_get","key":K}` | | `{"ok":true,"size":S}` | the object's bytes, read-only |
//!
//! `store_put` / `store_get` are the object-store baseline of XDT: the
//! sandbox has no network, so the worker makes the S3 PUT or GET for the
//! function, as a Lambda's own S3 client would over the network. Keys are
//! the owner's: two owners' `a/b` are different objects.
//!
//! A `get` of another worker's reference pulls the object from that worker
//! (see the daemon's `peer` module) into a sealed memfd here, handed over
//! like a local one; the pull may have started when the invocation arrived.
//!
//! Errors: `{"ok":false,"error":KIND,"message":..}` with the kinds of
//! [`XdtError::kind`], plus `invoke_failed` (the callee failed: its error
//! kind in `callee_error`), `not_found` and `timeout` (the caller's deadline
//! passed while waiting). Everything in a request comes from the sandbox and
//! is checked; a bad request never ends the invocation.
use crate::chain::{CallCtx, ChainLimits};
use crate::table::{now_ms, ObjectTable, Retrieved, XdtError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

/// How a callee's invocation ended, when it failed.
#[derive(Debug, Clone)]
pub struct CallFailure {
    /// `not_found`, `function_error`, `timeout`, `queue_full`, ...
    pub kind: String,
    pub message: String,
}

pub type CallOutcome = Result<Value, CallFailure>;

/// What the SDK needs from the worker it runs in.
pub trait Host: Send + Sync {
    fn table(&self) -> &ObjectTable;
    fn chain_limits(&self) -> &ChainLimits;
    /// The owner of a deployed function, or `None` if there is no such function.
    fn owner_of(&self, function: &str) -> Option<String>;
    /// Starts an invocation of `ctx.function` (already admitted by the chain
    /// limits) on its own; the outcome arrives on the receiver.
    fn start_invoke(&self, ctx: CallCtx, event: Value) -> Receiver<CallOutcome>;
    /// Stores `data` as `key` (the owner's, already checked) in the object store.
    fn store_put(&self, key: &str, data: Vec<u8>) -> Result<(), CallFailure>;
    /// Writes the object `key` to `sink` as it arrives; its size, or `None`
    /// if there is no such object. Larger than `max_bytes` is an error.
    fn store_get(
        &self,
        key: &str,
        max_bytes: u64,
        sink: &mut std::fs::File,
    ) -> Result<Option<u64>, CallFailure>;
    /// Starts pulling the object of another worker's reference (one
    /// retrieval, checked there for `owner`) into a sealed memfd here. A
    /// worker without peers cannot: the reference's worker is unreachable.
    fn pull(&self, owner: &str, token: &str, max_bytes: u64, deadline: Instant) -> Pulling {
        let _ = (owner, max_bytes, deadline);
        no_peers(token)
    }
}

/// What a pull is on a worker without peers: the reference's worker
/// cannot be reached.
pub fn no_peers(token: &str) -> Pulling {
    let (tx, rx) = std::sync::mpsc::channel();
    let e = match crate::reference::worker_of(token) {
        Ok(w) => XdtError::OtherWorker(w),
        Err(e) => e,
    };
    let _ = tx.send(Err(e));
    rx
}

/// A pull under way; its one message is the object or why it failed.
pub type Pulling = Receiver<Result<Retrieved, XdtError>>;

/// Longest object-store key a function may name.
pub const MAX_STORE_KEY: usize = 512;

/// A key of the object-store baseline: path-like, `[A-Za-z0-9._-]`
/// segments split by `/`, none empty, `.` or `..`.
pub fn check_store_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_STORE_KEY {
        return Err(format!("a key has 1..={MAX_STORE_KEY} bytes"));
    }
    for seg in key.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return Err(format!("key {key:?}: empty, '.' or '..' segment"));
        }
        if !seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(format!(
                "key {key:?}: only A-Z a-z 0-9 . _ - and / are allowed"
            ));
        }
    }
    Ok(())
}

/// One invocation's SDK requests.
pub struct Session<'h> {
    host: &'h dyn Host,
    pub ctx: CallCtx,
    /// the largest object this function may take (its memory limit)
    max_get_bytes: u64,
    started: u32,
    pending: HashMap<u64, Receiver<CallOutcome>>,
    next_handle: u64,
    /// pulls started when the invocation arrived, by reference
    prefetched: HashMap<String, Pulling>,
    /// the objects handed to the function: held until the session ends so
    /// that the consumer's unmap does not free their pages on the
    /// invocation's path (the worker frees them after the reply); at most
    /// `max_get_bytes` of them, so a long invocation getting object after
    /// object does not pile them up
    handed: Vec<OwnedFd>,
    handed_bytes: u64,
}

/// A reply to the sandbox and the descriptor to pass with it.
pub struct Reply {
    pub body: Value,
    pub fd: Option<OwnedFd>,
}

fn fail(kind: &str, message: impl Into<String>) -> Reply {
    Reply {
        body: json!({"ok": false, "error": kind, "message": message.into()}),
        fd: None,
    }
}

fn from_err(e: XdtError) -> Reply {
    fail(e.kind(), e.to_string())
}

fn from_outcome(o: CallOutcome) -> Reply {
    match o {
        Ok(output) => Reply {
            body: json!({"ok": true, "output": output}),
            fd: None,
        },
        Err(f) => Reply {
            body: json!({"ok": false, "error": "invoke_failed", "callee_error": f.kind,
                         "message": f.message}),
            fd: None,
        },
    }
}

impl<'h> Session<'h> {
    pub fn new(host: &'h dyn Host, ctx: CallCtx, max_get_bytes: u64) -> Session<'h> {
        Session {
            host,
            ctx,
            max_get_bytes,
            started: 0,
            pending: HashMap::new(),
            next_handle: 1,
            prefetched: HashMap::new(),
            handed: Vec::new(),
            handed_bytes: 0,
        }
    }

    /// Pulls of other workers' references in the event, started before
    /// the instance was ready; a `get` of one of them takes its result.
    pub fn with_prefetched(mut self, p: HashMap<String, Pulling>) -> Self {
        self.prefetched = p;
        self
    }

    /// Waits for a pull, at most until the invocation's deadline.
    fn finish_pull(&self, rx: Pulling) -> Result<Retrieved, XdtError> {
        let left = self.ctx.deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(XdtError::Peer(
                "the invocation's deadline passed while pulling the object".into(),
            )),
            Err(RecvTimeoutError::Disconnected) => Err(XdtError::Peer(
                "the pull ended without an answer (the worker is stopping?)".into(),
            )),
        }
    }

    /// Handles one request; `fds` are the descriptors that came with it
    /// (closed here unless an object takes one).
    pub fn serve(&mut self, req: &Value, mut fds: Vec<OwnedFd>) -> Reply {
        let op = req.get("sdk").and_then(Value::as_str).unwrap_or("");
        let want_fds = usize::from(op == "put" || op == "store_put");
        if fds.len() != want_fds {
            return fail(
                "bad_request",
                format!(
                    "sdk {op:?} takes {want_fds} descriptor(s), {} came",
                    fds.len()
                ),
            );
        }
        match op {
            "alloc" => self.alloc(req),
            "put" => self.put(req, fds.pop().expect("one fd checked above")),
            "get" => self.get(req),
            "invoke" => self.invoke(req),
            "wait" => self.wait(req),
            "store_put" => self.store_put(req, fds.pop().expect("one fd checked above")),
            "store_get" => self.store_get(req),
            _ => fail("bad_request", format!("unknown sdk request {op:?}")),
        }
    }

    /// A memfd for the producer to fill. Its pages are charged to whoever
    /// touches them (the producer's memory limit bounds an alloc that is
    /// never put); the worker keeps nothing until `put`.
    fn alloc(&mut self, req: &Value) -> Reply {
        let Some(size) = req.get("size").and_then(Value::as_u64) else {
            return fail("bad_request", "alloc needs 'size': a byte count");
        };
        let l = &self.host.table().limits;
        if size > l.max_object_bytes {
            return from_err(XdtError::TooLarge(format!(
                "an object of {size} bytes is larger than the {}-byte limit per object",
                l.max_object_bytes
            )));
        }
        match crate::memfd::create_sized(size) {
            Ok(fd) => Reply {
                body: json!({"ok": true, "size": size}),
                fd: Some(fd),
            },
            Err(e) => from_err(e),
        }
    }

    fn put(&mut self, req: &Value, fd: OwnedFd) -> Reply {
        let retrievals = match req.get("retrievals") {
            None => 1,
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => n,
                None => return fail("bad_request", "retrievals must be a positive integer"),
            },
        };
        let ttl_s = match req.get("ttl_s") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(t) => Some(t),
                None => return fail("bad_request", "ttl_s must be a positive integer"),
            },
        };
        let t = self.host.table();
        match t.put(
            &self.ctx.owner,
            &self.ctx.function,
            fd,
            retrievals,
            ttl_s,
            now_ms(),
        ) {
            Ok((r, size)) => Reply {
                body: json!({"ok": true, "ref": r, "size": size}),
                fd: None,
            },
            Err(e) => from_err(e),
        }
    }

    fn get(&mut self, req: &Value) -> Reply {
        let Some(r) = req.get("ref").and_then(Value::as_str) else {
            return fail("bad_request", "get needs 'ref': a reference string");
        };
        let got = match self.prefetched.remove(r) {
            Some(rx) => self.finish_pull(rx),
            None => match self
                .host
                .table()
                .get(&self.ctx.owner, r, self.max_get_bytes, now_ms())
            {
                // another worker's object: pulled from it now
                Err(XdtError::OtherWorker(_)) => self.finish_pull(self.host.pull(
                    &self.ctx.owner,
                    r,
                    self.max_get_bytes,
                    self.ctx.deadline,
                )),
                other => other,
            },
        };
        match got {
            Ok(got) => self.hand_over(
                json!({"ok": true, "size": got.size, "remaining": got.remaining}),
                got.fd,
                got.size,
            ),
            Err(e) => from_err(e),
        }
    }

    /// A reply passing an object to the function, which the session
    /// holds too (see `handed`).
    fn hand_over(&mut self, body: Value, fd: OwnedFd, size: u64) -> Reply {
        if self.handed_bytes + size <= self.max_get_bytes {
            // without the extra descriptor the object is still handed over
            if let Ok(held) = fd.try_clone() {
                self.handed.push(held);
                self.handed_bytes += size;
            }
        }
        Reply { body, fd: Some(fd) }
    }

    /// The owner's object-store name for the request's key.
    fn store_key(&self, req: &Value) -> Result<String, Reply> {
        let Some(key) = req.get("key").and_then(Value::as_str) else {
            return Err(fail("bad_request", "needs 'key': a string"));
        };
        check_store_key(key).map_err(|m| fail("bad_request", m))?;
        Ok(format!("{}/{key}", self.ctx.owner))
    }

    fn store_put(&mut self, req: &Value, fd: OwnedFd) -> Reply {
        let key = match self.store_key(req) {
            Ok(k) => k,
            Err(r) => return r,
        };
        // sealed first: the sandbox can no longer change or shrink what
        // the worker reads
        let size = match crate::memfd::seal_object(&fd) {
            Ok(s) => s,
            Err(e) => return from_err(e),
        };
        let max = self.host.table().limits.max_object_bytes;
        let len = usize::try_from(size).ok().filter(|_| size <= max);
        let Some(len) = len else {
            return from_err(XdtError::TooLarge(format!(
                "an object of {size} bytes is larger than the {max}-byte limit per object"
            )));
        };
        let mut data = vec![0u8; len];
        if let Err(e) = std::fs::File::from(fd).read_exact_at(&mut data, 0) {
            return fail("internal", format!("reading the object: {e}"));
        }
        match self.host.store_put(&key, data) {
            Ok(()) => Reply {
                body: json!({"ok": true, "size": size}),
                fd: None,
            },
            Err(f) => fail(&f.kind, f.message),
        }
    }

    fn store_get(&mut self, req: &Value) -> Reply {
        let key = match self.store_key(req) {
            Ok(k) => k,
            Err(r) => return r,
        };
        let max = self
            .max_get_bytes
            .min(self.host.table().limits.max_object_bytes);
        let fd = match crate::memfd::create_sized(0) {
            Ok(fd) => fd,
            Err(e) => return from_err(e),
        };
        let mut f = std::fs::File::from(fd);
        let size = match self.host.store_get(&key, max, &mut f) {
            Ok(Some(s)) => s,
            Ok(None) => {
                let shown = key.split_once('/').map_or(key.as_str(), |(_, k)| k);
                return fail(
                    "not_found",
                    format!("no object {shown:?} in the object store"),
                );
            }
            Err(f) => return fail(&f.kind, f.message),
        };
        let fd = OwnedFd::from(f);
        let ro = crate::memfd::seal_object(&fd).and_then(|_| crate::memfd::reopen_read_only(&fd));
        match ro {
            Ok(ro) => self.hand_over(json!({"ok": true, "size": size}), ro, size),
            Err(e) => from_err(e),
        }
    }

    fn invoke(&mut self, req: &Value) -> Reply {
        let Some(callee) = req.get("function").and_then(Value::as_str) else {
            return fail("bad_request", "invoke needs 'function': a function name");
        };
        let event = req.get("event").cloned().unwrap_or(Value::Null);
        let wait = req.get("wait").and_then(Value::as_bool).unwrap_or(true);
        let limits = self.host.chain_limits();
        if self.started >= limits.max_fanout {
            return fail(
                "limit",
                format!(
                    "fan-out limit: one invocation may start at most {} others",
                    limits.max_fanout
                ),
            );
        }
        let Some(owner) = self.host.owner_of(callee) else {
            // functions deployed on other workers are not reachable by
            // name: objects cross workers, invocations do not (yet)
            return fail(
                "not_found",
                format!(
                    "no function {callee:?} on this worker (thaw.invoke reaches only \
                     functions deployed on the caller's worker)"
                ),
            );
        };
        let ctx = match self.ctx.child(callee, &owner, limits) {
            Ok(c) => c,
            Err(XdtError::Forbidden) => {
                return fail(
                    "forbidden",
                    format!("function {callee:?} belongs to another owner"),
                )
            }
            Err(e) => return from_err(e),
        };
        self.started += 1;
        let rx = self.host.start_invoke(ctx, event);
        if wait {
            return self.wait_for(rx, callee);
        }
        let h = self.next_handle;
        self.next_handle += 1;
        self.pending.insert(h, rx);
        Reply {
            body: json!({"ok": true, "handle": h}),
            fd: None,
        }
    }

    fn wait(&mut self, req: &Value) -> Reply {
        let Some(rx) = req
            .get("handle")
            .and_then(Value::as_u64)
            .and_then(|h| self.pending.remove(&h))
        else {
            return fail("bad_request", "wait needs 'handle': one not waited for yet");
        };
        self.wait_for(rx, "the callee")
    }

    fn wait_for(&self, rx: Receiver<CallOutcome>, what: &str) -> Reply {
        let left = self.ctx.deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(o) => from_outcome(o),
            Err(RecvTimeoutError::Timeout) => fail(
                "timeout",
                format!("the invocation's deadline passed while waiting for {what}"),
            ),
            Err(RecvTimeoutError::Disconnected) => fail(
                "invoke_failed",
                format!("{what} ended without an answer (the worker is stopping?)"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_store_key;

    #[test]
    fn store_keys_are_plain_relative_paths() {
        for good in ["a", "runs/7/part-0", "A.b_c-d/e", &"k".repeat(512)] {
            assert!(check_store_key(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "/abs",
            "a/",
            "a//b",
            ".",
            "a/../b",
            "./a",
            "sp ace",
            "tab\t",
            "nul\0",
            "ünï",
            "a\\b",
            &"k".repeat(513),
        ] {
            assert!(check_store_key(bad).is_err(), "{bad:?}");
        }
    }
}
