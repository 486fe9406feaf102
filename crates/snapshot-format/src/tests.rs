use super::*;
use proptest::prelude::*;
use thaw_memory::{Region, Run};

/// A valid thread.
fn thread(name: &str) -> ThreadState {
    ThreadState {
        name: name.into(),
        regs: vec![0; NREGS],
        xstate: vec![0u8; 832],
        sigmask: 0,
        kernel: ThreadKernel {
            altstack: (0, SS_DISABLE, 0),
            ..ThreadKernel::default()
        },
    }
}

/// A small valid state.
fn valid() -> ProcessState {
    ProcessState {
        version: STATE_VERSION,
        threads: vec![thread("main")],
        mm: MmLayout::default(),
        auxv: vec![6, 4096, 0, 0],
        vdso: VdsoBlock {
            start: 0x7fff_f7fc_2000,
            vdso_offset: 0x6000,
            pieces: vec![(0, 0x6000), (0x6000, 0x2000)],
        },
        vmas: vec![Vma {
            start: 0x1000_0000,
            end: 0x1000_2000,
            prot: 3,
            path: None,
            file_off: 0,
            growsdown: false,
            name: String::new(),
            shared: None,
        }],
        memory: MemoryLayout {
            regions: vec![Region {
                start: 0x1000_0000,
                end: 0x1000_2000,
                anonymous: true,
                runs: vec![Run {
                    addr: 0x1000_0000,
                    len: 4096,
                    file_off: 0,
                }],
            }],
            image_len: 4096,
        },
        argv: vec![],
        files: vec![
            SavedFile {
                path: "/tmp/d".into(),
                kind: FileKind::Dir,
                mode: 0o755,
                mtime_ns: 1,
                image_off: 0,
                len: 0,
                target: String::new(),
            },
            SavedFile {
                path: "/tmp/d/model.bin".into(),
                kind: FileKind::File,
                mode: 0o644,
                mtime_ns: 2,
                image_off: 4096,
                len: 1000,
                target: String::new(),
            },
            SavedFile {
                path: "/dev/shm/link".into(),
                kind: FileKind::Symlink,
                mode: 0o777,
                mtime_ns: -3,
                image_off: 0,
                len: 0,
                target: "/tmp/d/model.bin".into(),
            },
        ],
        fds: valid_fds(),
        signals: SignalState {
            actions: vec![SigAction {
                sig: 13,
                handler: 1,
                flags: 0x0400_0000,
                restorer: 0x7f00_0000_1000,
                mask: 0,
            }],
            ..SignalState::default()
        },
        shared: vec![],
    }
}

