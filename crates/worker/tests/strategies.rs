//! The research restore strategies (REAP, PASS-style dax, TOSS-style tiered)
//! against the real runtime: correctness, fallbacks, drift, concurrency.
mod common;
use common::*;
use serde_json::Value;
use std::sync::Arc;
use thaw_checkpoint::RestoreArgs;
use thaw_memory::tiering::{CostParams, TIERS_FILE};
use thaw_memory::working_set::{WS_IMAGE, WS_INDEX, WS_STALE};
use thaw_sandbox::SandboxConfig;
use thaw_store::Snapshot;
use thaw_worker::InputSize;
use thaw_worker::RestoreRequest;
use thaw_worker::{invoke, StrategyKind, WsMode};

fn out_of(
    w: &thaw_worker::Worker,
    snap: &Snapshot,
    strategy: StrategyKind,
    size: InputSize,
) -> (Value, thaw_checkpoint::RestoreReport) {
    let (mut sb, rep) = w
        .restore(RestoreRequest::new(snap, strategy))
        .unwrap_or_else(|e| panic!("{strategy}: {e:#}"));
    let out = invoke(&mut sb, size, T)
        .unwrap_or_else(|e| panic!("{strategy} {size}: {e:#}"))
        .output;
    (out, rep)
}

#[test]
fn every_strategy_restores_every_function_correctly() {
    let w = worker();
    let fast = tier("all-strategies");
    let slow = tier("all-strategies-slow");
    for f in w.functions() {
        let snap = match w.snapshot(&f.name, &fast) {
            Ok(snap) => snap,
            // restored here as soon as the checkpoint captures a Node.js
            // process's threads and descriptors (libuv's epoll, eventfds, pipes)
            Err(e) if f.runtime == thaw_worker::Runtime::Nodejs => {
                let e = format!("{e:#}");
                let named = e.contains("descriptor") || e.contains("thread");
                assert!(named, "{}: {e}", f.name);
                continue;
            }
            Err(e) => panic!("{}: {e:#}", f.name),
        };
        let sizes = vec![InputSize::I, InputSize::II];
        w.make_tiered(&f.name, &fast, &slow, &sizes, 1, &CostParams::default())
            .unwrap();
        for s in StrategyKind::ALL {
            let (out, rep) = out_of(w, &snap, s, InputSize::I);
            w.check(&f.name, InputSize::I, &out)
                .unwrap_or_else(|e| panic!("{} restored with {s}: {e:#}", f.name));
            assert!(
                rep.figures.ws_warning.is_empty() && rep.figures.tier_warning.is_empty(),
                "{} {s}: {rep:?}",
                f.name
            );
            if s == StrategyKind::Tiered {
                assert_eq!(rep.strategy, StrategyKind::Tiered);
                // both tiers serve the restore; with the default costs (a
                // slow fault of a disk's 61 us, held to 1.10x) the split
                // counting its mappings keeps 8-100% of these functions'
                // pages slow, where splitting page by page kept over 30%
                assert!(
                    rep.figures.slow_tier_share > 0.05,
                    "{}: slow share {}",
                    f.name,
                    rep.figures.slow_tier_share
                );
            }
        }
    }
}

#[test]
fn reap_records_then_prefetches_with_the_same_outputs() {
    let w = worker();
    let t = tier("reap");
    let snap = w.snapshot("json_serdes", &t).unwrap();
    let (plain, _) = out_of(w, &snap, StrategyKind::Uffd, InputSize::II);
    let (recorded, rep) = out_of(w, &snap, StrategyKind::Reap, InputSize::II);
    assert_eq!(rep.figures.ws_mode, WsMode::Record);
    assert!(snap.dir.join(WS_INDEX).exists() && snap.dir.join(WS_IMAGE).exists());
    let (mut sb, rep) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Reap))
        .unwrap();
    assert_eq!(rep.figures.ws_mode, WsMode::Prefetch);
    assert!(rep.figures.ws_pages > 50, "{rep:?}");
    let prefetched = invoke(&mut sb, InputSize::II, T).unwrap().output;
    let after = sb.pager().unwrap().stats.faults();
    assert_eq!(plain, recorded);
    assert_eq!(plain, prefetched);
    w.check("json_serdes", InputSize::II, &prefetched).unwrap();
    // the same input touches the same pages: (almost) nothing is left to fault
    assert!(
        after * 20 < rep.figures.ws_pages,
        "{after} faults after prefetching {} pages",
        rep.figures.ws_pages
    );
    assert!(!sb.first_response().unwrap().drift);
}

