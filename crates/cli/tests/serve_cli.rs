//! `thaw serve` as a process and `thaw fn` as its client: the CLI round
//! trip, SIGTERM draining, and recovery after `kill -9`.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const THAW: &str = env!("CARGO_BIN_EXE_thaw");

struct Home(PathBuf);

impl Drop for Home {
    fn drop(&mut self) {
        let _ = thaw_server::remove_home(&self.0);
    }
}

fn start(home: &Path) -> Child {
    start_with_path(home, None)
}

/// Starts a daemon, with `path` as its `PATH` when given.
fn start_with_path(home: &Path, path: Option<&str>) -> Child {
    let mut cmd = Command::new(THAW);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let child = cmd
        .arg("--home")
        .arg(home)
        .args(["serve", "--runtime-home"])
        .arg(thaw_runtime::default_home())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting thaw serve");
    let sock = home.join("serve/thaw.sock");
    let t = Instant::now();
    while !answers(&sock) {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "thaw serve did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// Whether a daemon answers on `sock`. A connection alone is not enough: a
/// killed daemon's listener lives on in its children until they have died,
/// and takes connections nobody accepts.
fn answers(sock: &Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(sock) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = [0u8; 12];
    s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").is_ok()
        && s.read_exact(&mut reply).is_ok()
        && reply.starts_with(b"HTTP/1.")
}

fn thaw_fn(home: &Path, args: &[&str]) -> Output {
    Command::new(THAW)
        .arg("--home")
        .arg(home)
        .arg("fn")
        .args(args)
        .output()
        .expect("running thaw fn")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "thaw fn failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Snapshots of `function` on the daemon's tiers (both live under its home).
fn snapshots_of(home: &Path, function: &str) -> Vec<PathBuf> {
    [home.join("snapshots"), home.join("dram/snapshots")]
        .iter()
        .flat_map(|t| std::fs::read_dir(t).into_iter().flatten().flatten())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{function}-v"))
        })
        .map(|e| e.path())
        .collect()
}

/// The sandbox cgroups a daemon process made (named `PID.STARTTIME-N`).
fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    ["memory", "pids"]
        .iter()
        .flat_map(|ctrl| {
            let dir = Path::new("/sys/fs/cgroup").join(ctrl).join("thaw");
            std::fs::read_dir(dir).into_iter().flatten().flatten()
        })
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{pid}."))
        })
        .map(|e| e.path())
        .collect()
}

/// A daemon killed with -9 cannot remove its sandboxes' cgroups (their
/// processes died with it); remove those this test's daemon made.
fn remove_cgroups_of(pid: u32) {
    for d in cgroups_of(pid) {
        let _ = std::fs::remove_dir(d);
    }
}

