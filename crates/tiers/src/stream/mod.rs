//! Restoring from the remote tier without waiting for the whole snapshot.
//!
//! [`Stream::open`] sends, all at once, one round of requests: the commit
//! record, manifest, state, the image's sealed header, and the first pack
//! ([`FIRST_PACK`]: the REAP working set and the chunks the restorer copies
//! before resume, in one compressed object). It returns once the first four
//! are in (each checked against the commit record); a lazy restore can
//! start building its sandbox while the pack is still arriving (it is
//! checked against the record and the manifest when it is in). Only then do
//! fetcher threads bring the rest of
//! the image into a local sparse file, in order, with ranged GETs, each
//! chunk authenticated before a byte of it is written (a page fault's chunk
//! goes first at any time). The restore waits for what
//! it needs only when it needs it ([`Arriving`]). The page server reads
//! lazily restored pages through [`Stream::source`]: a page whose chunk has
//! not arrived puts that chunk at the head of the queue and waits for it, up
//! to a deadline. Unauthenticated bytes are never written, so never served;
//! a store that fails or stalls fails every waiter (the page server then
//! kills the sandbox) and [`Stream::finish`], which also re-hashes the whole
//! image against the manifest once every chunk is in.
use crate::error::{Result, TiersError};
use crate::moves::{CommitRecord, COMMIT, MAX_COMMIT_RECORD};
use crate::objects::{GetTiming, RemoteStore};
use crate::seal::Header;
use serde::Serialize;
use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thaw_error::fail;
use thaw_error::{BoxError, ResultExt};
use thaw_memory::{usize_of, PageSource, Region};
use thaw_restore::{Arriving, Streamed};
use thaw_store::Snapshot;

mod pack;
use pack::{chunk_len, parse_first_pack};
pub use pack::{first_pack, restorer_chunks};

/// Where streamed snapshots are staged, beside the DRAM tier's snapshots.
pub const STREAM_DIR: &str = "streams";

/// The staging directory's root: on the home's DRAM tmpfs, so the arriving
/// image and the working set never wait on a disk (the working-set reader's
/// O_DIRECT read of a freshly written file on a disk would first write it
/// back).
pub fn staging_root(home: &Path) -> Result<PathBuf> {
    let dram = thaw_store::Tier::by_name("tmpfs", home)?.path;
    Ok(dram.parent().unwrap_or(&dram).join(STREAM_DIR))
}
/// Files fetched whole before the restore starts.
const MANIFEST: &str = "manifest.json";
const STATE: &str = "state.json";
pub(crate) const WORKING_SET: &[&str] = &[
    thaw_memory::working_set::WS_INDEX,
    thaw_memory::working_set::WS_IMAGE,
];
const IMAGE: &str = "memory.img";
/// What a restore waits for after the manifest and state, in one object
/// (compressed, sealed): the working set's files and the image's chunks the
/// restorer copies before resume; see [`first_pack`]. Derived, so not in
/// the commit record; for a snapshot uploaded without it the working set's
/// files are fetched one by one and those chunks by range.
pub const FIRST_PACK: &str = "first.pack";
/// Requests a stream's first round sends at once (commit record, manifest,
/// state, the image's header, the first pack).
pub const FIRST_ROUND: usize = 5;
/// Bounds on what a manifest and a state file may announce (the store's own).
const MAX_MANIFEST: u64 = 1 << 20;
const MAX_STATE: u64 = 64 << 20;
/// Bytes one background request fetches (a fault's chunk goes alone).
const BATCH_BYTES: u64 = 1 << 20;
/// Requests in flight at once (one fetcher thread each): a fault's chunk
/// need not wait behind a whole background batch.
const FETCHERS: usize = 2;

/// What the stream did, in the order a cold start sees it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamReport {
    /// the first round's requests, each step timed from the stream's start
    pub gets: Vec<GetTiming>,
    /// commit record, manifest, state, working set and the chunks the
    /// restorer copies, fetched and verified
    pub first_ms: f64,
    pub first_bytes: u64,
    pub image_bytes: u64,
    pub chunks: u64,
    /// chunks fetched before the restore (file-backed regions' pages)
    pub chunks_before_restore: u64,
    /// chunks a page fault asked for ahead of the background order
    pub chunks_on_demand: u64,
    /// from the start of the stream until the whole image had arrived and
    /// its SHA-256 matched the manifest (0 until then)
    pub complete_ms: f64,
}

