//! The process state a snapshot carries besides its memory pages, in a
//! compact binary form: decoding costs time in proportion to its bytes (no
//! text parse), and it is still versioned and checksummed (CRC32 over the
//! body, besides the store's SHA-256 of the whole file).
//!
//! ```text
//! "THAWSTAT" | version u32 | crc32(body) u32 | body length u64 | body
//! ```
//!
//! All integers little-endian; the body is the fields of [`ProcessState`] in
//! declaration order, vectors and strings as a u32 count then their items.
use crate::ptrace::NREGS;
use crate::shared_maps::{SharedBacking, SharedObject};
use crate::signals::SignalState;
use serde::{Deserialize, Serialize};
use thaw_error::fail;
use thaw_memory::MemoryLayout;

/// Why a process state was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// written by another version of thaw: redeploy
    #[error("process state version {found} is not supported (want {want})")]
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

/// Version 1 was JSON; 2 is the binary form; 3 adds the saved files of
/// /tmp and /dev/shm; 4 carries every thread; 5 the open descriptors; 6
/// the signal state (older states: redeploy, since a restore of one would
/// silently lose the function's signal handlers).
pub const STATE_VERSION: u32 = 6;
/// The oldest version still read.
const OLDEST_READ: u32 = 6;
const MAGIC: &[u8; 8] = b"THAWSTAT";
const HEADER: usize = 8 + 4 + 4 + 8;

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
    /// [`crate::shared_maps`])
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

/// `sigaltstack`'s `ss_flags` when a thread has no alternate signal stack.
pub const SS_DISABLE: u32 = 2;
/// `sigaltstack`'s `SS_AUTODISARM` (a flag on top of an enabled stack).
pub const SS_AUTODISARM: u32 = 1 << 31;
/// `struct robust_list_head`: the only length the kernel accepts.
pub const ROBUST_LIST_LEN: u64 = 24;
const TASK_SIZE: u64 = 0x7fff_ffff_f000;

/// A thread's kernel-side state that no register set carries (each 0 where
/// the thread had none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadKernel {
    /// alternate signal stack: sp, flags, size
    pub altstack: (u64, u32, u64),
    /// robust futex list: head, length
    pub robust_list: (u64, u64),
    /// where the kernel clears the thread id at exit (glibc's copy of it)
    pub clear_tid: u64,
    /// rseq registration: area, length, signature
    pub rseq: (u64, u32, u32),
}

/// One thread: its CPU state and kernel-side state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadState {
    /// its name (`comm`), for reports; a restore gives it back
    pub name: String,
    /// `struct user_regs_struct`, prepared to re-issue an interrupted syscall
    pub regs: Vec<u64>,
    /// XSAVE area
    pub xstate: Vec<u8>,
    pub sigmask: u64,
    pub kernel: ThreadKernel,
}

impl ThreadState {
    pub fn regs_array(&self) -> [u64; NREGS] {
        let mut r = [0u64; NREGS];
        r.copy_from_slice(&self.regs[..NREGS]);
        r
    }

    /// What a restore would trust: lengths, flags and addresses in range.
    fn validate(&self) -> Result<()> {
        if self.regs.len() != NREGS {
            fail!(
                StateError::Corrupt,
                "{} registers, want {NREGS}",
                self.regs.len()
            );
        }
        let x = &self.xstate;
        if x.len() < 576 || x.len() > 16384 || !x.len().is_multiple_of(64) {
            fail!(
                StateError::Corrupt,
                "XSAVE area of {} bytes is implausible",
                x.len()
            );
        }
        let k = &self.kernel;
        let (sp, flags, size) = k.altstack;
        if flags != SS_DISABLE && flags & !SS_AUTODISARM != 0 {
            fail!(
                StateError::Corrupt,
                "alternate signal stack flags {flags:#x}"
            );
        }
        if flags != SS_DISABLE && (sp.saturating_add(size) > TASK_SIZE || size == 0) {
            fail!(
                StateError::Corrupt,
                "alternate signal stack {sp:#x}+{size:#x} outside user space"
            );
        }
        let (head, len) = k.robust_list;
        if (head != 0 && len != ROBUST_LIST_LEN) || head >= TASK_SIZE {
            fail!(
                StateError::Corrupt,
                "robust futex list {head:#x} of {len} bytes"
            );
        }
        if k.clear_tid >= TASK_SIZE || !k.clear_tid.is_multiple_of(4) {
            fail!(StateError::Corrupt, "thread id address {:#x}", k.clear_tid);
        }
        let (addr, rlen, _) = k.rseq;
        if addr != 0
            && (!addr.is_multiple_of(32) || !(32..=4096).contains(&rlen) || addr >= TASK_SIZE)
        {
            fail!(StateError::Corrupt, "rseq area {addr:#x} of {rlen} bytes");
        }
        Ok(())
    }
}

/// What a [`SavedFile`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    Dir,
    File,
    Symlink,
    /// a named pipe (its unread bytes, if any end is open, are a descriptor's)
    Fifo,
}

