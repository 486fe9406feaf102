//! The worker's object table. Each object is a sealed memfd (see
//! [`crate::memfd`]) kept by the worker, not by the producing instance, so
//! it outlives the producer's invocation and its instance. An object goes
//! when its last allowed retrieval is made or its TTL passes, whichever
//! comes first. Semantics are at most once: a retrieval that fails half-way
//! is not given back, and an object the worker lost (a restart) is an error
//! for the consumer, never a silent retry.
//!
//! Budget: the bytes of live objects are charged to the function that put
//! them; a `put` past the function's budget fails with `over_budget` (no
//! spilling to a slower tier: a failed put is visible and cheap to handle,
//! a spill would silently turn zero-copy into disk I/O).
use crate::memfd;
use crate::reference::{RefClaims, RefKey, WorkerId};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Every way an XDT request can fail; `kind()` is the name the SDK raises.
#[derive(Debug, thiserror::Error)]
pub enum XdtError {
    #[error("bad reference: {0}")]
    BadReference(String),
    #[error("the reference belongs to worker {0}, which this worker cannot reach")]
    OtherWorker(WorkerId),
    #[error("the reference belongs to another owner")]
    Forbidden,
    #[error("the reference expired {0} ms ago")]
    Expired(u64),
    #[error("the object was already retrieved the {0} time(s) its producer allowed")]
    Exhausted(u32),
    #[error("the object is gone: {0}")]
    Gone(String),
    #[error("too large: {0}")]
    TooLarge(String),
    #[error("over budget: {0}")]
    OverBudget(String),
    #[error("bad object: {0}")]
    BadObject(String),
    #[error("limit: {0}")]
    Limit(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    /// Pulling from the producer's worker failed on the way (it is down,
    /// died mid-transfer, stalled, or is not a configured peer).
    #[error("pull from the producer's worker failed: {0}")]
    Peer(String),
    /// An error the producer's worker answered a pull with (its kind kept).
    #[error("{message}")]
    Remote { kind: &'static str, message: String },
    #[error("{0}")]
    Internal(String),
}

/// Every kind a worker can answer, for [`XdtError::from_wire`].
const KINDS: [&str; 14] = [
    "bad_reference",
    "other_worker",
    "forbidden",
    "expired",
    "exhausted",
    "gone",
    "too_large",
    "over_budget",
    "bad_object",
    "limit",
    "bad_request",
    "peer_failed",
    "unauthorized",
    "internal",
];

impl XdtError {
    pub fn kind(&self) -> &'static str {
        match self {
            XdtError::BadReference(_) => "bad_reference",
            XdtError::OtherWorker(_) => "other_worker",
            XdtError::Forbidden => "forbidden",
            XdtError::Expired(_) => "expired",
            XdtError::Exhausted(_) => "exhausted",
            XdtError::Gone(_) => "gone",
            XdtError::TooLarge(_) => "too_large",
            XdtError::OverBudget(_) => "over_budget",
            XdtError::BadObject(_) => "bad_object",
            XdtError::Limit(_) => "limit",
            XdtError::BadRequest(_) => "bad_request",
            XdtError::Peer(_) => "peer_failed",
            XdtError::Remote { kind, .. } => kind,
            XdtError::Internal(_) => "internal",
        }
    }

    /// The error a peer answered with `kind` and `message` (an unknown kind
    /// is a failed pull: the peer is not speaking this protocol).
    pub fn from_wire(kind: &str, message: &str) -> XdtError {
        match KINDS.iter().find(|k| **k == kind) {
            Some(k) => XdtError::Remote {
                kind: k,
                message: format!("{message} (answered by the producer's worker)"),
            },
            None => XdtError::Peer(format!("the peer answered {kind:?}: {message}")),
        }
    }
}

/// The table's limits (`[xdt]` in the daemon's configuration).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TableLimits {
    /// bytes of live objects one function may hold
    pub budget_per_function_bytes: u64,
    /// largest single object
    pub max_object_bytes: u64,
    /// most retrievals a reference may allow
    pub max_retrievals: u32,
    pub default_ttl_s: u64,
    pub max_ttl_s: u64,
    /// most live objects on the worker (any function)
    pub max_objects: usize,
}

