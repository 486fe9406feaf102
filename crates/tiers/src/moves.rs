//! Moving a snapshot between any two tiers: copy, verify, switch, delete,
//! under a journal so that `kill -9` at any point leaves exactly one valid
//! copy once `recover` has run (every move, list and `where` runs it first).
//!
//! - copy: into a hidden temporary on the target (a local `.NAME.move-tmp`
//!   directory, or the remote's `NAME/` objects without their commit record);
//!   a local source is the store's published version (`NAME/current`);
//! - verify: the copy against the manifest's lengths and SHA-256 sums (local:
//!   the store's own checks; remote: every object read back and opened);
//! - switch: local: rename into `NAME/versions/ID` (ID: the manifest's id)
//!   and publish it with the store's atomic `current` switch, under the
//!   store's deploy lock; remote: write the commit record. Only now does the
//!   target hold a snapshot anyone would use;
//! - delete: the source is first made invisible (renamed aside, or its
//!   commit record deleted), then removed.
//!
//! A move is refused when the target already holds the snapshot, so a
//! committed target found by `recover` can only come from the move itself.
use crate::error::{Result, TiersError};
use crate::objects::RemoteStore;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use thaw_error::fail;
use thaw_error::{BoxError, ResultExt};

/// Journal directory under the state home.
const JOURNAL_DIR: &str = "moves";
/// The remote object that makes a snapshot's objects a snapshot.
pub const COMMIT: &str = "COMMIT";
/// Bound on a commit record's size (it lists a handful of files).
pub(crate) const MAX_COMMIT_RECORD: u64 = 1 << 20;
/// Test hook: the process kills itself (SIGKILL) at this step of a move.
pub const CRASH_ENV: &str = "THAW_MOVE_CRASH_AT";
pub const CRASH_POINTS: &[&str] = &["journaled", "copied", "verified", "switched", "hidden"];

/// Where a snapshot is or goes.
pub enum Place<'a> {
    /// a local tier (the store's versioned snapshot layout)
    Local {
        tier: String,
        store: thaw_store::Tier,
    },
    Remote {
        tier: String,
        store: &'a RemoteStore,
    },
}

impl Place<'_> {
    pub fn tier(&self) -> &str {
        match self {
            Place::Local { tier, .. } | Place::Remote { tier, .. } => tier,
        }
    }
}

/// Where a configured local tier keeps its snapshots: the store's own
/// resolution (it checks that an emulated device is set up), or a real tier
/// of the operator's at its configured path.
pub fn local_store(home: &Path, t: &crate::TierConfig) -> Result<thaw_store::Tier> {
    if t.kind == crate::Kind::Remote {
        fail!(TiersError::Failed, "tier {} is remote, not local", t.name);
    }
    match thaw_store::Tier::by_name(&t.name, home) {
        Ok(st) => Ok(st),
        Err(_) if !t.emulated => Ok(thaw_store::Tier {
            name: "configured",
            path: t.snapshot_root(home).ok_or_else(|| {
                TiersError::Config(format!("tier {}: a local tier needs a path", t.name))
            })?,
            emulated: false,
            description: "configured local tier",
        }),
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Journal {
    name: String,
    from: String,
    to: String,
    /// a copy (`thaw snapshot get`): the source stays
    #[serde(default)]
    keep_source: bool,
    /// "copying" until the target is switched in, then "switched"
    state: String,
}

/// What a move did.
#[derive(Debug, Clone, Serialize)]
pub struct MoveReport {
    pub name: String,
    pub from: String,
    pub to: String,
    pub bytes: u64,
    /// until what a cold start needs first (manifest, state, the REAP
    /// working set) was on the target
    pub first_needed_ms: f64,
    pub copy_ms: f64,
    pub verify_ms: f64,
    pub total_ms: f64,
}

/// A snapshot's files: (name, length, SHA-256).
pub type FileSums = Vec<(String, u64, String)>;

/// The commit record: every file of the snapshot with its length and SHA-256.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CommitRecord {
    pub files: FileSums,
}

fn crash_point(step: &str) {
    if std::env::var(CRASH_ENV).as_deref() == Ok(step) {
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.starts_with('.')
        || name.len() > 128
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        fail!(TiersError::Failed, "bad snapshot name {name:?}");
    }
    Ok(())
}

fn journal_path(home: &Path, name: &str) -> PathBuf {
    home.join(JOURNAL_DIR).join(format!("{name}.json"))
}

fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    fsync_dir(dir)
}

