//! References: `thref1.` + base64url(worker id (8) | nonce (24) | sealed
//! claims). The claims are sealed with XChaCha20-Poly1305 under a key only
//! the producing worker holds, with the format tag and the worker id as
//! associated data. The worker id stays readable: it is the routing hint a
//! consumer's worker needs to find the producer. Everything else (object id,
//! size, retrievals, expiry, owner) can be neither read nor changed without
//! the key: a flipped bit, a cut token or a token made up from scratch fails
//! to open.
use crate::table::XdtError;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

const PREFIX: &str = "thref1.";
const AAD_TAG: &[u8] = b"thaw-xdt-reference-v1";
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// object id, size, retrievals, expiry, owner length
const FIXED_CLAIMS: usize = 16 + 8 + 4 + 8 + 1;
/// Longest owner name a reference can carry.
pub const MAX_OWNER: usize = 63;
/// Longest token text accepted (anything longer is refused unread).
pub const MAX_TOKEN: usize = 256;

/// Identifies one worker (random per daemon start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkerId(pub [u8; 8]);

impl std::fmt::Display for WorkerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// What a reference says, once opened by its worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefClaims {
    pub worker: WorkerId,
    pub object: [u8; 16],
    pub size: u64,
    /// how many `get`s the producer allowed
    pub retrievals: u32,
    pub expires_unix_ms: u64,
    pub owner: String,
}

/// A worker's reference key: its id and a 32-byte AEAD key, both random,
/// made at start and never written anywhere (a restarted worker's old
/// references fail cleanly: its objects are gone with it).
pub struct RefKey {
    worker: WorkerId,
    aead: XChaCha20Poly1305,
}

impl RefKey {
    pub fn generate() -> RefKey {
        let key: [u8; 32] = rand::random();
        RefKey {
            worker: WorkerId(rand::random()),
            aead: XChaCha20Poly1305::new_from_slice(&key).expect("32-byte key"),
        }
    }

    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    fn aad(worker: &WorkerId) -> Vec<u8> {
        [AAD_TAG, &worker.0[..]].concat()
    }

    /// Seals `c` (whose `worker` must be this key's) into a token.
    pub fn seal(&self, c: &RefClaims) -> Result<String, XdtError> {
        if c.worker != self.worker {
            return Err(XdtError::Internal("sealing another worker's claims".into()));
        }
        let owner = c.owner.as_bytes();
        if owner.len() > MAX_OWNER {
            return Err(XdtError::BadRequest(format!(
                "owner name longer than {MAX_OWNER} bytes"
            )));
        }
        let mut plain = Vec::with_capacity(FIXED_CLAIMS + owner.len());
        plain.extend_from_slice(&c.object);
        plain.extend_from_slice(&c.size.to_le_bytes());
        plain.extend_from_slice(&c.retrievals.to_le_bytes());
        plain.extend_from_slice(&c.expires_unix_ms.to_le_bytes());
        #[allow(clippy::cast_possible_truncation)] // at most MAX_OWNER (63), checked above
        plain.push(owner.len() as u8);
        plain.extend_from_slice(owner);
        let nonce: [u8; NONCE_LEN] = rand::random();
        let sealed = self
            .aead
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &plain,
                    aad: &Self::aad(&self.worker),
                },
            )
            .map_err(|_| XdtError::Internal("sealing a reference failed".into()))?;
        let mut raw = Vec::with_capacity(8 + NONCE_LEN + sealed.len());
        raw.extend_from_slice(&self.worker.0);
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&sealed);
        Ok(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        ))
    }

    /// Opens a token this worker sealed. Expiry is not checked here (the
    /// object table does, so that it can tell expired from unknown).
    pub fn open(&self, token: &str) -> Result<RefClaims, XdtError> {
        let (worker, rest) = split(token)?;
        if worker != self.worker {
            return Err(XdtError::OtherWorker(worker));
        }
        let nonce = &rest[..NONCE_LEN];
        let plain = self
            .aead
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: &rest[NONCE_LEN..],
                    aad: &Self::aad(&worker),
                },
            )
            .map_err(|_| {
                XdtError::BadReference(
                    "the reference does not authenticate: forged, altered or cut".into(),
                )
            })?;
        // authenticated, so well-formed unless this code has a bug
        let bad = || XdtError::Internal("an authenticated reference has a bad layout".into());
        if plain.len() < FIXED_CLAIMS {
            return Err(bad());
        }
        let u64_at = |i: usize| u64::from_le_bytes(plain[i..i + 8].try_into().expect("8 bytes"));
        let owner_len = plain[FIXED_CLAIMS - 1] as usize;
        if plain.len() != FIXED_CLAIMS + owner_len {
            return Err(bad());
        }
        Ok(RefClaims {
            worker,
            object: plain[..16].try_into().expect("16 bytes"),
            size: u64_at(16),
            retrievals: u32::from_le_bytes(plain[24..28].try_into().expect("4 bytes")),
            expires_unix_ms: u64_at(28),
            owner: String::from_utf8(plain[FIXED_CLAIMS..].to_vec()).map_err(|_| bad())?,
        })
    }
}