impl Default for TableLimits {
    fn default() -> Self {
        TableLimits {
            budget_per_function_bytes: 1 << 30,
            max_object_bytes: 512 << 20,
            max_retrievals: 1024,
            default_ttl_s: 300,
            max_ttl_s: 3600,
            max_objects: 65_536,
        }
    }
}

struct Object {
    fd: OwnedFd,
    size: u64,
    function: String,
    remaining: u32,
    allowed: u32,
    expires_unix_ms: u64,
}

/// Why an object id is no longer in the table (kept a while so that a late
/// `get` learns why, not just "unknown").
#[derive(Clone, Copy)]
enum Dropped {
    Exhausted(u32),
    Expired(u64),
}

#[derive(Default)]
struct Inner {
    objects: HashMap<[u8; 16], Object>,
    used: HashMap<String, u64>,
    tombstones: HashMap<[u8; 16], (Dropped, u64)>,
}

/// What a successful `get` hands out.
#[derive(Debug)]
pub struct Retrieved {
    /// a read-only descriptor of the sealed object
    pub fd: OwnedFd,
    pub size: u64,
    /// retrievals left after this one
    pub remaining: u32,
}

pub struct ObjectTable {
    key: RefKey,
    pub limits: TableLimits,
    inner: Mutex<Inner>,
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How long tombstones are kept after an object goes.
const TOMBSTONE_MS: u64 = 10 * 60 * 1000;

impl ObjectTable {
    pub fn new(limits: TableLimits) -> ObjectTable {
        ObjectTable {
            key: RefKey::generate(),
            limits,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn worker(&self) -> WorkerId {
        self.key.worker()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Accepts the memfd `fd` as an object of `function` (owned by `owner`)
    /// that may be retrieved `retrievals` times within `ttl_s` (default:
    /// the table's), and returns its reference and size.
    pub fn put(
        &self,
        owner: &str,
        function: &str,
        fd: OwnedFd,
        retrievals: u32,
        ttl_s: Option<u64>,
        now_ms: u64,
    ) -> Result<(String, u64), XdtError> {
        let l = &self.limits;
        if retrievals == 0 || retrievals > l.max_retrievals {
            return Err(XdtError::BadRequest(format!(
                "retrievals must be 1..={}, not {retrievals}",
                l.max_retrievals
            )));
        }
        let ttl_s = ttl_s.unwrap_or(l.default_ttl_s);
        if ttl_s == 0 || ttl_s > l.max_ttl_s {
            return Err(XdtError::BadRequest(format!(
                "ttl_s must be 1..={}, not {ttl_s}",
                l.max_ttl_s
            )));
        }
        let size = memfd::seal_object(&fd)?;
        if size > l.max_object_bytes {
            return Err(XdtError::TooLarge(format!(
                "an object of {size} bytes is larger than the {}-byte limit per object",
                l.max_object_bytes
            )));
        }
        let mut g = self.lock();
        sweep(&mut g, now_ms);
        if g.objects.len() >= l.max_objects {
            return Err(XdtError::OverBudget(format!(
                "the worker holds its limit of {} objects",
                l.max_objects
            )));
        }
        let used = g.used.get(function).copied().unwrap_or(0);
        if used + size > l.budget_per_function_bytes {
            return Err(XdtError::OverBudget(format!(
                "put of {size} bytes: function {function:?} already holds {used} bytes of \
                 its {}-byte object budget (objects go when retrieved or expired)",
                l.budget_per_function_bytes
            )));
        }
        let id: [u8; 16] = rand::random();
        let expires_unix_ms = now_ms + ttl_s * 1000;
        let token = self.key.seal(&RefClaims {
            worker: self.key.worker(),
            object: id,
            size,
            retrievals,
            expires_unix_ms,
            owner: owner.to_string(),
        })?;
        *g.used.entry(function.to_string()).or_default() += size;
        g.objects.insert(
            id,
            Object {
                fd,
                size,
                function: function.to_string(),
                remaining: retrievals,
                allowed: retrievals,
                expires_unix_ms,
            },
        );
        Ok((token, size))
    }

    /// One retrieval by a function of `owner` that can take at most
    /// `max_bytes`: a read-only descriptor of the object.
    pub fn get(
        &self,
        owner: &str,
        token: &str,
        max_bytes: u64,
        now_ms: u64,
    ) -> Result<Retrieved, XdtError> {
        let claims = self.key.open(token)?;
        if claims.owner != owner {
            return Err(XdtError::Forbidden);
        }
        if now_ms > claims.expires_unix_ms {
            let mut g = self.lock();
            sweep(&mut g, now_ms);
            return Err(XdtError::Expired(now_ms - claims.expires_unix_ms));
        }
        if claims.size > max_bytes {
            return Err(XdtError::TooLarge(format!(
                "the object has {} bytes; this function may take at most {max_bytes}",
                claims.size
            )));
        }
        let mut g = self.lock();
        sweep(&mut g, now_ms);
        let Some(obj) = g.objects.get_mut(&claims.object) else {
            return Err(match g.tombstones.get(&claims.object) {
                Some((Dropped::Exhausted(n), _)) => XdtError::Exhausted(*n),
                Some((Dropped::Expired(at), _)) => XdtError::Expired(now_ms.saturating_sub(*at)),
                None => XdtError::Gone(
                    "this worker does not hold it (it was restarted or dropped the object)".into(),
                ),
            });
        };
        let fd = memfd::reopen_read_only(&obj.fd)?;
        obj.remaining -= 1;
        let (size, remaining, allowed) = (obj.size, obj.remaining, obj.allowed);
        if remaining == 0 {
            remove(&mut g, &claims.object, Dropped::Exhausted(allowed), now_ms);
        }
        Ok(Retrieved {
            fd,
            size,
            remaining,
        })
    }

    /// Drops expired objects.
    pub fn sweep(&self, now_ms: u64) {
        sweep(&mut self.lock(), now_ms);
    }

    /// (live objects, their bytes)
    pub fn usage(&self) -> (usize, u64) {
        let g = self.lock();
        (g.objects.len(), g.objects.values().map(|o| o.size).sum())
    }

    /// Bytes of live objects `function` put.
    pub fn used_by(&self, function: &str) -> u64 {
        self.lock().used.get(function).copied().unwrap_or(0)
    }
}

fn remove(g: &mut Inner, id: &[u8; 16], why: Dropped, now_ms: u64) {
    if let Some(o) = g.objects.remove(id) {
        if let Some(u) = g.used.get_mut(&o.function) {
            *u = u.saturating_sub(o.size);
            if *u == 0 {
                g.used.remove(&o.function);
            }
        }
        g.tombstones.insert(*id, (why, now_ms + TOMBSTONE_MS));
    }
}

fn sweep(g: &mut Inner, now_ms: u64) {
    let expired: Vec<([u8; 16], u64)> = g
        .objects
        .iter()
        .filter(|(_, o)| o.expires_unix_ms < now_ms)
        .map(|(k, o)| (*k, o.expires_unix_ms))
        .collect();
    for (id, at) in expired {
        remove(g, &id, Dropped::Expired(at), now_ms);
    }
    g.tombstones.retain(|_, (_, until)| *until > now_ms);
    // bounded whatever the rate of objects: past this, late gets just see "gone"
    if g.tombstones.len() > 1 << 20 {
        g.tombstones.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memfd::create_sealed;
    use std::io::Read;

    fn table() -> ObjectTable {
        ObjectTable::new(TableLimits {
            budget_per_function_bytes: 1000,
            ..TableLimits::default()
        })
    }

    fn read_all(fd: OwnedFd) -> Vec<u8> {
        let mut v = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut v).unwrap();
        v
    }

    const T0: u64 = 1_000_000;

    #[test]
    fn retrievals_are_counted_and_replay_past_n_fails() {
        let t = table();
        let r = t
            .put(
                "alice",
                "f",
                create_sealed("o", b"abc").unwrap(),
                2,
                None,
                T0,
            )
            .unwrap()
            .0;
        assert_eq!(t.usage(), (1, 3));
        let a = t.get("alice", &r, 1 << 20, T0 + 1).unwrap();
        assert_eq!((a.size, a.remaining), (3, 1));
        assert_eq!(read_all(a.fd), b"abc");
        let b = t.get("alice", &r, 1 << 20, T0 + 2).unwrap();
        assert_eq!(b.remaining, 0);
        assert_eq!(t.usage(), (0, 0), "the last retrieval drops the object");
        assert_eq!(t.used_by("f"), 0);
        let e = t.get("alice", &r, 1 << 20, T0 + 3).unwrap_err();
        assert!(matches!(e, XdtError::Exhausted(2)), "{e}");
        // the reader still has its descriptor: the pages stay until it closes
        assert_eq!(read_all(b.fd), b"abc");
    }

    #[test]
    fn expired_other_owner_too_large_and_budget() {
        let t = table();
        let r = t
            .put(
                "alice",
                "f",
                create_sealed("o", &[1; 600]).unwrap(),
                5,
                Some(1),
                T0,
            )
            .unwrap()
            .0;
        // another owner cannot read it, and the attempt does not count
        assert!(matches!(
            t.get("mallory", &r, 1 << 20, T0).unwrap_err(),
            XdtError::Forbidden
        ));
        // a consumer that cannot take 600 bytes
        let e = t.get("alice", &r, 100, T0).unwrap_err();
        assert!(matches!(e, XdtError::TooLarge(_)), "{e}");
        // the budget: 600 held, 600 more do not fit
        let e = t
            .put(
                "alice",
                "f",
                create_sealed("o", &[2; 600]).unwrap(),
                1,
                None,
                T0,
            )
            .unwrap_err();
        assert!(matches!(e, XdtError::OverBudget(_)), "{e}");
        assert!(e.to_string().contains("600 bytes"), "{e}");
        // another function has its own budget
        t.put(
            "alice",
            "g",
            create_sealed("o", &[2; 600]).unwrap(),
            1,
            None,
            T0,
        )
        .unwrap();
        // past the TTL: expired, and the budget is free again
        let e = t.get("alice", &r, 1 << 20, T0 + 1001).unwrap_err();
        assert!(matches!(e, XdtError::Expired(1)), "{e}");
        assert_eq!(t.used_by("f"), 0);
        t.put(
            "alice",
            "f",
            create_sealed("o", &[2; 600]).unwrap(),
            1,
            None,
            T0 + 1002,
        )
        .unwrap();
    }

    #[test]
    fn bad_puts_and_lost_objects() {
        let t = table();
        let fd = || create_sealed("o", b"x").unwrap();
        for (n, ttl) in [(0, None), (2000, None), (1, Some(0)), (1, Some(1 << 40))] {
            let e = t.put("a", "f", fd(), n, ttl, T0).unwrap_err();
            assert!(matches!(e, XdtError::BadRequest(_)), "{n} {ttl:?}: {e}");
        }
        // a worker that restarted has a new key: its old references fail
        let other = table();
        let r = other.put("a", "f", fd(), 1, None, T0).unwrap().0;
        assert!(matches!(
            t.get("a", &r, 10, T0).unwrap_err(),
            XdtError::OtherWorker(_)
        ));
        assert_eq!(t.usage(), (0, 0));
    }
}
