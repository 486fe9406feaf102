//! Lambda's API with clients nobody here wrote: boto3 and the AWS CLI v1,
//! pinned, in the virtual environment `scripts/setup.sh --tests` makes.
//! Each test starts `thaw serve` in-process on a temporary home with a
//! loopback TCP listener and runs one client script from `tests/lambda/`
//! against it with the daemon's key; the scripts check every answer, the
//! test what only the daemon's side shows (logs, metrics).
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use thaw_server::Config;

/// boto3 and the AWS CLI, or a failure naming how to install them.
fn clients() -> PathBuf {
    thaw_server::lambda::client_venv().unwrap_or_else(|| {
        panic!("boto3 and the AWS CLI are not installed: run `scripts/setup.sh --tests` (a venv in ~/.cache/thaw/lambda-clients)")
    })
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/lambda")
        .join(name)
}

/// The clients' side of one test: the daemon and its endpoint.
struct Clients<'a> {
    app: &'a thaw_server::App,
    endpoint: String,
}

/// Runs `test` against a daemon on a temporary home with a loopback TCP
/// listener (`configure` adjusts its settings); the daemon is stopped and
/// its home removed afterwards.
fn with_daemon(tag: &str, configure: impl FnOnce(&mut Config), test: impl FnOnce(&Clients)) {
    // a free port, which the daemon binds right after
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let configure = |c: &mut Config| {
        c.listen = Some(format!("127.0.0.1:{port}"));
        configure(c);
        Ok::<_, thaw_server::ServeError>(())
    };
    // a failed check is carried out of the daemon's run, so that the daemon
    // still stops and its home goes before the test fails
    let run = |app: &thaw_server::App, _: &std::path::Path| {
        let endpoint = format!("http://127.0.0.1:{port}");
        let checks = std::panic::AssertUnwindSafe(|| test(&Clients { app, endpoint }));
        Ok(std::panic::catch_unwind(checks))
    };
    let home = thaw_runtime::default_home();
    let outcome = thaw_server::on_temp_daemon_with(&home, &format!("lambda-{tag}"), configure, run)
        .expect("running the daemon");
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure);
    }
}

impl Clients<'_> {
    /// `program args...` with the daemon's endpoint and key in its
    /// environment (and no AWS configuration of the host's); its stdout.
    fn client(&self, program: &std::path::Path, args: &[&std::path::Path]) -> String {
        let creds = thaw_server::lambda::sigv4::load_or_create(&self.app.cfg.state_dir())
            .expect("the daemon's key file");
        let venv = clients();
        let out = Command::new(program)
            .args(args)
            .env("THAW_ENDPOINT", &self.endpoint)
            .env("AWS_ACCESS_KEY_ID", &creds.access_key_id)
            .env("AWS_SECRET_ACCESS_KEY", &creds.secret_access_key)
            .env("AWS_DEFAULT_REGION", &creds.region)
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .env("AWS_CLI", venv.join("bin/aws"))
            .env("PYTHON", venv.join("bin/python"))
            .output()
            .expect("running the client");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{} failed ({}):\nstdout: {stdout}\nstderr: {}",
            args.first().unwrap_or(&program).display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    fn python(&self, name: &str) -> serde_json::Value {
        self.python_with(name, &[])
    }

    /// The same, with arguments for the script.
    fn python_with(&self, name: &str, args: &[&str]) -> serde_json::Value {
        let script = script(name);
        let argv: Vec<&std::path::Path> = std::iter::once(script.as_path())
            .chain(args.iter().map(std::path::Path::new))
            .collect();
        let out = self.client(&clients().join("bin/python"), &argv);
        let last = out.lines().last().unwrap_or("");
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{name} printed {out:?}: {e}"))
    }

    /// Every log entry of `function` so far.
    fn logs(&self, function: &str) -> Vec<thaw_server::logs::LogEntry> {
        let v = self.app.function(function).expect("the function");
        v.ring.read(0, 10_000, None, None)
    }
}

#[test]
fn boto3_create_invoke_update_publish_alias_list_delete() {
    with_daemon(
        "roundtrip",
        |_| {},
        |d| {
            let out = d.python("roundtrip.py");
            assert_eq!(out["ok"], true, "{out}");
            assert_eq!(out["first_start"], "restore", "{out}");
            // the deletes removed every function, published versions included
            assert!(d.app.functions.read().unwrap().is_empty());
            let listed: Vec<_> = std::fs::read_dir(d.app.registry.dir.clone())
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            assert!(listed.is_empty(), "left in the registry: {listed:?}");
        },
    );
}