/// One entry of the sandbox's /tmp or /dev/shm at checkpoint (see
/// [`crate::files`]). Parents come before their children.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFile {
    /// the path inside the sandbox (`/tmp/model.bin`)
    pub path: String,
    pub kind: FileKind,
    /// permission bits (07777)
    pub mode: u32,
    pub mtime_ns: i64,
    /// regular files: where the content is in the memory image
    pub image_off: u64,
    /// regular files: content bytes
    pub len: u64,
    /// symbolic links: the target
    pub target: String,
}

/// Bytes of a descriptor's content (a pipe's unread bytes, a memfd's data, a
/// socket's queue) in the memory image, after the pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    pub image_off: u64,
    pub len: u64,
}

/// One watch of an epoll instance: the watched descriptor's number, the
/// events asked for (with EPOLLET/EPOLLONESHOT...) and the user data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpollWatch {
    pub fd: i32,
    pub events: u32,
    pub data: u64,
}

/// A socket a restore recreates: `pair` names the descriptor holding the
/// other end of a socketpair (both ends are in the process); otherwise it
/// comes back unconnected (closed by its peer with `SOCK_OPT_DROPPED`),
/// bound to `addr` when that is not empty, and listening when `backlog` is
/// `Some`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedSocket {
    pub family: u32,
    pub ty: u32,
    pub protocol: u32,
    /// `struct sockaddr` bytes it was bound to (empty: unbound)
    pub addr: Vec<u8>,
    pub backlog: Option<u32>,
    /// SOCK_OPT_* bits
    pub options: u32,
    /// socketpair: the other end's descriptor
    pub pair: Option<i32>,
    /// shut down directions (1 reading, 2 writing)
    pub shutdown: u32,
    /// bytes queued for this end to read (socketpairs)
    pub queued: Blob,
}

/// SO_REUSEADDR was set.
pub const SOCK_OPT_REUSEADDR: u32 = 1;
/// SO_REUSEPORT was set.
pub const SOCK_OPT_REUSEPORT: u32 = 2;
/// IPV6_V6ONLY was set.
pub const SOCK_OPT_V6ONLY: u32 = 4;
/// A TCP connection, closed at the snapshot: restored as one its peer
/// closed (reads see end of file, writes `EPIPE`), not as a new socket.
pub const SOCK_OPT_DROPPED: u32 = 8;
/// A custom runtime's Runtime API connection, its `next` pending: restored
/// as a unix stream socket connected to the abstract address `addr`, where
/// the worker listens in the new sandbox (`runtime_api`).
pub const SOCK_OPT_CONNECT: u32 = 16;

/// What an open descriptor is, with what a restore needs to rebuild it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FdKind {
    /// the same open file as the lower descriptor `of` (a dup)
    Dup {
        of: i32,
    },
    /// a regular file, directory or device, reopened by path in the
    /// sandbox (the read-only root, the restored /tmp and /dev/shm)
    File {
        path: String,
        pos: u64,
    },
    /// one end of a pipe (`fifo`: opened by that path); the unread bytes are
    /// in the record of the pipe's lowest descriptor, `first`
    Pipe {
        first: i32,
        read: bool,
        size: u32,
        fifo: Option<String>,
        unread: Blob,
    },
    EventFd {
        count: u64,
        semaphore: bool,
    },
    Epoll {
        watches: Vec<EpollWatch>,
    },
    /// remaining time and interval in nanoseconds, expirations not read yet
    TimerFd {
        clock: u32,
        value_ns: u64,
        interval_ns: u64,
        ticks: u64,
    },
    SignalFd {
        mask: u64,
    },
    Memfd {
        name: String,
        pos: u64,
        size: u64,
        seals: u32,
        data: Blob,
    },
    Socket(SavedSocket),
}

/// An open descriptor of the runtime (besides stdio and the control socket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFd {
    pub fd: i32,
    /// file status flags as fdinfo shows them (access mode, O_NONBLOCK,
    /// O_APPEND...), O_CLOEXEC for the descriptor's close-on-exec flag
    pub flags: u32,
    pub kind: FdKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessState {
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
    /// the open descriptors besides 0-3, in ascending order (see [`crate::fds`])
    pub fds: Vec<SavedFd>,
    /// dispositions, interval timers, queued signals (see [`crate::signals`])
    pub signals: SignalState,
    /// the shared memory objects shared mappings map (see [`crate::shared_maps`])
    pub shared: Vec<SharedObject>,
}

