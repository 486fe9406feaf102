//! Snapshots shared across nodes through the remote tier
//! (`shared_snapshots = true`; the daemon's slow snapshot tier must be the
//! remote one, and every node holds the same `remote.key`).
//!
//! A deploy computes the function's share key: a digest of everything a
//! snapshot's memory depends on (name, owner, the code tree, handler and
//! hooks, the environment, memory size, packages, network, sample event,
//! requested strategy and the runtime root's hash), never of the node or
//! of the node's version number of the function. Functions with secret
//! environment values are not shared (their values would be in the image). It then looks for `shared-KEY` on the remote tier:
//!
//! * absent: the node takes the snapshot as always and publishes a copy
//!   (below);
//! * present and made on a machine this one can restore (the manifest's
//!   machine record: CPU features, XSAVE components and size, kernel
//!   release; and the runtime root): no fresh start here. The version's
//!   snapshot is that shared copy on the slow tier, restored by streaming;
//!   the first stream that arrives whole is kept on the fast tier as the
//!   node's own snapshot, which the node's policy then moves like any other;
//! * present but from another kind of machine: refused (the reason logged
//!   and shown in the function's GET under `shared`); the node takes its
//!   own snapshot and keeps it to itself. The first publisher's copy is
//!   never overwritten: nodes of that other kind keep restoring it.
//!
//! Publishing is first-writer-wins, whatever the number of nodes deploying
//! the function at once: each publisher uploads its copy under a name of its
//! own (`shared-KEY-TOKEN`, TOKEN random: copied, read back and verified,
//! then committed), then creates the pointer `shared-KEY/published` naming
//! it with a conditional PUT (`If-None-Match: *`), which the store decides
//! atomically. The one whose create succeeded published; every other one
//! deletes its copy and keeps its own snapshot to itself. Readers follow
//! the pointer to one whole committed copy, so they never see a mix of two
//! publishers' objects; a publisher that died before its create leaves an
//! unreferenced copy, never a half-published snapshot.
//!
//! The shared copy is never moved or deleted by a node's policy, deletes or
//! redeploys: it is named by content, not by function version.
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thaw_store::{MachineRecord, Manifest, Snapshot};
use thaw_tiers::moves::{self, Place};

use crate::app::App;
use crate::registry::{Record, SnapshotInfo};
pub use crate::registry::{Role, SharedInfo};
use crate::roots::tree_digest;
pub use crate::stored::ShareError;
use crate::stored::{KeepLocal, RemoteCopy, Stored};

/// Objects of a shared snapshot are `shared-KEY...` on the remote tier.
pub const PREFIX: &str = "shared-";
/// The pointer a key's publisher creates (`shared-KEY/published`): it names
/// the copy that won.
pub const POINTER: &str = "published";
/// Bound on a manifest's size (the store's own limit).
const MAX_MANIFEST: u64 = 1 << 20;

pub fn object_name(key: &str) -> String {
    format!("{PREFIX}{key}")
}

fn pointer_name(key: &str) -> String {
    format!("{}/{POINTER}", object_name(key))
}

/// Why a published copy is refused here, if it is.
pub fn refusal(m: &Manifest, runtime_root: &str) -> Option<String> {
    let Some(machine) = &m.machine else {
        return Some("its manifest carries no machine record".into());
    };
    if let Some(why) = machine.mismatch(MachineRecord::this()) {
        return Some(why);
    }
    (m.runtime_root != runtime_root).then(|| {
        format!(
            "taken over runtime root {}, this node runs {}",
            m.runtime_root, runtime_root
        )
    })
}

/// The function's share key, or why it is not shared.
pub fn key(
    app: &App,
    rec: &Record,
    code_dir: &Path,
    requested_strategy: Option<&str>,
    sample_event: Option<&Value>,
    has_secrets: bool,
) -> Result<String, String> {
    if has_secrets {
        return Err("a function with secret environment values is not published".into());
    }
    if rec.strategy == thaw_sandbox::StartStrategy::Boot {
        return Err("strategy boot takes no snapshot".into());
    }
    let code = tree_digest(code_dir).map_err(|e| format!("reading the code tree: {e}"))?;
    // everything the initialised process's memory depends on, its identity
    // environment included (name, memory, owner), but not the node's
    // version number of the function: a restored copy of another node's
    // snapshot reports the publisher's (its context's function_version)
    let what = json!({
        "format": 2,
        "runtime_root": app.root_hash(rec),
        "runtime": rec.runtime,
        "name": rec.name,
        "owner": rec.owner,
        "handler": rec.handler,
        "init": rec.init,
        "before_snapshot": rec.before_snapshot,
        "after_restore": rec.after_restore,
        "env": rec.env,
        "memory_mb": rec.memory_mb,
        "packages": rec.packages.as_ref().map(|p| &p.hash),
        "network": rec.network,
        "strategy": requested_strategy,
        "sample_event": sample_event,
        "code": code,
    });
    Ok(hex::encode(Sha256::digest(what.to_string().as_bytes())))
}