#[derive(Default)]
struct Progress {
    arrived: Vec<bool>,
    /// being fetched by some fetcher
    taken: Vec<bool>,
    left: u64,
    /// chunks a fault (or the restorer) waits for, served first
    urgent: VecDeque<u64>,
    /// the next chunk of the background order
    cursor: u64,
    on_demand: u64,
    /// whether to fetch chunks nobody asked for yet
    background: bool,
    /// the restorer's chunks are on their way in one object
    pre_pending: bool,
    /// the working set's files and the restorer's chunks: fetched,
    /// checked and written (or why not); background fetches wait for it
    ws: Option<Result<(), String>>,
    /// when the last of what the restore waits for arrived
    first_done: Duration,
    gets: Vec<GetTiming>,
    failed: Option<String>,
    stop: bool,
}

struct Shared {
    p: Mutex<Progress>,
    cv: Condvar,
    chunk: u64,
    /// the chunks the restorer copies before resume
    before: Vec<u64>,
    t0: Instant,
    /// how long a reader waits for one chunk
    deadline: Duration,
    what: String,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.p.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until chunk `i` has arrived (asking for it first), the stream
    /// failed, or the deadline passed.
    fn wait_for(&self, i: u64) -> Result<()> {
        let mut p = self.lock();
        if p.arrived.get(usize_of(i)).copied().unwrap_or(true) {
            return Ok(());
        }
        let pre_brings = p.pre_pending && self.before.binary_search(&i).is_ok();
        if !pre_brings && !p.urgent.contains(&i) {
            p.urgent.push_back(i);
            p.on_demand += 1;
            self.cv.notify_all();
        }
        self.wait(p, &format!("chunk {i} of {}", self.what), |p| {
            match &p.failed {
                Some(e) => fail!(TiersError::Failed, "{e}"),
                None => Ok(p.arrived[usize_of(i)]),
            }
        })
    }

    /// Waits until `ready` says so (or fails), up to the deadline.
    fn wait(
        &self,
        mut p: std::sync::MutexGuard<'_, Progress>,
        what: &str,
        ready: impl Fn(&Progress) -> Result<bool>,
    ) -> Result<()> {
        let until = Instant::now() + self.deadline;
        loop {
            if ready(&p)? {
                return Ok(());
            }
            let now = Instant::now();
            if now >= until {
                fail!(
                    TiersError::Corrupt,
                    "{what} did not arrive within {:?}",
                    self.deadline
                );
            }
            p = self
                .cv
                .wait_timeout(p, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Arriving for Shared {
    fn copied_pages(&self) -> Result<(), BoxError> {
        for &c in &self.before {
            self.wait_for(c)?;
        }
        let mut p = self.lock();
        p.first_done = p.first_done.max(self.t0.elapsed());
        Ok(())
    }

    fn working_set(&self) -> Result<(), BoxError> {
        let what = format!("the working set beside {}", self.what);
        Ok(self.wait(self.lock(), &what, |p| match &p.ws {
            Some(Ok(())) => Ok(true),
            Some(Err(e)) => fail!(TiersError::Failed, "{e}"),
            None => Ok(false),
        })?)
    }
}

/// Fetches whole files of snapshot `name`, checks each against its commit
/// record entry (length, SHA-256) and writes it into `dir`.
fn fetch_files(
    store: &RemoteStore,
    name: &str,
    dir: &Path,
    files: &[(String, u64, String)],
) -> Result<()> {
    let objects: Vec<(String, u64)> = files
        .iter()
        .map(|(f, len, _)| (format!("{name}/{f}"), *len))
        .collect();
    for ((f, _, sum), data) in files.iter().zip(store.get_many(&objects)?) {
        if thaw_store::sha256_hex(&data) != *sum {
            fail!(
                TiersError::Corrupt,
                "{name}/{f} on the remote differs from its commit record"
            );
        }
        write_private(&dir.join(f), &data)?;
    }
    Ok(())
}

/// A snapshot being fetched from the remote tier into a staging directory.
pub struct Stream {
    shared: Arc<Shared>,
    /// the fetchers and the working set's reader
    threads: Vec<JoinHandle<()>>,
    /// the staged snapshot (its image fills in as chunks arrive)
    pub snapshot: Snapshot,
    pub report: StreamReport,
    /// the snapshot carries a REAP working set (it travels first)
    pub has_working_set: bool,
    t0: Instant,
    keep: bool,
}

/// An error of a streamed restore ([`Stream::explain`]): the stream's own
/// failure as its context when it failed, else just the error.
#[derive(Debug)]
pub struct Explained {
    pub failure: Option<String>,
    pub error: BoxError,
}

impl std::fmt::Display for Explained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.failure {
            Some(why) => write!(f, "streaming from the remote tier failed: {why}"),
            None => self.error.fmt(f),
        }
    }
}

impl std::error::Error for Explained {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.failure {
            Some(_) => Some(&*self.error),
            None => self.error.source(),
        }
    }
}

/// Serves lazily restored pages from the arriving image.
struct StreamSource {
    shared: Arc<Shared>,
    image: File,
}

impl PageSource for StreamSource {
    fn read_page(&self, region: &Region, addr: u64, buf: &mut [u8]) -> Result<bool, BoxError> {
        let Some(off) = region.image_offset(addr) else {
            return Ok(false);
        };
        // pages are aligned and chunks are whole pages: one chunk holds it
        self.shared.wait_for(off / self.shared.chunk)?;
        self.image.read_exact_at(buf, off)?;
        Ok(true)
    }
}

impl Stream {
    /// Fetches what a restore of `name` must know first (manifest, state)
    /// from `store` into a new staging directory under `home`, and starts
    /// fetching the working set and the image.
    pub fn open(home: &Path, store: Arc<RemoteStore>, name: &str) -> Result<Stream> {
        Stream::open_with(home, store, name, true)
    }