#[test]
fn serve_deploy_invoke_sigterm_and_kill9_recovery() {
    let home = Home(PathBuf::from(format!(
        "/tmp/thaw-serve-cli-{}",
        std::process::id()
    )));
    let _ = thaw_server::remove_home(&home.0);
    let code = home.0.join("code");
    std::fs::create_dir_all(code.join("lib")).unwrap();
    std::fs::write(
        code.join("main.py"),
        "from lib import words\nimport time\ndef handler(event):\n    if event == 'slow':\n        time.sleep(1)\n    print('counting', event)\n    return {'words': words.count(event)}\n",
    )
    .unwrap();
    std::fs::write(code.join("lib/__init__.py"), "").unwrap();
    std::fs::write(
        code.join("lib/words.py"),
        "def count(s):\n    return len(str(s).split())\n",
    )
    .unwrap();
    let mut daemon = start(&home.0);

    let out = ok(&thaw_fn(
        &home.0,
        &[
            "deploy",
            code.to_str().unwrap(),
            "--handler",
            "main.handler",
            "--name",
            "words",
        ],
    ));
    assert!(out.contains("\"snapshot_id\""), "{out}");
    let inv = thaw_fn(
        &home.0,
        &["invoke", "words", "--data", "\"one two three\"", "-v"],
    );
    assert_eq!(ok(&inv).trim(), "{\n  \"words\": 3\n}");
    assert!(String::from_utf8_lossy(&inv.stderr).contains("thaw-start-type: restore"));
    let event = home.0.join("event.json");
    std::fs::write(&event, "\"a b\"").unwrap();
    let inv = thaw_fn(
        &home.0,
        &[
            "invoke",
            "words",
            "--data",
            &format!("@{}", event.display()),
            "-v",
        ],
    );
    assert!(ok(&inv).contains("\"words\": 2"));
    assert!(String::from_utf8_lossy(&inv.stderr).contains("thaw-start-type: warm"));
    assert!(ok(&thaw_fn(&home.0, &["logs", "words"])).contains("counting a b"));
    assert!(ok(&thaw_fn(&home.0, &["list"])).contains("\"words\""));
    // an error from the daemon is a non-zero exit naming it
    let bad = thaw_fn(&home.0, &["invoke", "nope"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("404"));

    // --package (repeatable): a Debian package the runtime root lacks
    let six = home.0.join("six_user.py");
    std::fs::write(
        &six,
        "import six\ndef handler(e):\n    return [six.__file__, six.ensure_str(b'ok')]\n",
    )
    .unwrap();
    let deploy_six = |pkgs: &[&str]| {
        let mut args = vec![
            "deploy",
            six.to_str().unwrap(),
            "--handler",
            "six_user.handler",
        ];
        for p in pkgs {
            args.extend(["--package", p]);
        }
        thaw_fn(&home.0, &args)
    };
    let out = ok(&deploy_six(&["python3-six", "python3-six"]));
    assert!(out.contains("\"python3-six="), "{out}");
    let inv = ok(&thaw_fn(&home.0, &["invoke", "six_user"]));
    assert!(
        inv.contains("/opt/thaw/packages/usr/lib/python3/dist-packages/six.py")
            && inv.contains("\"ok\""),
        "{inv}"
    );
    let bad = deploy_six(&["six;reboot"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a Debian package name"));
    ok(&thaw_fn(&home.0, &["rm", "six_user"]));

    // SIGTERM while an invocation runs: it finishes, then the daemon exits
    let slow = {
        let h = home.0.clone();
        std::thread::spawn(move || thaw_fn(&h, &["invoke", "words", "--data", "\"slow\""]))
    };
    std::thread::sleep(Duration::from_millis(400));
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(daemon.id().cast_signed(), libc::SIGTERM) };
    let out = slow.join().unwrap();
    assert!(ok(&out).contains("\"words\": 1"));
    let pid = daemon.id();
    let status = daemon.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!home.0.join("serve/thaw.sock").exists());
    assert_eq!(
        cgroups_of(pid),
        Vec::<PathBuf>::new(),
        "sandboxes left behind"
    );

    // kill -9: a restart serves every deployed function
    let mut daemon = start(&home.0);
    assert!(
        ok(&thaw_fn(&home.0, &["invoke", "words", "--data", "\"x y\""])).contains("\"words\": 2")
    );
    let killed = daemon.id();
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    remove_cgroups_of(killed);
    let mut daemon = start(&home.0);
    assert!(ok(&thaw_fn(
        &home.0,
        &["invoke", "words", "--data", "\"x y z\""]
    ))
    .contains("\"words\": 3"));
    assert!(!snapshots_of(&home.0, "words").is_empty());
    ok(&thaw_fn(&home.0, &["rm", "words"]));
    assert_eq!(snapshots_of(&home.0, "words"), Vec::<PathBuf>::new());
    assert!(ok(&thaw_fn(&home.0, &["list"])).contains("\"functions\": []"));
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(daemon.id().cast_signed(), libc::SIGTERM) };
    let pid = daemon.id();
    assert!(daemon.wait().unwrap().success());
    assert_eq!(
        cgroups_of(pid),
        Vec::<PathBuf>::new(),
        "sandboxes left behind"
    );
}