#[test]
fn drift_marks_the_working_set_for_re_recording() {
    let w = worker();
    let t = tier("drift");
    let snap = w.snapshot("matmul", &t).unwrap();
    let (_, rep) = out_of(w, &snap, StrategyKind::Reap, InputSize::I);
    assert_eq!(rep.figures.ws_mode, WsMode::Record);
    // a larger input touches memory the small one never did; with a strict
    // drift share those faults mark the working set stale
    let cfg = SandboxConfig {
        drift_share: 0.001,
        ..SandboxConfig::default()
    };
    let (mut sb, rep) = thaw_checkpoint::restore(RestoreArgs::new(
        &snap,
        &w.root.path,
        &w.root.hash,
        StrategyKind::Reap,
        &cfg,
    ))
    .unwrap();
    assert_eq!(rep.figures.ws_mode, WsMode::Prefetch);
    w.check(
        "matmul",
        InputSize::III,
        &invoke(&mut sb, InputSize::III, T).unwrap().output,
    )
    .unwrap();
    let o = sb.first_response().unwrap().clone();
    assert!(
        o.drift,
        "no drift after {} faults on a {}-page working set",
        o.faults_after_prefetch, rep.figures.ws_pages
    );
    assert!(snap.dir.join(WS_STALE).exists());
    drop(sb);
    let (_, rep) = out_of(w, &snap, StrategyKind::Reap, InputSize::III);
    assert_eq!(
        rep.figures.ws_mode,
        WsMode::Record,
        "a drifted working set is recorded again"
    );
    assert!(!snap.dir.join(WS_STALE).exists());
    let (_, rep) = out_of(w, &snap, StrategyKind::Reap, InputSize::III);
    assert_eq!(rep.figures.ws_mode, WsMode::Prefetch);
}

fn flip_byte(path: &std::path::Path, at: usize) {
    let mut d = std::fs::read(path).unwrap();
    let i = at.min(d.len() - 1);
    d[i] ^= 0x5a;
    std::fs::write(path, d).unwrap();
}

