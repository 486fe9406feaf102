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
    let mpath = format!("{object}/manifest.json");
    let mut m: Value = serde_json::from_slice(&store.get(&mpath, 1 << 20).unwrap()).unwrap();
    m["machine"]["cpu_features"]["7.0.ebx"] = json!(u32::MAX);
    let forged = serde_json::to_vec(&m).unwrap();
    store.put(&mpath, &forged).unwrap();
    let cpath = format!("{object}/{}", thaw_tiers::moves::COMMIT);
    let mut rec: Value = serde_json::from_slice(&store.get(&cpath, 1 << 20).unwrap()).unwrap();
    for f in rec["files"].as_array_mut().unwrap() {
        if f[0] == "manifest.json" {
            f[1] = json!(forged.len());
            f[2] = json!(thaw_store::sha256_hex(&forged));
        }
    }
    store
        .put(&cpath, &serde_json::to_vec(&rec).unwrap())
        .unwrap();
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
        let object = format!(
            "{}{}",
            thaw_server::shared::PREFIX,
            va["shared"]["key"].as_str().unwrap()
        );
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

        // deleting the function on a node leaves the shared copy
        assert_eq!(a.req("DELETE", "/v1/functions/shared", None).status, 204);
        let commit = format!(
            "{}{key}/{}",
            thaw_server::shared::PREFIX,
            thaw_tiers::moves::COMMIT
        );
        assert!(client.exists(&commit).unwrap());
    });
    drop(guard);
}
