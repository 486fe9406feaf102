//! Encryption of everything that leaves the machine. A snapshot holds every
//! secret its function saw, so objects on the remote tier are sealed with
//! XChaCha20-Poly1305 under a key only the worker holds
//! (`$THAW_HOME/remote.key`, 0600).
//!
//! The object is cut into chunks sealed one by one, so a restore can fetch
//! and open only the chunks it needs (the REAP working set first). Every
//! chunk authenticates the header (format, chunk size, plaintext length)
//! and the object's name, so truncation, reordering, swapping objects or
//! flipping any bit fails to open.
//!
//! Objects read whole (manifest, state, working set) are compressed (LZ4)
//! before sealing: format 2. That cuts the bytes a streamed restore waits
//! for by about 3x (the remote tier of "Reducing FaaS Latency
//! with Storage-backed Caching" is bandwidth-bound). The store
//! sees their compressed lengths; the memory image, read by range, stays
//! uncompressed (format 1). Format 3, what [`seal_compressed`] writes now,
//! compresses in segments of [`SEGMENT`] bytes sealed in 64 KiB chunks, so
//! a reader opens and decompresses each part as it arrives
//! ([`Opener`]) instead of after the whole body.
use crate::error::{Result, TiersError};
use chacha20poly1305::aead::{Aead, AeadInPlace, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use thaw_error::fail;
use thaw_error::{Context, ResultExt};
use thaw_memory::usize_of;

const MAGIC: &[u8; 8] = b"THAWSEAL";
/// Format 1: chunks of plaintext. Format 2: the same over an LZ4 block of
/// the plaintext with its length in front (4 bytes, little-endian).
const VERSION: u32 = 1;
// format 2 (whole-body LZ4) is still read: objects uploaded before format 3
/// Format 3: chunks over LZ4 segments, each an LZ4 block of at most
/// [`SEGMENT`] bytes with its length in front, behind its own length
/// (4 bytes each, little-endian).
const VERSION_SEGMENTS: u32 = 3;
/// Plaintext bytes per segment (format 3).
pub const SEGMENT: usize = 256 << 10;
/// Sealed chunk of a format 3 object: a reader opens each as it arrives.
const SEGMENT_CHUNK: usize = 64 << 10;
pub const HEADER_LEN: usize = 40;
pub const TAG_LEN: usize = 16;
/// Plaintext bytes per chunk.
pub const CHUNK: usize = 1 << 20;
pub const KEY_FILE: &str = "remote.key";

pub struct Key(XChaCha20Poly1305);

impl Key {
    /// The worker's key, made on first use; refused if anyone else could read it.
    pub fn load_or_create(home: &Path) -> Result<Key> {
        let p = home.join(KEY_FILE);
        match std::fs::File::open(&p) {
            Ok(mut f) => {
                let mode = f.metadata()?.permissions().mode() & 0o777;
                if mode != 0o600 {
                    fail!(
                        TiersError::Config,
                        "{} has mode {mode:o}; it must be 0600",
                        p.display()
                    );
                }
                let mut k = Vec::new();
                f.read_to_end(&mut k)?;
                if k.len() != 32 {
                    fail!(
                        TiersError::Corrupt,
                        "{} must hold 32 bytes, not {}",
                        p.display(),
                        k.len()
                    );
                }
                Ok(Key::from_bytes(&k))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut k = [0u8; 32];
                random(&mut k)?;
                let tmp = home.join(format!(".{KEY_FILE}.tmp-{}", std::process::id()));
                create_private(&tmp, &k)?;
                // no-replace: a key another process made first wins
                match std::fs::hard_link(&tmp, &p) {
                    Ok(()) => {
                        let _ = std::fs::remove_file(&tmp);
                        Ok(Key::from_bytes(&k))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        let _ = std::fs::remove_file(&tmp);
                        Key::load_or_create(home)
                    }
                    Err(e) => Err(Context::new(format!("creating {}", p.display()), e).into()),
                }
            }
            Err(e) => Err(Context::new(format!("opening {}", p.display()), e).into()),
        }
    }

    pub fn from_bytes(k: &[u8]) -> Key {
        Key(XChaCha20Poly1305::new_from_slice(k).expect("32-byte key"))
    }
}

/// Creates `path` (which must not exist) readable by its owner only, with
/// `data`, synced.
pub fn create_private(path: &Path, data: &[u8]) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::io::Write::write_all(&mut f, data)?;
    f.sync_all()?;
    Ok(())
}