    /// [`Stream::open`]; without `background`, only what the restore and
    /// its faults ask for is fetched (tests use it to stop the store while
    /// a restore still needs it; `finish` then fails).
    pub fn open_with(
        home: &Path,
        store: Arc<RemoteStore>,
        name: &str,
        background: bool,
    ) -> Result<Stream> {
        let t0 = Instant::now();
        let root = staging_root(home)?;
        thaw_store::secure::ensure_private_dir(&root)?;
        clean_dead(&root);
        // one directory per stream: a daemon streams one snapshot into
        // several instances at once, each stream removing its own at the end
        static STREAMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = STREAMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = root.join(format!("{}-{n}-{name}", thaw_store::secure::owner_tag()));
        if dir.exists() {
            thaw_store::secure::remove_tree(&dir)?;
        }
        thaw_store::secure::ensure_private_dir(&dir)?;
        // from here on a failure removes the staging directory
        let mut cleanup = RemoveOnError(Some(dir.clone()));
        let obj = format!("{name}/{IMAGE}");
        let object = |f: &str| format!("{name}/{f}");
        // first round, all at once: the commit record, the image's header, manifest
        // and state (each checked against the record once it is in)
        // the pack is asked for now too; what bounds and checks it is sent
        // to its reader once this round is in (dropping the sender ends it)
        let (to_pack, pack_rx) = std::sync::mpsc::channel::<First>();
        let pack = {
            let (store, name) = (store.clone(), name.to_string());
            std::thread::Builder::new()
                .name("thaw-stream-ws".into())
                .spawn(move || fetch_first(&store, &name, t0, pack_rx))?
        };
        // one task each on the client's runtime: no thread to start first
        let round = [
            (COMMIT, MAX_COMMIT_RECORD),
            (MANIFEST, MAX_MANIFEST),
            (STATE, MAX_STATE),
        ];
        let objects: Vec<(String, u64)> = round.iter().map(|(f, m)| (object(f), *m)).collect();
        let (got, header) = store.get_round(&objects, &obj, t0);
        let mut got = got.into_iter();
        let mut next = || {
            got.next().unwrap_or_else(|| {
                Err(TiersError::Failed(
                    "a request of the first round is missing".into(),
                ))
            })
        };
        let (rec, tr) = next().with_context(|| format!("{name} is not on the remote tier"))?;
        let ((manifest, tm), (state, ts), header) = (next()?, next()?, header?);
        let rec: CommitRecord =
            serde_json::from_slice(&rec).context("parsing the remote commit record")?;
        let gets = vec![tr, tm, ts];
        let entry = |f: &str| rec.files.iter().find(|e| e.0 == f);
        let mut first_bytes = 0;
        for (f, data) in [(MANIFEST, &manifest), (STATE, &state)] {
            let Some((_, len, sum)) = entry(f) else {
                fail!(TiersError::Corrupt, "{name} on the remote has no {f}");
            };
            if data.len() as u64 != *len || thaw_store::sha256_hex(data) != *sum {
                fail!(
                    TiersError::Corrupt,
                    "{name}/{f} on the remote differs from its commit record"
                );
            }
            write_private(&dir.join(f), data)?;
            first_bytes += *len;
        }
        let Some((_, image_len, image_sum)) = entry(IMAGE).cloned() else {
            fail!(TiersError::Corrupt, "{name} on the remote has no {IMAGE}");
        };
        if header.plain_len != image_len {
            fail!(
                TiersError::Corrupt,
                "{obj} announces {} bytes, its commit record {image_len}",
                header.plain_len
            );
        }
        let sparse = thaw_store::secure::create_private_file(&dir.join(IMAGE))?;
        sparse.set_len(image_len)?;
        let snapshot = Snapshot::open(&dir)?;
        if snapshot.manifest.memory.sha256 != image_sum {
            fail!(
                TiersError::Corrupt,
                "{name}: the manifest's image checksum differs from the commit record's"
            );
        }
        let state = thaw_snapshot_format::ProcessState::decode(&state)
            .with_context(|| format!("decoding the state of {name}"))?;
        let chunk = header.chunk as u64;
        let before = restorer_chunks(&state, chunk, header.chunks());
        // the REAP working set's files, which travel in the pack
        let ws: Vec<(String, u64, String)> = WORKING_SET
            .iter()
            .filter_map(|f| entry(f).cloned())
            .collect();
        let chunks = if image_len == 0 { 0 } else { header.chunks() };
        let shared = Arc::new(Shared {
            p: Mutex::new(Progress {
                arrived: vec![false; usize_of(chunks)],
                taken: vec![false; usize_of(chunks)],
                left: chunks,
                pre_pending: true,
                background,
                gets,
                ..Default::default()
            }),
            cv: Condvar::new(),
            chunk,
            before: before.clone(),
            t0,
            // a request may be retried once after timing out
            deadline: store.timeout() * 2 + Duration::from_secs(2),
            what: format!("{obj} on {}", store.url),
        });
        let fetch = Arc::new(Fetch {
            store: store.clone(),
            obj,
            header,
            image: sparse,
            shared: shared.clone(),
        });
        let mut threads = (0..FETCHERS)
            .map(|_| {
                let f = fetch.clone();
                std::thread::Builder::new()
                    .name("thaw-stream".into())
                    .spawn(move || f.run())
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        // the pack's reader checks it against the record and writes it
        let ws_bytes: u64 = ws.iter().map(|w| w.1).sum();
        let has_working_set = !ws.is_empty();
        to_pack
            .send(First {
                fetch,
                dir: dir.clone(),
                ws,
                id: snapshot.manifest.id.clone(),
            })
            .map_err(|_| TiersError::Failed("the working set's reader ended early".into()))?;
        threads.push(pack);
        cleanup.0 = None;
        Ok(Stream {
            shared,
            threads,
            snapshot,
            report: StreamReport {
                first_bytes: first_bytes + ws_bytes + before.len() as u64 * chunk,
                image_bytes: image_len,
                chunks,
                chunks_before_restore: before.len() as u64,
                ..Default::default()
            },
            has_working_set,
            t0,
            keep: false,
        })
    }

    /// What a restore from this stream takes: the arriving image, the page
    /// source over it, and what to wait for.
    pub fn inputs(&self) -> Result<Streamed> {
        let image = File::open(self.snapshot.memory_path())?;
        Ok(Streamed {
            source: Arc::new(StreamSource {
                shared: self.shared.clone(),
                image: image.try_clone()?,
            }),
            image,
            arriving: self.shared.clone(),
        })
    }

    /// `e` with the stream's failure, if it failed (a page server that
    /// could not get a chunk kills its sandbox: the restore or invocation
    /// error alone would not say why).
    pub fn explain(&self, e: BoxError) -> Explained {
        Explained {
            failure: self.shared.lock().failed.clone(),
            error: e,
        }
    }

    /// Waits for the background fill, then checks the whole image against
    /// the manifest's SHA-256.
    pub fn finish(&mut self) -> Result<&StreamReport> {
        if !self.shared.lock().background {
            fail!(
                TiersError::Corrupt,
                "this stream fetches only what is asked for: it never finishes"
            );
        }
        for t in std::mem::take(&mut self.threads) {
            t.join()
                .map_err(|_| TiersError::Failed("the stream's fetcher panicked".into()))?;
        }
        let p = self.shared.lock();
        self.report.chunks_on_demand = p.on_demand;
        self.report.gets = p.gets.clone();
        self.report.first_ms = p.first_done.as_secs_f64() * 1e3;
        if let Some(Err(e)) = &p.ws {
            fail!(TiersError::Failed, "{e}");
        }
        if let Some(e) = &p.failed {
            fail!(TiersError::Failed, "{e}");
        }
        drop(p);
        self.snapshot.verify_memory()?;
        self.report.complete_ms = self.t0.elapsed().as_secs_f64() * 1e3;
        Ok(&self.report)
    }

    /// The staging directory, kept after this value is dropped: the caller
    /// takes it over (publishing it onto a local tier).
    pub fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.snapshot.dir.clone()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.cv.notify_all();
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
        if !self.keep {
            let _ = thaw_store::secure::remove_tree(&self.snapshot.dir);
        }
    }
}

fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    let mut out = thaw_store::secure::create_private_file(path)?;
    std::io::Write::write_all(&mut out, data)?;
    Ok(())
}

struct RemoveOnError(Option<PathBuf>);

impl Drop for RemoveOnError {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = thaw_store::secure::remove_tree(&d);
        }
    }
}