/// What [`lookup`] found on the remote tier.
pub enum Found {
    /// nothing published yet
    Absent,
    /// a copy this node can restore: its name on the tier and its manifest
    Usable {
        copy: String,
        manifest: Box<Manifest>,
    },
    /// a copy from another kind of machine (the reason)
    Refused(String),
}

/// The copy the pointer of `key` names, if `key` was published.
pub fn published_copy(
    store: &thaw_tiers::objects::RemoteStore,
    key: &str,
) -> Result<Option<String>, ShareError> {
    let pointer = pointer_name(key);
    let Some(raw) = store.get_opt(&pointer, MAX_MANIFEST)? else {
        return Ok(None);
    };
    let corrupt = |why: String| ShareError::Corrupt {
        name: pointer.clone(),
        what: "pointer",
        why,
    };
    let v: Value = serde_json::from_slice(&raw).map_err(|e| corrupt(e.to_string()))?;
    let copy = v["copy"].as_str().unwrap_or("");
    // a copy of this key, one name deep (the store seals the pointer, but
    // a reader still names no object outside the key's own)
    let token = copy
        .strip_prefix(&object_name(key))
        .and_then(|t| t.strip_prefix('-'))
        .unwrap_or("");
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(corrupt(format!("it names {copy:?}, not a copy of {key}")));
    }
    Ok(Some(copy.to_string()))
}

/// Looks for the published copy of `key` and checks its manifest.
pub fn lookup(app: &App, key: &str, root_hash: &str) -> Result<Found, ShareError> {
    let Some((_, store)) = &app.remote else {
        return Err(ShareError::NotRemote);
    };
    lookup_in(store, key, root_hash)
}

/// [`lookup`] on `store`, for a function running on the root `runtime_root`.
pub fn lookup_in(
    store: &thaw_tiers::objects::RemoteStore,
    key: &str,
    runtime_root: &str,
) -> Result<Found, ShareError> {
    let Some(name) = published_copy(store, key)? else {
        return Ok(Found::Absent);
    };
    let Some(commit) = store.get_opt(&format!("{name}/{}", moves::COMMIT), MAX_MANIFEST)? else {
        return Err(ShareError::Corrupt {
            name: pointer_name(key),
            what: "pointer",
            why: format!("it names {name}, which has no commit record"),
        });
    };
    let raw = store.get(&format!("{name}/manifest.json"), MAX_MANIFEST)?;
    // the manifest read must be the one committed
    let files: Value = serde_json::from_slice(&commit).map_err(|e| ShareError::Corrupt {
        name: name.clone(),
        what: "commit record",
        why: e.to_string(),
    })?;
    let committed = files["files"].as_array().and_then(|fs| {
        fs.iter()
            .find(|f| f[0] == "manifest.json")
            .and_then(|f| f[2].as_str())
    });
    if committed != Some(thaw_store::sha256_hex(&raw).as_str()) {
        return Ok(Found::Refused(format!(
            "the manifest of {name} differs from its commit record"
        )));
    }
    let m: Manifest = serde_json::from_slice(&raw).map_err(|e| ShareError::Corrupt {
        name: name.clone(),
        what: "manifest",
        why: e.to_string(),
    })?;
    Ok(match refusal(&m, runtime_root) {
        Some(why) => Found::Refused(why),
        None => Found::Usable {
            copy: name,
            manifest: Box::new(m),
        },
    })
}

/// The version's snapshot as the published copy `copy` on the slow tier.
pub fn fetched(app: &App, rec: &mut Record, copy: &str, m: &Manifest) -> Stored {
    let (tier, store) = app.remote.as_ref().expect("lookup checked it");
    rec.tier = tier.clone();
    rec.snapshot = Some(SnapshotInfo {
        id: m.id.clone(),
        dir: PathBuf::from(format!("{}/{copy}", store.url)),
        size_bytes: m.state.len + m.memory.len,
        init_ms: 0.0,
        import_ms: 0.0,
        checkpoint_ms: 0.0,
    });
    Stored::Remote(Arc::new(shared_copy(app, rec, copy)))
}

/// A stream source for the published copy `name`, kept on the fast tier
/// once a stream of it arrives whole.
pub fn shared_copy(app: &App, rec: &Record, name: &str) -> RemoteCopy {
    let (_, store) = app.remote.as_ref().expect("the slow tier is remote");
    RemoteCopy {
        store: store.clone(),
        home: app.cfg.home.clone(),
        name: name.to_string(),
        keep: Some(KeepLocal::new(
            &app.cfg.snapshot_tiers.fast,
            &crate::tiering::snapshot_name(app, &rec.name, rec.version),
        )),
    }
}

/// Publishes the node's snapshot `snap` for `key`: [`stage`], then
/// [`commit`] (false: another node published it first; its copy stays and
/// this one is gone).
pub fn publish(app: &App, key: &str, snap: &Snapshot) -> Result<bool, ShareError> {
    let Some((tier, store)) = &app.remote else {
        return Err(ShareError::NotRemote);
    };
    let copy = stage(tier, store, key, &snap.dir)?;
    commit(tier, store, key, &copy)
}

fn remote_place<'a>(tier: &str, store: &'a thaw_tiers::objects::RemoteStore) -> Place<'a> {
    Place::Remote {
        tier: tier.to_string(),
        store,
    }
}

