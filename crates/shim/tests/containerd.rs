//! The shim under a real containerd, driven with `ctr` as a user would
//! (see `common` for the harness); after each case nothing is left behind:
//! no shim or front process, no mount, no shim socket.
mod common;

use common::*;
use std::io::Read;
use std::process::{Command, Stdio};

#[test]
fn a_function_image_runs_once_serves_http_is_killed_and_deleted() {
    let base = std::env::temp_dir().join(unique("run"));
    let daemon = Daemon::start(base.with_extension("home"));
    let c = start_containerd(&base, &daemon.socket());
    let image = import_function(&c, "greeter", GREETER);

    // one invocation: the function's output and its answer, exit 0
    let out = c.ok(&[
        "run",
        "--rm",
        "--runtime",
        RUNTIME,
        &image,
        "once",
        "invoke",
        r#"{"name": "ctr"}"#,
    ]);
    assert!(out.contains("greeting ctr"), "the function's print: {out}");
    assert!(out.contains(r#""greeting":"hi ctr""#), "the answer: {out}");
    // a second container of the image: the daemon already has the function
    let out = c.ok(&[
        "run",
        "--rm",
        "--runtime",
        RUNTIME,
        &image,
        "again",
        "invoke",
        r#"{"name": "two"}"#,
    ]);
    assert!(out.contains("hi two"), "{out}");
    assert_eq!(daemon.functions().len(), 1, "one deploy for one image");
    // the function raising: exit 1 and the daemon's error on stderr
    let o = c
        .ctr(&[
            "run",
            "--rm",
            "--runtime",
            RUNTIME,
            &image,
            "fails",
            "invoke",
            r#"{"fail": true}"#,
        ])
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("function_error"),
        "{o:?}"
    );

    // a pod's pause container: runs until killed, deploys nothing
    let before = daemon.functions();
    c.ok(&[
        "run",
        "-d",
        "--runtime",
        RUNTIME,
        "--annotation",
        "io.kubernetes.cri.container-type=sandbox",
        &image,
        "pause",
    ]);
    assert_eq!(c.ok(&["task", "ps", "pause"]).lines().count(), 2);
    c.ok(&["task", "kill", "--signal", "SIGKILL", "pause"]);
    wait_stopped(&c, "pause");
    c.ok(&["task", "delete", "pause"]);
    c.ok(&["containers", "rm", "pause"]);
    assert_eq!(daemon.functions(), before);

    // serve: HTTP on $PORT in the namespace it is given, until killed
    let netns = test_netns();
    let with_ns = format!("network:{}", netns.path());
    // in the foreground: `ctr run` waits for the task and exits with its status
    let mut web = Command::new("/usr/bin/ctr")
        .arg("--address")
        .arg(&c.socket)
        .args(["--namespace", NS, "run", "--rm", "--runtime", RUNTIME])
        .args(["--with-ns", &with_ns, "--env", "PORT=8080", &image, "web"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("ctr run");
    let answer = post(&netns, "127.0.0.1", 8080, r#"{"name": "http"}"#);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("hi http"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("thaw-start-type"),
        "{answer}"
    );
    let ps = c.ok(&["task", "ps", "web"]);
    assert!(ps.lines().count() == 2, "one process: {ps}");
    c.ok(&["task", "kill", "web"]);
    let mut printed = String::new();
    web.stdout
        .take()
        .unwrap()
        .read_to_string(&mut printed)
        .unwrap();
    let status = web.wait().unwrap();
    assert_eq!(status.code(), Some(143), "SIGTERM's exit status");
    assert!(
        printed.contains("greeting http"),
        "the function's print: {printed}"
    );
    assert!(!c.ok(&["containers", "ls", "-q"]).contains("web"));
    assert_nothing_left(
        &c,
        &["once", "again", "fails", "pause", "web"],
        &daemon.home,
    );
}

#[test]
fn bad_images_and_a_daemon_down_fail_clearly_and_leave_nothing() {
    let base = std::env::temp_dir().join(unique("bad"));
    let mut daemon = Daemon::start(base.with_extension("home"));
    let c = start_containerd(&base, &daemon.socket());
    let run_fails = |image: &str, id: &str, extra: &[&str], cmd: &str, expect: &str| {
        let mut args = vec!["run", "--rm", "--runtime", RUNTIME];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[image, id, cmd]);
        let o = c.ctr(&args).unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success(), "{id} should fail: {o:?}");
        assert!(err.contains(expect), "{id}: expected {expect:?} in: {err}");
    };
    let good = import_function(&c, "good", GREETER);
    // an image whose config names no handler (its THAW_HANDLER emptied) is
    // not a function: runc runs it, and it has no `invoke` to run
    run_fails(
        &good,
        "nohandler",
        &["--env", "THAW_HANDLER="],
        "invoke",
        "names no THAW_HANDLER",
    );
    // a handler whose module fails to import: the daemon's deploy refuses it
    let broken = import_function(&c, "broken", "raise ImportError('broken on purpose')\n");
    run_fails(&broken, "broken", &[], "invoke", "broken on purpose");
    // a bad setting
    run_fails(
        &good,
        "badmem",
        &["--env", "THAW_MEMORY_MB=lots"],
        "invoke",
        "THAW_MEMORY_MB",
    );
    // a command the runtime does not know
    run_fails(&good, "badcmd", &[], "sh", "unknown command");
    // the node's daemon down
    daemon.stop();
    run_fails(&good, "down", &[], "invoke", "does not answer");
    assert!(c.ok(&["containers", "ls", "-q"]).trim().is_empty());
    assert_nothing_left(
        &c,
        &["nohandler", "broken", "badmem", "badcmd", "down"],
        &daemon.home,
    );
}

/// The Kubernetes manifests parse (PyYAML) and every pod runs on thaw.
#[test]
fn the_kubernetes_manifests_name_the_thaw_runtime() {
    let dir = repo_file("deploy/kubernetes");
    let mut pods = 0;
    let mut runtime_classes = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let o = Command::new("/usr/bin/python3")
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
            ])
            .arg(&path)
            .output()
            .expect("python3 with PyYAML (scripts/setup.sh installs python3-yaml)");
        assert!(
            o.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        let docs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for d in docs.as_array().unwrap() {
            assert!(
                d["apiVersion"].is_string() && d["metadata"]["name"].is_string(),
                "{d}"
            );
            match d["kind"].as_str().unwrap() {
                "RuntimeClass" => {
                    assert_eq!(d["handler"], "thaw");
                    runtime_classes += 1;
                }
                "Deployment" | "Service" if d["spec"]["template"].is_object() => {
                    let spec = &d["spec"]["template"]["spec"];
                    assert_eq!(spec["runtimeClassName"], "thaw", "{}", path.display());
                    assert!(spec["containers"][0]["image"].is_string());
                    pods += 1;
                }
                "Service" => assert!(d["spec"]["ports"].is_array()),
                other => panic!("{}: unexpected kind {other}", path.display()),
            }
        }
    }
    assert_eq!((runtime_classes, pods), (1, 2));
}