/// Staging directories of workers that died mid-stream.
fn clean_dead(root: &Path) {
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        if thaw_store::secure::owned_by_dead(&e.file_name().to_string_lossy()) {
            let _ = thaw_store::secure::remove_tree(&e.path());
        }
    }
}

/// The fetcher thread: urgent chunks first, then the rest in order.
struct Fetch {
    store: Arc<RemoteStore>,
    obj: String,
    header: Header,
    image: File,
    shared: Arc<Shared>,
}

impl Fetch {
    fn run(&self) {
        while let Some((a, b)) = self.next() {
            let res = self.fetch(a, b);
            let mut p = self.shared.lock();
            match res {
                Ok(()) => {
                    for c in a..b {
                        p.arrived[usize_of(c)] = true;
                    }
                    p.left -= b - a;
                }
                // the first failure is the one to report
                Err(e) => {
                    p.failed.get_or_insert(thaw_error::chain(&e));
                }
            }
            self.shared.cv.notify_all();
            if p.failed.is_some() {
                return;
            }
        }
    }

    /// The next chunks to fetch, [a, b), marked taken; None when done,
    /// failed or stopped.
    fn next(&self) -> Option<(u64, u64)> {
        let mut p = self.shared.lock();
        if p.stop || p.failed.is_some() {
            return None;
        }
        let free = |p: &Progress, c: u64| !p.arrived[usize_of(c)] && !p.taken[usize_of(c)];
        let n = p.arrived.len() as u64;
        let batch = (BATCH_BYTES / self.shared.chunk).max(1);
        let range = loop {
            match p.urgent.pop_front() {
                Some(a) if free(&p, a) => {
                    // one request up to the last other urgent chunk within a
                    // batch (the restorer's pages lie in runs)
                    let last = (a + 1..(a + batch).min(n))
                        .rev()
                        .find(|c| p.urgent.contains(c))
                        .unwrap_or(a);
                    let mut b = a + 1;
                    while b <= last && free(&p, b) {
                        b += 1;
                    }
                    break Some((a, b));
                }
                Some(_) => continue,
                None => {}
            }
            if !p.background || p.ws.is_none() {
                // wait for the next request (or for the critical path's
                // bytes to be in: the background must not compete with them)
                p = self.shared.cv.wait(p).unwrap_or_else(|e| e.into_inner());
                if p.stop || p.failed.is_some() {
                    return None;
                }
                continue;
            }
            while p.cursor < n && !free(&p, p.cursor) {
                p.cursor += 1;
            }
            let a = p.cursor;
            if a == n {
                // the rest is arriving through the other fetchers
                break None;
            }
            let mut b = a + 1;
            while b < n && b - a < batch && free(&p, b) {
                b += 1;
            }
            break Some((a, b));
        };
        let (a, b) = range?;
        for c in a..b {
            p.taken[usize_of(c)] = true;
        }
        Some((a, b))
    }

