//! Java functions through the daemon: compiled here from source
//! (tests/java/example) with the host's javac against the runtime root's
//! copies of Lambda's and CRaC's API jars (Maven Central, pinned in the
//! root's recipe), deployed as a jar, snapshotted and restored.
mod common;

use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

const SOURCES: [(&str, &str); 6] = [
    ("Pojo.java", include_str!("java/example/Pojo.java")),
    ("Stream.java", include_str!("java/example/Stream.java")),
    ("Pool.java", include_str!("java/example/Pool.java")),
    ("Fails.java", include_str!("java/example/Fails.java")),
    ("Hooks.java", include_str!("java/example/Hooks.java")),
    ("Heavy.java", include_str!("java/example/Heavy.java")),
];

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (the Java tests need the host's JDK 17: scripts/setup.sh --tests installs it)"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test functions as one jar, compiled once per test binary.
fn jar() -> &'static [u8] {
    static JAR: OnceLock<Vec<u8>> = OnceLock::new();
    JAR.get_or_init(|| {
        let root = thaw_runtime::current_root(&thaw_runtime::default_home())
            .expect("the runtime root (scripts/setup.sh builds it)");
        let lib = root.path.join("opt/thaw/java/lib");
        let class_path: Vec<PathBuf> = std::fs::read_dir(&lib)
            .unwrap_or_else(|e| panic!("{}: {e}", lib.display()))
            .map(|e| e.unwrap().path())
            .collect();
        assert!(
            class_path
                .iter()
                .any(|p| p.to_string_lossy().contains("crac-")),
            "no CRaC jar in {}",
            lib.display()
        );
        let dir = PathBuf::from(format!("/tmp/thaw-java-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let src = dir.join("src/example");
        std::fs::create_dir_all(&src).unwrap();
        for (name, text) in SOURCES {
            std::fs::write(src.join(name), text).unwrap();
        }
        let cp = class_path
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let classes = dir.join("classes");
        run(
            Command::new("javac")
                .args(["--release", "17", "-cp", &cp, "-d"])
                .arg(&classes)
                .args(SOURCES.map(|(n, _)| src.join(n))),
            "javac",
        );
        let jar = dir.join("functions.jar");
        run(
            Command::new("jar")
                .arg("cf")
                .arg(&jar)
                .arg("-C")
                .arg(&classes)
                .arg("."),
            "jar",
        );
        let bytes = std::fs::read(&jar).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    })
}

fn java_deploy(name: &str, handler: &str) -> Value {
    json!({
        "name": name,
        "runtime": "java",
        "handler": handler,
        "memory_mb": 512,
        "snapshot": "required",
        "code": {"format": "file", "data_base64": b64(jar()), "filename": "functions.jar"},
    })
}

fn cold(d: &Daemon, name: &str, event: &Value) -> Value {
    let r = d.post_json(&format!("/v1/functions/{name}/invoke?force=cold"), event);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    r.json().unwrap()
}

fn out_of(r: &thaw_client::Response) -> Value {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json().unwrap()
}

#[test]
fn pojo_and_stream_handlers_answer_from_restores_with_lambdas_context() {
    let d = Daemon::start(test_config("java-pojo"));
    deploy(&d, &java_deploy("pojo", "example.Pojo"));
    let event = json!({"customer": "ada", "items": [1, 2, 39], "unknown": true});
    let a = cold(&d, "pojo", &event);
    assert_eq!((&a["customer"], &a["total"]), (&json!("ada"), &json!(42)));
    assert_eq!(a["functionName"], "pojo");
    assert_eq!(a["memoryMb"], 512);
    let left = a["remainingMs"].as_i64().unwrap();
    assert!(left > 0 && left <= 30_000, "{a}");
    assert!(!a["requestId"].as_str().unwrap().is_empty());
    // a second clone of the same snapshot draws other numbers
    let b = cold(&d, "pojo", &event);
    assert_ne!(a["uuid"], b["uuid"]);
    assert_ne!(a["random"], b["random"]);
    assert_ne!(a["requestId"], b["requestId"]);
    let r = d.invoke("pojo", &event);
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    assert_eq!(out_of(&r)["total"], 42);
    let logs = d.req("GET", "/v1/functions/pojo/logs", None);
    assert!(
        String::from_utf8_lossy(&logs.body).contains("receipt for ada"),
        "the logger's lines are not in the function's log"
    );

    deploy(&d, &java_deploy("stream", "example.Stream::handleRequest"));
    assert_eq!(cold(&d, "stream", &json!({"a": "b"})), json!("{'A':'B'}"));
}

#[test]
fn a_java_exception_reaches_the_caller_in_lambdas_shape() {
    let d = Daemon::start(test_config("java-fails"));
    deploy(&d, &java_deploy("fails", "example.Fails::handleRequest"));
    let r = d.post_json(
        "/v1/functions/fails/invoke?error_shape=lambda",
        &json!({"why": "x"}),
    );
    assert_eq!(r.status, 502);
    let e = r.json().unwrap();
    assert_eq!(
        (&e["errorType"], &e["errorMessage"]),
        (&json!("java.lang.IllegalStateException"), &json!("boom: x")),
        "{e}"
    );
    let frames: Vec<&str> = e["stackTrace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        frames[0].starts_with("example.Fails.explode(Fails.java:")
            && frames.iter().all(|f| !f.starts_with("thaw.")),
        "{frames:?}"
    );
    // the instance keeps serving
    let r = d.invoke("fails", &json!({"why": "y"}));
    assert_eq!(error_of(&r).1, "function_error");
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
}

#[test]
fn threads_started_at_init_work_in_every_restored_clone() {
    let d = Daemon::start(test_config("java-pool"));
    deploy(&d, &java_deploy("pool", "example.Pool::handle"));
    let sum: i64 = (0..16).map(|k: i64| (0..=1000 * k).sum::<i64>()).sum();
    for _ in 0..3 {
        let v = cold(&d, "pool", &json!({}));
        assert_eq!(v["sum"], sum, "{v}");
        assert!(
            v["ticked"].as_i64().unwrap() >= 3,
            "the scheduler stopped: {v}"
        );
    }
}

#[test]
fn crac_hooks_run_in_snapshot_order_once_per_restore() {
    let d = Daemon::start(test_config("java-hooks"));
    deploy(&d, &java_deploy("hooks", "example.Hooks::handleRequest"));
    let before = ["before c", "before b", "before a"];
    let after = ["after a", "after b", "after c"];
    let expected: Vec<&str> = before.iter().chain(after.iter()).copied().collect();
    for _ in 0..2 {
        assert_eq!(cold(&d, "hooks", &json!({}))["events"], json!(expected));
    }
    // the same clone again: no more hook calls
    let r = d.invoke("hooks", &json!({}));
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    assert_eq!(out_of(&r)["events"], json!(expected));

    // a hook that throws fails the deploy with the hook's message: before
    // the snapshot, or after the restore the deploy measures
    for (fail, message) in [
        ("before", "resource b refuses the snapshot"),
        ("after", "resource b cannot come back"),
    ] {
        let mut req = java_deploy(&format!("fails-{fail}"), "example.Hooks::handleRequest");
        req["env"] = json!({ "FAIL": fail });
        let (status, _, msg) = error_of(&d.post_json("/v1/functions", &req));
        assert!(
            (400..500).contains(&status) && msg.contains(message),
            "{status} {msg}"
        );
    }
    d.healthy();
}

#[test]
fn a_restored_jvm_collects_allocates_and_catches_null_pointers() {
    let d = Daemon::start(test_config("java-heavy"));
    deploy(&d, &java_deploy("heavy", "example.Heavy::handleRequest"));
    // the handler sums (byte) i: Java's byte wraps as Rust's i8 does
    #[allow(clippy::cast_possible_truncation)]
    let byte_sum: i64 = (0..200).map(|i: i64| i64::from(i as i8)).sum();
    for _ in 0..2 {
        let v = cold(&d, "heavy", &json!({}));
        assert_eq!(v["caught"], 200, "{v}");
        assert_eq!(v["len"], 3 * (200_000 - 200), "{v}");
        assert_eq!(v["sum"], byte_sum, "{v}");
    }
}

#[test]
fn every_strategy_on_the_disk_tier_restores_a_java_function() {
    let d = Daemon::start(test_config("java-strategies"));
    for s in ["eager", "mmap", "uffd", "reap"] {
        let mut req = java_deploy(&format!("pojo-{s}"), "example.Pojo");
        req["strategy"] = json!(s);
        req["tier"] = json!("disk");
        deploy(&d, &req);
        for _ in 0..2 {
            let r = d.post_json(
                &format!("/v1/functions/pojo-{s}/invoke?force=cold"),
                &json!({"customer": s, "items": [5]}),
            );
            assert_eq!(r.header("thaw-strategy"), Some(s));
            assert_eq!(r.header("thaw-start-type"), Some("restore"));
            assert_eq!(out_of(&r)["customer"], s);
        }
    }
}

#[test]
fn a_hundred_restores_of_one_snapshot_all_answer() {
    let d = Daemon::start(test_config("java-hundred"));
    deploy(&d, &java_deploy("hundred", "example.Pojo"));
    let mut ids = std::collections::HashSet::new();
    for i in 0..100 {
        let v = cold(&d, "hundred", &json!({"customer": "c", "items": [i]}));
        assert_eq!(v["total"], i, "{v}");
        ids.insert(v["uuid"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 100, "clones drew the same UUIDs");
}

#[test]
fn bad_java_deploys_are_refused_with_reasons() {
    let d = Daemon::start(test_config("java-bad"));
    for (handler, needle) in [
        ("example.Pojo::", "package.Class::method"),
        ("not a class", "package.Class::method"),
        ("1example.Pojo", "package.Class::method"),
    ] {
        let r = d.post_json("/v1/functions", &java_deploy("bad", handler));
        let (status, _, msg) = error_of(&r);
        assert_eq!(status, 400, "{handler}: {msg}");
        assert!(msg.contains(needle), "{handler}: {msg}");
    }
    let mut req = java_deploy("bad", "example.Pojo");
    req["init"] = json!("m.init");
    let (status, _, msg) = error_of(&d.post_json("/v1/functions", &req));
    assert!(status == 400 && msg.contains("CRaC"), "{status} {msg}");
    for (handler, needle) in [
        ("example.Missing", "not found"),
        ("example.Pojo::nothing", "no public method nothing"),
        (
            "example.Fails",
            "neither RequestHandler nor RequestStreamHandler",
        ),
    ] {
        let r = d.post_json("/v1/functions", &java_deploy("bad", handler));
        let (status, _, msg) = error_of(&r);
        assert!(
            (400..500).contains(&status) && msg.contains(needle),
            "{handler}: {status} {msg}"
        );
    }
    d.healthy();
}

const SPRING: [(&str, &str); 4] = [
    ("pom.xml", include_str!("java/spring/pom.xml")),
    (
        "src/main/java/example/spring/App.java",
        include_str!("java/spring/src/main/java/example/spring/App.java"),
    ),
    (
        "src/main/java/example/spring/Greeter.java",
        include_str!("java/spring/src/main/java/example/spring/Greeter.java"),
    ),
    (
        "src/main/java/example/spring/Handler.java",
        include_str!("java/spring/src/main/java/example/spring/Handler.java"),
    ),
];

/// The Spring Boot function (tests/java/spring) as Lambda's zip layout
/// (classes at the top, dependencies in lib/), built with Maven from Maven
/// Central once per version of its sources and cached in the runtime home.
fn spring_zip() -> Vec<u8> {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for (name, text) in SPRING {
        h.update(name.as_bytes());
        h.update(text.as_bytes());
    }
    let key = hex::encode(&h.finalize()[..8]);
    let cache = thaw_runtime::default_home().join("cache/java-tests");
    let zip = cache.join(format!("spring-{key}.zip"));
    if let Ok(bytes) = std::fs::read(&zip) {
        return bytes;
    }
    let dir = PathBuf::from(format!("/tmp/thaw-java-spring-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (name, text) in SPRING {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    run(
        Command::new("mvn")
            .args(["-q", "-B", "package", "dependency:copy-dependencies"])
            .args(["-DincludeScope=runtime", "-DoutputDirectory=target/lib"])
            .arg("-DskipTests")
            .current_dir(&dir),
        "mvn package (Maven from scripts/setup.sh --tests)",
    );
    let part = dir.join("function.zip");
    run(
        Command::new("jar")
            .arg("cfM")
            .arg(&part)
            .args(["-C", "target/classes", ".", "-C", "target", "lib"])
            .current_dir(&dir),
        "jar",
    );
    std::fs::create_dir_all(&cache).unwrap();
    let tmp = cache.join(format!(".spring-{key}.{}", std::process::id()));
    std::fs::copy(&part, &tmp).unwrap();
    std::fs::rename(&tmp, &zip).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::read(&zip).unwrap()
}

#[test]
fn a_spring_boot_application_answers_from_restores() {
    let mut cfg = test_config("java-spring");
    cfg.limits.code_bytes = 32 << 20;
    cfg.limits.unpacked_bytes = 64 << 20;
    let d = Daemon::start(cfg);
    let req = json!({
        "name": "spring",
        "runtime": "java",
        "handler": "example.spring.Handler",
        "memory_mb": 512,
        "snapshot": "required",
        "code": {"format": "zip", "data_base64": b64(&spring_zip())},
    });
    deploy(&d, &req);
    for name in ["boot", "again"] {
        let v = cold(&d, "spring", &json!({ "name": name }));
        assert_eq!(v["greeting"], format!("\"Hello, {name}!\""), "{v}");
        assert!(v["beans"].as_i64().unwrap() > 20, "{v}");
        assert!(v["started_ms"].as_i64().unwrap() > 0, "{v}");
    }
}