pub(crate) fn random(buf: &mut [u8]) -> Result<()> {
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .context("reading /dev/urandom")?;
    Ok(())
}

/// The parsed header of a sealed object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// bytes of the sealed body (compressed, for format 2)
    pub plain_len: u64,
    /// the body is compressed (format 2 or 3)
    pub compressed: bool,
    /// the body is LZ4 segments (format 3)
    segmented: bool,
    pub chunk: u32,
    nonce_prefix: [u8; 16],
    raw: [u8; HEADER_LEN],
}

impl Header {
    pub fn parse(b: &[u8]) -> Result<Header> {
        if b.len() < HEADER_LEN || &b[..8] != MAGIC {
            fail!(TiersError::Corrupt, "not a sealed thaw object (bad magic)");
        }
        let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
        if !(VERSION..=VERSION_SEGMENTS).contains(&version) {
            fail!(
                TiersError::Corrupt,
                "sealed object format {version} is not {VERSION} to {VERSION_SEGMENTS}"
            );
        }
        let chunk = u32::from_le_bytes(b[12..16].try_into().unwrap());
        if chunk == 0 || chunk as usize > 64 * CHUNK {
            fail!(
                TiersError::Corrupt,
                "sealed object has a bad chunk size {chunk}"
            );
        }
        let mut raw = [0u8; HEADER_LEN];
        raw.copy_from_slice(&b[..HEADER_LEN]);
        Ok(Header {
            plain_len: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            compressed: version != VERSION,
            segmented: version == VERSION_SEGMENTS,
            chunk,
            nonce_prefix: b[24..40].try_into().unwrap(),
            raw,
        })
    }

    /// Chunks in the object (at least one, so the header is always authenticated).
    pub fn chunks(&self) -> u64 {
        self.plain_len.div_ceil(self.chunk as u64).max(1)
    }

    /// Sealed bytes of chunk `i` (every chunk but the last is full).
    fn sealed_chunk(&self, i: u64) -> usize {
        let c = self.chunk as u64;
        usize_of((self.plain_len.saturating_sub(i * c)).min(c)) + TAG_LEN
    }

    /// Length of the whole sealed object.
    pub fn sealed_len(&self) -> u64 {
        HEADER_LEN as u64 + self.plain_len + self.chunks() * TAG_LEN as u64
    }

    /// The sealed bytes holding plaintext `r`, and the first chunk's index.
    pub fn sealed_span(&self, r: &Range<u64>) -> Result<(Range<u64>, u64)> {
        if r.start > r.end || r.end > self.plain_len {
            fail!(
                TiersError::Corrupt,
                "range {}..{} is outside the object's {} bytes",
                r.start,
                r.end,
                self.plain_len
            );
        }
        let c = self.chunk as u64;
        let first = r.start / c;
        let last = if r.end == r.start {
            first
        } else {
            (r.end - 1) / c
        };
        let start = HEADER_LEN as u64 + first * (c + TAG_LEN as u64);
        let end = (HEADER_LEN as u64 + (last + 1) * (c + TAG_LEN as u64)).min(self.sealed_len());
        Ok((start..end, first))
    }

    fn nonce(&self, i: u64) -> XNonce {
        let mut n = [0u8; 24];
        n[..16].copy_from_slice(&self.nonce_prefix);
        n[16..].copy_from_slice(&i.to_le_bytes());
        *XNonce::from_slice(&n)
    }

    fn aad(&self, name: &str) -> Vec<u8> {
        let mut a = self.raw.to_vec();
        a.extend_from_slice(name.as_bytes());
        a
    }
}

/// Seals `plain` as the object called `name`.
pub fn seal(key: &Key, name: &str, plain: &[u8]) -> Result<Vec<u8>> {
    seal_chunked(key, name, plain, CHUNK)
}

/// [`seal`] in chunks of `chunk` plaintext bytes (smaller chunks: finer
/// ranged reads, 16 bytes of tag each).
pub fn seal_chunked(key: &Key, name: &str, plain: &[u8], chunk: usize) -> Result<Vec<u8>> {
    seal_as(key, name, plain, chunk, VERSION)
}

