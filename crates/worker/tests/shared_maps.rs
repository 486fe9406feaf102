//! A restored instance keeps its shared mappings: POSIX semaphores
//! (multiprocessing's locks, a thread pool's queues), a shared mapping of a
//! file of its /tmp, shared anonymous memory; each restore's are its own.
//! Real sandboxes on the real runtime root; runs as root.
mod common;
use common::*;
use serde_json::json;
use thaw_worker::{RestoreRequest, StrategyKind};

#[test]
fn shared_mappings_made_at_init_survive_every_restore() {
    restores_answer_as_a_fresh_start("_test_shared_maps", "shared-maps", json!({"tag": "t"}));
}

#[test]
fn clones_do_not_see_each_others_shared_writes() {
    let w = worker();
    let t = tier("shared-maps-clones");
    let snap = w.snapshot("_test_shared_maps", &t).unwrap();
    let restore = || {
        w.restore(RestoreRequest::new(&snap, StrategyKind::Mmap))
            .unwrap()
            .0
    };
    let (mut a, mut b) = (restore(), restore());
    let first = first_answer(&mut a, "clone a", json!({"tag": "a"}));
    assert_eq!(first["tmp_seen"], json!(["init", "12345"]), "{first}");
    // b was restored before a wrote, and runs beside it
    let other = first_answer(&mut b, "clone b", json!({"tag": "b"}));
    assert_eq!(other["tmp_seen"], json!(["init", "12345"]), "{other}");
    assert_eq!(other["anon_seen"], "anonymous", "{other}");
    // a's second call sees its own writes, not b's
    let again = explicit(&mut a, json!({"tag": "a2"}));
    assert_eq!(again["anon_seen"], "a.......!", "{again}");
}