/// One record of each kind, contents after the 4096 bytes of pages.
fn valid_fds() -> Vec<SavedFd> {
    let fd = |fd: i32, kind: FdKind| SavedFd {
        fd,
        flags: 0o2000002,
        kind,
    };
    let blob = |len| Blob {
        image_off: 8192,
        len,
    };
    let sock = |pair: Option<i32>, queued| SavedSocket {
        family: libc::AF_UNIX as u32,
        ty: libc::SOCK_STREAM as u32,
        protocol: 0,
        addr: Vec::new(),
        backlog: None,
        options: 0,
        pair,
        shutdown: 0,
        queued,
    };
    vec![
        fd(
            4,
            FdKind::File {
                path: "/tmp/d/model.bin".into(),
                pos: 10,
            },
        ),
        fd(5, FdKind::Dup { of: 4 }),
        fd(
            6,
            FdKind::Pipe {
                first: 6,
                read: true,
                size: 65536,
                fifo: None,
                unread: blob(9),
            },
        ),
        fd(
            7,
            FdKind::Pipe {
                first: 6,
                read: false,
                size: 65536,
                fifo: None,
                unread: Blob::default(),
            },
        ),
        fd(
            8,
            FdKind::EventFd {
                count: 3,
                semaphore: true,
            },
        ),
        fd(
            9,
            FdKind::TimerFd {
                clock: 1,
                value_ns: 5,
                interval_ns: 0,
                ticks: 0,
            },
        ),
        fd(10, FdKind::SignalFd { mask: 1 << 11 }),
        fd(
            11,
            FdKind::Memfd {
                name: "m".into(),
                pos: 2,
                size: 9,
                seals: 2,
                data: blob(9),
            },
        ),
        fd(12, FdKind::Socket(sock(Some(13), blob(4)))),
        fd(13, FdKind::Socket(sock(Some(12), Blob::default()))),
        fd(
            14,
            FdKind::Socket(SavedSocket {
                family: libc::AF_INET as u32,
                addr: vec![2, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                backlog: Some(128),
                options: SOCK_OPT_REUSEADDR,
                ..sock(None, Blob::default())
            }),
        ),
        fd(
            15,
            FdKind::Epoll {
                watches: vec![
                    EpollWatch {
                        fd: 6,
                        events: 1,
                        data: 6,
                    },
                    EpollWatch {
                        fd: 8,
                        events: 1 | 1 << 31,
                        data: 8,
                    },
                    EpollWatch {
                        fd: 12,
                        events: 1,
                        data: 12,
                    },
                ],
            },
        ),
    ]
}

/// The message of a state refused as corrupt (any other outcome fails).
fn corrupt(r: Result<ProcessState, StateError>) -> String {
    match r {
        Err(StateError::Corrupt(m)) => m,
        other => panic!("not refused as corrupt: {other:?}"),
    }
}

#[test]
fn descriptor_records_round_trip_and_bad_ones_are_named() {
    let s = valid();
    assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
    let bad = |edit: &dyn Fn(&mut Vec<SavedFd>)| {
        let mut b = valid();
        edit(&mut b.fds);
        corrupt(ProcessState::decode(&b.encode()))
    };
    assert!(bad(&|f| f[0].fd = 3).contains("descriptor 3"));
    assert!(bad(&|f| f.swap(0, 1)).contains("out of order"));
    assert!(bad(&|f| f[1].kind = FdKind::Dup { of: 9 }).contains("a dup of 9"));
    assert!(bad(&|f| f[0].kind = FdKind::File {
        path: "tmp/x".into(),
        pos: 0
    })
    .contains("not absolute"));
    assert!(bad(&|f| f[0].kind = FdKind::File {
        path: "/tmp/../etc".into(),
        pos: 0
    })
    .contains("plain path"));
    // a pipe's unread bytes inside the pages, or more than the pipe holds
    assert!(
        bad(&|f| if let FdKind::Pipe { unread, .. } = &mut f[2].kind {
            unread.image_off = 0
        })
        .contains("not after the pages")
    );
    assert!(
        bad(&|f| if let FdKind::Pipe { unread, .. } = &mut f[2].kind {
            unread.len = 1 << 20
        })
        .contains("unread bytes")
    );
    assert!(
        bad(&|f| if let FdKind::Pipe { first, .. } = &mut f[3].kind {
            *first = 4
        })
        .contains("other end")
    );
    assert!(bad(&|f| f[4].kind = FdKind::EventFd {
        count: u64::MAX,
        semaphore: false
    })
    .contains("eventfd"));
    assert!(bad(&|f| f[5].kind = FdKind::TimerFd {
        clock: 8,
        value_ns: 0,
        interval_ns: 0,
        ticks: 0
    })
    .contains("clock 8"));
    assert!(bad(&|f| if let FdKind::Socket(s) = &mut f[9].kind {
        s.pair = Some(14)
    })
    .contains("socketpair"));
    assert!(bad(&|f| if let FdKind::Socket(s) = &mut f[10].kind {
        s.addr = vec![10, 0, 1]
    })
    .contains("address"));
    assert!(
        bad(&|f| if let FdKind::Epoll { watches } = &mut f[11].kind {
            watches[0].fd = 15
        })
        .contains("watches descriptor 15")
    );
    assert!(
        bad(&|f| if let FdKind::Epoll { watches } = &mut f[11].kind {
            watches[0].fd = 3
        })
        .contains("watches descriptor 3")
    );
    assert!(bad(&|f| f[0].flags |= 0o100).contains("unknown flags"));
    assert!(bad(&|f| {
        let extra = f[0].clone();
        f.extend((0..MAX_FDS).map(|i| SavedFd {
            fd: 100 + i32::try_from(i).unwrap(),
            ..extra.clone()
        }));
    })
    .contains("descriptors (at most"));
}

#[test]
fn valid_state_round_trips_and_bad_ones_are_named() {
    let s = valid();
    assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
    let mut bad = valid();
    bad.vmas[0].start = thaw_restorer::RESTORER_BASE;
    bad.vmas[0].end = thaw_restorer::RESTORER_BASE + 0x2000;
    bad.memory.regions[0].start = bad.vmas[0].start;
    bad.memory.regions[0].end = bad.vmas[0].end;
    bad.memory.regions[0].runs.clear();
    assert!(corrupt(ProcessState::decode(&bad.encode())).contains("restorer"));
    let mut bad = valid();
    bad.vmas[0].path = Some("/../../etc/passwd".into());
    bad.memory.regions[0].anonymous = false;
    assert!(ProcessState::decode(&bad.encode()).is_err());
    let mut bad = valid();
    bad.threads[0].regs.pop();
    assert!(ProcessState::decode(&bad.encode()).is_err());
    let mut bad = valid();
    bad.threads.clear();
    assert!(ProcessState::decode(&bad.encode()).is_err(), "no thread");
    let mut bad = valid();
    bad.files.swap(0, 1);
    assert!(corrupt(ProcessState::decode(&bad.encode())).contains("before its directory"));
    let mut bad = valid();
    bad.files[1].path = "/tmp/d/../../etc/passwd".into();
    assert!(ProcessState::decode(&bad.encode()).is_err());
    let mut bad = valid();
    bad.files[0].path = "/etc".into();
    assert!(ProcessState::decode(&bad.encode()).is_err());
    let mut bad = valid();
    bad.version = 1;
    assert_eq!(
        ProcessState::decode(&bad.encode()),
        Err(StateError::Version {
            found: 1,
            want: STATE_VERSION
        })
    );
}

#[test]
fn corrupt_thread_records_are_refused_by_name() {
    let mut s = valid();
    s.threads.push(thread("worker"));
    assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
    let bad = |f: &dyn Fn(&mut ThreadKernel)| {
        let mut b = s.clone();
        f(&mut b.threads[1].kernel);
        corrupt(ProcessState::decode(&b.encode()))
    };
    let e = bad(&|k| k.robust_list = (0x1000_0000, 4096));
    assert!(
        e.contains("thread 1 (worker)") && e.contains("robust"),
        "{e}"
    );
    assert!(bad(&|k| k.rseq = (0x1000_0010, 32, 0)).contains("rseq"));
    assert!(bad(&|k| k.rseq = (0x1000_0000, 1 << 20, 0)).contains("rseq"));
    assert!(bad(&|k| k.altstack = (1 << 47, 0, 8192)).contains("signal stack"));
    assert!(bad(&|k| k.altstack = (0x1000, 0x10, 8192)).contains("signal stack"));
    assert!(bad(&|k| k.clear_tid = u64::MAX).contains("thread id"));
    let mut b = s.clone();
    b.threads[1].xstate = vec![0u8; 100];
    assert!(
        ProcessState::decode(&b.encode()).is_err(),
        "short XSAVE area"
    );
    let mut b = s.clone();
    b.threads = vec![thread("t"); thaw_restorer::MAX_THREADS + 1];
    assert!(
        ProcessState::decode(&b.encode()).is_err(),
        "too many threads"
    );
}

#[test]
fn truncated_corrupted_and_json_states_are_refused() {
    let good = valid().encode();
    let err = |d: &[u8]| corrupt(ProcessState::decode(d));
    for cut in [0, 7, HEADER - 1, HEADER, good.len() - 1] {
        assert!(err(&good[..cut]).contains("corrupt"), "cut at {cut}");
    }
    // a flipped bit anywhere in the body fails the CRC
    for at in [HEADER, HEADER + 100, good.len() - 1] {
        let mut d = good.clone();
        d[at] ^= 0x10;
        assert!(err(&d).contains("CRC32"), "flip at {at}");
    }
    // a consistent CRC over a body whose first count (threads) runs past
    // the end: refused before it is allocated for
    let d = with_body(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(err(&d).contains("end of buffer"), "{}", err(&d));
    // bytes after the state
    let mut body = good[HEADER..].to_vec();
    body.push(0);
    assert!(err(&with_body(&body)).contains("1 bytes after the end"));
    // the old JSON form
    let json = serde_json::to_vec(&valid()).unwrap();
    assert!(err(&json).contains("THAWSTAT"));
}

/// A state file of this version around `body`, its header consistent.
fn with_body(body: &[u8]) -> Vec<u8> {
    let mut d = MAGIC.to_vec();
    d.extend_from_slice(&STATE_VERSION.to_le_bytes());
    d.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    d.extend_from_slice(&(body.len() as u64).to_le_bytes());
    d.extend_from_slice(body);
    d
}

#[test]
fn states_of_other_versions_are_refused_with_a_word_to_snapshot_again() {
    let good = valid().encode();
    // version 6 (the hand-written form) and a later one: same header, no parse
    for found in [6u32, STATE_VERSION + 1] {
        let mut d = good.clone();
        d[8..12].copy_from_slice(&found.to_le_bytes());
        let e = ProcessState::decode(&d).unwrap_err();
        assert_eq!(
            e,
            StateError::Version {
                found,
                want: STATE_VERSION
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("version {found}")) && msg.contains("take the snapshot again"),
            "{msg}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
    #[test]
    fn decoding_arbitrary_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = ProcessState::decode(&data);
    }

    #[test]
    fn decoding_mutated_states_never_panics(pos in 0usize..4096, byte in any::<u8>(), n in 1u8..8) {
        let mut data = valid().encode();
        for k in 0..n {
            let i = (pos + usize::from(k) * 97) % data.len();
            data[i] = byte.wrapping_add(k);
        }
        let _ = ProcessState::decode(&data);
    }

    /// Past the CRC: the body's parse and checks see every mutation.
    #[test]
    fn decoding_mutated_bodies_never_panics(pos in 0usize..4096, byte in any::<u8>(), n in 1u8..8) {
        let mut body = valid().encode()[HEADER..].to_vec();
        for k in 0..n {
            let i = (pos + usize::from(k) * 97) % body.len();
            body[i] = byte.wrapping_add(k);
        }
        let _ = ProcessState::decode(&with_body(&body));
    }
}

mod fd_refusals;
mod golden;