/// [`seal`] of the object LZ4-compressed in segments (format 3): for
/// objects read whole.
pub fn seal_compressed(key: &Key, name: &str, plain: &[u8]) -> Result<Vec<u8>> {
    let mut body = Vec::with_capacity(plain.len() / 2 + 64);
    for seg in plain.chunks(SEGMENT) {
        let packed = lz4_flex::block::compress_prepend_size(seg);
        let packed_len = u32::try_from(packed.len()).context("a compressed segment's length")?;
        body.extend_from_slice(&packed_len.to_le_bytes());
        body.extend_from_slice(&packed);
    }
    seal_as(key, name, &body, SEGMENT_CHUNK, VERSION_SEGMENTS)
}

fn seal_as(key: &Key, name: &str, plain: &[u8], chunk: usize, version: u32) -> Result<Vec<u8>> {
    let mut raw = [0u8; HEADER_LEN];
    raw[..8].copy_from_slice(MAGIC);
    raw[8..12].copy_from_slice(&version.to_le_bytes());
    raw[12..16].copy_from_slice(
        &u32::try_from(chunk)
            .context("the chunk size")?
            .to_le_bytes(),
    );
    raw[16..24].copy_from_slice(&(plain.len() as u64).to_le_bytes());
    random(&mut raw[24..40])?;
    let h = Header::parse(&raw)?;
    let aad = h.aad(name);
    let mut out = Vec::with_capacity(usize_of(h.sealed_len()));
    out.extend_from_slice(&raw);
    for i in 0..h.chunks() {
        let s = (usize_of(i) * chunk).min(plain.len());
        let e = (s + chunk).min(plain.len());
        let ct = key
            .0
            .encrypt(
                &h.nonce(i),
                Payload {
                    msg: &plain[s..e],
                    aad: &aad,
                },
            )
            .map_err(|_| TiersError::Failed(format!("sealing {name} failed")))?;
        out.extend_from_slice(&ct);
    }
    Ok(out)
}

/// Opens sealed chunks starting at chunk `first` (as fetched for
/// `Header::sealed_span`); returns their plaintext.
pub fn open_chunks(
    key: &Key,
    name: &str,
    h: &Header,
    first: u64,
    sealed: &[u8],
) -> Result<Vec<u8>> {
    let aad = h.aad(name);
    let step = h.chunk as usize + TAG_LEN;
    let mut out = Vec::with_capacity(sealed.len());
    for (k, ct) in sealed.chunks(step).enumerate() {
        out.extend_from_slice(&open_chunk(key, name, h, &aad, first + k as u64, ct)?);
    }
    Ok(out)
}

fn open_chunk(key: &Key, name: &str, h: &Header, aad: &[u8], i: u64, ct: &[u8]) -> Result<Vec<u8>> {
    let mut buf = ct.to_vec();
    open_chunk_in_place(key, name, h, aad, i, &mut buf)?;
    Ok(buf)
}

/// Authenticates sealed chunk `i` in `buf` and leaves its plaintext there
/// (no copy: the opener's receive path runs on the restore's critical path).
fn open_chunk_in_place(
    key: &Key,
    name: &str,
    h: &Header,
    aad: &[u8],
    i: u64,
    buf: &mut Vec<u8>,
) -> Result<()> {
    if i >= h.chunks() {
        fail!(
            TiersError::Corrupt,
            "{name}: more data than the header announces"
        );
    }
    let want = h.sealed_chunk(i);
    if buf.len() != want {
        fail!(
            TiersError::Corrupt,
            "{name}: chunk {i} is truncated ({} of {want} bytes)",
            buf.len()
        );
    }
    key.0.decrypt_in_place(&h.nonce(i), aad, buf).map_err(|_| {
        TiersError::Corrupt(format!(
            "{name}: chunk {i} failed authentication (corrupt or tampered)"
        ))
    })
}

/// Opens a whole sealed object of at most `max_len` bytes (decompressed,
/// for formats 2 and 3: every announced length is checked before anything
/// is allocated for it).
pub fn open(key: &Key, name: &str, sealed: &[u8], max_len: u64) -> Result<Vec<u8>> {
    let mut o = Opener::new(key, name, max_len);
    o.push(sealed)?;
    o.finish()
}

