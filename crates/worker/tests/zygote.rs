//! The zygote start type (the benchmarks' floor): children of one live
//! template each run in a sandbox of their own and leave nothing behind.
mod common;
use common::*;
use std::path::PathBuf;
use thaw_worker::invoke;
use thaw_worker::InputSize;

fn status_field(pid: i32, field: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

fn ns(pid: i32, kind: &str) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).expect("ns link")
}

fn our_cgroups(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup")
}

#[test]
fn zygote_children_are_sandboxed_answer_correctly_and_leave_nothing() {
    let w = worker();
    let mut z = w.start_zygote("helloworld").expect("zygote template");
    let template = z.template().pid();
    let mut pids = Vec::new();
    let mut cgroup_dirs = Vec::new();
    let mut seen_ns = vec![ns(template, "pid")];
    // all alive at once: a freed namespace's inode number may be reused
    let mut live = Vec::new();
    for _ in 0..3 {
        let mut sb = w.fork_zygote(&mut z).expect("fork");
        let pid = sb.pid();
        assert_ne!(pid, template);
        // its own namespaces of every kind the sandbox has, not the template's
        for kind in ["mnt", "net", "ipc", "uts"] {
            assert_ne!(ns(pid, kind), ns(template, kind), "{kind} namespace shared");
        }
        // the pid namespace is per child
        let pidns = std::fs::read_link(format!("/proc/{pid}/ns/pid_for_children")).unwrap();
        assert!(!seen_ns.contains(&pidns), "pid namespace reused");
        seen_ns.push(pidns);
        assert_eq!(
            status_field(pid, "NSpid:").split_whitespace().last(),
            Some("1")
        );
        // unprivileged, filtered, in this sandbox's cgroups
        let uid = sb.uid().to_string();
        assert!(status_field(pid, "Uid:")
            .split_whitespace()
            .all(|u| u == uid));
        assert_eq!(status_field(pid, "Seccomp:"), "2");
        assert_eq!(status_field(pid, "NoNewPrivs:"), "1");
        let cg = our_cgroups(pid);
        assert!(cg.contains(&format!("memory:/thaw/{}", sb.id)), "{cg}");
        assert!(cg.contains(&format!("pids:/thaw/{}", sb.id)), "{cg}");
        cgroup_dirs.push(PathBuf::from(format!(
            "/sys/fs/cgroup/memory/thaw/{}",
            sb.id
        )));
        let inv = invoke(&mut sb, InputSize::I, T).expect("invoke");
        w.check("helloworld", InputSize::I, &inv.output)
            .expect("output");
        pids.push(pid);
        live.push(sb);
    }
    drop(live);
    for pid in &pids {
        assert!(
            !PathBuf::from(format!("/proc/{pid}")).exists() || {
                // a zombie until the template reaps it: it must at least be dead
                status_field(*pid, "State:").starts_with('Z')
            }
        );
    }
    for d in &cgroup_dirs {
        assert!(!d.exists(), "cgroup {} left behind", d.display());
    }
    drop(z);
    assert!(
        !PathBuf::from(format!("/proc/{template}")).exists(),
        "zygote template still running"
    );
    for pid in &pids {
        assert!(
            !PathBuf::from(format!("/proc/{pid}")).exists(),
            "child {pid} left"
        );
    }
}
