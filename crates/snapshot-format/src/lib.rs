//! The process state a snapshot carries besides its memory pages: every
//! thread, the memory layout, the saved /tmp and /dev/shm, the open
//! descriptors, the signal state and the shared memory objects, with the
//! checks a restore relies on (the state file is untrusted input: a
//! function's snapshot may have been tampered with on disk or in a tier).
//!
//! ```text
//! "THAWSTAT" | version u32 | crc32(body) u32 | body length u64 | body
//! ```
//!
//! The header's integers are little-endian; the body is [`ProcessState`]
//! in postcard's serde format (varint integers, length-prefixed vectors
//! and strings, fields in declaration order), so its layout follows the
//! types, and decoding costs time in proportion to its bytes. It is still
//! versioned and checksummed (CRC32 over the body, besides the store's
//! SHA-256 of the whole file).
mod fds;
mod files;
mod shared;
mod signals;
mod thread;

pub use fds::{
    check_abs_path, EpollWatch, FdKind, SavedFd, SavedSocket, CLOCKS, MAX_FDS, MAX_FD_NUMBER,
    MAX_PIPE_SIZE, MAX_WATCHES, SOCK_OPT_CONNECT, SOCK_OPT_DROPPED, SOCK_OPT_REUSEADDR,
    SOCK_OPT_REUSEPORT, SOCK_OPT_V6ONLY,
};
pub use files::{
    check_path, split_mount, FileKind, SavedFile, MAX_PATH, MAX_SAVED_ENTRIES, SAVED_MOUNTS,
};
pub use shared::{SharedBacking, SharedObject, NAME_MAX as SHARED_NAME_MAX};
pub use signals::{signo, ITimer, QueuedSignal, SigAction, SignalState, MAX_QUEUED_SIGNALS};
pub use thread::{ThreadKernel, ThreadState, NREGS, ROBUST_LIST_LEN, SS_AUTODISARM, SS_DISABLE};

use serde::{Deserialize, Serialize};
use thaw_error::fail;
use thaw_memory::MemoryLayout;

/// Why a process state was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// written by another version of thaw: take the snapshot again
    #[error("process state version {found} is not supported (want {want}): it was written by another version of thaw; take the snapshot again (redeploy the function)")]
    Version { found: u32, want: u32 },
    /// fails its checks (header, checksum, lengths, values a restore would
    /// not trust); the message names the field
    #[error("{0}")]
    Corrupt(String),
}

impl StateError {
    /// This error found in `what` (a thread, the memory layout).
    pub(crate) fn within(self, what: &str) -> StateError {
        match self {
            StateError::Corrupt(m) => StateError::Corrupt(format!("{what}: {m}")),
            e => e,
        }
    }
}

type Result<T, E = StateError> = std::result::Result<T, E>;
/// Version 1 was JSON; 2 the hand-written binary form; 3 adds the saved
/// files of /tmp and /dev/shm; 4 carries every thread; 5 the open
/// descriptors; 6 the signal state; 7 is the same records in postcard's
/// form. Older states are refused (take the snapshot again): a restore of
/// one would silently lose what it lacks, and none is worth two codecs.
pub const STATE_VERSION: u32 = 7;
const MAGIC: &[u8; 8] = b"THAWSTAT";
const HEADER: usize = 8 + 4 + 4 + 8;
/// The top of x86_64 user space (4-level paging).
pub(crate) const TASK_SIZE: u64 = 0x7fff_ffff_f000;

/// Bytes of a descriptor's or shared object's content (a pipe's unread
/// bytes, a memfd's data, a socket's queue) in the memory image, after the
/// pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    pub image_off: u64,
    pub len: u64,
}

/// One mapping of the runtime. `path` is inside the runtime root for
/// file-backed mappings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    /// PROT_READ | PROT_WRITE | PROT_EXEC bits
    pub prot: u32,
    pub path: Option<String>,
    pub file_off: u64,
    pub growsdown: bool,
    pub name: String,
    /// a shared mapping's backing (`path` is then `None`; see
    /// [`SharedBacking`])
    pub shared: Option<SharedBacking>,
}

/// The mm layout fields (`struct prctl_mm_map` minus auxv and exe).
pub use thaw_restorer::MmFields as MmLayout;

/// The runtime's [vvar .. vdso] block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdsoBlock {
    pub start: u64,
    pub vdso_offset: u64,
    /// (offset, length) of each mapping in the block
    pub pieces: Vec<(u64, u64)>,
}

/// Everything a restore needs besides the memory image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessState {
    /// the header's (not in the body) (not in the body)
    #[serde(skip)]
    pub version: u32,
    /// every thread, the main thread (the one the agent serves on) first
    pub threads: Vec<ThreadState>,
    pub mm: MmLayout,
    pub auxv: Vec<u64>,
    pub vdso: VdsoBlock,
    /// `vmas[i]` and `memory.regions[i]` describe the same mapping.
    pub vmas: Vec<Vma>,
    pub memory: MemoryLayout,
    /// argv the runtime was started with (to restart it fresh if needed)
    pub argv: Vec<String>,
    /// the sandbox's /tmp and /dev/shm, contents in the image after the pages
    pub files: Vec<SavedFile>,
    /// the open descriptors besides 0-3, in ascending order
    pub fds: Vec<SavedFd>,
    /// dispositions, interval timers, queued signals
    pub signals: SignalState,
    /// the shared memory objects shared mappings map
    pub shared: Vec<SharedObject>,
}