impl ProcessState {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4096 + self.vmas.len() * 64);
        let w = &mut b;
        put_count(w, self.threads.len());
        for t in &self.threads {
            put_bytes(w, t.name.as_bytes());
            for r in &t.regs {
                put64(w, *r);
            }
            put_bytes(w, &t.xstate);
            put64(w, t.sigmask);
            let k = &t.kernel;
            put64(w, k.altstack.0);
            put32(w, k.altstack.1);
            put64(w, k.altstack.2);
            put64(w, k.robust_list.0);
            put64(w, k.robust_list.1);
            put64(w, k.clear_tid);
            put64(w, k.rseq.0);
            put32(w, k.rseq.1);
            put32(w, k.rseq.2);
        }
        let m = &self.mm;
        for v in [
            m.start_code,
            m.end_code,
            m.start_data,
            m.end_data,
            m.start_brk,
            m.brk,
            m.start_stack,
            m.arg_start,
            m.arg_end,
            m.env_start,
            m.env_end,
        ] {
            put64(w, v);
        }
        put_count(w, self.auxv.len());
        for a in &self.auxv {
            put64(w, *a);
        }
        put64(w, self.vdso.start);
        put64(w, self.vdso.vdso_offset);
        put_count(w, self.vdso.pieces.len());
        for &(off, len) in &self.vdso.pieces {
            put64(w, off);
            put64(w, len);
        }
        put_count(w, self.vmas.len());
        for v in &self.vmas {
            put64(w, v.start);
            put64(w, v.end);
            put32(w, v.prot);
            w.push(u8::from(v.path.is_some()) | u8::from(v.growsdown) << 1);
            put_bytes(w, v.path.as_deref().unwrap_or("").as_bytes());
            put64(w, v.file_off);
            put_bytes(w, v.name.as_bytes());
            crate::shared_maps::encode_backing(w, &v.shared);
        }
        put64(w, self.memory.image_len);
        put_count(w, self.memory.regions.len());
        for r in &self.memory.regions {
            put64(w, r.start);
            put64(w, r.end);
            w.push(u8::from(r.anonymous));
            put_count(w, r.runs.len());
            for run in &r.runs {
                put64(w, run.addr);
                put64(w, run.len);
                put64(w, run.file_off);
            }
        }
        put_count(w, self.argv.len());
        for a in &self.argv {
            put_bytes(w, a.as_bytes());
        }
        put_count(w, self.files.len());
        for f in &self.files {
            put_bytes(w, f.path.as_bytes());
            w.push(match f.kind {
                FileKind::Dir => 0,
                FileKind::File => 1,
                FileKind::Symlink => 2,
                FileKind::Fifo => 3,
            });
            put32(w, f.mode);
            put64(w, f.mtime_ns as u64);
            put64(w, f.image_off);
            put64(w, f.len);
            put_bytes(w, f.target.as_bytes());
        }
        put_count(w, self.fds.len());
        for f in &self.fds {
            put_fd(w, f);
        }
        self.signals.encode(w);
        crate::shared_maps::encode_objects(w, &self.shared);
        let mut out = Vec::with_capacity(HEADER + b.len());
        out.extend_from_slice(MAGIC);
        put32(&mut out, self.version);
        put32(&mut out, crc32fast::hash(&b));
        put64(&mut out, b.len() as u64);
        out.extend_from_slice(&b);
        out
    }

    /// Parses and checks a state file: everything in it is later used to
    /// build mappings, so shape errors are caught here, not in the restorer.
    pub fn decode(data: &[u8]) -> Result<ProcessState> {
        if data.len() < HEADER || &data[..8] != MAGIC {
            fail!(StateError::Corrupt, "process state is corrupt: no THAWSTAT header (a JSON state of version 1 needs a redeploy)");
        }
        let version = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
        if !(OLDEST_READ..=STATE_VERSION).contains(&version) {
            return Err(StateError::Version {
                found: version,
                want: STATE_VERSION,
            });
        }
        let crc = u32::from_le_bytes(data[12..16].try_into().expect("4 bytes"));
        let len = u64::from_le_bytes(data[16..24].try_into().expect("8 bytes"));
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
        let s = Reader(body)
            .state(version)
            .map_err(|e| e.within("process state is corrupt"))?;
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
        crate::shared_maps::validate_objects(&s.shared, s.memory.image_len)
            .map_err(|e| e.within("process state"))?;
        for (v, r) in s.vmas.iter().zip(&s.memory.regions) {
            let anonymous = v.path.is_none() && v.shared.is_none();
            let shared_ok = v.shared.is_none() || (v.path.is_none() && r.runs.is_empty());
            crate::shared_maps::validate(&v.shared, &s.shared)
                .map_err(|e| e.within("process state"))?;
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
            if v.end > 0x7fff_ffff_f000 || v.start < 0x10000 {
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
        check_files(&s.files)?;
        crate::fds::check(&s.fds, s.memory.image_len).map_err(|e| e.within("process state"))?;
        Ok(s)
    }

    /// The main thread (the one the agent serves on).
    pub fn main(&self) -> &ThreadState {
        &self.threads[0]
    }
}

fn put_blob(w: &mut Vec<u8>, b: &Blob) {
    put64(w, b.image_off);
    put64(w, b.len);
}

fn put_opt_str(w: &mut Vec<u8>, s: Option<&str>) {
    w.push(u8::from(s.is_some()));
    put_bytes(w, s.unwrap_or("").as_bytes());
}

/// One descriptor record: number, flags, a kind byte, then the kind's fields.
fn put_fd(w: &mut Vec<u8>, f: &SavedFd) {
    put32(w, f.fd as u32);
    put32(w, f.flags);
    match &f.kind {
        FdKind::Dup { of } => {
            w.push(0);
            put32(w, *of as u32);
        }
        FdKind::File { path, pos } => {
            w.push(1);
            put_bytes(w, path.as_bytes());
            put64(w, *pos);
        }
        FdKind::Pipe {
            first,
            read,
            size,
            fifo,
            unread,
        } => {
            w.push(2);
            put32(w, *first as u32);
            w.push(u8::from(*read));
            put32(w, *size);
            put_opt_str(w, fifo.as_deref());
            put_blob(w, unread);
        }
        FdKind::EventFd { count, semaphore } => {
            w.push(3);
            put64(w, *count);
            w.push(u8::from(*semaphore));
        }
        FdKind::Epoll { watches } => {
            w.push(4);
            put_count(w, watches.len());
            for x in watches {
                put32(w, x.fd as u32);
                put32(w, x.events);
                put64(w, x.data);
            }
        }
        FdKind::TimerFd {
            clock,
            value_ns,
            interval_ns,
            ticks,
        } => {
            w.push(5);
            put32(w, *clock);
            put64(w, *value_ns);
            put64(w, *interval_ns);
            put64(w, *ticks);
        }
        FdKind::SignalFd { mask } => {
            w.push(6);
            put64(w, *mask);
        }
        FdKind::Memfd {
            name,
            pos,
            size,
            seals,
            data,
        } => {
            w.push(7);
            put_bytes(w, name.as_bytes());
            put64(w, *pos);
            put64(w, *size);
            put32(w, *seals);
            put_blob(w, data);
        }
        FdKind::Socket(s) => {
            w.push(8);
            put32(w, s.family);
            put32(w, s.ty);
            put32(w, s.protocol);
            put_bytes(w, &s.addr);
            w.push(u8::from(s.backlog.is_some()));
            put32(w, s.backlog.unwrap_or(0));
            put32(w, s.options);
            w.push(u8::from(s.pair.is_some()));
            put32(w, s.pair.unwrap_or(0) as u32);
            put32(w, s.shutdown);
            put_blob(w, &s.queued);
        }
    }
}

pub(crate) fn put64(w: &mut Vec<u8>, v: u64) {
    w.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put32(w: &mut Vec<u8>, v: u32) {
    w.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_count(w: &mut Vec<u8>, n: usize) {
    put32(w, n as u32);
}

pub(crate) fn put_bytes(w: &mut Vec<u8>, b: &[u8]) {
    put_count(w, b.len());
    w.extend_from_slice(b);
}

/// Reads the body; every count is checked against the bytes left before
/// anything is allocated for it, so a hostile file cannot ask for much memory.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            fail!(StateError::Corrupt, "ends early");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// A count of items of at least `item_bytes` each.
    pub(crate) fn count(&mut self, item_bytes: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(item_bytes) > self.0.len() {
            fail!(StateError::Corrupt, "a count of {n} exceeds the bytes left");
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.count(1)?;
        self.take(n)
    }

    pub(crate) fn string(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?.to_vec())
            .map_err(|_| StateError::Corrupt("a string is not UTF-8".into()))
    }

    fn state(mut self, version: u32) -> Result<ProcessState> {
        // name, registers, xstate, mask, kernel fields: at least this much each
        let n = self.count(4 + NREGS * 8 + 4 + 8 + 20 + 16 + 8 + 16)?;
        let mut threads = Vec::with_capacity(n);
        for _ in 0..n {
            let name = self.string()?;
            let regs = (0..NREGS).map(|_| self.u64()).collect::<Result<_>>()?;
            let xstate = self.bytes()?.to_vec();
            let sigmask = self.u64()?;
            // fields are read in the order written
            let kernel = ThreadKernel {
                altstack: (self.u64()?, self.u32()?, self.u64()?),
                robust_list: (self.u64()?, self.u64()?),
                clear_tid: self.u64()?,
                rseq: (self.u64()?, self.u32()?, self.u32()?),
            };
            threads.push(ThreadState {
                name,
                regs,
                xstate,
                sigmask,
                kernel,
            });
        }
        let mut f = [0u64; 11];
        for v in &mut f {
            *v = self.u64()?;
        }
        let [start_code, end_code, start_data, end_data, start_brk, brk, start_stack, arg_start, arg_end, env_start, env_end] =
            f;
        let mm = MmLayout {
            start_code,
            end_code,
            start_data,
            end_data,
            start_brk,
            brk,
            start_stack,
            arg_start,
            arg_end,
            env_start,
            env_end,
        };
        let n = self.count(8)?;
        let auxv = (0..n).map(|_| self.u64()).collect::<Result<_>>()?;
        let (start, vdso_offset) = (self.u64()?, self.u64()?);
        let n = self.count(16)?;
        let pieces = (0..n)
            .map(|_| Ok((self.u64()?, self.u64()?)))
            .collect::<Result<_>>()?;
        let n = self.count(8 + 8 + 4 + 1 + 4 + 8 + 4)?;
        let mut vmas = Vec::with_capacity(n);
        for _ in 0..n {
            let (start, end, prot, flags) = (self.u64()?, self.u64()?, self.u32()?, self.u8()?);
            let path = self.string()?;
            vmas.push(Vma {
                start,
                end,
                prot,
                path: (flags & 1 != 0).then_some(path),
                file_off: self.u64()?,
                growsdown: flags & 2 != 0,
                name: self.string()?,
                shared: crate::shared_maps::decode_backing(&mut self)?,
            });
        }
        let image_len = self.u64()?;
        let n = self.count(8 + 8 + 1 + 4)?;
        let mut regions = Vec::with_capacity(n);
        for _ in 0..n {
            let (start, end, anonymous) = (self.u64()?, self.u64()?, self.u8()? != 0);
            let k = self.count(24)?;
            let runs = (0..k)
                .map(|_| {
                    Ok(thaw_memory::Run {
                        addr: self.u64()?,
                        len: self.u64()?,
                        file_off: self.u64()?,
                    })
                })
                .collect::<Result<_>>()?;
            regions.push(thaw_memory::Region {
                start,
                end,
                anonymous,
                runs,
            });
        }
        let n = self.count(4)?;
        let argv = (0..n).map(|_| self.string()).collect::<Result<_>>()?;
        let files = self.files()?;
        let fds = self.fds()?;
        let signals = SignalState::decode(&mut self).map_err(|e| e.within("signal state"))?;
        let shared = crate::shared_maps::decode_objects(&mut self)?;
        if !self.0.is_empty() {
            fail!(StateError::Corrupt, "{} bytes after the end", self.0.len());
        }
        Ok(ProcessState {
            version,
            threads,
            mm,
            auxv,
            vdso: VdsoBlock {
                start,
                vdso_offset,
                pieces,
            },
            vmas,
            memory: MemoryLayout { regions, image_len },
            argv,
            files,
            fds,
            signals,
            shared,
        })
    }

    fn blob(&mut self) -> Result<Blob> {
        Ok(Blob {
            image_off: self.u64()?,
            len: self.u64()?,
        })
    }

    fn fds(&mut self) -> Result<Vec<SavedFd>> {
        // number, flags, kind byte and at least a u32
        let n = self.count(4 + 4 + 1 + 4)?;
        let mut fds = Vec::with_capacity(n);
        for _ in 0..n {
            let fd = self.u32()? as i32;
            let flags = self.u32()?;
            let kind = match self.u8()? {
                0 => FdKind::Dup {
                    of: self.u32()? as i32,
                },
                1 => FdKind::File {
                    path: self.string()?,
                    pos: self.u64()?,
                },
                2 => FdKind::Pipe {
                    first: self.u32()? as i32,
                    read: self.u8()? != 0,
                    size: self.u32()?,
                    fifo: {
                        let some = self.u8()? != 0;
                        let p = self.string()?;
                        some.then_some(p)
                    },
                    unread: self.blob()?,
                },
                3 => FdKind::EventFd {
                    count: self.u64()?,
                    semaphore: self.u8()? != 0,
                },
                4 => {
                    let k = self.count(16)?;
                    let watches = (0..k)
                        .map(|_| {
                            Ok(EpollWatch {
                                fd: self.u32()? as i32,
                                events: self.u32()?,
                                data: self.u64()?,
                            })
                        })
                        .collect::<Result<_>>()?;
                    FdKind::Epoll { watches }
                }
                5 => FdKind::TimerFd {
                    clock: self.u32()?,
                    value_ns: self.u64()?,
                    interval_ns: self.u64()?,
                    ticks: self.u64()?,
                },
                6 => FdKind::SignalFd { mask: self.u64()? },
                7 => FdKind::Memfd {
                    name: self.string()?,
                    pos: self.u64()?,
                    size: self.u64()?,
                    seals: self.u32()?,
                    data: self.blob()?,
                },
                8 => {
                    let (family, ty, protocol) = (self.u32()?, self.u32()?, self.u32()?);
                    let addr = self.bytes()?.to_vec();
                    let listening = self.u8()? != 0;
                    let backlog = self.u32()?;
                    let options = self.u32()?;
                    let paired = self.u8()? != 0;
                    let pair = self.u32()? as i32;
                    FdKind::Socket(SavedSocket {
                        family,
                        ty,
                        protocol,
                        addr,
                        backlog: listening.then_some(backlog),
                        options,
                        pair: paired.then_some(pair),
                        shutdown: self.u32()?,
                        queued: self.blob()?,
                    })
                }
                k => fail!(
                    StateError::Corrupt,
                    "descriptor {fd} has an unknown kind {k}"
                ),
            };
            fds.push(SavedFd { fd, flags, kind });
        }
        Ok(fds)
    }

    fn files(&mut self) -> Result<Vec<SavedFile>> {
        let n = self.count(4 + 1 + 4 + 8 + 8 + 8 + 4)?;
        let mut files = Vec::with_capacity(n);
        for _ in 0..n {
            let path = self.string()?;
            let kind = match self.u8()? {
                0 => FileKind::Dir,
                1 => FileKind::File,
                2 => FileKind::Symlink,
                3 => FileKind::Fifo,
                k => fail!(
                    StateError::Corrupt,
                    "saved file {path:?} has an unknown kind {k}"
                ),
            };
            files.push(SavedFile {
                path,
                kind,
                mode: self.u32()?,
                mtime_ns: self.u64()? as i64,
                image_off: self.u64()?,
                len: self.u64()?,
                target: self.string()?,
            });
        }
        Ok(files)
    }
}

/// Saved files must be plain paths on the saved mounts, each parent saved
/// before its children, with sane modes and ranges.
fn check_files(files: &[SavedFile]) -> Result<()> {
    if files.len() > crate::files::MAX_SAVED_ENTRIES {
        fail!(
            StateError::Corrupt,
            "process state: {} saved files",
            files.len()
        );
    }
    let mut dirs = std::collections::HashSet::new();
    for f in files {
        crate::files::check_path(&f.path).map_err(|e| e.within("process state: a saved file"))?;
        let parent = f.path.rsplit_once('/').map_or("", |(p, _)| p);
        if !crate::files::SAVED_MOUNTS.contains(&parent) && !dirs.contains(parent) {
            fail!(
                StateError::Corrupt,
                "process state: saved file {:?} comes before its directory",
                f.path
            );
        }
        if f.mode & !0o7777 != 0 || f.image_off.checked_add(f.len).is_none() {
            fail!(
                StateError::Corrupt,
                "process state: saved file {:?} is malformed",
                f.path
            );
        }
        if f.kind != FileKind::Symlink && !f.target.is_empty()
            || f.kind != FileKind::File && f.len != 0
        {
            fail!(
                StateError::Corrupt,
                "process state: saved file {:?} is malformed",
                f.path
            );
        }
        if f.kind == FileKind::Dir && !dirs.insert(f.path.as_str()) {
            fail!(
                StateError::Corrupt,
                "process state: directory {:?} saved twice",
                f.path
            );
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use thaw_memory::{Region, Run};

    /// A valid thread (also for the sigframe tests).
    pub(crate) fn thread(name: &str) -> ThreadState {
        ThreadState {
            name: name.into(),
            regs: vec![0; NREGS],
            xstate: vec![0u8; 832],
            sigmask: 0,
            kernel: ThreadKernel {
                altstack: (0, SS_DISABLE, 0),
                ..ThreadKernel::default()
            },
        }
    }

    /// A small valid state.
    fn valid() -> ProcessState {
        ProcessState {
            version: STATE_VERSION,
            threads: vec![thread("main")],
            mm: MmLayout::default(),
            auxv: vec![6, 4096, 0, 0],
            vdso: VdsoBlock {
                start: 0x7fff_f7fc_2000,
                vdso_offset: 0x6000,
                pieces: vec![(0, 0x6000), (0x6000, 0x2000)],
            },
            vmas: vec![Vma {
                start: 0x1000_0000,
                end: 0x1000_2000,
                prot: 3,
                path: None,
                file_off: 0,
                growsdown: false,
                name: String::new(),
                shared: None,
            }],
            memory: MemoryLayout {
                regions: vec![Region {
                    start: 0x1000_0000,
                    end: 0x1000_2000,
                    anonymous: true,
                    runs: vec![Run {
                        addr: 0x1000_0000,
                        len: 4096,
                        file_off: 0,
                    }],
                }],
                image_len: 4096,
            },
            argv: vec![],
            files: vec![
                SavedFile {
                    path: "/tmp/d".into(),
                    kind: FileKind::Dir,
                    mode: 0o755,
                    mtime_ns: 1,
                    image_off: 0,
                    len: 0,
                    target: String::new(),
                },
                SavedFile {
                    path: "/tmp/d/model.bin".into(),
                    kind: FileKind::File,
                    mode: 0o644,
                    mtime_ns: 2,
                    image_off: 4096,
                    len: 1000,
                    target: String::new(),
                },
                SavedFile {
                    path: "/dev/shm/link".into(),
                    kind: FileKind::Symlink,
                    mode: 0o777,
                    mtime_ns: -3,
                    image_off: 0,
                    len: 0,
                    target: "/tmp/d/model.bin".into(),
                },
            ],
            fds: valid_fds(),
            signals: SignalState {
                actions: vec![crate::signals::SigAction {
                    sig: 13,
                    handler: 1,
                    flags: 0x0400_0000,
                    restorer: 0x7f00_0000_1000,
                    mask: 0,
                }],
                ..SignalState::default()
            },
            shared: vec![],
        }
    }

    /// One record of each kind, contents after the 4096 bytes of pages.
    fn valid_fds() -> Vec<SavedFd> {
        let fd = |fd: i32, kind: FdKind| SavedFd {
            fd,
            flags: 0o2000002,
            kind,
        };
        let blob = |len| Blob {
            image_off: 8192,
            len,
        };
        let sock = |pair: Option<i32>, queued| SavedSocket {
            family: libc::AF_UNIX as u32,
            ty: libc::SOCK_STREAM as u32,
            protocol: 0,
            addr: Vec::new(),
            backlog: None,
            options: 0,
            pair,
            shutdown: 0,
            queued,
        };
        vec![
            fd(
                4,
                FdKind::File {
                    path: "/tmp/d/model.bin".into(),
                    pos: 10,
                },
            ),
            fd(5, FdKind::Dup { of: 4 }),
            fd(
                6,
                FdKind::Pipe {
                    first: 6,
                    read: true,
                    size: 65536,
                    fifo: None,
                    unread: blob(9),
                },
            ),
            fd(
                7,
                FdKind::Pipe {
                    first: 6,
                    read: false,
                    size: 65536,
                    fifo: None,
                    unread: Blob::default(),
                },
            ),
            fd(
                8,
                FdKind::EventFd {
                    count: 3,
                    semaphore: true,
                },
            ),
            fd(
                9,
                FdKind::TimerFd {
                    clock: 1,
                    value_ns: 5,
                    interval_ns: 0,
                    ticks: 0,
                },
            ),
            fd(10, FdKind::SignalFd { mask: 1 << 11 }),
            fd(
                11,
                FdKind::Memfd {
                    name: "m".into(),
                    pos: 2,
                    size: 9,
                    seals: 2,
                    data: blob(9),
                },
            ),
            fd(12, FdKind::Socket(sock(Some(13), blob(4)))),
            fd(13, FdKind::Socket(sock(Some(12), Blob::default()))),
            fd(
                14,
                FdKind::Socket(SavedSocket {
                    family: libc::AF_INET as u32,
                    addr: vec![2, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                    backlog: Some(128),
                    options: SOCK_OPT_REUSEADDR,
                    ..sock(None, Blob::default())
                }),
            ),
            fd(
                15,
                FdKind::Epoll {
                    watches: vec![
                        EpollWatch {
                            fd: 6,
                            events: 1,
                            data: 6,
                        },
                        EpollWatch {
                            fd: 8,
                            events: 1 | 1 << 31,
                            data: 8,
                        },
                        EpollWatch {
                            fd: 12,
                            events: 1,
                            data: 12,
                        },
                    ],
                },
            ),
        ]
    }

    /// The message of a state refused as corrupt (any other outcome fails).
    fn corrupt(r: Result<ProcessState, StateError>) -> String {
        match r {
            Err(StateError::Corrupt(m)) => m,
            other => panic!("not refused as corrupt: {other:?}"),
        }
    }

    #[test]
    fn descriptor_records_round_trip_and_bad_ones_are_named() {
        let s = valid();
        assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
        let bad = |edit: &dyn Fn(&mut Vec<SavedFd>)| {
            let mut b = valid();
            edit(&mut b.fds);
            corrupt(ProcessState::decode(&b.encode()))
        };
        assert!(bad(&|f| f[0].fd = 3).contains("descriptor 3"));
        assert!(bad(&|f| f.swap(0, 1)).contains("out of order"));
        assert!(bad(&|f| f[1].kind = FdKind::Dup { of: 9 }).contains("a dup of 9"));
        assert!(bad(&|f| f[0].kind = FdKind::File {
            path: "tmp/x".into(),
            pos: 0
        })
        .contains("not absolute"));
        assert!(bad(&|f| f[0].kind = FdKind::File {
            path: "/tmp/../etc".into(),
            pos: 0
        })
        .contains("plain path"));
        // a pipe's unread bytes inside the pages, or more than the pipe holds
        assert!(
            bad(&|f| if let FdKind::Pipe { unread, .. } = &mut f[2].kind {
                unread.image_off = 0
            })
            .contains("not after the pages")
        );
        assert!(
            bad(&|f| if let FdKind::Pipe { unread, .. } = &mut f[2].kind {
                unread.len = 1 << 20
            })
            .contains("unread bytes")
        );
        assert!(
            bad(&|f| if let FdKind::Pipe { first, .. } = &mut f[3].kind {
                *first = 4
            })
            .contains("other end")
        );
        assert!(bad(&|f| f[4].kind = FdKind::EventFd {
            count: u64::MAX,
            semaphore: false
        })
        .contains("eventfd"));
        assert!(bad(&|f| f[5].kind = FdKind::TimerFd {
            clock: 8,
            value_ns: 0,
            interval_ns: 0,
            ticks: 0
        })
        .contains("clock 8"));
        assert!(bad(&|f| if let FdKind::Socket(s) = &mut f[9].kind {
            s.pair = Some(14)
        })
        .contains("socketpair"));
        assert!(bad(&|f| if let FdKind::Socket(s) = &mut f[10].kind {
            s.addr = vec![10, 0, 1]
        })
        .contains("address"));
        assert!(
            bad(&|f| if let FdKind::Epoll { watches } = &mut f[11].kind {
                watches[0].fd = 15
            })
            .contains("watches descriptor 15")
        );
        assert!(
            bad(&|f| if let FdKind::Epoll { watches } = &mut f[11].kind {
                watches[0].fd = 3
            })
            .contains("watches descriptor 3")
        );
        assert!(bad(&|f| f[0].flags |= 0o100).contains("unknown flags"));
        assert!(bad(&|f| {
            let extra = f[0].clone();
            f.extend((0..crate::fds::MAX_FDS).map(|i| SavedFd {
                fd: 100 + i as i32,
                ..extra.clone()
            }));
        })
        .contains("descriptors (at most"));
    }

    #[test]
    fn valid_state_round_trips_and_bad_ones_are_named() {
        let s = valid();
        assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
        let mut bad = valid();
        bad.vmas[0].start = thaw_restorer::RESTORER_BASE;
        bad.vmas[0].end = thaw_restorer::RESTORER_BASE + 0x2000;
        bad.memory.regions[0].start = bad.vmas[0].start;
        bad.memory.regions[0].end = bad.vmas[0].end;
        bad.memory.regions[0].runs.clear();
        assert!(corrupt(ProcessState::decode(&bad.encode())).contains("restorer"));
        let mut bad = valid();
        bad.vmas[0].path = Some("/../../etc/passwd".into());
        bad.memory.regions[0].anonymous = false;
        assert!(ProcessState::decode(&bad.encode()).is_err());
        let mut bad = valid();
        bad.threads[0].regs.pop();
        assert!(ProcessState::decode(&bad.encode()).is_err());
        let mut bad = valid();
        bad.threads.clear();
        assert!(ProcessState::decode(&bad.encode()).is_err(), "no thread");
        let mut bad = valid();
        bad.files.swap(0, 1);
        assert!(corrupt(ProcessState::decode(&bad.encode())).contains("before its directory"));
        let mut bad = valid();
        bad.files[1].path = "/tmp/d/../../etc/passwd".into();
        assert!(ProcessState::decode(&bad.encode()).is_err());
        let mut bad = valid();
        bad.files[0].path = "/etc".into();
        assert!(ProcessState::decode(&bad.encode()).is_err());
        let mut bad = valid();
        bad.version = 1;
        assert_eq!(
            ProcessState::decode(&bad.encode()),
            Err(StateError::Version {
                found: 1,
                want: STATE_VERSION
            })
        );
    }

    #[test]
    fn corrupt_thread_records_are_refused_by_name() {
        let mut s = valid();
        s.threads.push(thread("worker"));
        assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
        let bad = |f: &dyn Fn(&mut ThreadKernel)| {
            let mut b = s.clone();
            f(&mut b.threads[1].kernel);
            corrupt(ProcessState::decode(&b.encode()))
        };
        let e = bad(&|k| k.robust_list = (0x1000_0000, 4096));
        assert!(
            e.contains("thread 1 (worker)") && e.contains("robust"),
            "{e}"
        );
        assert!(bad(&|k| k.rseq = (0x1000_0010, 32, 0)).contains("rseq"));
        assert!(bad(&|k| k.rseq = (0x1000_0000, 1 << 20, 0)).contains("rseq"));
        assert!(bad(&|k| k.altstack = (1 << 47, 0, 8192)).contains("signal stack"));
        assert!(bad(&|k| k.altstack = (0x1000, 0x10, 8192)).contains("signal stack"));
        assert!(bad(&|k| k.clear_tid = u64::MAX).contains("thread id"));
        let mut b = s.clone();
        b.threads[1].xstate = vec![0u8; 100];
        assert!(
            ProcessState::decode(&b.encode()).is_err(),
            "short XSAVE area"
        );
        let mut b = s.clone();
        b.threads = vec![thread("t"); thaw_restorer::MAX_THREADS + 1];
        assert!(
            ProcessState::decode(&b.encode()).is_err(),
            "too many threads"
        );
    }

    #[test]
    fn truncated_corrupted_and_json_states_are_refused() {
        let good = valid().encode();
        let err = |d: &[u8]| corrupt(ProcessState::decode(d));
        for cut in [0, 7, HEADER - 1, HEADER, good.len() - 1] {
            assert!(err(&good[..cut]).contains("corrupt"), "cut at {cut}");
        }
        // a flipped bit anywhere in the body fails the CRC
        for at in [HEADER, HEADER + 100, good.len() - 1] {
            let mut d = good.clone();
            d[at] ^= 0x10;
            assert!(err(&d).contains("CRC32"), "flip at {at}");
        }
        // a consistent CRC over a body with a count that runs past the end
        let mut d = good.clone();
        // thread count, name length, "main", registers: then the xstate length
        let xlen_at = HEADER + 4 + 4 + 4 + NREGS * 8;
        d[xlen_at..xlen_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32fast::hash(&d[HEADER..]);
        d[12..16].copy_from_slice(&crc.to_le_bytes());
        assert!(err(&d).contains("exceeds the bytes left"), "{}", err(&d));
        // the old JSON form
        let json = serde_json::to_vec(&valid()).unwrap();
        assert!(err(&json).contains("THAWSTAT"));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn decoding_arbitrary_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = ProcessState::decode(&data);
        }

        #[test]
        fn decoding_mutated_states_never_panics(pos in 0usize..4096, byte in any::<u8>(), n in 1usize..8) {
            let mut data = valid().encode();
            for k in 0..n {
                let i = (pos + k * 97) % data.len();
                data[i] = byte.wrapping_add(k as u8);
            }
            let _ = ProcessState::decode(&data);
        }
    }
}