/// The producing worker a token names (readable without any key).
pub fn worker_of(token: &str) -> Result<WorkerId, XdtError> {
    Ok(split(token)?.0)
}

fn split(token: &str) -> Result<(WorkerId, Vec<u8>), XdtError> {
    if token.len() > MAX_TOKEN {
        return Err(XdtError::BadReference(format!(
            "a reference of {} characters is longer than any thaw reference ({MAX_TOKEN})",
            token.len()
        )));
    }
    let body = token.strip_prefix(PREFIX).ok_or_else(|| {
        XdtError::BadReference(format!("not a thaw reference (no {PREFIX:?} prefix)"))
    })?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| XdtError::BadReference("the reference is not base64url".into()))?;
    if raw.len() < 8 + NONCE_LEN + TAG_LEN + FIXED_CLAIMS {
        return Err(XdtError::BadReference(format!(
            "the reference is truncated ({} bytes)",
            raw.len()
        )));
    }
    let worker = WorkerId(raw[..8].try_into().expect("8 bytes"));
    Ok((worker, raw[8..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(k: &RefKey) -> RefClaims {
        RefClaims {
            worker: k.worker(),
            object: [7; 16],
            size: 1 << 20,
            retrievals: 3,
            expires_unix_ms: 1_800_000_000_000,
            owner: "alice".into(),
        }
    }

    #[test]
    fn round_trip_and_opaque() {
        let k = RefKey::generate();
        let t = k.seal(&claims(&k)).unwrap();
        assert_eq!(k.open(&t).unwrap(), claims(&k));
        assert_eq!(worker_of(&t).unwrap(), k.worker());
        // the owner's name is not readable in the token
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(t.strip_prefix(PREFIX).unwrap())
            .unwrap();
        assert!(!raw.windows(5).any(|w| w == b"alice"));
        // two seals of the same claims differ (fresh nonce)
        assert_ne!(t, k.seal(&claims(&k)).unwrap());
    }

    #[test]
    fn forged_truncated_and_foreign_tokens_fail() {
        let k = RefKey::generate();
        let t = k.seal(&claims(&k)).unwrap();
        // every single flipped character of the body
        let body = t.strip_prefix(PREFIX).unwrap();
        for i in 0..body.len() {
            let mut b = body.as_bytes().to_vec();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let forged = format!("{PREFIX}{}", String::from_utf8(b).unwrap());
            match k.open(&forged) {
                Err(XdtError::BadReference(_)) | Err(XdtError::OtherWorker(_)) => {}
                other => panic!("flipped char {i} opened: {other:?}"),
            }
        }
        for cut in [1, 10, body.len() / 2, body.len() - 1] {
            let e = k.open(&t[..t.len() - cut]).unwrap_err();
            assert!(matches!(e, XdtError::BadReference(_)), "{e}");
        }
        assert!(matches!(
            k.open("hello").unwrap_err(),
            XdtError::BadReference(_)
        ));
        assert!(matches!(
            k.open(&"A".repeat(10_000)).unwrap_err(),
            XdtError::BadReference(_)
        ));
        // made up from scratch with this worker's id: no key, no luck
        let mut raw = k.worker().0.to_vec();
        raw.extend_from_slice(&[0u8; 100]);
        let made = format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        );
        assert!(matches!(
            k.open(&made).unwrap_err(),
            XdtError::BadReference(_)
        ));
        // another worker's token names that worker and does not open here
        let other = RefKey::generate();
        let t2 = other.seal(&claims(&other)).unwrap();
        assert!(
            matches!(k.open(&t2).unwrap_err(), XdtError::OtherWorker(w) if w == other.worker())
        );
    }
}
