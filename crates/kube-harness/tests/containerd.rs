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

#[test]
fn a_function_image_runs_on_its_own_root_filesystem_and_one_without_python_is_refused() {
    let base = std::env::temp_dir().join(unique("rooted"));
    let daemon = Daemon::start_importing_from(base.with_extension("home"), vec![base.clone()]);
    let c = start_containerd(&base, &daemon.socket());
    // thaw's runtime root as `thaw image build` layers it, and on top a
    // file thaw's runtime root does not have
    let runtime = runtime_layer();
    let marker = files_layer(
        &base.join("marker"),
        &[("etc/thaw-image-marker", "from the image")],
    );
    let image = import_rooted_function(&c, "rooted", READS_THE_IMAGE, &[runtime, marker]);
    let invoke = |image: &str, id: &str| {
        c.ctr(&["run", "--rm", "--runtime", RUNTIME, image, id, "invoke"])
            .unwrap()
    };
    let stdout = |o: std::process::Output| {
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = stdout(invoke(&image, "r1"));
    assert!(
        out.contains("marker from the image"),
        "the function's print: {out}"
    );
    assert!(
        out.contains(r#""marker":"from the image""#) && out.contains(r#""agent":true"#),
        "the answer: {out}"
    );
    // the daemon deployed it on its copy of the image's root, took a
    // snapshot there, and a second container restores it (or finds the
    // instance the first left warm)
    let names = daemon.functions();
    assert_eq!(names.len(), 1, "{names:?}");
    let f = daemon.function(&names[0]);
    assert!(f["snapshot"]["id"].is_string(), "a snapshot: {f}");
    assert_eq!(daemon.imported_roots(), 1, "one imported root");
    let out = stdout(invoke(&image, "r2"));
    assert!(out.contains(r#""marker":"from the image""#), "{out}");
    assert_eq!(daemon.functions(), names, "no second deploy");
    assert_eq!(daemon.imported_roots(), 1, "the root is imported once");
    daemon.assert_restored();

    // a root filesystem without Python (nor Node.js): Create fails naming
    // the missing program, and nothing is left, in containerd or the daemon
    let bare = files_layer(&base.join("bare"), &[("etc/os-release", "ID=bare\n")]);
    let nopython = import_rooted_function(&c, "nopython", GREETER, &[bare]);
    let o = invoke(&nopython, "np");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{o:?}");
    assert!(err.contains("/usr/bin/python3"), "the reason: {err}");
    assert_eq!(daemon.functions(), names, "nothing deployed");
    assert_eq!(
        daemon.imported_roots(),
        1,
        "nothing kept of the refused root"
    );
    assert!(c.ok(&["containers", "ls", "-q"]).trim().is_empty());
    assert_nothing_left(&c, &["r1", "r2", "np"], &daemon.home);
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

#[test]
fn code_spread_over_layers_is_read_merged_and_a_link_in_a_lower_layer_is_refused() {
    let base = std::env::temp_dir().join(unique("layers"));
    let mut daemon = Daemon::start(base.with_extension("home"));
    let c = start_containerd(&base, &daemon.socket());
    let run = |image: &str, id: &str| {
        c.ctr(&["run", "--rm", "--runtime", RUNTIME, image, id, "invoke"])
            .unwrap()
    };
    // the handler's module in a layer below the code's: the shim mounts
    // the rootfs and packs the merged /function
    let helper = files_layer(
        &base.join("helper"),
        &[("function/helper.py", "WORD = 'from below'\n")],
    );
    let source = "import helper\ndef handler(event):\n    return {'word': helper.WORD}\n";
    let image = import_rooted_function(&c, "spread", source, &[helper]);
    let o = run(&image, "spread");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(out.contains(r#""word":"from below""#), "the answer: {out}");
    // a symbolic link out of /function in a lower layer is refused as the
    // packer refuses it in a mounted rootfs
    let dir = base.join("link");
    std::fs::create_dir_all(dir.join("tree/function")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", dir.join("tree/function/leak")).unwrap();
    let link =
        thaw_server::image::layer_from_dir(&dir.join("tree"), &dir.join("l.tar.gz")).unwrap();
    let image = import_rooted_function(&c, "link", GREETER, &[link]);
    let o = run(&image, "link");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a link in the code should fail: {o:?}");
    assert!(err.contains("is not a regular file or directory"), "{err}");
    daemon.stop();
    assert_nothing_left(&c, &["spread", "link"], &daemon.home);
}

/// A registry takes `thaw image build`'s archive as it is (skopeo pushes
/// the OCI archive), and a node's containerd pulls it from there and runs
/// it on thaw, then pushes it on.
#[test]
fn a_function_image_pushed_to_a_registry_is_pulled_by_a_node_and_runs() {
    let base = std::env::temp_dir().join(unique("registry"));
    let daemon = Daemon::start(base.with_extension("home"));
    let registry = Registry::start(&base.join("registry"));
    // the build machine: the image archive, pushed without containerd
    let code = base.join("greeter");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("main.py"), GREETER).unwrap();
    let built = thaw_server::image::build(&thaw_server::image::ImageSpec {
        code: &code,
        handler: "main.handler",
        init: None,
        reference: "thaw.local/greeter:latest",
    })
    .unwrap();
    let archive = base.join("greeter.oci.tar");
    std::fs::write(&archive, &built.archive).unwrap();
    let pushed = format!("{REGISTRY}/thaw/greeter:latest");
    succeeds(
        registry
            .client("/usr/bin/skopeo")
            .args(["copy", "--dest-tls-verify=false"])
            .arg(format!("oci-archive:{}", archive.display()))
            .arg(format!("docker://{pushed}")),
    );
    let inspect = |reference: &str| -> serde_json::Value {
        let out = succeeds(
            registry
                .client("/usr/bin/skopeo")
                .args(["inspect", "--tls-verify=false"])
                .arg(format!("docker://{reference}")),
        );
        serde_json::from_str(&out).unwrap()
    };
    let seen = inspect(&pushed);
    assert_eq!(seen["Digest"], built.manifest_digest, "{seen}");
    assert!(
        seen["Env"]
            .to_string()
            .contains("THAW_HANDLER=main.handler"),
        "the handler in the config: {seen}"
    );

    // a node pulls it (plain HTTP) and runs it
    let node = start_containerd(&base.join("node"), &daemon.socket());
    let ctr = |args: &[&str]| {
        succeeds(
            registry
                .client("/usr/bin/ctr")
                .arg("--address")
                .arg(&node.socket)
                .args(["--namespace", NS])
                .args(args),
        )
    };
    ctr(&["images", "pull", "--plain-http", &pushed]);
    let listed = node.ok(&["images", "ls"]);
    assert!(
        listed.contains(&pushed) && listed.contains(&built.manifest_digest),
        "the pulled image keeps its digest: {listed}"
    );
    let out = node.ok(&[
        "run",
        "--rm",
        "--runtime",
        RUNTIME,
        &pushed,
        "pulled",
        "invoke",
        r#"{"name": "registry"}"#,
    ]);
    assert!(out.contains(r#""greeting":"hi registry""#), "{out}");
    assert_eq!(daemon.functions().len(), 1, "{:?}", daemon.functions());

    // containerd pushes it on: the registry holds the same manifest twice
    let copy = format!("{REGISTRY}/thaw/copy:v1");
    ctr(&["images", "tag", &pushed, &copy]);
    ctr(&["images", "push", "--plain-http", &copy]);
    assert_eq!(inspect(&copy)["Digest"], built.manifest_digest);
    assert_nothing_left(&node, &["pulled"], &daemon.home);
    drop((node, registry));
    let _ = std::fs::remove_dir_all(&base);
}
