//! The userfaultfd ioctls the page server and working-set install use.
use std::os::fd::RawFd;

pub const PAGEFAULT_FLAG_MINOR: u64 = 4;
const UFFDIO_WAKE: libc::c_ulong = 0x8010_aa02;
const UFFDIO_COPY: libc::c_ulong = 0xc028_aa03;
const UFFDIO_ZEROPAGE: libc::c_ulong = 0xc020_aa04;
const UFFDIO_CONTINUE: libc::c_ulong = 0xc020_aa07;
const MODE_DONTWAKE: u64 = 1;

#[repr(C)]
struct Copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
struct RangeOp {
    start: u64,
    len: u64,
    mode: u64,
    result: i64,
}

/// Why a userfaultfd ioctl failed: callers match it (a target that is gone
/// is not a page-server failure).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} at {addr:#x}: {}", std::io::Error::from_raw_os_error(*errno))]
pub struct UffdError {
    pub op: &'static str,
    pub addr: u64,
    pub errno: i32,
}

impl UffdError {
    /// The target's memory is gone (it exited).
    pub fn target_gone(&self) -> bool {
        matches!(self.errno, libc::ESRCH | libc::ENOENT)
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// UFFDIO_COPY of `len` bytes from our `src` to `dst`, finishing partial copies.
/// A page already present (EEXIST, a racing fault) counts as done.
pub fn copy(
    uffd: RawFd,
    mut dst: u64,
    mut src: u64,
    mut len: u64,
    dontwake: bool,
) -> Result<(), UffdError> {
    while len > 0 {
        let mut c = Copy {
            dst,
            src,
            len,
            mode: if dontwake { MODE_DONTWAKE } else { 0 },
            copy: 0,
        };
        // SAFETY: the kernel reads `len` bytes at `src`, which the caller owns.
        let r = unsafe { libc::ioctl(uffd, UFFDIO_COPY, &mut c) };
        if r == 0 {
            return Ok(());
        }
        let e = errno();
        if e == libc::EEXIST && c.copy <= 0 {
            // some page in the range exists: fall back to one page at a time
            if len == 4096 {
                return Ok(());
            }
            copy(uffd, dst, src, 4096, dontwake)?;
            dst += 4096;
            src += 4096;
            len -= 4096;
            continue;
        }
        // a partial copy: `copy` holds the bytes done (else a negative errno)
        if let (libc::EAGAIN, Ok(done @ 1..)) = (e, u64::try_from(c.copy)) {
            dst += done;
            src += done;
            len -= done;
            continue;
        }
        return Err(UffdError {
            op: "UFFDIO_COPY",
            addr: dst,
            errno: e,
        });
    }
    Ok(())
}

fn range_op(
    uffd: RawFd,
    req: libc::c_ulong,
    op: &'static str,
    start: u64,
    len: u64,
    mode: u64,
) -> Result<(), UffdError> {
    let mut z = RangeOp {
        start,
        len,
        mode,
        result: 0,
    };
    // SAFETY: the kernel reads the range and writes the result field.
    let r = unsafe { libc::ioctl(uffd, req, &mut z) };
    if r != 0 && errno() != libc::EEXIST {
        return Err(UffdError {
            op,
            addr: start,
            errno: errno(),
        });
    }
    Ok(())
}

pub fn zeropage(uffd: RawFd, start: u64, len: u64, dontwake: bool) -> Result<(), UffdError> {
    range_op(
        uffd,
        UFFDIO_ZEROPAGE,
        "UFFDIO_ZEROPAGE",
        start,
        len,
        if dontwake { MODE_DONTWAKE } else { 0 },
    )
}

/// Maps the page-cache page already behind a minor fault.
pub fn cont(uffd: RawFd, start: u64, len: u64) -> Result<(), UffdError> {
    range_op(uffd, UFFDIO_CONTINUE, "UFFDIO_CONTINUE", start, len, 0)
}

pub fn wake(uffd: RawFd, start: u64, len: u64) -> Result<(), UffdError> {
    let range = [start, len];
    // SAFETY: UFFDIO_WAKE reads a struct uffdio_range.
    let r = unsafe { libc::ioctl(uffd, UFFDIO_WAKE, range.as_ptr()) };
    if r != 0 {
        return Err(UffdError {
            op: "UFFDIO_WAKE",
            addr: start,
            errno: errno(),
        });
    }
    Ok(())
}