/// `thaw load` against a live daemon: every scheduled request is sent and
/// answered once, and the start types the daemon reports account for all.
#[test]
fn load_against_a_live_daemon_accounts_every_request() {
    let (home, code) = home_with_function(
        "load-live",
        "echo.py",
        "def handler(event):\n    return {'echo': event}\n",
    );
    let mut daemon = start(&home.0);
    ok(&thaw_fn(
        &home.0,
        &[
            "deploy",
            code.to_str().unwrap(),
            "--handler",
            "echo.handler",
            "--name",
            "echo",
            "--max-instances",
            "2",
        ],
    ));
    let summary = home.0.join("summary.json");
    let records = home.0.join("records.jsonl");
    let out = Command::new(THAW)
        .arg("load")
        .arg("--target")
        .arg(format!("unix:{}", home.0.join("serve/thaw.sock").display()))
        .args(["--functions", "echo", "--rps", "40", "--requests", "60"])
        .args(["--seed", "3", "--quiet", "--json"])
        .arg(&summary)
        .arg("--records")
        .arg(&records)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "thaw load failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    for k in ["scheduled", "sent", "answered", "ok"] {
        assert_eq!(s[k], 60, "{k} in {s}");
    }
    let types = s["start_types"].as_object().expect("start types");
    let counted: u64 = types.values().filter_map(|v| v.as_u64()).sum();
    assert_eq!(counted, 60, "start types {types:?}");
    assert!(types.get("warm").and_then(|v| v.as_u64()).unwrap_or(0) > 0);
    let recs = std::fs::read_to_string(&records).unwrap();
    assert_eq!(recs.lines().count(), 60, "one record per request");
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(daemon.id().cast_signed(), libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
}

/// A new temporary home holding one function's source file (both go when
/// the home is dropped).
fn home_with_function(tag: &str, file: &str, source: &str) -> (Home, PathBuf) {
    let home = Home(PathBuf::from(format!(
        "/tmp/thaw-{tag}-{}",
        std::process::id()
    )));
    let _ = thaw_server::remove_home(&home.0);
    std::fs::create_dir_all(&home.0).unwrap();
    let code = home.0.join(file);
    std::fs::write(&code, source).unwrap();
    (home, code)
}

/// A function that never sends anything (the egress tests list a
/// documentation network).
const NETFN: &str = "def handler(event):\n    return 'ok'\n";

/// The egress bridge a daemon process made (its alias names the daemon).
fn egress_bridge_of(pid: u32) -> Option<String> {
    let out = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output()
        .expect("ip link");
    let tag = format!("alias thaw-egress:{pid}.");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains(&tag))
        .and_then(|l| l.split(": ").nth(1).map(str::to_string))
}

#[test]
fn egress_leftovers_of_a_killed_daemon_go_at_the_next_cleanup() {
    let _network = thaw_egress::nethost::one_network_at_a_time();
    let (home, code) = home_with_function("egress-cli", "netfn.py", NETFN);
    let mut daemon = start(&home.0);
    let pid = daemon.id();
    // a documentation network: the function never sends anything
    let code_arg = code.to_string_lossy().into_owned();
    let bad = thaw_fn(
        &home.0,
        &[
            "deploy",
            &code_arg,
            "--handler",
            "netfn.handler",
            "--egress",
            "192.0.2.0/33",
        ],
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("prefix length"));
    // (an IPv6 destination too when the host has IPv6: its state must go
    // as well)
    let ipv6 = thaw_egress::ipv6_unavailable().is_none();
    let mut args = vec![
        "deploy",
        &code_arg,
        "--handler",
        "netfn.handler",
        "--egress",
        "192.0.2.0/24:443",
        "--dns",
        "192.0.2.53",
    ];
    if ipv6 {
        args.extend(["--egress", "[2001:db8::/32]:443"]);
    }
    ok(&thaw_fn(&home.0, &args));
    assert!(ok(&thaw_fn(&home.0, &["invoke", "netfn"])).contains("ok"));
    let bridge = egress_bridge_of(pid).expect("the daemon's egress bridge");
    // its IPv6 subnet (when the host has IPv6) is the bridge's, so it goes
    // with the bridge
    let v6 = Command::new("ip")
        .args(["-6", "-o", "addr", "show", "dev", &bridge])
        .output()
        .unwrap();
    let v6 = String::from_utf8_lossy(&v6.stdout).into_owned();
    if ipv6 {
        assert!(v6.contains("inet6 fd74:6861:7700:"), "{v6}");
    }
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    remove_cgroups_of(pid);
    assert_eq!(egress_bridge_of(pid).as_ref(), Some(&bridge));
    // the next start cleans up (its own bridge, made as the function comes
    // back, may take the same subnet under its own alias; a clean stop
    // removes it)
    let mut again = Stopping(start(&home.0));
    assert_eq!(egress_bridge_of(pid), None, "{bridge} survived the cleanup");
    let again_pid = again.0.id();
    assert!(egress_bridge_of(again_pid).is_some());
    again.stop();
    assert_eq!(egress_bridge_of(again_pid), None);
}