    /// Writes the restorer's chunks (from the pack) into the sparse image,
    /// marking them arrived.
    fn install_chunks(&self, data: &[u8]) -> Result<()> {
        let c = self.shared.chunk;
        let mut off = 0;
        for &i in &self.shared.before {
            let len = chunk_len(i, c, self.header.plain_len);
            self.image.write_all_at(&data[off..off + len], i * c)?;
            off += len;
        }
        let mut p = self.shared.lock();
        for &i in &self.shared.before {
            if !p.arrived[usize_of(i)] {
                p.arrived[usize_of(i)] = true;
                p.left -= 1;
            }
        }
        self.shared.cv.notify_all();
        Ok(())
    }

    /// Fetches chunks [a, b), authenticated, into the sparse image.
    fn fetch(&self, a: u64, b: u64) -> Result<()> {
        let c = self.shared.chunk;
        let end = (b * c).min(self.header.plain_len);
        let data = self
            .store
            .get_range(&self.obj, &self.header, a * c..end)
            .with_context(|| format!("streaming chunks {a}..{b} of {}", self.shared.what))?;
        self.image.write_all_at(&data, a * c)?;
        Ok(())
    }
}

/// What the pack's reader learns once the first round is in.
struct First {
    fetch: Arc<Fetch>,
    dir: PathBuf,
    /// the working set's files in the commit record
    ws: Vec<(String, u64, String)>,
    id: String,
}

