//! A state file written by an earlier build, read back: the records' serde
//! derives are the format, so reordering a field or an enum variant (or
//! moving a kind's record between modules in a way that changes one)
//! changes the bytes and breaks snapshots already on disk.
use super::*;

/// [`every_kind`] as state version 7 encodes it, committed: the bytes a
/// snapshot on disk holds.
const FIXTURE: &[u8] = include_bytes!("../../tests/data/state-v7.bin");

/// A valid state whose descriptors are every [`FdKind`], most in each of
/// their shapes, neighbouring fields mostly holding different values (so
/// two swapped fields show).
pub(super) fn every_kind() -> ProcessState {
    let fd = |fd: i32, flags: u32, kind: FdKind| SavedFd { fd, flags, kind };
    let blob = |image_off, len| Blob { image_off, len };
    let unix = |ty: u32, pair, shutdown, queued| SavedSocket {
        family: libc::AF_UNIX as u32,
        ty,
        protocol: 0,
        addr: Vec::new(),
        backlog: None,
        options: 0,
        pair,
        shutdown,
        queued,
    };
    let mut v6_addr = vec![10, 0, 0x13, 0x88, 0, 0, 0, 0];
    v6_addr.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    v6_addr.extend_from_slice(&[0, 0, 0, 0]);
    let mut abstract_addr = vec![1, 0, 0];
    abstract_addr.extend_from_slice(b"thaw-runtime-api");
    let mut s = valid();
    s.fds = vec![
        fd(
            4,
            0o2100002,
            FdKind::File {
                path: "/tmp/d/model.bin".into(),
                pos: 17,
            },
        ),
        fd(5, 0o100002, FdKind::Dup { of: 4 }),
        fd(
            6,
            0o4000,
            FdKind::Pipe {
                first: 6,
                read: true,
                size: 8192,
                fifo: None,
                unread: blob(8192, 5),
            },
        ),
        fd(
            7,
            0o1,
            FdKind::Pipe {
                first: 6,
                read: false,
                size: 8192,
                fifo: None,
                unread: Blob::default(),
            },
        ),
        fd(
            8,
            0o2004000,
            FdKind::Pipe {
                first: 8,
                read: true,
                size: 16384,
                fifo: Some("/tmp/d/fifo".into()),
                unread: blob(12288, 7),
            },
        ),
        fd(
            9,
            0o2000001,
            FdKind::Pipe {
                first: 8,
                read: false,
                size: 16384,
                fifo: Some("/tmp/d/fifo".into()),
                unread: Blob::default(),
            },
        ),
        fd(
            10,
            0o4002,
            FdKind::EventFd {
                count: 3,
                semaphore: true,
            },
        ),
        fd(
            11,
            0o2000002,
            FdKind::Epoll {
                watches: vec![
                    EpollWatch {
                        fd: 6,
                        events: 1 | 1 << 31,
                        data: 0x1122_3344_5566_7788,
                    },
                    EpollWatch {
                        fd: 10,
                        events: 4,
                        data: 99,
                    },
                    EpollWatch {
                        fd: 2,
                        events: 1 | 1 << 30,
                        data: 7,
                    },
                    EpollWatch {
                        fd: 17,
                        events: 1 | 1 << 29,
                        data: 1 << 40,
                    },
                ],
            },
        ),
        fd(
            12,
            0o2004002,
            FdKind::TimerFd {
                clock: libc::CLOCK_BOOTTIME as u32,
                value_ns: 1_500_000_000,
                interval_ns: 250_000_000,
                ticks: 2,
            },
        ),
        fd(
            13,
            0o2,
            FdKind::SignalFd {
                mask: 1 << 9 | 1 << 16,
            },
        ),
        fd(
            14,
            0o2100002,
            FdKind::Memfd {
                name: "weights".into(),
                pos: 3,
                size: 4100,
                seals: 0xb,
                data: blob(16384, 4000),
            },
        ),
        fd(
            15,
            0o2,
            FdKind::Socket(unix(
                libc::SOCK_SEQPACKET as u32,
                Some(16),
                1,
                blob(20480, 11),
            )),
        ),
        fd(
            16,
            0o4002,
            FdKind::Socket(unix(
                libc::SOCK_SEQPACKET as u32,
                Some(15),
                2,
                Blob::default(),
            )),
        ),
    ];
    // the sockets of no pair: family, type, protocol, address, backlog,
    // SOCK_OPT_*, shut down directions
    let v4_addr = vec![2, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    let reuse = SOCK_OPT_REUSEADDR | SOCK_OPT_REUSEPORT;
    let (stream, dgram) = (libc::SOCK_STREAM as u32, libc::SOCK_DGRAM as u32);
    let unpaired = [
        (libc::AF_INET, stream, 6, v4_addr, Some(511), reuse, 0),
        (libc::AF_INET6, dgram, 17, v6_addr, None, SOCK_OPT_V6ONLY, 0),
        (
            libc::AF_INET6,
            stream,
            6,
            Vec::new(),
            None,
            SOCK_OPT_DROPPED,
            3,
        ),
        (
            libc::AF_UNIX,
            stream,
            0,
            abstract_addr,
            None,
            SOCK_OPT_CONNECT,
            0,
        ),
    ];
    let flags = [0o2004002, 0o2000002, 0o2, 0o2000002];
    for ((n, (family, ty, protocol, addr, backlog, options, shutdown)), flags) in
        (17..).zip(unpaired).zip(flags)
    {
        let socket = SavedSocket {
            family: family.cast_unsigned(),
            protocol,
            addr,
            backlog,
            options,
            ..unix(ty, None, shutdown, Blob::default())
        };
        s.fds.push(fd(n, flags, FdKind::Socket(socket)));
    }
    s
}

#[test]
fn a_state_written_before_reads_back_record_for_record() {
    let want = every_kind();
    let read = ProcessState::decode(FIXTURE).unwrap_or_else(|e| {
        panic!("tests/data/state-v7.bin no longer decodes ({e}): old snapshots would not restore")
    });
    for (i, (got, want)) in read.fds.iter().zip(&want.fds).enumerate() {
        assert_eq!(got, want, "descriptor record {i}");
    }
    assert_eq!(read, want);
}

#[test]
fn a_state_encodes_to_the_bytes_written_before() {
    // Failing here and not above means the encoding moved while decoding
    // still matches; failing both, the records changed shape: a new
    // STATE_VERSION and a new fixture of it, never an edited old one.
    assert!(
        every_kind().encode() == FIXTURE,
        "the encoding of the records changed: snapshots on disk no longer match"
    );
}