/// A daemon stopped with SIGTERM when the test ends, even by a panic.
struct Stopping(Child);

impl Stopping {
    fn stop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let _ = self.0.wait();
    }
}

impl Drop for Stopping {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// The test's `nft`: refuses a rule set that holds PATTERN, passes
/// everything else to the real one (REAL).
const REFUSING_NFT: &str = r#"#!/bin/sh
if [ "$1" = -f ] && [ "$2" = - ]; then
  rules=$(cat)
  case "$rules" in *"PATTERN"*) echo "Error: refused by the test's nft" >&2; exit 1;; esac
  printf '%s\n' "$rules" | exec REAL -f -
fi
exec REAL "$@"
"#;

/// A host step of the egress set-up that fails (`nft`, replaced on the
/// daemon's PATH by one that refuses some rule sets) fails the deploy with
/// the host's error and leaves no bridge, rule or function behind; the
/// daemon goes on serving.
#[test]
fn an_egress_set_up_the_host_refuses_fails_the_deploy_and_leaves_nothing() {
    let _network = thaw_egress::nethost::one_network_at_a_time();
    let real_nft = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nft is not installed (scripts/setup.sh installs nftables)");
    // the whole network's rules, then only a function's chain
    for (mode, pattern) in [("network", "table inet"), ("function", "add chain")] {
        let (home, code) = home_with_function(&format!("egress-refused-{mode}"), "netfn.py", NETFN);
        let bin = home.0.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let nft = bin.join("nft");
        std::fs::write(
            &nft,
            REFUSING_NFT
                .replace("PATTERN", pattern)
                .replace("REAL", real_nft),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&nft, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            bin.display()
        );
        let mut daemon = Stopping(start_with_path(&home.0, Some(&path)));
        let pid = daemon.0.id();
        let code_arg = code.to_string_lossy().into_owned();
        let deploy = |extra: &[&str]| {
            let mut args = vec!["deploy", &code_arg, "--handler", "netfn.handler"];
            args.extend_from_slice(extra);
            thaw_fn(&home.0, &args)
        };
        let refused = deploy(&["--egress", "192.0.2.0/24:443"]);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{mode}: the deploy succeeded");
        assert!(err.contains("refused by the test's nft"), "{mode}: {err}");
        assert!(
            ok(&thaw_fn(&home.0, &["list"])).contains("\"functions\": []"),
            "{mode}: a function was left"
        );
        match mode {
            "network" => assert_eq!(egress_bridge_of(pid), None, "a bridge was left"),
            _ => {
                // the network stays for the daemon's next egress deploy,
                // without the refused function's chains or addresses
                let bridge = egress_bridge_of(pid).expect("the daemon's bridge");
                let index = bridge.trim_start_matches("thaw-br");
                let out = Command::new(real_nft)
                    .args(["list", "table", "inet", &format!("thaw_egress_{index}")])
                    .output()
                    .unwrap();
                let table = String::from_utf8_lossy(&out.stdout);
                assert!(out.status.success(), "{table}");
                assert!(!table.contains("chain fn_"), "{table}");
                assert!(!table.contains("jump fn_"), "{table}");
            }
        }
        // the daemon still deploys and serves
        ok(&deploy(&[]));
        assert!(ok(&thaw_fn(&home.0, &["invoke", "netfn"])).contains("ok"));
        daemon.stop();
        assert_eq!(
            egress_bridge_of(pid),
            None,
            "{mode}: bridge left after stop"
        );
    }
}