/// Opens a sealed object as its bytes arrive: each chunk is authenticated
/// as soon as it is whole and, in format 3, each segment decompressed as
/// soon as its chunks are, so little is left to do when the last byte
/// arrives.
pub struct Opener<'a> {
    key: &'a Key,
    name: &'a str,
    max_len: u64,
    head: Vec<u8>,
    h: Option<(Header, Vec<u8>)>,
    /// sealed bytes of the chunk being received
    pending: Vec<u8>,
    next: u64,
    /// opened plaintext; in format 3, from `used` on, segments not yet whole
    body: Vec<u8>,
    used: usize,
    out: Vec<u8>,
}

impl<'a> Opener<'a> {
    pub fn new(key: &'a Key, name: &'a str, max_len: u64) -> Opener<'a> {
        Opener {
            key,
            name,
            max_len,
            head: Vec::new(),
            h: None,
            pending: Vec::new(),
            next: 0,
            body: Vec::new(),
            used: 0,
            out: Vec::new(),
        }
    }

    /// The next bytes of the sealed object.
    pub fn push(&mut self, mut b: &[u8]) -> Result<()> {
        let name = self.name;
        if self.h.is_none() {
            let n = (HEADER_LEN - self.head.len()).min(b.len());
            self.head.extend_from_slice(&b[..n]);
            b = &b[n..];
            if self.head.len() < HEADER_LEN {
                return Ok(());
            }
            let h = Header::parse(&self.head)?;
            if !h.compressed && h.plain_len > self.max_len {
                fail!(
                    TiersError::TooLarge,
                    "{name} announces {} bytes, more than the {} expected",
                    h.plain_len,
                    self.max_len
                );
            }
            self.h = Some((h, h.aad(name)));
        }
        let (h, aad) = self.h.clone().expect("parsed above");
        while !b.is_empty() {
            if self.next >= h.chunks() {
                fail!(
                    TiersError::Corrupt,
                    "{name}: more data than the header announces"
                );
            }
            let want = h.sealed_chunk(self.next);
            let n = (want - self.pending.len()).min(b.len());
            self.pending.extend_from_slice(&b[..n]);
            b = &b[n..];
            if self.pending.len() == want {
                open_chunk_in_place(self.key, name, &h, &aad, self.next, &mut self.pending)?;
                self.body.extend_from_slice(&self.pending);
                self.pending.clear();
                self.next += 1;
                if h.segmented {
                    self.segments()?;
                }
            }
        }
        Ok(())
    }

    /// Decompresses the whole segments opened so far.
    fn segments(&mut self) -> Result<()> {
        let name = self.name;
        loop {
            let rest = &self.body[self.used..];
            let Some(len) = rest.get(..4) else { break };
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let Some(seg) = rest.get(4..4 + len) else {
                break;
            };
            // authenticated, so ours: still bounded, as any length we read
            let Some(plain) = seg.get(..4) else {
                fail!(TiersError::Corrupt, "{name}: a segment has no length");
            };
            let plain = u32::from_le_bytes(plain.try_into().expect("4 bytes")) as u64;
            if plain > SEGMENT as u64 || self.out.len() as u64 + plain > self.max_len {
                fail!(
                    TiersError::TooLarge,
                    "{name} announces more than the {} bytes expected",
                    self.max_len
                );
            }
            // straight into the plaintext: no segment-sized buffer to
            // allocate, fault in and copy out of
            let start = self.out.len();
            self.out.resize(start + usize_of(plain), 0);
            let n = lz4_flex::block::decompress_into(&seg[4..], &mut self.out[start..])
                .map_err(|e| TiersError::Corrupt(format!("{name}: decompressing: {e}")))?;
            if n as u64 != plain {
                fail!(
                    TiersError::Corrupt,
                    "{name}: a segment decompressed to {n} bytes, not the {plain} it announces"
                );
            }
            self.used += 4 + len;
        }
        // keep only the segment being received
        if self.used > SEGMENT {
            self.body.drain(..self.used);
            self.used = 0;
        }
        Ok(())
    }

    /// The object's plaintext, once every byte has been pushed.
    pub fn finish(self) -> Result<Vec<u8>> {
        let name = self.name;
        let Some((h, _)) = self.h else {
            fail!(
                TiersError::Corrupt,
                "{name}: sealed object is truncated (no header)"
            );
        };
        if self.next != h.chunks() || !self.pending.is_empty() {
            fail!(
                TiersError::Corrupt,
                "{name}: sealed object is truncated (chunk {} of {})",
                self.next,
                h.chunks()
            );
        }
        if h.segmented {
            if self.used != self.body.len() {
                fail!(TiersError::Corrupt, "{name}: its last segment is truncated");
            }
            return Ok(self.out);
        }
        let body = self.body;
        if !h.compressed {
            return Ok(body);
        }
        let Some(len) = body.get(..4) else {
            fail!(TiersError::Corrupt, "{name}: compressed body has no length");
        };
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as u64;
        if len > self.max_len {
            fail!(
                TiersError::TooLarge,
                "{name} announces {len} bytes, more than the {} expected",
                self.max_len
            );
        }
        lz4_flex::block::decompress_size_prepended(&body)
            .map_err(|e| TiersError::Corrupt(format!("{name}: decompressing: {e}")))
    }
}

