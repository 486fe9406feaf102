//! Each descriptor kind's check, seen through a decode: a record a restore
//! must not trust is refused with the message naming the descriptor and
//! what is wrong with it (the exact words, so they stay the same).
use super::golden::every_kind;
use super::*;

/// An edit of [`every_kind`]'s records and the refusal it must bring.
type Case<'a> = (&'a dyn Fn(&mut Vec<SavedFd>), &'a str);

/// Each case's edit, decoded, is refused as corrupt with its message.
#[track_caller]
fn refused(cases: &[Case<'_>]) {
    for (edit, want) in cases {
        let mut s = every_kind();
        edit(&mut s.fds);
        match ProcessState::decode(&s.encode()) {
            Err(StateError::Corrupt(m)) => assert_eq!(m, format!("process state: {want}")),
            other => panic!("{want}: not refused as corrupt: {other:?}"),
        }
    }
}

/// The record of descriptor `fd`.
fn at(fds: &mut [SavedFd], fd: i32) -> &mut FdKind {
    &mut fds.iter_mut().find(|f| f.fd == fd).expect("a record").kind
}

fn socket(fds: &mut [SavedFd], fd: i32) -> &mut SavedSocket {
    match at(fds, fd) {
        FdKind::Socket(s) => s,
        k => panic!("descriptor {fd} is {k:?}"),
    }
}

/// Descriptor `fd`'s pipe record's fields: first, size, fifo, unread.
fn pipe(fds: &mut [SavedFd], fd: i32) -> (&mut i32, &mut u32, &mut Option<String>, &mut Blob) {
    match at(fds, fd) {
        FdKind::Pipe {
            first,
            size,
            fifo,
            unread,
            ..
        } => (first, size, fifo, unread),
        k => panic!("descriptor {fd} is {k:?}"),
    }
}

/// The memfd record's (descriptor 14) name, seals and data.
fn memfd(fds: &mut [SavedFd]) -> (&mut String, &mut u32, &mut Blob) {
    match at(fds, 14) {
        FdKind::Memfd {
            name, seals, data, ..
        } => (name, seals, data),
        k => panic!("descriptor 14 is {k:?}"),
    }
}

/// The epoll record's (descriptor 11) watches.
fn watches(fds: &mut [SavedFd]) -> &mut Vec<EpollWatch> {
    match at(fds, 11) {
        FdKind::Epoll { watches } => watches,
        k => panic!("descriptor 11 is {k:?}"),
    }
}

#[test]
fn every_kind_state_passes_and_any_signalfd_mask_is_kept() {
    let mut s = every_kind();
    assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
    *at(&mut s.fds, 13) = FdKind::SignalFd { mask: u64::MAX };
    assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
}

#[test]
fn dups_and_files_are_refused_by_name() {
    let path = |p: &str| FdKind::File {
        path: p.into(),
        pos: 0,
    };
    refused(&[
        (
            &|f| *at(f, 5) = FdKind::Dup { of: 5 },
            "descriptor 5: a dup of 5, which is no earlier record",
        ),
        (
            &|f| {
                *at(f, 6) = FdKind::Dup { of: 4 };
                *at(f, 7) = FdKind::Dup { of: 6 };
            },
            "descriptor 7: a dup of 6, which is no earlier record",
        ),
        (
            &|f| *at(f, 4) = path("/tmp/./x"),
            "descriptor 4: path \"/tmp/./x\" is not a plain path",
        ),
    ]);
}

#[test]
fn pipes_and_fifos_are_refused_by_name() {
    refused(&[
        (
            &|f| *pipe(f, 6).1 = 5000,
            "descriptor 6: a pipe of 5000 bytes",
        ),
        (
            &|f| {
                *pipe(f, 7).3 = Blob {
                    image_off: 8192,
                    len: 1,
                }
            },
            "descriptor 7: 1 unread bytes in a pipe of 8192",
        ),
        (
            &|f| pipe(f, 6).3.image_off = 100,
            "descriptor 6: content at 100+5 is not after the pages",
        ),
        (
            &|f| *pipe(f, 7).1 = 4096,
            "descriptor 7: the other end of pipe 6, which is not",
        ),
        (
            &|f| *pipe(f, 9).2 = Some("/tmp/d/other".into()),
            "descriptor 9: a FIFO opened first at 8, which is not",
        ),
        (
            &|f| *pipe(f, 9).0 = 6,
            "descriptor 9: a FIFO opened first at 6, which is not",
        ),
        (
            &|f| *pipe(f, 8).2 = Some("/etc/fifo".into()),
            "descriptor 8: \"/etc/fifo\" is not on a saved mount",
        ),
    ]);
}

#[test]
fn eventfds_epolls_and_timerfds_are_refused_by_name() {
    let eventfd = FdKind::EventFd {
        count: u64::MAX,
        semaphore: false,
    };
    refused(&[
        (
            &|f| *at(f, 10) = eventfd.clone(),
            "descriptor 10: an eventfd count of 2^64-1",
        ),
        (
            &|f| {
                let w = watches(f);
                w.resize(MAX_WATCHES + 1, w[0]);
            },
            "descriptor 11: 1025 epoll watches",
        ),
        (
            &|f| watches(f)[1].fd = 6,
            "descriptor 11: watches descriptor 6, which it cannot",
        ),
        (
            &|f| watches(f)[0].fd = 11,
            "descriptor 11: watches descriptor 11, which it cannot",
        ),
        (
            &|f| {
                if let FdKind::TimerFd { value_ns, .. } = at(f, 12) {
                    *value_ns = 1 << 62;
                }
            },
            "descriptor 12: a timer on clock 7",
        ),
    ]);
}

#[test]
fn memfds_are_refused_by_name() {
    let past_the_end = format!(
        "descriptor 14: content at {}+4000 is not after the pages",
        u64::MAX
    );
    refused(&[
        (&|f| *memfd(f).1 = 0x40, "descriptor 14: memfd seals 0x40"),
        (
            &|f| *memfd(f).0 = "a\0b".into(),
            "descriptor 14: a malformed memfd",
        ),
        (
            &|f| *memfd(f).0 = "n".repeat(250),
            "descriptor 14: a malformed memfd",
        ),
        (
            &|f| memfd(f).2.len = 4101,
            "descriptor 14: a malformed memfd",
        ),
        (&|f| memfd(f).2.image_off = u64::MAX, &past_the_end),
    ]);
}

#[test]
fn sockets_are_refused_by_name() {
    let not_to_an_abstract_address =
        "descriptor 20: a connection to remake that is not to an abstract unix address";
    refused(&[
        (
            &|f| socket(f, 17).family = 16,
            "descriptor 17: a socket of family 16, type 1, protocol 6",
        ),
        (
            &|f| socket(f, 17).addr[0] = 10,
            "descriptor 17: a malformed socket address",
        ),
        (
            &|f| socket(f, 18).options |= 32,
            "descriptor 18: malformed socket options",
        ),
        (
            &|f| socket(f, 17).backlog = Some(65536),
            "descriptor 17: malformed socket options",
        ),
        (
            &|f| socket(f, 19).backlog = Some(1),
            "descriptor 19: a dropped connection that is not an unbound TCP socket",
        ),
        (
            &|f| socket(f, 20).addr[2] = b'/',
            not_to_an_abstract_address,
        ),
        (
            &|f| socket(f, 20).options |= SOCK_OPT_REUSEADDR,
            not_to_an_abstract_address,
        ),
        (
            &|f| {
                socket(f, 17).queued = Blob {
                    image_off: 8192,
                    len: 1,
                }
            },
            "descriptor 17: queued bytes on an unconnected socket",
        ),
        (
            &|f| socket(f, 16).ty = libc::SOCK_STREAM as u32,
            "descriptor 15: half of a socketpair with 16, which is not",
        ),
        (
            &|f| socket(f, 15).queued.image_off = 0,
            "descriptor 15: content at 0+11 is not after the pages",
        ),
    ]);
}