/// Uploads the snapshot in `dir` as a copy of `key` of this publisher's
/// own (read back, verified and committed under its name, referenced by
/// nothing yet); returns its name.
pub fn stage(
    tier: &str,
    store: &thaw_tiers::objects::RemoteStore,
    key: &str,
    dir: &Path,
) -> Result<String, ShareError> {
    let copy = format!("{}-{:016x}", object_name(key), rand::random::<u64>());
    moves::publish_staged(&copy, Snapshot::open(dir)?, &remote_place(tier, store))?;
    Ok(copy)
}

/// Makes the staged `copy` the published one of `key` unless another is
/// already: the pointer's conditional create decides. True if `copy` is
/// the published one; false if another publisher's is (then `copy` is
/// deleted).
pub fn commit(
    tier: &str,
    store: &thaw_tiers::objects::RemoteStore,
    key: &str,
    copy: &str,
) -> Result<bool, ShareError> {
    let pointer = json!({ "copy": copy }).to_string();
    if store.put_new(&pointer_name(key), pointer.as_bytes())? {
        return Ok(true);
    }
    // taken: by another publisher, or by this one's own create answered
    // twice (a retried request whose first attempt went through)
    if published_copy(store, key)?.as_deref() == Some(copy) {
        return Ok(true);
    }
    moves::delete_snapshot(&remote_place(tier, store), copy)?;
    Ok(false)
}

/// Rewrites the manifest of the published copy `copy` with `edit`, sealed
/// again and its commit record updated, so that only the checks of its
/// contents can refuse it: for tools and tests that must show what a node
/// does with a copy from another kind of machine.
pub fn rewrite_manifest(
    store: &thaw_tiers::objects::RemoteStore,
    copy: &str,
    edit: impl FnOnce(&mut Value),
) -> Result<(), ShareError> {
    let corrupt = |what, why: String| ShareError::Corrupt {
        name: copy.to_string(),
        what,
        why,
    };
    let mpath = format!("{copy}/manifest.json");
    let mut m: Value = serde_json::from_slice(&store.get(&mpath, MAX_MANIFEST)?)
        .map_err(|e| corrupt("manifest", e.to_string()))?;
    edit(&mut m);
    let edited = serde_json::to_vec(&m).map_err(|e| corrupt("manifest", e.to_string()))?;
    store.put(&mpath, &edited)?;
    let cpath = format!("{copy}/{}", moves::COMMIT);
    let mut rec: Value = serde_json::from_slice(&store.get(&cpath, MAX_MANIFEST)?)
        .map_err(|e| corrupt("commit record", e.to_string()))?;
    for f in rec["files"].as_array_mut().into_iter().flatten() {
        if f[0] == "manifest.json" {
            f[1] = json!(edited.len());
            f[2] = json!(thaw_store::sha256_hex(&edited));
        }
    }
    let rec = serde_json::to_vec(&rec).map_err(|e| corrupt("commit record", e.to_string()))?;
    store.put(&cpath, &rec)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_digest_follows_contents_not_order_or_times() {
        let base = std::env::temp_dir().join(format!("thaw-shared-digest-{}", std::process::id()));
        let (a, b) = (base.join("a"), base.join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d.join("pkg")).unwrap();
        }
        std::fs::write(a.join("main.py"), "x = 1\n").unwrap();
        std::fs::write(a.join("pkg/m.py"), "y = 2\n").unwrap();
        // written in the other order, later
        std::fs::write(b.join("pkg/m.py"), "y = 2\n").unwrap();
        std::fs::write(b.join("main.py"), "x = 1\n").unwrap();
        let (da, db) = (tree_digest(&a).unwrap(), tree_digest(&b).unwrap());
        assert_eq!(da, db);
        std::fs::write(b.join("main.py"), "x = 2\n").unwrap();
        assert_ne!(tree_digest(&b).unwrap(), da);
        std::fs::write(b.join("main.py"), "x = 1\n").unwrap();
        std::fs::rename(b.join("pkg/m.py"), b.join("pkg/n.py")).unwrap();
        assert_ne!(tree_digest(&b).unwrap(), da);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_manifest_from_another_machine_or_root_is_refused() {
        let here = MachineRecord::this().clone();
        let entry = thaw_store::FileEntry {
            name: "x".into(),
            len: 0,
            sha256: String::new(),
        };
        let mut m = Manifest {
            format: "thaw-snapshot".into(),
            version: 1,
            id: "1".into(),
            function: "f".into(),
            runtime_root: "root".into(),
            created_unix: 0,
            state: entry.clone(),
            memory: entry,
            machine: Some(here.clone()),
        };
        assert!(refusal(&m, "root").is_none());
        assert!(refusal(&m, "other").unwrap().contains("runtime root"));
        m.machine.as_mut().unwrap().xsave_bytes = here.xsave_bytes + 64;
        assert!(refusal(&m, "root").unwrap().contains("XSAVE area"));
        m.machine = None;
        assert!(refusal(&m, "root").unwrap().contains("no machine record"));
    }
}
