//! Each descriptor kind's check, seen through a decode: a record a restore
//! must not trust is refused with the message naming the descriptor and
//! what is wrong with it (the exact words, so they stay the same).
use super::golden::every_kind;
use super::*;

/// The message a decode gives once `edit` has changed the records of
/// [`every_kind`] (the state itself must pass).
fn refusal(edit: impl Fn(&mut Vec<SavedFd>)) -> String {
    let mut s = every_kind();
    edit(&mut s.fds);
    match ProcessState::decode(&s.encode()) {
        Err(StateError::Corrupt(m)) => m,
        other => panic!("not refused as corrupt: {other:?}"),
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

#[track_caller]
fn refused(edit: impl Fn(&mut Vec<SavedFd>), want: &str) {
    assert_eq!(refusal(edit), format!("process state: {want}"));
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
    refused(
        |f| *at(f, 5) = FdKind::Dup { of: 5 },
        "descriptor 5: a dup of 5, which is no earlier record",
    );
    refused(
        |f| {
            *at(f, 6) = FdKind::Dup { of: 4 };
            *at(f, 7) = FdKind::Dup { of: 6 };
        },
        "descriptor 7: a dup of 6, which is no earlier record",
    );
    refused(
        |f| {
            *at(f, 4) = FdKind::File {
                path: "/tmp/./x".into(),
                pos: 0,
            }
        },
        "descriptor 4: path \"/tmp/./x\" is not a plain path",
    );
}

#[test]
fn pipes_and_fifos_are_refused_by_name() {
    let pipe = |fds: &mut Vec<SavedFd>,
                fd,
                edit: &dyn Fn(&mut i32, &mut u32, &mut Option<String>, &mut Blob)| {
        if let FdKind::Pipe {
            first,
            size,
            fifo,
            unread,
            ..
        } = at(fds, fd)
        {
            edit(first, size, fifo, unread);
        }
    };
    refused(
        |f| pipe(f, 6, &|_, size, _, _| *size = 5000),
        "descriptor 6: a pipe of 5000 bytes",
    );
    refused(
        |f| {
            pipe(f, 7, &|_, _, _, u| {
                *u = Blob {
                    image_off: 8192,
                    len: 1,
                }
            })
        },
        "descriptor 7: 1 unread bytes in a pipe of 8192",
    );
    refused(
        |f| pipe(f, 6, &|_, _, _, u| u.image_off = 100),
        "descriptor 6: content at 100+5 is not after the pages",
    );
    refused(
        |f| pipe(f, 7, &|_, size, _, _| *size = 4096),
        "descriptor 7: the other end of pipe 6, which is not",
    );
    refused(
        |f| pipe(f, 9, &|_, _, fifo, _| *fifo = Some("/tmp/d/other".into())),
        "descriptor 9: a FIFO opened first at 8, which is not",
    );
    refused(
        |f| pipe(f, 9, &|first, _, _, _| *first = 6),
        "descriptor 9: a FIFO opened first at 6, which is not",
    );
    refused(
        |f| pipe(f, 8, &|_, _, fifo, _| *fifo = Some("/etc/fifo".into())),
        "descriptor 8: \"/etc/fifo\" is not on a saved mount",
    );
}

#[test]
fn eventfds_epolls_and_timerfds_are_refused_by_name() {
    refused(
        |f| {
            *at(f, 10) = FdKind::EventFd {
                count: u64::MAX,
                semaphore: false,
            }
        },
        "descriptor 10: an eventfd count of 2^64-1",
    );
    let watches = |fds: &mut Vec<SavedFd>, edit: &dyn Fn(&mut Vec<EpollWatch>)| {
        if let FdKind::Epoll { watches } = at(fds, 11) {
            edit(watches);
        }
    };
    refused(
        |f| watches(f, &|w| w.resize(MAX_WATCHES + 1, w[0])),
        "descriptor 11: 1025 epoll watches",
    );
    refused(
        |f| watches(f, &|w| w[1].fd = 6),
        "descriptor 11: watches descriptor 6, which it cannot",
    );
    refused(
        |f| watches(f, &|w| w[0].fd = 11),
        "descriptor 11: watches descriptor 11, which it cannot",
    );
    refused(
        |f| {
            if let FdKind::TimerFd { value_ns, .. } = at(f, 12) {
                *value_ns = 1 << 62;
            }
        },
        "descriptor 12: a timer on clock 7",
    );
}

#[test]
fn memfds_are_refused_by_name() {
    let memfd = |fds: &mut Vec<SavedFd>, edit: &dyn Fn(&mut String, &mut u32, &mut Blob)| {
        if let FdKind::Memfd {
            name, seals, data, ..
        } = at(fds, 14)
        {
            edit(name, seals, data);
        }
    };
    refused(
        |f| memfd(f, &|_, seals, _| *seals = 0x40),
        "descriptor 14: memfd seals 0x40",
    );
    refused(
        |f| memfd(f, &|name, _, _| *name = "a\0b".into()),
        "descriptor 14: a malformed memfd",
    );
    refused(
        |f| memfd(f, &|name, _, _| *name = "n".repeat(250)),
        "descriptor 14: a malformed memfd",
    );
    refused(
        |f| memfd(f, &|_, _, data| data.len = 4101),
        "descriptor 14: a malformed memfd",
    );
    refused(
        |f| memfd(f, &|_, _, data| data.image_off = u64::MAX),
        &format!(
            "descriptor 14: content at {}+4000 is not after the pages",
            u64::MAX
        ),
    );
}

#[test]
fn sockets_are_refused_by_name() {
    refused(
        |f| socket(f, 17).family = 16,
        "descriptor 17: a socket of family 16, type 1, protocol 6",
    );
    refused(
        |f| socket(f, 17).addr[0] = 10,
        "descriptor 17: a malformed socket address",
    );
    refused(
        |f| socket(f, 18).options |= 32,
        "descriptor 18: malformed socket options",
    );
    refused(
        |f| socket(f, 17).backlog = Some(65536),
        "descriptor 17: malformed socket options",
    );
    refused(
        |f| socket(f, 19).backlog = Some(1),
        "descriptor 19: a dropped connection that is not an unbound TCP socket",
    );
    refused(
        |f| socket(f, 20).addr[2] = b'/',
        "descriptor 20: a connection to remake that is not to an abstract unix address",
    );
    refused(
        |f| socket(f, 20).options |= SOCK_OPT_REUSEADDR,
        "descriptor 20: a connection to remake that is not to an abstract unix address",
    );
    refused(
        |f| {
            socket(f, 17).queued = Blob {
                image_off: 8192,
                len: 1,
            }
        },
        "descriptor 17: queued bytes on an unconnected socket",
    );
    refused(
        |f| socket(f, 16).ty = libc::SOCK_STREAM as u32,
        "descriptor 15: half of a socketpair with 16, which is not",
    );
    refused(
        |f| socket(f, 15).queued.image_off = 0,
        "descriptor 15: content at 0+11 is not after the pages",
    );
}
