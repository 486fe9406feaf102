//! The Kubernetes manifests of deploy/kubernetes against a real API server:
//! `deploy/kubernetes/validate.sh` starts a private kube-apiserver and etcd
//! on loopback, applies Knative Serving's CRDs and runs each manifest
//! through `kubectl apply --dry-run=client --validate=true` (of the
//! server's version and Debian's kubectl 1.20, which checks fields itself)
//! and `--dry-run=server`. Its first run builds kube-apiserver and kubectl
//! from the Go module proxy and unpacks Debian's kubectl into
//! `$THAW_HOME/tools` (later runs reuse them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The script's checks as it names them.
const CHECKS: [&str; 3] = [
    "client dry run",
    "client dry run, kubectl v1.20.2",
    "server dry run",
];

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn validate(files: &[PathBuf]) -> (Output, String) {
    let o = Command::new(repo_file("deploy/kubernetes/validate.sh"))
        .args(files)
        .output()
        .expect("run deploy/kubernetes/validate.sh");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o, err)
}

/// A directory of this test's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("thaw-k8s-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn every_manifest_is_valid_for_a_real_api_server_and_broken_copies_are_refused() {
    let (o, err) = validate(&[]);
    assert!(o.status.success(), "{:?}\n{err}", o.status);
    let dir = repo_file("deploy/kubernetes");
    let mut yaml = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".yaml") {
            continue;
        }
        yaml += 1;
        for check in CHECKS {
            assert!(
                err.lines()
                    .any(|l| l == format!("validate: valid ({check}): {name}")),
                "{name} through the {check}: {err}"
            );
        }
    }
    assert_eq!(
        yaml, 3,
        "the RuntimeClass, the Deployment, the Knative Service"
    );
    // the server is the real one, with Knative's CRDs in it
    assert!(err.contains("kube-apiserver v1."), "{err}");
    assert!(err.contains("CRDs established"), "{err}");
    // the script's own broken copies were refused, with kubectl's reasons:
    // by Debian's kubectl's client dry run (it checks fields against the
    // server's OpenAPI schema) and by the server dry run
    for (copy, client, server) in [
        (
            "misspelled-field.yaml",
            r#"unknown field "containerPrt""#,
            r#"unknown field "spec.template.spec.containers[0].ports[0].containerPrt""#,
        ),
        (
            "wrong-type.yaml",
            "invalid type for io.k8s.api.apps.v1.DeploymentSpec.replicas",
            "cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas",
        ),
        (
            "knative-misspelled-field.yaml",
            r#"unknown field "runtimeClasName" in dev.knative.serving.v1"#,
            r#"unknown field "spec.template.spec.runtimeClasName""#,
        ),
        (
            "knative-wrong-type.yaml",
            "containerPort): invalid type",
            "containerPort in body must be of type integer",
        ),
        (
            "runtimeclass-misspelled-field.yaml",
            r#"unknown field "handlr" in io.k8s.api.node.v1.RuntimeClass"#,
            r#"unknown field "handlr""#,
        ),
    ] {
        for (check, reason) in [(CHECKS[1], client), (CHECKS[2], server)] {
            let line = refusal(&err, check, copy);
            assert!(line.contains(reason), "{copy}, {check}: {line}");
        }
    }
    // the server's own strict field validation, not a decoding accident
    assert!(
        refusal(&err, CHECKS[2], "misspelled-field.yaml").contains("strict decoding error"),
        "{err}"
    );
    // a misspelled kind: every check, the newer kubectl's client dry run too
    for check in CHECKS {
        let line = refusal(&err, check, "misspelled-kind.yaml");
        assert!(
            line.contains(r#"no matches for kind "Deploymnet" in version "apps/v1""#),
            "{check}: {line}"
        );
    }
    assert!(
        err.contains("6 broken copies refused (13 refusals)"),
        "{err}"
    );
}

/// The script's line saying `check` refused the broken copy `copy`.
fn refusal<'a>(err: &'a str, check: &str, copy: &str) -> &'a str {
    let prefix = format!("validate: broken copy refused as expected ({check}): {copy}: ");
    err.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("{copy} refused by the {check}: {err}"))
}

#[test]
fn a_broken_manifest_is_refused_with_kubectls_message() {
    let dir = TempDir::new("broken");
    let good =
        std::fs::read_to_string(repo_file("deploy/kubernetes/hello-deployment.yaml")).unwrap();
    let misspelled = good.replace("imagePullPolicy:", "imagePulPolicy:");
    assert_ne!(misspelled, good);
    let bad = dir.0.join("hello-deployment.yaml");
    std::fs::write(&bad, misspelled).unwrap();
    // a file that is not YAML at all is refused too, not skipped
    let junk = dir.0.join("junk.yaml");
    std::fs::write(&junk, "kind: [unclosed\n").unwrap();
    let (o, err) = validate(&[bad.clone(), junk.clone()]);
    assert_eq!(o.status.code(), Some(1), "refused: {err}");
    let refused = |check: &str, f: &Path| {
        err.lines()
            .any(|l| l == format!("validate: REFUSED ({check}): {}", f.display()))
    };
    // the misspelled field: by Debian's kubectl and by the server, with
    // their messages (the newer kubectl's client dry run leaves fields to
    // the server)
    assert!(!refused(CHECKS[0], &bad), "{err}");
    assert!(
        refused(CHECKS[1], &bad) && refused(CHECKS[2], &bad),
        "{err}"
    );
    assert!(
        err.contains(r#"unknown field "imagePulPolicy" in io.k8s.api.core.v1.Container"#),
        "Debian's kubectl's message: {err}"
    );
    assert!(
        err.contains(r#"unknown field "spec.template.spec.containers[0].imagePulPolicy""#),
        "the server's message: {err}"
    );
    // what does not parse: by every check
    for check in CHECKS {
        assert!(refused(check, &junk), "{check}: {err}");
    }
    assert!(err.contains("2 of 2 manifests refused"), "{err}");
}
