//! Container images' root filesystems as functions' roots: imports, the
//! refusals, functions restored on them, and their removal.
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use thaw_client::Response;

mod common;
use common::*;

/// A root filesystem to import: thaw's runtime root linked file by file
/// (`cp -al`: nothing of the runtime root is written; the test only adds
/// and unlinks names) with `extra` written in.
fn linked_root(at: &Path, extra: &[(&str, &str)]) {
    let root = thaw_runtime::ensure_root(&thaw_runtime::default_home(), &mut |_| {}).unwrap();
    let st = std::process::Command::new("cp")
        .arg("-al")
        .arg(&root.path)
        .arg(at)
        .status()
        .unwrap();
    assert!(st.success(), "cp -al of the runtime root");
    for (path, content) in extra {
        let p = at.join(path);
        let _ = std::fs::remove_file(&p);
        std::fs::write(p, content).unwrap();
    }
}

/// The names in `dir`, sorted (none if it does not exist).
fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn import_root(d: &Daemon, path: &Path, key: Option<&str>) -> Response {
    d.post_json("/v1/roots", &json!({"path": path, "key": key}))
}

#[test]
fn image_roots_import_once_refuse_what_they_must_and_functions_run_and_restore_on_them() {
    let from = PathBuf::from(format!("/tmp/thaw-roots-from-{}", std::process::id()));
    let outside = from.with_extension("outside");
    let _ = std::fs::remove_dir_all(&from);
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&from).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let mut cfg = test_config("roots");
    cfg.image_roots_from = vec![from.clone()];
    let d = Daemon::start(cfg);
    let roots = d.home.join("serve/roots");
    let listing = || names_in(&roots);

    // an image's root: thaw's runtime root with a file of its own, and
    // hostile links where the sandbox mounts and elsewhere
    let rootfs = from.join("c1/rootfs");
    std::fs::create_dir_all(rootfs.parent().unwrap()).unwrap();
    linked_root(&rootfs, &[("etc/image-marker", "mine")]);
    std::fs::remove_file(rootfs.join("etc/resolv.conf")).ok();
    std::os::unix::fs::symlink(outside.join("resolv.conf"), rootfs.join("etc/resolv.conf"))
        .unwrap();
    std::os::unix::fs::symlink(&outside, rootfs.join("tmp/escape")).unwrap();
    std::fs::remove_dir_all(rootfs.join("proc")).unwrap();
    std::os::unix::fs::symlink(&outside, rootfs.join("proc")).unwrap();
    let key = "ab".repeat(32);
    let r = import_root(&d, &rootfs, Some(&key));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let info = r.json().unwrap();
    assert_eq!(info["key"], json!(key), "{info}");
    assert!(
        info["runtimes"]
            .as_array()
            .unwrap()
            .contains(&json!("python")),
        "{info}"
    );
    let copy = roots.join(&key).join("root");
    // links are copied as links, mount points are real directories, and
    // nothing was written through a link
    assert_eq!(
        std::fs::read_link(copy.join("tmp/escape")).unwrap(),
        outside
    );
    for dir in ["proc", "opt/thaw/user", "opt/thaw/packages", "dev", "tmp"] {
        let m = std::fs::symlink_metadata(copy.join(dir)).unwrap();
        assert!(m.is_dir(), "{dir} is a real directory in the copy");
    }
    assert!(std::fs::symlink_metadata(copy.join("etc/resolv.conf"))
        .unwrap()
        .is_file());
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "written outside"
    );
    // the same key again: nothing copied
    let r = import_root(&d, &rootfs, Some(&key));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(listing(), vec![key.clone()]);

    // refused: paths outside what may be imported, bad keys, a root with
    // no runtime program; nothing is kept of any
    std::os::unix::fs::symlink("/etc", from.join("etc-link")).unwrap();
    for (path, key, want) in [
        (PathBuf::from("/etc"), None, "not below"),
        (from.join("etc-link"), None, "not below"),
        (from.join("c1/rootfs/../../../"), None, "not below"),
        (from.clone(), None, "not below"),
        (PathBuf::from("c1/rootfs"), None, "not absolute"),
        (from.join("missing"), None, "No such file"),
        (rootfs.clone(), Some("../../etc"), "not 64 hex digits"),
    ] {
        let r = import_root(&d, &path, key);
        let (status, code, msg) = error_of(&r);
        assert_eq!(
            (status, code.as_str()),
            (400, "bad_request"),
            "{path:?}: {msg}"
        );
        assert!(msg.contains(want), "{path:?}: {msg}");
    }
    let bare = from.join("c2/rootfs");
    std::fs::create_dir_all(bare.join("etc")).unwrap();
    std::fs::write(bare.join("etc/os-release"), "ID=bare\n").unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", bare.join("python3")).unwrap();
    let (status, code, msg) = error_of(&import_root(&d, &bare, None));
    assert_eq!((status, code.as_str()), (422, "unusable_root"), "{msg}");
    assert!(msg.contains("/usr/bin/python3"), "{msg}");
    assert_eq!(
        listing(),
        vec![key.clone()],
        "nothing kept of refused roots"
    );

    // a function on it reads the image's file; its snapshot restores
    // there, also after a restart
    let src = "import os\ndef handler(e):\n    return [open('/etc/image-marker').read(), os.path.exists('/opt/thaw/agent.py')]\n";
    let mut req = file_deploy("rooted", "m.handler", src);
    req["root"] = json!(key);
    let v = deploy(&d, &req);
    assert!(v["snapshot"]["id"].is_string(), "{v}");
    assert_eq!(v["root"], json!(key), "{v}");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(PathBuf::from(v["snapshot"]["dir"].as_str().unwrap()).join("manifest.json"))
            .unwrap(),
    )
    .unwrap();
    let runtime_root = thaw_runtime::ensure_root(&thaw_runtime::default_home(), &mut |_| {})
        .unwrap()
        .hash;
    assert_ne!(
        manifest["runtime_root"],
        json!(runtime_root),
        "taken over the image's root"
    );
    let r = d.invoke("rooted", &json!(null));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap(), json!(["mine", true]));
    // a deploy on a root never imported, or without its runtime
    req["root"] = json!("cd".repeat(32));
    let (status, _, msg) = error_of(&d.post_json("/v1/functions", &req));
    assert_eq!(status, 400, "{msg}");
    assert!(msg.contains("no root filesystem imported"), "{msg}");
    std::fs::remove_dir_all(&from).unwrap();
    let d = d.restart(|| {});
    let r = d.invoke("rooted", &json!(null));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    assert_eq!(r.json().unwrap(), json!(["mine", true]));
    drop(d);
    std::fs::remove_dir_all(&outside).unwrap();
}

