//! The Kubernetes manifests of deploy/kubernetes against a real API server:
//! `deploy/kubernetes/validate.sh` starts a private kube-apiserver and etcd
//! on loopback, applies Knative Serving's CRDs and runs each manifest
//! through `kubectl apply --dry-run=client --validate=true` and
//! `--dry-run=server`. Its first run builds kube-apiserver and kubectl from
//! the Go module proxy into `$THAW_HOME/tools` (later runs reuse them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
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
        for mode in ["client", "server"] {
            assert!(
                err.contains(&format!("valid ({mode} dry run): {name}\n")),
                "{name} through the {mode} dry run: {err}"
            );
        }
    }
    assert_eq!(yaml, 3, "the RuntimeClass, the Deployment, the Knative Service");
    // the server is the real one, with Knative's CRDs in it
    assert!(err.contains("kube-apiserver v1."), "{err}");
    assert!(err.contains("CRDs established"), "{err}");
    // the script's own broken copies were refused by both dry runs, with
    // kubectl's reasons
    for (copy, reason) in [
        (
            "misspelled-field.yaml",
            r#"unknown field "spec.template.spec.containers[0].ports[0].containerPrt""#,
        ),
        ("wrong-type.yaml", "replicas"),
        (
            "knative-misspelled-field.yaml",
            r#"unknown field "spec.template.spec.runtimeClasName""#,
        ),
        ("runtimeclass-misspelled-field.yaml", "handlr"),
    ] {
        for mode in ["client", "server"] {
            let line = err
                .lines()
                .find(|l| l.contains(&format!("refused as expected ({mode} dry run): {copy}")))
                .unwrap_or_else(|| panic!("{copy} refused by the {mode} dry run: {err}"));
            assert!(line.contains(reason), "{copy}, {mode}: {line}");
        }
    }
}

#[test]
fn a_broken_manifest_is_refused_with_kubectls_message() {
    let dir = TempDir::new("broken");
    let good = std::fs::read_to_string(repo_file("deploy/kubernetes/hello-deployment.yaml")).unwrap();
    let misspelled = good.replace("imagePullPolicy:", "imagePulPolicy:");
    assert_ne!(misspelled, good);
    let bad = dir.0.join("hello-deployment.yaml");
    std::fs::write(&bad, misspelled).unwrap();
    // a file that is not YAML at all is refused too, not skipped
    let junk = dir.0.join("junk.yaml");
    std::fs::write(&junk, "kind: [unclosed\n").unwrap();
    let (o, err) = validate(&[bad.clone(), junk.clone()]);
    assert_eq!(o.status.code(), Some(1), "refused: {err}");
    for f in [&bad, &junk] {
        for mode in ["client", "server"] {
            assert!(
                err.contains(&format!("REFUSED ({mode} dry run): {}", f.display())),
                "{mode}: {err}"
            );
        }
    }
    assert!(
        err.contains(r#"unknown field "spec.template.spec.containers[0].imagePulPolicy""#),
        "kubectl's message: {err}"
    );
    assert!(err.contains("2 of 2 manifests refused"), "{err}");
}
