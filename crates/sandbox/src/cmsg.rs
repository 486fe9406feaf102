//! Ancillary data on Unix sockets, the one place that walks it (through
//! rustix): receiving bytes with the descriptors or the sender's credentials
//! that came with them (the restorer's userfaultfd, a zygote child's hello,
//! the agent's replies), and sending a message with descriptors attached
//! (the restore plan, the zygote template, the XDT SDK's objects).
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// At most this many descriptors are taken from one message; more are
/// closed by the kernel (MSG_CTRUNC) and never reach us.
pub(crate) const MAX_FDS: usize = 16;

/// What one `recvmsg` brought.
pub struct Received {
    /// bytes read (0: the peer closed)
    pub read: usize,
    /// descriptors passed with them (SCM_RIGHTS), ours to own
    pub fds: Vec<OwnedFd>,
    /// the sender's pid, if credentials came with them (SCM_CREDENTIALS)
    pub sender_pid: Option<i32>,
}

/// One `recvmsg` into `buf` (close-on-exec descriptors), retried on EINTR.
/// A read timeout set on `sock` ends it with `WouldBlock`.
pub(crate) fn recv(sock: &UnixStream, buf: &mut [u8]) -> std::io::Result<Received> {
    let mut space =
        [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS), ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let read = loop {
        let mut iov = [IoSliceMut::new(buf)];
        match rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(m) => break m.bytes,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut got = Received {
        read,
        fds: Vec::new(),
        sender_pid: None,
    };
    for msg in control.drain() {
        match msg {
            RecvAncillaryMessage::ScmRights(fds) => got.fds.extend(fds),
            RecvAncillaryMessage::ScmCredentials(c) => {
                got.sender_pid = Some(c.pid.as_raw_nonzero().get())
            }
            _ => {}
        }
    }
    Ok(got)
}

/// One byte read from `sock` with what came with it.
pub fn recv_one_byte(sock: &UnixStream) -> std::io::Result<(u8, Received)> {
    let mut byte = [0u8];
    let got = recv(sock, &mut byte)?;
    Ok((byte[0], got))
}

/// One sendmsg: `data` with `fds` attached to its first byte.
pub fn send_with_fds(sock: &UnixStream, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    // SAFETY: the caller's descriptors stay open for the duration of the call.
    let borrowed: Vec<BorrowedFd<'_>> = fds
        .iter()
        .map(|&fd| unsafe { BorrowedFd::borrow_raw(fd) })
        .collect();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(borrowed.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
        return Err(std::io::Error::other(
            "descriptors do not fit the control buffer",
        ));
    }
    let mut sent = 0;
    while sent < data.len() {
        let iov = [IoSlice::new(&data[sent..])];
        let r = if sent == 0 {
            rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL)
        } else {
            rustix::net::send(sock, &data[sent..], SendFlags::NOSIGNAL)
        };
        match r {
            Ok(n) => sent += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