#[test]
fn corrupt_or_stale_working_sets_and_tier_layouts_fall_back_to_uffd() {
    let w = worker();
    let t = tier("fallback");
    let slow = tier("fallback-slow");
    let snap = w.snapshot("helloworld", &t).unwrap();
    let (plain, _) = out_of(w, &snap, StrategyKind::Uffd, InputSize::I);

    out_of(w, &snap, StrategyKind::Reap, InputSize::I); // records
    flip_byte(&snap.dir.join(WS_IMAGE), 5000);
    let (out, rep) = out_of(w, &snap, StrategyKind::Reap, InputSize::I);
    assert!(rep.figures.ws_warning.contains("checksum"), "{rep:?}");
    assert_eq!(out, plain);
    // that restore recorded a fresh, valid working set
    assert_eq!(
        out_of(w, &snap, StrategyKind::Reap, InputSize::I)
            .1
            .figures
            .ws_mode,
        WsMode::Prefetch
    );

    // a working set from another snapshot of the same function is stale
    // bound: a test tier removes its directory when dropped
    let other_tier = tier("fallback-other");
    let other = w.snapshot("helloworld", &other_tier).unwrap();
    for f in [WS_IMAGE, WS_INDEX] {
        std::fs::copy(snap.dir.join(f), other.dir.join(f)).unwrap();
    }
    let (out, rep) = out_of(w, &other, StrategyKind::Reap, InputSize::I);
    assert!(
        rep.figures.ws_warning.contains("stale")
            || rep.figures.ws_warning.contains("another snapshot"),
        "{rep:?}"
    );
    assert_eq!(out, plain);

    // tier layout: missing, corrupt, and a damaged slow file
    let (_, rep) = out_of(w, &snap, StrategyKind::Tiered, InputSize::I);
    assert_eq!(rep.strategy, StrategyKind::Uffd, "no layout yet: {rep:?}");
    w.make_tiered(
        "helloworld",
        &t,
        &slow,
        &[InputSize::I],
        1,
        &CostParams::default(),
    )
    .unwrap();
    let (out, rep) = out_of(w, &snap, StrategyKind::Tiered, InputSize::I);
    assert_eq!(
        (rep.strategy, out.clone()),
        (StrategyKind::Tiered, plain.clone())
    );
    let layout_raw = std::fs::read(snap.dir.join(TIERS_FILE)).unwrap();
    std::fs::write(
        snap.dir.join(TIERS_FILE),
        &layout_raw[..layout_raw.len() / 2],
    )
    .unwrap();
    let (out, rep) = out_of(w, &snap, StrategyKind::Tiered, InputSize::I);
    assert!(rep.figures.tier_warning.contains("corrupt"), "{rep:?}");
    assert_eq!((rep.strategy, out), (StrategyKind::Uffd, plain.clone()));
    std::fs::write(snap.dir.join(TIERS_FILE), &layout_raw).unwrap();
    let tl: thaw_memory::tiering::TierLayout = serde_json::from_slice(&layout_raw).unwrap();
    let len = std::fs::metadata(&tl.slow.path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&tl.slow.path)
        .unwrap()
        .set_len(len - 4096)
        .unwrap();
    let (out, rep) = out_of(w, &snap, StrategyKind::Tiered, InputSize::I);
    assert!(rep.figures.tier_warning.contains("truncated"), "{rep:?}");
    assert_eq!(out, plain);
}

#[test]
fn sixteen_concurrent_reap_and_dax_restores() {
    let w = worker();
    let t = tier("concurrent");
    let snap = Arc::new(w.snapshot("lr_serving", &t).unwrap());
    let (expected, _) = out_of(w, &snap, StrategyKind::Reap, InputSize::I); // records the working set
    w.check("lr_serving", InputSize::I, &expected).unwrap();
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let snap = snap.clone();
            std::thread::spawn(move || {
                let s = if i % 2 == 0 {
                    StrategyKind::Reap
                } else {
                    StrategyKind::Dax
                };
                let (out, rep) = out_of(worker(), &snap, s, InputSize::I);
                (s, out, rep)
            })
        })
        .collect();
    for h in handles {
        let (s, out, rep) = h.join().expect("restore thread");
        assert_eq!(out, expected, "{s} clone differs");
        if s == StrategyKind::Reap {
            assert_eq!(rep.figures.ws_mode, WsMode::Prefetch);
        }
    }
}

