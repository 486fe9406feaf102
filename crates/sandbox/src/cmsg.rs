//! Ancillary data on Unix sockets: receiving one byte with a passed
//! descriptor or the sender's credentials (how the restorer hands over its
//! userfaultfd and a zygote child announces itself), and sending a message
//! with descriptors attached (the zygote template, the XDT SDK's objects).
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// One byte read from `sock`, and the first control message that came with
/// it as (level, type, data), if any. `payload` bounds that data's size.
pub(crate) struct OneByte {
    pub read: isize,
    pub byte: u8,
    pub control: Option<(i32, i32, Vec<u8>)>,
}

pub(crate) fn recv_one_byte(sock: &UnixStream, payload: usize) -> std::io::Result<OneByte> {
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: a zeroed msghdr is a valid empty header; filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    let read = loop {
        // SAFETY: msg points at live buffers sized above.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break n;
    };
    let mut control = None;
    // SAFETY: walking the control buffer the kernel just filled; the data
    // length comes from its header, bounded by the buffer.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let header = data.offset_from(c.cast::<u8>()) as usize;
            let len = ((*c).cmsg_len as usize)
                .saturating_sub(header)
                .min(space.saturating_sub(header));
            control = Some((
                (*c).cmsg_level,
                (*c).cmsg_type,
                std::slice::from_raw_parts(data, len).to_vec(),
            ));
        }
    }
    Ok(OneByte {
        read,
        byte,
        control,
    })
}

/// One sendmsg: `data` with `fds` attached to its first byte.
pub(crate) fn send_with_fds(sock: &UnixStream, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let payload = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut _,
        iov_len: data.len(),
    };
    // SAFETY: a zeroed msghdr is a valid empty header; filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: the control buffer is CMSG_SPACE(payload) bytes, enough for one
    // header and the descriptors copied into its data.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(payload) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
    }
    let mut sent = 0;
    while sent < data.len() {
        let n = if sent == 0 {
            // SAFETY: msg points at live buffers for the call.
            unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) }
        } else {
            // SAFETY: sending the unsent tail of our buffer.
            unsafe {
                libc::send(
                    sock.as_raw_fd(),
                    data[sent..].as_ptr().cast(),
                    data.len() - sent,
                    libc::MSG_NOSIGNAL,
                )
            }
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent += n as usize;
    }
    Ok(())
}