fn fsync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

fn set_journal(home: &Path, j: &Journal) -> Result<()> {
    write_atomic(&journal_path(home, &j.name), &serde_json::to_vec(j)?)
}

/// The published version of `name` on a local tier, held for reading (a
/// redeploy cannot remove it while the value lives).
fn published(store: &thaw_store::Tier, name: &str) -> Result<thaw_store::Snapshot> {
    store
        .open_current(name)?
        .ok_or_else(|| TiersError::NotFound(format!("{name} is not on tier {}", store.name)))
}

/// What a transfer reads from.
enum Source<'a> {
    Local(Box<thaw_store::Snapshot>),
    Remote(&'a RemoteStore),
}

fn tmp_dir(root: &Path, name: &str) -> PathBuf {
    root.join(format!(".{name}.move-tmp"))
}

fn aside_dir(root: &Path, name: &str) -> PathBuf {
    root.join(format!(".{name}.move-old"))
}

/// The snapshot's files (relative names) and their (length, SHA-256).
fn local_files(dir: &Path) -> Result<FileSums> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        if !e.file_type()?.is_file() {
            fail!(
                TiersError::Failed,
                "{} holds {:?}, which is not a plain file",
                dir.display(),
                e.file_name()
            );
        }
        let data = std::fs::read(e.path())?;
        out.push((
            e.file_name().to_string_lossy().into_owned(),
            data.len() as u64,
            thaw_store::sha256_hex(&data),
        ));
    }
    out.sort();
    Ok(out)
}

/// A local copy passes the store's checks: manifest, state and full image.
fn verify_local(dir: &Path) -> Result<()> {
    let s = thaw_store::Snapshot::open(dir)?;
    s.load_state()?;
    Ok(s.verify_memory()?)
}

/// Whether `name` is a committed snapshot at `p`.
pub fn holds(p: &Place, name: &str) -> Result<bool> {
    Ok(match p {
        Place::Local { store, .. } => store.open_current(name)?.is_some(),
        Place::Remote { store, .. } => store.exists(&format!("{name}/{COMMIT}"))?,
    })
}

/// Bytes the snapshot `name` takes at `p` (remote: as stored, sealed).
pub fn size_of(p: &Place, name: &str) -> Result<u64> {
    Ok(match p {
        Place::Local { store, .. } => local_files(&published(store, name)?.dir)?
            .iter()
            .map(|f| f.1)
            .sum(),
        Place::Remote { store, .. } => store.list(name)?.iter().map(|o| o.1).sum(),
    })
}

