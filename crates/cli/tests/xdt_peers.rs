//! XDT across workers end to end: two real `thaw serve` daemons,
//! each in its own network namespace joined by a veth pair; a consumer on
//! worker B gets objects produced on worker A, which B pulls over HTTP/2.
//! Every bad input gives a clear error in the function while B keeps
//! serving: forged and truncated references, another owner's, past-N and
//! expired ones, one of a worker that is not a peer, requests to A from a
//! non-peer address or with the wrong key, and a producer's worker killed
//! mid-transfer (the consumer's `get` fails within the stall deadline, and
//! B holds no pulled memfd afterwards). Needs root (network namespaces).
mod common;
use base64::Engine as _;
use common::{deploy, error, invoke, post, Module};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use thaw_bench_serve::pair::{Pair, PairOptions};
use thaw_client::Client;

const THAW: &str = env!("CARGO_BIN_EXE_thaw");
const FNS: Module = Module {
    file: "peerfns.py",
    source: include_str!("xdt_peers_fns/peerfns.py"),
};
/// The test's stall deadline for pulls (the daemons' `stall_ms`).
const STALL_MS: u64 = 2_000;

/// A reference to a fresh object of `size` bytes on worker A.
fn produce(a: &mut Client, size: u64, retrievals: u32, ttl_s: Option<u64>) -> String {
    let out = invoke(
        a,
        "produce",
        &json!({"size": size, "retrievals": retrievals, "ttl_s": ttl_s}),
    );
    out["ref"].as_str().expect("a reference").to_string()
}

/// The error kind (and message) a consumer's `get` of `r` raised.
fn get_error(b: &mut Client, name: &str, r: &str) -> (String, String) {
    error(b, name, &json!({"ref": r}))
}

fn assert_whole(out: &Value, size: u64) {
    assert_eq!(out["n"], size, "{out}");
    assert_eq!(out["same"], true, "{out}");
    assert_eq!(out["readonly"], true, "{out}");
}

/// Memfds a daemon holds whose name starts with `name`.
fn memfds(pid: u32, name: &str) -> usize {
    let want = format!("/memfd:{name}");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with(&want))
                })
                .count()
        })
        .unwrap_or(0)
}