#[test]
fn aws_cli_drives_a_nodejs_function() {
    with_daemon(
        "cli",
        |_| {},
        |d| {
            let out = d.client(std::path::Path::new("bash"), &[&script("cli.sh")]);
            assert_eq!(out.lines().last(), Some("ok"), "{out}");
        },
    );
}

#[test]
fn wrong_signatures_hostile_packages_and_big_payloads_are_refused() {
    let limit = |c: &mut Config| c.limits.unpacked_bytes = 8 << 20;
    with_daemon("refusals", limit, |d| {
        let out = d.python("refusals.py");
        assert_eq!(out["ok"], true, "{out}");
        // a refused request is counted
        let m = d.app.metrics.encode();
        assert!(
            m.lines().any(|l| l
                .starts_with("thaw_rejected_requests_total{reason=\"unauthorized\"}")
                && !l.ends_with(" 0")),
            "{m}"
        );
        assert!(d.app.functions.read().unwrap().is_empty());
    });
}

#[test]
fn async_invocations_are_retried_twice_and_bounded() {
    with_daemon(
        "async",
        |c| c.limits.lambda_event_queue = 2,
        |d| {
            let out = d.python("async.py");
            let (failing, slow) = (
                out["failing"].as_str().unwrap().to_string(),
                out["slow"].as_str().unwrap().to_string(),
            );
            // first try, then retries after 1 s and 2 s more
            let deadline = Instant::now() + Duration::from_secs(60);
            let outcome = |id: &str| {
                d.logs("queued")
                    .into_iter()
                    .find(|e| e.instance == "lambda-async" && e.invocation_id == id)
            };
            while (outcome(&failing).is_none() || outcome(&slow).is_none())
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            let failed = outcome(&failing).expect("the failing event's outcome in the log");
            assert!(
                failed.output.contains("failed after 3 tries"),
                "{}",
                failed.output
            );
            let ok = outcome(&slow).expect("the slow event's outcome in the log");
            assert!(ok.output.contains("succeeded on try 1"), "{}", ok.output);
            // the handler ran three times for the failing event, once for the slow one
            let runs = |tag: &str| {
                d.logs("queued")
                    .iter()
                    .filter(|e| e.output.contains(&format!("\"tag\": \"{tag}\"")))
                    .count()
            };
            assert_eq!(runs("failing"), 3);
            assert_eq!(runs("slow"), 1);
            assert_eq!(runs("third"), 0);
            // its restores calibrate its placement as the native API's do
            let v = d.app.function("queued").expect("the function");
            let c = thaw_server::deploy::calibration(d.app, &v).expect("a calibration");
            assert!(c["restores"].as_u64().unwrap_or(0) >= 1, "{c}");
            let m = d.app.metrics.encode();
            for (outcome, n) in [("failed", 1), ("ok", 1)] {
                let line = format!(
            "thaw_lambda_async_invocations_total{{function=\"queued\",outcome=\"{outcome}\"}} {n}"
        );
                assert!(m.contains(&line), "{line} not in\n{m}");
            }
        },
    );
}

#[test]
fn go_and_rust_custom_runtimes_restore_through_boto3() {
    with_daemon(
        "provided",
        |_| {},
        |d| {
            // the script fails on any wrong answer; what it saw, by language
            let seen = d.python("provided.py")["seen"].clone();
            for lang in ["go", "rust"] {
                assert_eq!(seen[lang]["first"], "restore", "{lang}: {seen}");
            }
            assert!(d.app.functions.read().unwrap().is_empty());
        },
    );
}

/// Lambda's runtime client for `language` (ric.py's argument) as a custom
/// runtime; the version of the root's runtime that ran it starts with
/// `version`.
fn runtime_client_restores(language: &str, version: &str, error_type: &str) {
    with_daemon(
        &format!("ric-{language}"),
        |_| {},
        |d| {
            // the script checks every answer; the daemon's side: the
            // function ran as a custom runtime and is gone after the delete
            let seen = d.python_with("ric.py", &[language])["seen"].clone();
            assert_eq!(seen["first"], "restore", "{seen}");
            assert_eq!(seen["second"], "restore", "{seen}");
            assert_eq!(seen["error_type"], error_type, "{seen}");
            // the root's runtime ran the client (Node's addon built elsewhere)
            assert!(
                seen["runtime"]
                    .as_str()
                    .is_some_and(|v| v.starts_with(version)),
                "{seen}"
            );
            assert!(d.app.functions.read().unwrap().is_empty());
        },
    );
}

#[test]
fn lambdas_python_runtime_client_restores_as_a_custom_runtime() {
    runtime_client_restores("python", "3.11.", "ValueError");
}

#[test]
fn lambdas_nodejs_runtime_client_restores_as_a_custom_runtime() {
    runtime_client_restores("node", "v18.", "Error");
}