/// Snapshot names committed at `p`.
pub fn list(p: &Place) -> Result<Vec<String>> {
    let mut out = Vec::new();
    match p {
        Place::Local { store, .. } => {
            for (n, snap) in store.list()? {
                if snap.is_ok() {
                    out.push(n);
                }
            }
        }
        Place::Remote { store, .. } => {
            for (obj, _) in store.list("")? {
                if let Some(n) = obj.strip_suffix(&format!("/{COMMIT}")) {
                    out.push(n.to_string());
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Copies `name` from `from` to `to`, verifies, switches, deletes the source.
pub fn move_snapshot(home: &Path, name: &str, from: &Place, to: &Place) -> Result<MoveReport> {
    transfer(home, name, from, to, false)
}

/// Like a move, but the source stays: fetching a remote snapshot onto a
/// local tier to restore it (what a cold start needs first comes first).
pub fn copy_snapshot(home: &Path, name: &str, from: &Place, to: &Place) -> Result<MoveReport> {
    transfer(home, name, from, to, true)
}

fn transfer(
    home: &Path,
    name: &str,
    from: &Place,
    to: &Place,
    keep_source: bool,
) -> Result<MoveReport> {
    check_name(name)?;
    let t0 = std::time::Instant::now();
    if from.tier() == to.tier() {
        fail!(TiersError::Failed, "{name} is already on {}", from.tier());
    }
    if journal_path(home, name).exists() {
        fail!(TiersError::Failed, "a move of {name} is in progress (or was interrupted: `thaw snapshot where` finishes it)");
    }
    if !holds(from, name)? {
        fail!(TiersError::Failed, "{name} is not on tier {}", from.tier());
    }
    if holds(to, name)? {
        fail!(
            TiersError::Failed,
            "{name} is already on tier {}; delete that copy first",
            to.tier()
        );
    }
    let mut j = Journal {
        name: name.into(),
        from: from.tier().into(),
        to: to.tier().into(),
        keep_source,
        state: "copying".into(),
    };
    set_journal(home, &j)?;
    crash_point("journaled");
    // leftovers of an earlier failed attempt
    discard_target(to, name)?;
    let (files, bytes, first_needed) = match copy(from, to, name) {
        Ok(c) => c,
        Err(e) => {
            // nothing is committed on the target and the source is untouched:
            // clear the partial copy now, so another source can be tried at
            // once; if even that fails, the journal stays for `recover`
            if discard_target(to, name).is_ok() {
                std::fs::remove_file(journal_path(home, name))?;
            }
            return Err(e.during(format!("copying {name} from {}", from.tier())));
        }
    };
    let copy_ms = t0.elapsed().as_secs_f64() * 1e3;
    crash_point("copied");
    let t1 = std::time::Instant::now();
    let verified = verify_copy(to, name, &files);
    if let Err(e) = verified {
        discard_target(to, name)?;
        std::fs::remove_file(journal_path(home, name))?;
        return Err(e.during(format!(
            "the copy of {name} on {} failed verification; the source is kept",
            to.tier()
        )));
    }
    let verify_ms = t1.elapsed().as_secs_f64() * 1e3;
    crash_point("verified");
    switch_in(to, name, &files)?;
    crash_point("switched");
    j.state = "switched".into();
    set_journal(home, &j)?;
    if !keep_source {
        delete_source(from, name)?;
    }
    std::fs::remove_file(journal_path(home, name))?;
    // the journal directory goes with its last entry
    let _ = std::fs::remove_dir(home.join(JOURNAL_DIR));
    Ok(MoveReport {
        name: name.into(),
        from: from.tier().into(),
        to: to.tier().into(),
        bytes,
        first_needed_ms: first_needed.as_secs_f64() * 1e3,
        copy_ms,
        verify_ms,
        total_ms: t0.elapsed().as_secs_f64() * 1e3,
    })
}

/// Plaintext bytes per sealed chunk of a memory image on the remote tier.
const IMAGE_CHUNK: usize = 64 << 10;

/// Files a cold start reads first: they travel first.
const FIRST_NEEDED: &[&str] = &["manifest.json", "state.json", "ws.json", "ws.img"];

fn copy(from: &Place, to: &Place, name: &str) -> Result<(FileSums, u64, std::time::Duration)> {
    let src = match from {
        Place::Local { store, .. } => Source::Local(Box::new(published(store, name)?)),
        Place::Remote { store, .. } => Source::Remote(store),
    };
    copy_from(&src, to, name)
}

fn copy_from(src: &Source, to: &Place, name: &str) -> Result<(FileSums, u64, std::time::Duration)> {
    let t0 = std::time::Instant::now();
    let mut files = match &src {
        Source::Local(snap) => local_files(&snap.dir)?,
        Source::Remote(store) => {
            let rec: CommitRecord =
                serde_json::from_slice(&store.get(&format!("{name}/{COMMIT}"), MAX_COMMIT_RECORD)?)
                    .context("parsing the remote commit record")?;
            rec.files
        }
    };
    let bytes = files.iter().map(|f| f.1).sum();
    let mut order: Vec<&(String, u64, String)> = files.iter().collect();
    order.sort_by_key(|(f, _, _)| {
        FIRST_NEEDED
            .iter()
            .position(|n| n == f)
            .unwrap_or(FIRST_NEEDED.len())
    });
    let mut first_needed = None;
    // what the first pack is made from (all travel before the image)
    let (mut state, mut id): (_, Option<String>) = (None, None);
    let mut ws = Vec::new();
    for (f, len, _) in order {
        if first_needed.is_none() && !FIRST_NEEDED.contains(&f.as_str()) {
            first_needed = Some(t0.elapsed());
        }
        if f.contains('/') || f.starts_with('.') || f == COMMIT {
            fail!(
                TiersError::Failed,
                "snapshot {name} holds a file named {f:?}"
            );
        }
        let data = match &src {
            Source::Local(snap) => std::fs::read(snap.dir.join(f))?,
            Source::Remote(store) => store.get(&format!("{name}/{f}"), *len)?,
        };
        match to {
            Place::Local { store, .. } => {
                let dir = tmp_dir(&store.path, name);
                store.ensure_root()?;
                thaw_store::secure::ensure_private_dir(&dir)?;
                let mut out = thaw_store::secure::create_private_file(&dir.join(f))?;
                std::io::Write::write_all(&mut out, &data)?;
                out.sync_all()?;
            }
            // the image in small chunks: a streamed restore fetches (and
            // authenticates) little more than the pages it faults on
            Place::Remote { store, .. } if f == "memory.img" => {
                store.put_chunked(&format!("{name}/{f}"), &data, IMAGE_CHUNK)?;
                let (Some(state), Some(id)) = (&state, &id) else {
                    fail!(
                        TiersError::Failed,
                        "snapshot {name} has no state.json or manifest id"
                    );
                };
                let chunk = IMAGE_CHUNK as u64;
                let chunks = (data.len() as u64).div_ceil(chunk).max(1);
                let pre = crate::stream::restorer_chunks(state, chunk, chunks);
                let obj = crate::stream::first_pack(id, &ws, &pre, chunk, &data);
                store.put(&format!("{name}/{}", crate::stream::FIRST_PACK), &obj)?;
            }
            Place::Remote { store, .. } => store.put(&format!("{name}/{f}"), &data)?,
        }
        match f.as_str() {
            _ if !matches!(to, Place::Remote { .. }) => {}
            "state.json" => {
                let decoded = thaw_snapshot_format::ProcessState::decode(&data)
                    .with_context(|| format!("decoding the state of {name}"))?;
                state = Some(decoded);
            }
            "manifest.json" => {
                id = Some(serde_json::from_slice::<thaw_store::Manifest>(&data)?.id);
            }
            f if crate::stream::WORKING_SET.contains(&f) => ws.push((f.to_string(), data)),
            _ => {}
        }
    }
    if let Place::Local { store, .. } = to {
        fsync_dir(&tmp_dir(&store.path, name))?;
    }
    files.sort();
    Ok((files, bytes, first_needed.unwrap_or_else(|| t0.elapsed())))
}

fn verify_copy(to: &Place, name: &str, files: &[(String, u64, String)]) -> Result<()> {
    match to {
        Place::Local { store, .. } => {
            let dir = tmp_dir(&store.path, name);
            if local_files(&dir)? != files {
                fail!(
                    TiersError::Failed,
                    "the copy's files differ from the source's"
                );
            }
            verify_local(&dir)
        }
        Place::Remote { store, .. } => {
            for (f, len, sum) in files {
                let data = store.get(&format!("{name}/{f}"), *len)?;
                if data.len() as u64 != *len || thaw_store::sha256_hex(&data) != *sum {
                    fail!(
                        TiersError::Failed,
                        "{name}/{f} read back differs from what was sent"
                    );
                }
            }
            Ok(())
        }
    }
}

fn switch_in(to: &Place, name: &str, files: &[(String, u64, String)]) -> Result<()> {
    match to {
        Place::Local { store, .. } => {
            let lock = store.lock_deploy(name)?;
            let tmp = tmp_dir(&store.path, name);
            let id = thaw_store::Snapshot::open(&tmp)?.manifest.id;
            if !thaw_store::is_version_id(&id) {
                fail!(
                    TiersError::Failed,
                    "{name}: manifest id {id:?} is not a snapshot version id"
                );
            }
            thaw_store::make_immutable(&tmp)?;
            let dir = store.function_dir(name).join("versions").join(&id);
            std::fs::rename(&tmp, &dir)
                .with_context(|| format!("renaming {} to {}", tmp.display(), dir.display()))?;
            lock.publish(&thaw_store::Snapshot::open(&dir)?)?;
            Ok(())
        }
        Place::Remote { store, .. } => {
            let rec = CommitRecord {
                files: files.to_vec(),
            };
            store.put(&format!("{name}/{COMMIT}"), &serde_json::to_vec(&rec)?)
        }
    }
}

/// Publishes `staged` (a local snapshot directory: a streamed snapshot
/// that has fully arrived and been verified, or a node's own snapshot it
/// shares) as `name` on `to`: copied there, verified again, then switched
/// in (local: the store's deploy lock and `current` rename; remote: the
/// commit record). A crash before the switch leaves only an uncommitted
/// copy (a `.move-tmp` directory, or objects without a commit record),
/// removed by the next transfer of `name`; the source is never touched.
/// Returns false (and does nothing) if `to` already holds `name`.
pub fn publish_staged(name: &str, staged: thaw_store::Snapshot, to: &Place) -> Result<bool> {
    check_name(name)?;
    if holds(to, name)? {
        return Ok(false);
    }
    discard_target(to, name)?;
    let res = copy_from(&Source::Local(Box::new(staged)), to, name).and_then(|(files, _, _)| {
        verify_copy(to, name, &files)?;
        switch_in(to, name, &files)
    });
    if let Err(e) = res {
        let _ = discard_target(to, name);
        return Err(e.during(format!("publishing {name} onto tier {}", to.tier())));
    }
    Ok(true)
}

/// Deletes the snapshot `name` at `p` (first made invisible, then removed).
pub fn delete_snapshot(p: &Place, name: &str) -> Result<()> {
    check_name(name)?;
    delete_source(p, name)
}

fn delete_source(from: &Place, name: &str) -> Result<()> {
    match from {
        Place::Local { store, .. } => {
            let root = &store.path;
            let aside = aside_dir(root, name);
            if root.join(name).exists() {
                // restores under way keep their open image; new ones miss it
                std::fs::rename(root.join(name), &aside)?;
                fsync_dir(root)?;
            }
            crash_point("hidden");
            remove_tree(&aside)
        }
        Place::Remote { store, .. } => {
            // without its commit record the rest is garbage, never a snapshot
            if holds(from, name)? {
                store.delete(&format!("{name}/{COMMIT}"))?;
            }
            crash_point("hidden");
            for (obj, _) in store.list(name)? {
                store.delete(&obj)?;
            }
            Ok(())
        }
    }
}

/// Removes an uncommitted copy of `name` from `to`.
fn discard_target(to: &Place, name: &str) -> Result<()> {
    match to {
        Place::Local { store, .. } => remove_tree(&tmp_dir(&store.path, name)),
        Place::Remote { store, .. } => {
            if holds(to, name)? {
                fail!(
                    TiersError::Failed,
                    "{name} is committed on {}: not discarding it",
                    to.tier()
                );
            }
            for (obj, _) in store.list(name)? {
                store.delete(&obj)?;
            }
            Ok(())
        }
    }
}

/// Removes a local tree (snapshot files on block tiers are immutable: the
/// store's removal clears the flag first).
fn remove_tree(p: &Path) -> Result<()> {
    Ok(thaw_store::secure::remove_tree(p)?)
}

/// Finishes or rolls back every interrupted move. `place` resolves a tier
/// name to where its snapshots are. Returns one line per move handled.
pub fn recover<'a, E: Into<BoxError>>(
    home: &Path,
    place: &dyn Fn(&str) -> Result<Place<'a>, E>,
) -> Result<Vec<String>> {
    let place = |t: &str| place(t).with_context(|| format!("tier {t}"));
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(home.join(JOURNAL_DIR)) else {
        return Ok(out);
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            // a journal write cut short before its rename
            let _ = std::fs::remove_file(&p);
            continue;
        }
        let j: Journal = serde_json::from_slice(&std::fs::read(&p)?)
            .with_context(|| format!("parsing move journal {}", p.display()))?;
        check_name(&j.name)?;
        let (from, to) = (place(&j.from)?, place(&j.to)?);
        let line = if j.state == "switched" || holds(&to, &j.name)? {
            if !j.keep_source {
                delete_source(&from, &j.name)?;
            }
            format!("{}: finished the move from {} to {}", j.name, j.from, j.to)
        } else {
            discard_target(&to, &j.name)?;
            format!(
                "{}: rolled back the move from {} to {}",
                j.name, j.from, j.to
            )
        };
        std::fs::remove_file(&p)?;
        out.push(line);
    }
    let _ = std::fs::remove_dir(home.join(JOURNAL_DIR));
    Ok(out)
}