#[test]
fn dax_maps_without_copying_and_shares_pages_between_clones() {
    let w = worker();
    let t = tier("dax");
    let snap = w.snapshot("matmul", &t).unwrap();
    let (mut a, rep) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Dax))
        .unwrap();
    assert_eq!(rep.copied_bytes, 0, "dax copies nothing before resume");
    assert!(rep.mapped_bytes > 0);
    let (mut b, _) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Eager))
        .unwrap();
    // a restored dax clone's private memory is far below an eager clone's
    // full copy; measured before either runs its invocation, whose own
    // allocations (several MiB for matmul) are the same for both and would
    // blur the comparison. Anonymous memory only: the runtime root's page
    // cache is charged to whichever clone reads it first, which made the
    // whole charge flaky.
    let (dax_bytes, eager_bytes) = (a.memory_anon().unwrap(), b.memory_anon().unwrap());
    assert!(
        dax_bytes * 2 < eager_bytes,
        "dax clone holds {dax_bytes} bytes after its restore, eager {eager_bytes}"
    );
    w.check(
        "matmul",
        InputSize::I,
        &invoke(&mut a, InputSize::I, T).unwrap().output,
    )
    .unwrap();
    w.check(
        "matmul",
        InputSize::I,
        &invoke(&mut b, InputSize::I, T).unwrap().output,
    )
    .unwrap();
    // the first dax restore recorded what its invocation wrote; the next one
    // copies those pages before resume and still answers correctly
    assert_eq!(rep.figures.write_set_pages, 0);
    let (mut c, rep) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Dax))
        .unwrap();
    assert!(rep.figures.write_set_pages > 10, "{rep:?}");
    w.check(
        "matmul",
        InputSize::I,
        &invoke(&mut c, InputSize::I, T).unwrap().output,
    )
    .unwrap();
    // a corrupt write set is refused (and re-recorded), never trusted
    let ws_file = snap.dir.join(thaw_memory::write_set::WRITE_SET_FILE);
    std::fs::write(&ws_file, b"{").unwrap();
    let (mut d, rep) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Dax))
        .unwrap();
    assert_eq!(rep.figures.write_set_pages, 0);
    w.check(
        "matmul",
        InputSize::I,
        &invoke(&mut d, InputSize::I, T).unwrap().output,
    )
    .unwrap();
    let again: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&ws_file).unwrap()).unwrap();
    assert!(
        again["ranges"].as_array().is_some_and(|r| !r.is_empty()),
        "re-recorded"
    );
}

/// ptrace for the test below: raw requests, checked.
fn pt(req: libc::c_uint, pid: i32, addr: usize, data: usize) {
    // SAFETY: every caller passes data that is a plain value or points at a
    // live buffer of the size the request reads or writes.
    let r = unsafe { libc::ptrace(req, pid, addr, data) };
    assert!(
        r >= 0,
        "ptrace({req:#x}, {pid}): {}",
        std::io::Error::last_os_error()
    );
}

fn wait_ptrace_stop(pid: i32) {
    let mut status = 0;
    // SAFETY: status is a valid out pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(libc::WIFSTOPPED(status), "restorer died: {status:#x}");
}

/// Stops `pid` at the entry of its `userfaultfd` call (its mappings are built
/// then, the lazy ones not yet registered), reads its /proc/PID/cmdline there
/// as ps does, and lets it go. `traced` is told once every system call stops.
fn read_cmdline_before_uffd(pid: i32, traced: std::sync::mpsc::Sender<()>) -> Vec<u8> {
    const PTRACE_SEIZE: libc::c_uint = 0x4206;
    const PTRACE_INTERRUPT: libc::c_uint = 0x4207;
    const PTRACE_GETREGSET: libc::c_uint = 0x4204;
    const NT_PRSTATUS: usize = 1;
    const ORIG_RAX: usize = 15;
    pt(PTRACE_SEIZE, pid, 0, libc::PTRACE_O_TRACESYSGOOD as usize);
    pt(PTRACE_INTERRUPT, pid, 0, 0);
    wait_ptrace_stop(pid);
    let mut told = Some(traced);
    loop {
        pt(libc::PTRACE_SYSCALL, pid, 0, 0);
        if let Some(t) = told.take() {
            t.send(()).unwrap();
        }
        wait_ptrace_stop(pid);
        let mut regs = [0u64; 27];
        let mut iov = libc::iovec {
            iov_base: regs.as_mut_ptr().cast(),
            iov_len: std::mem::size_of_val(&regs),
        };
        pt(
            PTRACE_GETREGSET,
            pid,
            NT_PRSTATUS,
            &mut iov as *mut _ as usize,
        );
        if regs[ORIG_RAX] == libc::SYS_userfaultfd as u64 {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
            pt(libc::PTRACE_DETACH, pid, 0, 0);
            return cmdline;
        }
    }
}

