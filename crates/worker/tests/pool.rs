//! The pool of sandboxes built ahead of restores: 64 back-to-back restores
//! through it leave no process, mount or cgroup behind, and a pooled sandbox
//! killed while it waits is discarded cleanly.
mod common;
use common::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use thaw_worker::InputSize;
use thaw_worker::RestoreRequest;
use thaw_worker::StrategyKind;
use thaw_worker::{invoke, Worker};

/// Our children (pids whose parent is this test process).
fn children() -> BTreeSet<i32> {
    let me = std::process::id().to_string();
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        if after.split_whitespace().nth(1) == Some(me.as_str()) {
            out.insert(pid);
        }
    }
    out
}

/// This process's sandbox cgroups (named with its owner tag).
fn our_cgroups() -> BTreeSet<String> {
    let tag = thaw_store::secure::owner_tag();
    let mut out = BTreeSet::new();
    for ctrl in ["memory", "pids"] {
        let dir = Path::new("/sys/fs/cgroup").join(ctrl).join("thaw");
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with(tag) {
                out.insert(format!("{ctrl}/thaw/{name}"));
            }
        }
    }
    out
}

/// The host-namespace mounts a worker of this test could make: under its
/// home, its tier or `/run/thaw`. Other processes on the machine (another
/// home's daemon, a test binary of another checkout) mount and unmount
/// elsewhere while this test runs, so the whole table is not compared.
fn mounts(tier: &Path) -> BTreeSet<String> {
    let home = thaw_runtime::default_home();
    let ours = |p: &Path| p.starts_with(&home) || p.starts_with(tier) || p.starts_with("/run/thaw");
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|m| ours(Path::new(m))))
        .map(String::from)
        .collect()
}

/// The checks look at the whole test process: one test at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn pooled_worker() -> Worker {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "the pool test needs root");
    let home = thaw_runtime::default_home();
    let mut w = Worker::new(&home, &mut |m| eprintln!("runtime: {m}")).expect("runtime root");
    w.set_pool(2).expect("pool");
    w
}

#[test]
fn pool_64_restores_leave_nothing_behind() {
    let _one = serial();
    let tier = tier("pool64");
    let mut w = pooled_worker();
    let snap = w.snapshot("helloworld", &tier).expect("snapshot");
    w.set_pool(0).unwrap();
    let (procs0, cgroups0, mounts0) = (children(), our_cgroups(), mounts(&tier.path));
    w.set_pool(2).unwrap();
    let pool = w.pool().unwrap();
    for i in 0..64 {
        assert!(pool.wait_full(Duration::from_secs(30)), "pool not refilled");
        let waiting = pool.waiting_pids();
        let (mut sb, rep) = w
            .restore(RestoreRequest::new(&snap, StrategyKind::Mmap))
            .expect("restore");
        assert!(rep.pooled, "restore {i} did not use the pool");
        assert!(
            waiting.contains(&sb.pid()),
            "restored into a pooled sandbox"
        );
        let inv = invoke(&mut sb, InputSize::I, T).expect("invoke");
        if i == 0 {
            w.check("helloworld", InputSize::I, &inv.output)
                .expect("output");
        }
    }
    let stats = pool.stats();
    assert_eq!((stats.hits, stats.misses, stats.discarded), (64, 0, 0));
    assert!(stats.built >= 64, "{stats:?}");
    w.set_pool(0).unwrap();
    assert_eq!(children(), procs0, "processes left behind");
    assert_eq!(our_cgroups(), cgroups0, "cgroups left behind");
    assert_eq!(mounts(&tier.path), mounts0, "mounts left behind");
    let _ = std::fs::remove_dir_all(&tier.path);
}

#[test]
fn a_pooled_sandbox_killed_while_waiting_is_discarded() {
    let _one = serial();
    let tier = tier("poolkill");
    let w = pooled_worker();
    let snap = w.snapshot("helloworld", &tier).expect("snapshot");
    let pool = w.pool().unwrap();
    assert!(pool.wait_full(Duration::from_secs(30)));
    let victim = pool.waiting_pids()[0];
    let victim_cgroups: Vec<_> = our_cgroups()
        .into_iter()
        .filter(|c| {
            let procs = format!("/sys/fs/cgroup/{c}/cgroup.procs");
            std::fs::read_to_string(procs).unwrap_or_default().trim() == victim.to_string()
        })
        .collect();
    assert_eq!(
        victim_cgroups.len(),
        2,
        "the victim's memory and pids cgroups"
    );
    // SAFETY: signalling a restorer this test's pool started.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    // it dies asynchronously: wait until it is a zombie, as the pool will find it
    while !std::fs::read_to_string(format!("/proc/{victim}/stat"))
        .map(|s| s.contains(") Z "))
        .unwrap_or(true)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (mut sb, rep) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Mmap))
        .expect("restore past the dead one");
    assert!(rep.pooled);
    assert_ne!(sb.pid(), victim);
    let inv = invoke(&mut sb, InputSize::I, T).expect("invoke");
    w.check("helloworld", InputSize::I, &inv.output)
        .expect("output");
    let stats = w.pool().unwrap().stats();
    assert_eq!((stats.hits, stats.discarded), (1, 1), "{stats:?}");
    assert!(
        !Path::new(&format!("/proc/{victim}")).exists(),
        "victim not reaped"
    );
    let left = our_cgroups();
    for c in &victim_cgroups {
        assert!(
            !left.contains(c),
            "cgroup {c} of the discarded sandbox left"
        );
    }
    drop(sb);
    drop(w);
    assert!(children().is_empty(), "processes left: {:?}", children());
    assert!(
        our_cgroups().is_empty(),
        "cgroups left: {:?}",
        our_cgroups()
    );
    let _ = std::fs::remove_dir_all(&tier.path);
}

#[test]
fn a_restore_in_flight_holds_the_refill_back_but_never_starves_it() {
    let _one = serial();
    let tier = tier("poolhold");
    let w = pooled_worker();
    let snap = w.snapshot("helloworld", &tier).expect("snapshot");
    let pool = w.pool().unwrap();
    assert!(pool.wait_full(Duration::from_secs(30)), "pool not filled");
    // restored and never invoked: its first response never comes, and the
    // refill must go ahead anyway
    let (mut held, rep) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Mmap))
        .expect("restore");
    assert!(rep.pooled);
    assert!(
        pool.wait_full(Duration::from_secs(30)),
        "a restore never invoked starved the pool: {:?}",
        pool.stats()
    );
    // invoked later, it still answers; a second restore, invoked at once
    w.check(
        "helloworld",
        InputSize::I,
        &invoke(&mut held, InputSize::I, T).unwrap().output,
    )
    .unwrap();
    let (mut sb, rep) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Mmap))
        .expect("restore");
    assert!(rep.pooled);
    w.check(
        "helloworld",
        InputSize::I,
        &invoke(&mut sb, InputSize::I, T).unwrap().output,
    )
    .unwrap();
    assert!(pool.wait_full(Duration::from_secs(30)), "pool not refilled");
    let stats = pool.stats();
    assert_eq!((stats.hits, stats.misses), (2, 0), "{stats:?}");
    drop((held, sb));
    let _ = std::fs::remove_dir_all(&tier.path);
}
