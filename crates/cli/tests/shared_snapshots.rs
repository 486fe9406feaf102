//! Two nodes sharing snapshots through the remote tier: two `thaw serve`
//! daemons on homes of their own, both with `shared_snapshots`, and one
//! MinIO (`thaw tier setup --tiers remote` on a third home) that both use
//! as their slow snapshot tier.
mod common;

use base64::Engine as _;
use common::thaw;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_client::{Client, Response, Target};

/// The object store both nodes use, on a home of its own: torn down and
/// its home removed when this goes (also on a failure).
struct Store(PathBuf);

impl Drop for Store {
    fn drop(&mut self) {
        let (ok, out) = thaw(
            &self.0,
            &["tier", "teardown", "--tiers", "remote", "--force"],
        );
        let _ = std::fs::remove_dir_all(&self.0);
        assert!(ok || std::thread::panicking(), "teardown: {out}");
    }
}

/// A node's daemon, through its socket.
struct Node(PathBuf);

impl Node {
    fn req(&self, method: &str, path: &str, body: Option<&Value>) -> Response {
        let body = body.map(|v| serde_json::to_vec(v).unwrap());
        Client::new(Target::Unix(self.0.clone()))
            .request(method, path, body.as_deref())
            .expect("request")
    }

    fn get(&self, path: &str) -> Value {
        let r = self.req("GET", path, None);
        assert_eq!(r.status, 200, "GET {path}");
        r.json().unwrap()
    }