/// Two imports of one key at once: one copies the root, the other waits
/// for it at most `limits.lock_wait_ms` and answers 503 `busy` with a
/// Retry-After (a copy of a whole root takes seconds, the wait 50 ms);
/// asked again, the root is there.
#[test]
fn an_import_waiting_behind_a_long_copy_of_its_key_answers_busy() {
    let from = PathBuf::from(format!("/tmp/thaw-rootbusy-from-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&from);
    let rootfs = from.join("c1/rootfs");
    std::fs::create_dir_all(rootfs.parent().unwrap()).unwrap();
    linked_root(&rootfs, &[]);
    let mut cfg = test_config("rootbusy");
    cfg.image_roots_from = vec![from.clone()];
    cfg.limits.lock_wait_ms = 50;
    let d = Daemon::start(cfg);
    let key = "cd".repeat(32);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| import_root(&d, &rootfs, Some(&key)));
        let b = s.spawn(|| import_root(&d, &rootfs, Some(&key)));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (copied, busy) = if a.status == 201 { (a, b) } else { (b, a) };
    assert_eq!(
        copied.status,
        201,
        "{}",
        String::from_utf8_lossy(&copied.body)
    );
    assert_eq!(busy.status, 503, "{}", String::from_utf8_lossy(&busy.body));
    assert_eq!(busy.json().unwrap()["error"], "busy");
    assert_eq!(busy.header("retry-after"), Some("1"));
    let again = import_root(&d, &rootfs, Some(&key));
    assert_eq!(
        again.status,
        200,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&from);
}

#[test]
fn image_roots_go_when_no_version_names_them_and_imports_hold_them_for_their_deploy() {
    let from = PathBuf::from(format!("/tmp/thaw-rootgc-from-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&from);
    let rootfs = from.join("c1/rootfs");
    std::fs::create_dir_all(rootfs.parent().unwrap()).unwrap();
    linked_root(&rootfs, &[("etc/image-marker", "mine")]);
    let mut cfg = test_config("rootgc");
    cfg.image_roots_from = vec![from.clone()];
    let d = Daemon::start(cfg);
    let roots = d.home.join("serve/roots");
    let listing = || names_in(&roots);
    let imported = |key: &str| {
        let r = import_root(&d, &rootfs, Some(key));
        assert!(
            r.status == 201 || r.status == 200,
            "{}",
            String::from_utf8_lossy(&r.body)
        );
    };
    let on_root = |name: &str, key: Option<&str>| {
        let src = "import os\ndef handler(e):\n    return os.path.exists('/etc/image-marker')\n";
        let mut req = file_deploy(name, "m.handler", src);
        req["strategy"] = json!("boot");
        req["root"] = json!(key);
        deploy(&d, &req);
        let r = d.invoke(name, &json!(null));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json().unwrap(), json!(key.is_some()), "{name}");
    };
    let delete = |name: &str| {
        assert_eq!(
            d.req("DELETE", &format!("/v1/functions/{name}"), None)
                .status,
            204
        );
    };

    // two functions on one root: it goes with the last of them
    let a = "a1".repeat(32);
    imported(&a);
    on_root("fa", Some(&a));
    on_root("fb", Some(&a));
    delete("fa");
    assert_eq!(listing(), vec![a.clone()], "fb still runs on it");
    delete("fb");
    assert_eq!(listing(), Vec::<String>::new(), "no function names it");

    // an import no deploy followed yet is held through other deletes
    let b = "b2".repeat(32);
    imported(&b);
    on_root("plain", None);
    delete("plain");
    assert_eq!(listing(), vec![b.clone()], "held for its deploy");

    // a function moved off its root: the root stays while the previous
    // version (kept for its in-flight invocations) names it, then goes
    let c = "c3".repeat(32);
    imported(&c);
    on_root("moved", Some(&c));
    on_root("moved", None);
    assert_eq!(listing(), vec![b.clone(), c.clone()]);
    on_root("moved", None);
    assert_eq!(listing(), vec![b.clone()], "no version names it any more");

    // at a start: a root imported longer ago than the grace that no
    // function names goes, with what dead imports left; a recent import
    // and a root a function names stay
    let e = "e4".repeat(32);
    imported(&e);
    on_root("kept", Some(&e));
    let f = "f5".repeat(32);
    imported(&f);
    let roots2 = roots.clone();
    let (b2, e2) = (b.clone(), e.clone());
    let d = d.restart(move || {
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for k in [&b2, &e2] {
            std::fs::File::options()
                .write(true)
                .open(roots2.join(k).join("root.json"))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        std::fs::create_dir_all(roots2.join(".staging-1-00/root")).unwrap();
        std::fs::create_dir_all(roots2.join(format!(".removing-{b2}-00/root"))).unwrap();
    });
    assert_eq!(names_in(&roots), vec![e.clone(), f.clone()]);
    let r = d.invoke("kept", &json!(null));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap(), json!(true));
    // the recent import is still held after the start for its deploy
    assert_eq!(d.req("DELETE", "/v1/functions/kept", None).status, 204);
    assert_eq!(names_in(&roots), vec![f.clone()]);
    let mut req = file_deploy("late", "m.handler", "def handler(e):\n    return 1\n");
    req["strategy"] = json!("boot");
    req["root"] = json!(f);
    deploy(&d, &req);
    drop(d);
    std::fs::remove_dir_all(&from).unwrap();
}