impl ProcessState {
    /// The state file: header, then the body in postcard's form.
    pub fn encode(&self) -> Vec<u8> {
        // postcard fails only on sequences of unknown length, which the
        // derived impls of these records never produce
        let body = postcard::to_allocvec(self).expect("a process state always serializes");
        let mut out = Vec::with_capacity(HEADER + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Parses and checks a state file: everything in it is later used to
    /// build mappings, so shape errors are caught here, not in the restorer.
    pub fn decode(data: &[u8]) -> Result<ProcessState> {
        if data.len() < HEADER || &data[..8] != MAGIC {
            fail!(StateError::Corrupt, "process state is corrupt: no THAWSTAT header (a JSON state of version 1: take the snapshot again)");
        }
        let word =
            |at: usize| u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        let version = word(8);
        if version != STATE_VERSION {
            return Err(StateError::Version {
                found: version,
                want: STATE_VERSION,
            });
        }
        let crc = word(12);
        let len = u64::from(word(16)) | u64::from(word(20)) << 32;
        let body = &data[HEADER..];
        if body.len() as u64 != len {
            fail!(
                StateError::Corrupt,
                "process state is corrupt: body of {} bytes, header says {len} (truncated?)",
                body.len()
            );
        }
        if crc32fast::hash(body) != crc {
            fail!(
                StateError::Corrupt,
                "process state is corrupt: CRC32 mismatch"
            );
        }
        // A hostile length prefix cannot make this allocate much: serde
        // preallocates at most 1 MiB per vector whatever its count says,
        // and every item must then be read from the bytes that are there.
        let (mut s, rest): (ProcessState, _) = postcard::take_from_bytes(body)
            .map_err(|e| StateError::Corrupt(format!("process state is corrupt: {e}")))?;
        if !rest.is_empty() {
            fail!(
                StateError::Corrupt,
                "process state is corrupt: {} bytes after the end",
                rest.len()
            );
        }
        s.version = version;
        s.validate()?;
        Ok(s)
    }

    /// What a restore would trust: counts, lengths, ranges, and references
    /// between records.
    fn validate(&self) -> Result<()> {
        let s = self;
        if s.threads.is_empty() || s.threads.len() > thaw_restorer::MAX_THREADS {
            fail!(
                StateError::Corrupt,
                "process state has {} threads (1..={} supported)",
                s.threads.len(),
                thaw_restorer::MAX_THREADS
            );
        }
        for (i, t) in s.threads.iter().enumerate() {
            t.validate()
                .map_err(|e| e.within(&format!("process state: thread {i} ({})", t.name)))?;
        }
        if s.vmas.len() != s.memory.regions.len() {
            fail!(
                StateError::Corrupt,
                "process state: {} mappings but {} memory regions",
                s.vmas.len(),
                s.memory.regions.len()
            );
        }
        s.signals
            .validate()
            .map_err(|e| e.within("process state: signal state"))?;
        s.memory.validate().map_err(|e| {
            StateError::Corrupt(format!(
                "process state: memory layout: {}",
                thaw_error::chain(&e)
            ))
        })?;
        shared::validate_objects(&s.shared, s.memory.image_len)
            .map_err(|e| e.within("process state"))?;
        for (v, r) in s.vmas.iter().zip(&s.memory.regions) {
            let anonymous = v.path.is_none() && v.shared.is_none();
            let shared_ok = v.shared.is_none() || (v.path.is_none() && r.runs.is_empty());
            shared::validate(&v.shared, &s.shared).map_err(|e| e.within("process state"))?;
            if v.start != r.start || v.end != r.end || r.anonymous != anonymous || !shared_ok {
                fail!(
                    StateError::Corrupt,
                    "process state: mapping {:#x} and its memory region disagree",
                    v.start
                );
            }
            if v.prot & !7 != 0 {
                fail!(
                    StateError::Corrupt,
                    "process state: mapping {:#x} has bad protection bits",
                    v.start
                );
            }
            if let Some(p) = &v.path {
                if !p.starts_with('/') || p.split('/').any(|c| c == "..") || p.contains('\0') {
                    fail!(
                        StateError::Corrupt,
                        "process state: mapping {:#x} names a bad path {p:?}",
                        v.start
                    );
                }
            }
            let lo = thaw_restorer::RESTORER_BASE;
            let hi = lo + 2 * thaw_restorer::RESTORER_SPAN; // span + vdso scratch
            if v.start < hi && v.end > lo {
                fail!(
                    StateError::Corrupt,
                    "process state: mapping {:#x} overlaps the restorer's reserved range",
                    v.start
                );
            }
            if v.end > TASK_SIZE || v.start < 0x10000 {
                fail!(
                    StateError::Corrupt,
                    "process state: mapping {:#x} is outside user space",
                    v.start
                );
            }
        }
        if s.vdso.pieces.is_empty() || s.vdso.pieces.len() > thaw_restorer::MAX_VDSO_PIECES {
            fail!(
                StateError::Corrupt,
                "process state: vDSO block with {} mappings",
                s.vdso.pieces.len()
            );
        }
        if s.auxv.len() > 128 || !s.auxv.len().is_multiple_of(2) {
            fail!(
                StateError::Corrupt,
                "process state: auxv of {} words",
                s.auxv.len()
            );
        }
        files::check_files(&s.files)?;
        fds::check(&s.fds, s.memory.image_len).map_err(|e| e.within("process state"))?;
        Ok(())
    }

    /// The main thread (the one the agent serves on).
    pub fn main(&self) -> &ThreadState {
        &self.threads[0]
    }
}

#[cfg(test)]
mod tests;