/// Regression: `ps` reading a restorer's cmdline while it rebuilt the runtime
/// mapped the zero page into the runtime's stack (the restorer's argv sits in
/// the exec stack's top page, which the runtime's stack mapping replaces), and
/// the page server and the REAP prefetch took that page as already served: the
/// runtime resumed with a zeroed stack top and returned to address 0.
#[test]
fn a_cmdline_read_during_the_restore_does_not_zero_lazy_pages() {
    let w = worker();
    let t = tier("cmdline");
    let snap = w.snapshot("helloworld", &t).unwrap();
    let (expected, _) = out_of(w, &snap, StrategyKind::Reap, InputSize::I); // records the working set
    for (strategy, ws_mode) in [
        (StrategyKind::Uffd, WsMode::None),
        (StrategyKind::Reap, WsMode::Prefetch),
    ] {
        let mut tracer = None;
        let mut on_spawn = |pid| {
            let (tx, rx) = std::sync::mpsc::channel();
            tracer = Some(std::thread::spawn(move || {
                read_cmdline_before_uffd(pid, tx)
            }));
            rx.recv().expect("tracer started");
        };
        let restored = thaw_checkpoint::restore(RestoreArgs {
            on_spawn: Some(&mut on_spawn),
            ..RestoreArgs::new(&snap, &w.root.path, &w.root.hash, strategy, &w.cfg)
        });
        let cmdline = tracer.expect("restorer spawned").join().expect("tracer");
        // argv ("thaw-restorer") points into what is now the runtime's stack
        // mapping, still empty: the read maps the zero page there
        assert_eq!(cmdline, [0u8; 14], "the read reached the stack mapping");
        let (mut sb, rep) = restored.unwrap_or_else(|e| panic!("{strategy}: {e:#}"));
        assert_eq!(rep.figures.ws_mode, ws_mode);
        let out = invoke(&mut sb, InputSize::I, T)
            .unwrap_or_else(|e| panic!("{strategy}: {e:#}"))
            .output;
        assert_eq!(out, expected, "{strategy}");
    }
}

/// Drops the page cache of `path` and reads it again in 4 KiB folios: one
/// page after the other with readahead off.
fn small_folios(path: &std::path::Path) {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    // SAFETY: advice on our own descriptor.
    unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
    }
    let mut page = [0u8; 4096];
    for off in (0..len).step_by(4096) {
        f.read_at(&mut page, off).unwrap();
    }
}

/// The pieces of `file` the process `pid` maps with 2 MiB entries, in KiB
/// (`FilePmdMapped` of its mappings of that file).
fn pmd_mapped_kib(pid: i32, file: &str) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            ours = line.ends_with(file);
        } else if ours && first == "FilePmdMapped:" {
            kib += words.next().unwrap().parse::<u64>().unwrap();
        }
    }
    kib
}

/// Node.js's library is mapped 2 MiB-aligned in its snapshot: a restore has
/// its page cache in 2 MiB folios first (a copy in small folios is read
/// again), so the restored runtime maps its code with 2 MiB entries, one
/// fault each, and answers as a fresh one.
#[test]
fn a_restored_node_maps_its_library_code_with_2_mib_entries() {
    let w = worker();
    let f = "node_helloworld";
    let lib = "libnode.so.108";
    let t = tier("node-huge");
    let snap = w.snapshot(f, &t).unwrap();
    // the library's page cache in small folios, as ordinary faults leave
    // it (no other test of this binary restores Node.js: the worker checks
    // a file once per process)
    let host = w.root.path.join("usr/lib/x86_64-linux-gnu").join(lib);
    small_folios(&host);
    for s in [StrategyKind::Mmap, StrategyKind::Reap] {
        let (mut sb, _) = w
            .restore(RestoreRequest::new(&snap, s))
            .unwrap_or_else(|e| panic!("{s}: {e:#}"));
        let out = invoke(&mut sb, InputSize::I, T).unwrap().output;
        w.check(f, InputSize::I, &out).unwrap();
        let kib = pmd_mapped_kib(sb.pid(), lib);
        assert!(
            kib >= 2048,
            "{s}: the restored runtime maps none of {lib} with 2 MiB entries (FilePmdMapped {kib} kB): the root's file system needs large folios (ext4 on Linux 6.16 or later)"
        );
    }
}