    fn deploy(&self, req: &Value) -> Value {
        let r = self.req("POST", "/v1/functions", Some(req));
        assert!(
            r.status == 201 || r.status == 200,
            "deploy failed: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        r.json().unwrap()
    }

    /// An invocation that must answer 200: its (start type, tier, value).
    fn invoke(&self, name: &str, ev: Value, query: &str) -> (String, String, Value) {
        let r = self.req(
            "POST",
            &format!("/v1/functions/{name}/invoke{query}"),
            Some(&ev),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let h = |k: &str| r.header(k).unwrap_or("").to_string();
        (h("thaw-start-type"), h("thaw-tier"), r.json().unwrap())
    }

    /// A metric's value (0 if the series is absent).
    fn metric(&self, series: &str) -> f64 {
        let r = self.req("GET", "/metrics", None);
        String::from_utf8_lossy(&r.body)
            .lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

fn file_deploy(name: &str, src: &str) -> Value {
    json!({
        "name": name,
        "handler": "m.handler",
        "strategy": "mmap",
        "tier": "tmpfs",
        "code": {"format": "file", "filename": "m.py",
                 "data_base64": base64::engine::general_purpose::STANDARD.encode(src)},
    })
}

/// Rewrites the published manifest of `object` as if another kind of
/// machine had taken it: re-sealed, and its commit record updated, so only
/// the machine check can refuse it.
fn forge_machine(store: &thaw_tiers::objects::RemoteStore, object: &str) {
    thaw_server::shared::rewrite_manifest(store, object, |m| {
        m["machine"]["cpu_features"]["7.0.ebx"] = json!(u32::MAX)
    })
    .unwrap();
}

/// The copy the pointer of `key` names.
fn published(store: &thaw_tiers::objects::RemoteStore, key: &str) -> String {
    thaw_server::shared::published_copy(store, key)
        .unwrap()
        .unwrap_or_else(|| panic!("{key} is not published"))
}

/// (name, length, sha256) of each file of the local snapshot in `dir`.
fn local_files(dir: &Path) -> Vec<(String, u64, String)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let data = std::fs::read(e.path()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                data.len() as u64,
                thaw_store::sha256_hex(&data),
            )
        })
        .collect();
    out.sort();
    out
}

/// Two publishers of one share key, the snapshots in `dir_a` and `dir_b`:
/// in a fixed order (both staged, then B commits first), then at the same
/// moment. Exactly one wins each time; the loser's copy is gone and the
/// published one is the winner's, file for file.
fn race(store: &thaw_tiers::objects::RemoteStore, dir_a: &Path, dir_b: &Path) {
    use thaw_server::shared::{commit, lookup_in, stage, Found};
    // the store decides a conditional create once
    let probe = "race-probe/object";
    assert!(store.put_new(probe, b"first").unwrap());
    assert!(!store.put_new(probe, b"second").unwrap());
    assert_eq!(store.get(probe, 64).unwrap(), b"first");
    store.delete(probe).unwrap();

    let (files_a, files_b) = (local_files(dir_a), local_files(dir_b));
    let id = |d: &Path| thaw_store::Snapshot::open(d).unwrap().manifest.id;
    assert_ne!(id(dir_a), id(dir_b), "two different snapshots");
    let runtime_root = thaw_store::Snapshot::open(dir_a)
        .unwrap()
        .manifest
        .runtime_root;
    let check_won = |key: &str, winner: &str, loser: &str, files: &[(String, u64, String)]| {
        assert_eq!(published(store, key), winner);
        assert!(store.list(loser).unwrap().is_empty(), "{loser} left");
        let rec: Value = serde_json::from_slice(
            &store
                .get(&format!("{winner}/{}", thaw_tiers::moves::COMMIT), 1 << 20)
                .unwrap(),
        )
        .unwrap();
        let committed: Vec<(String, u64, String)> =
            serde_json::from_value(rec["files"].clone()).unwrap();
        assert_eq!(committed, files, "the published copy is the winner's whole");
        match lookup_in(store, key, &runtime_root).unwrap() {
            Found::Usable { copy, .. } => assert_eq!(copy, winner),
            _ => panic!("{key}: the winner's copy is not usable"),
        }
    };

    // in a fixed order: A and B staged, B commits first
    let key = "ab".repeat(32);
    let sa = stage("remote", store, &key, dir_a).unwrap();
    let sb = stage("remote", store, &key, dir_b).unwrap();
    assert_ne!(sa, sb);
    assert!(thaw_server::shared::published_copy(store, &key)
        .unwrap()
        .is_none());
    assert!(commit("remote", store, &key, &sb).unwrap());
    assert!(!commit("remote", store, &key, &sa).unwrap());
    check_won(&key, &sb, &sa, &files_b);
    // the winner's commit answered twice (a retried request) still wins
    assert!(commit("remote", store, &key, &sb).unwrap());
    check_won(&key, &sb, &sa, &files_b);

    // at the same moment, from two threads
    let key = "cd".repeat(32);
    let sa = stage("remote", store, &key, dir_a).unwrap();
    let sb = stage("remote", store, &key, dir_b).unwrap();
    let gate = std::sync::Barrier::new(2);
    let go = |copy: &str| {
        gate.wait();
        commit("remote", store, &key, copy).unwrap()
    };
    let (won_a, won_b) = std::thread::scope(|s| {
        let ta = s.spawn(|| go(&sa));
        let tb = s.spawn(|| go(&sb));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert!(won_a != won_b, "exactly one wins: A {won_a}, B {won_b}");
    match won_a {
        true => check_won(&key, &sa, &sb, &files_a),
        false => check_won(&key, &sb, &sa, &files_b),
    }
}

/// Runs `body` with two nodes (daemons on throw-away homes) sharing the
/// store of `store_home`.
fn with_nodes(store_home: &Path, store: &thaw_tiers::TierConfig, body: impl FnOnce(&Node, &Node)) {
    let rt_home = thaw_runtime::default_home();
    let configure = |cfg: &mut thaw_server::Config| {
        thaw_tiers::remote::join(&cfg.home, store_home, store)?;
        cfg.snapshot_tiers = thaw_server::config::SnapshotTiers::parse("tmpfs,remote")?;
        cfg.shared_snapshots = true;
        cfg.drain_grace_s = 5;
        Ok(())
    };
    thaw_server::on_temp_daemon_with(&rt_home, "shared-node-a", configure, |_, a| {
        thaw_server::on_temp_daemon_with(&rt_home, "shared-node-b", configure, |_, b| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                body(&Node(a.to_path_buf()), &Node(b.to_path_buf()))
            }))
            .map_err(|_| anyhow::anyhow!("the test failed (its panic is above)"))
        })
    })
    .unwrap();
}

