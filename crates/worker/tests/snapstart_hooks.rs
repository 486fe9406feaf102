//! SnapStart's Python hooks (`snapshot_restore_py`) in a thaw function, in
//! SnapStart's order and counts: before-snapshot hooks once, in reverse
//! registration order, before the snapshot; after-restore hooks in every
//! restore, in registration order; thaw's own hooks nested around them.
//! Real sandboxes on the real runtime root; runs as root.
mod common;
use common::*;
use serde_json::json;
use thaw_checkpoint::checkpoint;
use thaw_worker::{RestoreRequest, StrategyKind, UserFunction};

const MAIN: &str = r#"
from snapshot_restore_py import register_after_restore, register_before_snapshot

LOG = []

@register_before_snapshot
def first_before():
    LOG.append("before-1")

def second_before(tag, *, n):
    LOG.append("before-2:%s:%d" % (tag, n))

register_before_snapshot(second_before, "x", n=7)

@register_after_restore
def first_after():
    LOG.append("after-1")

register_after_restore(lambda: LOG.append("after-2"))

def thaw_before():
    LOG.append("thaw-before")

def thaw_after(instance_id):
    LOG.append("thaw-after")

def handler(event, context):
    return {"log": LOG}
"#;

#[test]
fn snapstart_hooks_run_in_order_once_before_and_in_every_restore() {
    let w = worker();
    let t = tier("snapstart-hooks");
    let code = t.path.join("code");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("main.py"), MAIN).unwrap();
    let func = UserFunction {
        before_snapshot: Some("main.thaw_before".into()),
        after_restore: Some("main.thaw_after".into()),
        ..UserFunction::plain("hooks", thaw_worker::Runtime::Python, code, "main.handler")
    };
    let (mut fresh, _) = w.start_user(&func, T).unwrap();
    assert_eq!(explicit(&mut fresh, json!({}))["log"], json!([]));
    let dir = t.path.join("snapshot");
    let (snap, _) = checkpoint(&mut fresh, &dir, "hooks", &w.root.hash).unwrap();
    let before = json!(["before-2:x:7", "before-1", "thaw-before"]);
    // the instance that was snapshotted ran the before hooks, and is not restored
    assert_eq!(explicit(&mut fresh, json!({}))["log"], before);
    // a second snapshot of it does not run them again
    let (_, _) = checkpoint(&mut fresh, &t.path.join("again"), "hooks", &w.root.hash).unwrap();
    assert_eq!(explicit(&mut fresh, json!({}))["log"], before);
    drop(fresh);
    for i in 0..2 {
        let (mut sb, _) = w
            .restore(RestoreRequest::new(&snap, StrategyKind::Mmap).function(&func))
            .unwrap();
        let r = thaw_worker::after_restore(&mut sb, &format!("i-{i}"), T).unwrap();
        assert!(r.hook, "restore {i}");
        let log = explicit(&mut sb, json!({}))["log"].clone();
        let mut want = before.as_array().unwrap().clone();
        want.extend(["thaw-after", "after-1", "after-2"].map(|s| json!(s)));
        assert_eq!(log, json!(want), "restore {i}: each restore runs them once");
    }
}
