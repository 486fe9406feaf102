//! The plan's layout, checks and the restorer's status report.
use super::*;

#[test]
fn elf_is_embedded_and_linked_at_base() {
    assert_eq!(&RESTORER_ELF[..4], b"\x7fELF");
    // e_entry lies inside the restorer span
    let entry = u64::from_le_bytes(RESTORER_ELF[24..32].try_into().unwrap());
    assert!((RESTORER_BASE..RESTORER_BASE + RESTORER_SPAN).contains(&entry));
}

#[test]
fn plan_encoding_has_c_layout_sizes() {
    let mut p = Plan::default();
    p.header.vdso_pieces = vec![(0, 4096)];
    p.vmas.push(PlanVma::default());
    p.runs.push(PlanRun::default());
    p.threads.push(PlanThread::default());
    p.auxv = vec![0, 0];
    p.filter.push([0; 8]);
    p.frame = vec![0; 16];
    let off = p.add_string("/usr/bin/python3");
    assert_eq!(off, 0);
    let enc = p.encode().unwrap();
    let len = usize::try_from(u64::from_le_bytes(enc[..8].try_into().unwrap())).unwrap();
    assert_eq!(len, enc.len() - 8);
    assert_eq!(len, 296 + 48 + 32 + 80 + 16 + 8 + 16 + 17);
    p.frame = vec![0; 12];
    assert!(p.encode().is_err(), "a frame not a multiple of 8");
    p.frame = vec![0; 16];
    p.threads.push(PlanThread {
        frame_off: 16,
        ..PlanThread::default()
    });
    assert!(p.encode().is_err(), "a thread's frame past the frames");
    p.threads.clear();
    assert!(p.encode().is_err(), "no main thread");
}

#[test]
fn encode_refuses_descriptor_records_that_point_outside() {
    let mut p = Plan::default();
    p.header.vdso_pieces = vec![(0, 4096)];
    p.threads.push(PlanThread::default());
    p.frame = vec![0; 16];
    let path = p.add_string("/tmp/x");
    let fd = |reference, path_off, path_len| PlanFd {
        fd: 4,
        reference,
        path_off,
        path_len,
        ..PlanFd::default()
    };
    let with = |fds: Vec<PlanFd>, watches: Vec<PlanWatch>| Plan {
        fds,
        watches,
        ..p.clone()
    };
    // no reference, no path; a path inside the strings; a dup of the first
    let good = with(vec![fd(-1, -1, 0), fd(-1, path, 6), fd(0, -1, 0)], vec![]);
    assert!(good.encode().is_ok());
    for bad in [
        fd(1, -1, 0),        // references itself
        fd(7, -1, 0),        // references a later record
        fd(-1, path, 7),     // path runs past the strings' end
        fd(-1, i32::MAX, 1), // offset past the end
    ] {
        assert!(
            with(vec![fd(-1, -1, 0), bad], vec![]).encode().is_err(),
            "{bad:?}"
        );
    }
    for epoll in [-1, 1, i32::MAX] {
        let w = PlanWatch {
            epoll,
            ..PlanWatch::default()
        };
        assert!(
            with(vec![fd(-1, -1, 0)], vec![w]).encode().is_err(),
            "epoll {epoll}"
        );
    }
}

#[test]
fn thread_names_fit_comm() {
    assert_eq!(
        &PlanThread::comm_of("python3.11"),
        b"python3.11\0\0\0\0\0\0"
    );
    // the kernel keeps 15 bytes; a character is never cut in half
    assert_eq!(
        &PlanThread::comm_of("renamed-worker-12345"),
        b"renamed-worker-\0"
    );
    assert_eq!(
        &PlanThread::comm_of("abcdefghijklmn\u{e9}"),
        b"abcdefghijklmn\0\0"
    );
    assert_eq!(PlanThread::comm_of(""), [0; 16]);
}

#[test]
fn step_table_comes_from_plan_h() {
    assert_eq!(STEPS.len(), 22);
    let s = |step| RestorerStatus {
        ok: false,
        err: 0,
        step,
        detail: 0,
        populate_ns: 0,
        setup_ns: 0,
    };
    assert_eq!(s(1).step_name(), "reading the plan");
    assert_eq!(s(13).step_name(), "installing the seccomp filter");
    assert_eq!(s(99).step_name(), "an unknown step");
}

#[test]
fn status_rejects_garbage() {
    assert!(RestorerStatus::decode(&[0u8; 39]).is_err());
    assert!(RestorerStatus::decode(&[0u8; 40]).is_err());
    let mut b = [0u8; 40];
    b[..8].copy_from_slice(&PLAN_MAGIC.to_le_bytes());
    b[8] = 1;
    assert!(RestorerStatus::decode(&b).unwrap().ok);
}