impl First {
    /// The most bytes the pack may open to.
    fn max_len(&self) -> u64 {
        let before = self.fetch.shared.before.len() as u64;
        let ws: u64 = self.ws.iter().map(|w| w.1 + 64).sum();
        ws + before * (self.fetch.shared.chunk + 8) + self.id.len() as u64 + 64
    }

    /// Checks the pack's files against the commit record and writes them
    /// and its chunks.
    fn install(&self, raw: &[u8]) -> Result<()> {
        let sh = &self.fetch.shared;
        let pack = parse_first_pack(
            raw,
            &self.id,
            &sh.before,
            sh.chunk,
            self.fetch.header.plain_len,
        )?;
        if pack.files.len() != self.ws.len() {
            fail!(
                TiersError::Corrupt,
                "holds {} working-set files, the record {}",
                pack.files.len(),
                self.ws.len()
            );
        }
        for (f, len, sum) in &self.ws {
            let Some((_, data)) = pack.files.iter().find(|(n, _)| *n == f.as_bytes()) else {
                fail!(TiersError::Corrupt, "lacks {f}");
            };
            if data.len() as u64 != *len || thaw_store::sha256_hex(data) != *sum {
                fail!(
                    TiersError::Corrupt,
                    "its {f} differs from the commit record"
                );
            }
            write_private(&self.dir.join(f), data)?;
        }
        self.fetch.install_chunks(pack.chunks)
    }
}

/// The pack's reader: sends its GET at once, waits for the first round
/// (which bounds and checks it), then installs it. A snapshot uploaded
/// without one gets its working set's files fetched one by one and the
/// restorer's chunks by range.
fn fetch_first(store: &RemoteStore, name: &str, t0: Instant, rx: std::sync::mpsc::Receiver<First>) {
    let mut first = None;
    let got = store.get_timed(&format!("{name}/{FIRST_PACK}"), t0, || {
        let f = rx.recv().context("the stream did not open")?;
        let max = f.max_len();
        first = Some(f);
        Ok(max)
    });
    // the first round failed: nothing to do
    let Some(first) = first.or_else(|| rx.recv().ok()) else {
        return;
    };
    let sh = first.fetch.shared.clone();
    let what = format!("{name}/{FIRST_PACK} on {}", store.url);
    let res = match got {
        Ok(Some((raw, t))) => {
            sh.lock().gets.push(t);
            first.install(&raw).map_err(|e| e.during(what.clone()))
        }
        Ok(None) => {
            {
                let mut p = sh.lock();
                p.pre_pending = false;
                p.urgent.extend(sh.before.iter().copied());
                sh.cv.notify_all();
            }
            fetch_files(store, name, &first.dir, &first.ws)
        }
        Err(e) => Err(e.during(what)),
    };
    let mut p = sh.lock();
    p.pre_pending = false;
    if let Err(e) = &res {
        // the restorer's chunks are lost with it
        p.failed.get_or_insert(thaw_error::chain(e));
    }
    p.ws = Some(res.map_err(|e| thaw_error::chain(&e)));
    p.first_done = p.first_done.max(sh.t0.elapsed());
    sh.cv.notify_all();
}