/// The largest sealed object holding at most `max_len` bytes, compressed
/// (LZ4's worst case, either format) or not.
pub fn max_sealed_len(max_len: u64) -> u64 {
    let sealed = |body: u64, chunk: u64| {
        HEADER_LEN as u64 + body + body.div_ceil(chunk).max(1) * TAG_LEN as u64
    };
    let worst = max_len + max_len / 255 + 16;
    let segs = max_len.div_ceil(SEGMENT as u64).max(1);
    sealed(4 + worst, CHUNK as u64).max(sealed(worst + segs * 24, SEGMENT_CHUNK as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key::from_bytes(&[7u8; 32])
    }

    #[test]
    fn round_trips_and_ranges() {
        let k = key();
        for len in [0usize, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17] {
            let plain: Vec<u8> = (0..len)
                .map(|i| u8::try_from(i * 31 % 251).unwrap())
                .collect();
            let s = seal(&k, "f/x", &plain).unwrap();
            assert_eq!(open(&k, "f/x", &s, u64::MAX).unwrap(), plain);
            let h = Header::parse(&s).unwrap();
            for r in [
                0..len as u64,
                (len as u64 / 3)..(len as u64 / 2),
                len as u64..len as u64,
            ] {
                let (span, first) = h.sealed_span(&r).unwrap();
                let pt = open_chunks(
                    &k,
                    "f/x",
                    &h,
                    first,
                    &s[usize_of(span.start)..usize_of(span.end)],
                )
                .unwrap();
                let off = usize_of(r.start - first * CHUNK as u64);
                assert_eq!(
                    &pt[off..off + usize_of(r.end - r.start)],
                    &plain[usize_of(r.start)..usize_of(r.end)]
                );
            }
            assert!(h.sealed_span(&(0..len as u64 + 1)).is_err());
        }
    }

    #[test]
    fn small_chunks_open_by_range() {
        let k = key();
        let plain: Vec<u8> = (0..200_000usize)
            .map(|i| u8::try_from(i % 253).unwrap())
            .collect();
        let s = seal_chunked(&k, "f/img", &plain, 64 << 10).unwrap();
        let h = Header::parse(&s).unwrap();
        assert_eq!((h.chunk, h.chunks()), (64 << 10, 4));
        assert_eq!(open(&k, "f/img", &s, u64::MAX).unwrap(), plain);
        // the last chunk alone, as a streamed restore fetches it
        let (span, first) = h.sealed_span(&(196_608..200_000)).unwrap();
        assert_eq!(first, 3);
        let pt = open_chunks(
            &k,
            "f/img",
            &h,
            3,
            &s[usize_of(span.start)..usize_of(span.end)],
        );
        assert_eq!(pt.unwrap(), &plain[196_608..]);
        let mut bad = s.clone();
        bad[usize_of(span.start) + 5] ^= 1;
        let pt = open_chunks(
            &k,
            "f/img",
            &h,
            3,
            &bad[usize_of(span.start)..usize_of(span.end)],
        );
        assert!(pt.is_err(), "a flipped bit in a small chunk accepted");
    }

    #[test]
    fn tampering_is_detected() {
        let k = key();
        let plain = vec![5u8; CHUNK + 100];
        let s = seal(&k, "f/x", &plain).unwrap();
        // every byte of header and body matters
        for pos in [
            0,
            9,
            13,
            17,
            30,
            HEADER_LEN,
            HEADER_LEN + CHUNK + 20,
            s.len() - 1,
        ] {
            let mut t = s.clone();
            t[pos] ^= 1;
            assert!(
                matches!(open(&k, "f/x", &t, u64::MAX), Err(TiersError::Corrupt(_))),
                "flip at {pos} accepted"
            );
        }
        assert!(
            matches!(open(&k, "f/y", &s, u64::MAX), Err(TiersError::Corrupt(_))),
            "another object's name accepted"
        );
        assert!(
            matches!(
                open(&k, "f/x", &s[..s.len() - 1], u64::MAX),
                Err(TiersError::Corrupt(_))
            ),
            "truncation accepted"
        );
        assert!(
            matches!(
                open(&Key::from_bytes(&[8u8; 32]), "f/x", &s, u64::MAX),
                Err(TiersError::Corrupt(_))
            ),
            "wrong key accepted"
        );
    }

    #[test]
    fn compressed_objects_round_trip_bounded_and_authenticated() {
        let k = key();
        for len in [0usize, 1, 4096, 3 * CHUNK + 5] {
            let plain: Vec<u8> = (0..len)
                .map(|i| u8::try_from(i / 7 % 13).unwrap())
                .collect();
            let s = seal_compressed(&k, "f/ws", &plain).unwrap();
            assert!(Header::parse(&s).unwrap().compressed);
            assert!(s.len() as u64 <= max_sealed_len(len as u64));
            if len > 4096 {
                assert!(s.len() < len / 2, "{len} bytes sealed to {}", s.len());
            }
            assert_eq!(open(&k, "f/ws", &s, len as u64).unwrap(), plain);
            if len > 0 {
                // a bound below the announced length refuses before decompressing
                let e = open(&k, "f/ws", &s, len as u64 - 1).unwrap_err();
                assert!(matches!(e, TiersError::TooLarge(_)), "{e}");
            }
            let mut t = s.clone();
            let at = t.len() - 3;
            t[at] ^= 1;
            assert!(matches!(
                open(&k, "f/ws", &t, u64::MAX),
                Err(TiersError::Corrupt(_))
            ));
        }
        // incompressible bytes fit the worst-case bound too
        let mut noise = vec![0u8; 100_000];
        random(&mut noise).unwrap();
        let s = seal_compressed(&k, "f/n", &noise).unwrap();
        assert!(s.len() as u64 <= max_sealed_len(noise.len() as u64));
    }

    #[test]
    fn objects_open_as_they_arrive_in_any_pieces() {
        let k = key();
        let plain: Vec<u8> = (0..3 * SEGMENT + 777)
            .map(|i| u8::try_from(i / 5 % 11).unwrap())
            .collect();
        let s = seal_compressed(&k, "f/p", &plain).unwrap();
        for piece in [1usize, 4096, 70_000, s.len()] {
            let mut o = Opener::new(&k, "f/p", plain.len() as u64);
            for b in s.chunks(piece) {
                o.push(b).unwrap();
            }
            assert_eq!(o.finish().unwrap(), plain, "pieces of {piece}");
        }
        // cut short anywhere: an error, never a shorter object
        for cut in [10, HEADER_LEN, s.len() / 2, s.len() - 1] {
            let mut o = Opener::new(&k, "f/p", plain.len() as u64);
            o.push(&s[..cut]).unwrap();
            assert!(o.finish().is_err(), "cut at {cut}");
        }
        // a segment past the bound is refused while arriving
        let mut o = Opener::new(&k, "f/p", SEGMENT as u64);
        assert!(o.push(&s).is_err());
        // format 2 (one LZ4 block), as uploaded before format 3, still opens
        let old = seal_as(
            &k,
            "f/p",
            &lz4_flex::block::compress_prepend_size(&plain),
            CHUNK,
            2,
        )
        .unwrap();
        assert_eq!(open(&k, "f/p", &old, plain.len() as u64).unwrap(), plain);
        assert!(matches!(
            open(&k, "f/p", &old, plain.len() as u64 - 1),
            Err(TiersError::TooLarge(_))
        ));
    }

    #[test]
    fn key_file_is_private_and_stable() {
        let d = std::env::temp_dir().join(format!("thaw-seal-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let a = Key::load_or_create(&d).unwrap();
        let s = seal(&a, "n", b"secret").unwrap();
        let b = Key::load_or_create(&d).unwrap();
        assert_eq!(open(&b, "n", &s, 6).unwrap(), b"secret");
        let p = d.join(KEY_FILE);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Key::load_or_create(&d).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