#[test]
fn two_nodes_share_snapshots_through_the_remote_tier() {
    let store_home = std::env::temp_dir().join(format!("thaw-shared-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store_home);
    std::fs::create_dir_all(&store_home).unwrap();
    let guard = Store(store_home.clone());
    let (ok, out) = thaw(&store_home, &["tier", "setup", "--tiers", "remote"]);
    assert!(ok, "tier setup: {out}");
    let tier = thaw_tiers::TiersConfig::load(&store_home)
        .unwrap()
        .get("remote")
        .unwrap()
        .clone();
    let client = thaw_tiers::objects::RemoteStore::open(&store_home, &tier).unwrap();
    with_nodes(&store_home, &tier, |a, b| {
        let req = file_deploy(
            "shared",
            "import hashlib\nSEED = hashlib.sha256(b'init').hexdigest()[:8]\ndef handler(e):\n    return {'seed': SEED, 'echo': e}\n",
        );
        let want = |e: Value| json!({"seed": "bb54068a", "echo": e});

        // A's first deploy takes the snapshot and publishes it
        let va = a.deploy(&req);
        assert_eq!(va["shared"]["role"], "published", "{va}");
        let key = va["shared"]["key"].as_str().unwrap().to_string();
        assert_eq!(key.len(), 64, "{va}");
        assert_eq!(a.invoke("shared", json!(1), "").2, want(json!(1)));

        // B never saw it: its deploy takes no snapshot, and its first
        // instance streams A's from the remote tier
        let vb = b.deploy(&req);
        assert_eq!(
            (
                &vb["shared"]["role"],
                &vb["shared"]["key"],
                &vb["snapshot_tier"]
            ),
            (&json!("fetched"), &json!(key), &json!("remote")),
            "{vb}"
        );
        assert_eq!(vb["placement"]["chosen_by"], "shared", "{vb}");
        assert_eq!(vb["snapshot"]["init_ms"], 0.0, "no init on B: {vb}");
        let (start, tier, v) = b.invoke("shared", json!(2), "");
        assert_eq!((start.as_str(), tier.as_str()), ("restore", "remote"));
        assert_eq!(v, want(json!(2)));
        assert_eq!(
            b.metric("thaw_restore_duration_seconds_count{strategy=\"mmap\",tier=\"remote\"} "),
            1.0
        );
        assert_eq!(
            b.metric("thaw_shared_snapshots_total{outcome=\"fetched\"} "),
            1.0
        );
        assert_eq!(
            a.metric("thaw_shared_snapshots_total{outcome=\"published\"} "),
            1.0
        );
        // once the stream arrived whole, B keeps it on its fast tier
        let t = Instant::now();
        loop {
            let v = b.get("/v1/functions/shared");
            if v["snapshot_tier"] == "tmpfs" {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(60), "not kept: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let (start, tier, v) = b.invoke("shared", json!(3), "?force=cold");
        assert_eq!((start.as_str(), tier.as_str()), ("restore", "tmpfs"));
        assert_eq!(v, want(json!(3)));

        // a published snapshot from another kind of machine: refused on B,
        // which takes its own and leaves the published one as it is
        let req2 = file_deploy("forged", "def handler(e):\n    return {'forged': e}\n");
        let va = a.deploy(&req2);
        assert_eq!(va["shared"]["role"], "published", "{va}");
        let object = published(&client, va["shared"]["key"].as_str().unwrap());
        forge_machine(&client, &object);
        let vb = b.deploy(&req2);
        assert_eq!(vb["shared"]["role"], "refused", "{vb}");
        let why = vb["shared"]["reason"].as_str().unwrap();
        assert!(
            why.contains("cannot resume here") && why.contains("7.0.ebx"),
            "{why}"
        );
        assert_eq!(vb["snapshot_tier"], "tmpfs", "{vb}");
        assert!(
            vb["snapshot"]["checkpoint_ms"].as_f64().unwrap() > 0.0,
            "{vb}"
        );
        let (start, tier, v) = b.invoke("forged", json!(4), "");
        assert_eq!((start.as_str(), tier.as_str()), ("restore", "tmpfs"));
        assert_eq!(v, json!({"forged": 4}));
        let m: Value = serde_json::from_slice(
            &client
                .get(&format!("{object}/manifest.json"), 1 << 20)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(m["machine"]["cpu_features"]["7.0.ebx"], json!(u32::MAX));
        assert_eq!(
            b.metric("thaw_shared_snapshots_total{outcome=\"refused\"} "),
            1.0
        );

        // two publishers of one key: exactly one wins, the other's copy
        // goes, and readers get the winner's whole
        let dir_of = |n: &Node, f: &str| -> PathBuf {
            let v = n.get(&format!("/v1/functions/{f}"));
            PathBuf::from(v["snapshot"]["dir"].as_str().unwrap())
        };
        race(&client, &dir_of(a, "forged"), &dir_of(b, "forged"));

        // deleting the function on a node leaves the shared copy
        let copy = published(&client, &key);
        assert_eq!(a.req("DELETE", "/v1/functions/shared", None).status, 204);
        let commit = format!("{copy}/{}", thaw_tiers::moves::COMMIT);
        assert!(client.exists(&commit).unwrap());
        assert_eq!(published(&client, &key), copy);
    });
    drop(guard);
}