/// `memfds` once it has settled at `want` (or after 5 s): the worker lets
/// go of the objects a function got just after the function's reply.
fn memfds_settled(pid: u32, name: &str, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = memfds(pid, name);
        if n == want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A raw peer request from inside `ns`, signed with the key in `key_file`.
fn peer_request(ns: &str, key_file: &Path, to: &str, path: &'static str) -> (u16, String) {
    let cfg = thaw_server::xdt::PeerConfig {
        key_file: Some(key_file.to_path_buf()),
        peers: vec![to.to_string()],
        ..Default::default()
    };
    let to: std::net::SocketAddr = to.parse().unwrap();
    thaw_bench_serve::pair::in_netns(ns, move || {
        let peers = thaw_server::xdt::peer::Peers::from_config(&cfg)
            .unwrap()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (st, body) = rt
            .block_on(peers.small_request(to, "GET", path, b""))
            .expect("the peer answers");
        (st.as_u16(), String::from_utf8_lossy(&body).into_owned())
    })
    .unwrap()
}

#[test]
fn a_consumer_on_another_worker_pulls_objects_and_bad_input_fails_clearly() {
    let mut pair = Pair::start(
        Path::new(THAW),
        &thaw_runtime::default_home(),
        &PairOptions {
            stall_ms: STALL_MS,
            ..PairOptions::default()
        },
    )
    .expect("two workers in network namespaces (root, ip, veth)");
    let net = pair.net.clone();
    let (mut a, mut b) = (pair.workers[0].client(), pair.workers[1].client());
    deploy(&mut a, &FNS, "produce", "produce", "default", 512);
    deploy(&mut b, &FNS, "consume", "consume", "default", 512);
    deploy(&mut b, &FNS, "mallory", "consume", "mallory", 256);
    deploy(&mut b, &FNS, "small", "consume", "default", 64);
    deploy(&mut b, &FNS, "produce", "produce", "default", 256);
    deploy(&mut a, &FNS, "call", "call", "default", 128);

    // thaw.invoke reaches only the caller's worker: a function deployed
    // on the other one is not found, and the error says why
    let out = invoke(&mut a, "call", &json!({"function": "consume"}));
    assert_eq!(out["kind"], "not_found", "{out}");
    assert!(
        out["message"].as_str().unwrap().contains("on this worker"),
        "{out}"
    );

    // byte-exact across workers, read-only, and one retrieval each
    for size in [0, 1, (3 << 20) + 5] {
        let r = produce(&mut a, size, 2, None);
        assert_whole(&invoke(&mut b, "consume", &json!({"ref": r})), size);
        // the second retrieval, by a cold consumer (the pull overlaps its restore)
        let (st, out) = post(
            &mut b,
            "/v1/functions/consume/invoke?force=cold",
            &json!({"ref": r}),
        );
        assert_eq!(st, 200, "{out}");
        assert_whole(&out, size);
        // past N: the producer's worker says so
        let (kind, msg) = get_error(&mut b, "consume", &r);
        assert_eq!(kind, "exhausted", "{msg}");
    }

    // forged (one character of the sealed part changed) and truncated
    let r = produce(&mut a, 4096, 5, None);
    let mut forged = r.clone().into_bytes();
    let i = forged.len() - 3;
    forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let (kind, msg) = get_error(&mut b, "consume", &forged);
    assert_eq!(kind, "bad_reference", "{msg}");
    for cut in [5, r.len() / 2] {
        let (kind, msg) = get_error(&mut b, "consume", &r[..r.len() - cut]);
        assert_eq!(kind, "bad_reference", "cut {cut}: {msg}");
    }
    // another owner's consumer, and one that cannot take the object
    let (kind, msg) = get_error(&mut b, "mallory", &r);
    assert_eq!(kind, "forbidden", "{msg}");
    let big = produce(&mut a, 65 << 20, 1, None);
    let (kind, msg) = get_error(&mut b, "small", &big);
    assert_eq!(kind, "too_large", "{msg}");
    // none of those used up a retrieval
    assert_whole(&invoke(&mut b, "consume", &json!({"ref": r})), 4096);

    // expired
    let r = produce(&mut a, 100, 1, Some(1));
    std::thread::sleep(Duration::from_millis(1_200));
    let (kind, msg) = get_error(&mut b, "consume", &r);
    assert_eq!(kind, "expired", "{msg}");

    // a reference of a worker that is not among B's peers
    let stranger = thaw_xdt::ObjectTable::new(Default::default());
    let (r, _) = stranger
        .put(
            "default",
            "f",
            thaw_xdt::memfd::create_sealed("t", b"abc").unwrap(),
            1,
            None,
            thaw_xdt::table::now_ms(),
        )
        .unwrap();
    let (kind, msg) = get_error(&mut b, "consume", &r);
    assert_eq!(kind, "other_worker", "{msg}");

    // A answers only configured peers with the shared key: from A's own
    // address (not a peer of A) and with another key, refused
    let key = pair.key_file();
    let (st, body) = peer_request(&net.netns[0], &key, &net.peer_addr(0), "/peer/v1/hello");
    assert_eq!(st, 403, "{body}");
    assert!(
        body.contains("not one of this worker's configured peers"),
        "{body}"
    );
    let wrong = std::env::temp_dir().join(format!("thaw-xdt-wrong-key-{}", std::process::id()));
    std::fs::write(&wrong, hex::encode([7u8; 32])).unwrap();
    std::fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (st, body) = peer_request(&net.netns[1], &wrong, &net.peer_addr(0), "/peer/v1/hello");
    let _ = std::fs::remove_file(&wrong);
    assert_eq!(st, 401, "{body}");
    let (st, body) = peer_request(&net.netns[1], &key, &net.peer_addr(0), "/peer/v1/hello");
    assert_eq!(st, 200, "{body}");

    // the producer's worker killed mid-transfer: A's link slowed down so
    // that the kill lands while B's memfd is being filled
    let b_pid = pair.workers[1].pid().unwrap();
    // (objects B's functions got are let go of just after their replies)
    let before = memfds_settled(b_pid, "thaw-", 0);
    let r = produce(&mut a, 96 << 20, 1, None);
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &net.netns[0], "tc", "qdisc", "add", "dev"])
        .arg(&net.links[0])
        .args([
            "root", "tbf", "rate", "200mbit", "burst", "256kb", "latency", "100ms",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sock = pair.workers[1].socket.clone();
    let consumer = std::thread::spawn(move || {
        let mut b = Client::new(thaw_client::Target::Unix(sock));
        let t0 = Instant::now();
        let e = get_error(&mut b, "consume", &r);
        (e, t0.elapsed())
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while memfds(b_pid, "thaw-pulled") == 0 {
        assert!(Instant::now() < deadline, "the pull never started");
        std::thread::sleep(Duration::from_millis(2));
    }
    pair.workers[0].kill();
    let t_kill = Instant::now();
    let ((kind, msg), _) = consumer.join().unwrap();
    let after_kill = t_kill.elapsed();
    assert_eq!(kind, "peer_failed", "{msg}");
    assert!(
        msg.contains("of 100663296 bytes") || msg.contains("stopped"),
        "{msg}"
    );
    assert!(
        after_kill < Duration::from_millis(STALL_MS + 5_000),
        "the consumer waited {after_kill:?} after the kill"
    );
    // B keeps serving (a local object), and holds nothing of the failed pull
    let r = invoke(&mut b, "produce", &json!({"size": 1000}))["ref"]
        .as_str()
        .unwrap()
        .to_string();
    assert_whole(&invoke(&mut b, "consume", &json!({"ref": r})), 1000);
    assert_eq!(
        memfds_settled(b_pid, "thaw-pulled", 0),
        0,
        "a pulled memfd leaked"
    );
    assert_eq!(
        memfds_settled(b_pid, "thaw-", before),
        before,
        "memfds leaked"
    );
    // and a reference of the dead worker now fails at once, clearly
    let t0 = Instant::now();
    let (kind, msg) = get_error(&mut b, "consume", &produce_dead_ref(&r));
    assert!(
        ["other_worker", "bad_reference"].contains(&kind.as_str()),
        "{kind}: {msg}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));

    let ns = net.netns.clone();
    drop(pair);
    for n in ns {
        assert!(
            !Path::new("/run/netns").join(&n).exists(),
            "{n} left behind"
        );
    }
    for l in &net.links {
        assert!(
            !Path::new("/sys/class/net").join(l).exists(),
            "{l} left behind"
        );
    }
}

/// A reference naming a worker nobody runs any more: B's own reference
/// with its worker id replaced (so it cannot open anywhere).
fn produce_dead_ref(r: &str) -> String {
    let body = r.strip_prefix("thref1.").unwrap();
    let mut raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .unwrap();
    raw[..8].copy_from_slice(&[0xde, 0xad, 0, 0, 0, 0, 0, 1]);
    format!(
        "thref1.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    )
}
