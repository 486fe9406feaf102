//! Objects are sealed memfds. The producer writes its bytes once into a
//! memfd it made (with sealing allowed) and passes the descriptor to the
//! worker, which seals it against any further write, growth or shrinking
//! before it accepts it. Consumers get a read-only descriptor to the same
//! pages: mapping it shares them, so no byte is copied between sandboxes,
//! and neither a write through the descriptor nor a writable shared mapping
//! is possible (the seals forbid both, whoever holds the memfd).
use crate::table::XdtError;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The seals every accepted object carries.
pub const REQUIRED_SEALS: libc::c_int =
    libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;

fn seals(fd: &OwnedFd) -> std::io::Result<libc::c_int> {
    // SAFETY: fcntl on a descriptor we own; F_GET_SEALS takes no argument.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Seals a memfd a sandbox handed over and returns its size. Anything that
/// is not a memfd made with sealing allowed (a pipe, a socket, a tmpfs file,
/// a memfd with a writable shared mapping still open) is refused.
pub fn seal_object(fd: &OwnedFd) -> Result<u64, XdtError> {
    let bad = |m: String| XdtError::BadObject(m);
    let have = seals(fd).map_err(|e| {
        bad(format!(
            "the descriptor is not a memfd ({e}); make it with memfd_create(MFD_ALLOW_SEALING)"
        ))
    })?;
    if have & REQUIRED_SEALS != REQUIRED_SEALS {
        // SAFETY: fcntl on a descriptor we own with an int argument.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, REQUIRED_SEALS & !have) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::EBUSY) => "it is still mapped writable somewhere".to_string(),
                Some(libc::EPERM) => {
                    "it does not allow sealing (made without MFD_ALLOW_SEALING, or sealed incompletely)"
                        .to_string()
                }
                _ => e.to_string(),
            };
            return Err(bad(format!("cannot seal the object: {why}")));
        }
    }
    let have = seals(fd).map_err(|e| bad(e.to_string()))?;
    if have & REQUIRED_SEALS != REQUIRED_SEALS {
        return Err(bad("the object's seals are incomplete".into()));
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a full struct stat into st on success.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(bad(std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: fstat succeeded, so st is initialised.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(bad("the object is not a regular memfd".into()));
    }
    u64::try_from(st.st_size).map_err(|_| bad("the object has a negative size".into()))
}

/// A new descriptor for the same object opened read-only (what consumers
/// get: no write through it even if the seals were gone).
pub fn reopen_read_only(fd: &OwnedFd) -> Result<OwnedFd, XdtError> {
    let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    // SAFETY: a NUL-terminated path; the result is checked and then owned.
    let r = unsafe {
        libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if r < 0 {
        return Err(XdtError::Internal(format!(
            "reopening an object read-only: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: r is a descriptor we just opened and nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// A new, unsealed memfd of `size` bytes (sparse) for a producer to map
/// and fill: writes through a mapping are not bounded by the sandbox's
/// RLIMIT_FSIZE, which keeps its log files small.
pub fn create_sized(size: u64) -> Result<OwnedFd, XdtError> {
    create_named("thaw-object", size)
}

/// [`create_sized`] with the memfd's name (shown in `/proc/PID/fd`).
pub fn create_named(name: &str, size: u64) -> Result<OwnedFd, XdtError> {
    let fd = new_memfd(name)?;
    let len = libc::off_t::try_from(size)
        .map_err(|_| XdtError::Internal(format!("an object of {size} bytes")))?;
    // SAFETY: ftruncate on a descriptor we own.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(XdtError::Internal(format!(
            "sizing an object: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(fd)
}

fn new_memfd(name: &str) -> Result<OwnedFd, XdtError> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| XdtError::Internal("object name with a NUL byte".into()))?;
    // SAFETY: a valid C string; the result is checked and then owned.
    let r =
        unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if r < 0 {
        return Err(XdtError::Internal(format!(
            "memfd_create: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: r is a descriptor we just made and nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Makes a sealed object from bytes the worker has (an object pulled from
/// another worker, tests, benchmarks).
pub fn create_sealed(name: &str, data: &[u8]) -> Result<OwnedFd, XdtError> {
    let fd = new_memfd(name)?;
    let mut f = File::from(fd);
    f.write_all(data)
        .map_err(|e| XdtError::Internal(format!("writing an object: {e}")))?;
    let fd = OwnedFd::from(f);
    seal_object(&fd)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn sealed_objects_refuse_writes_and_other_files_are_refused() {
        let fd = create_sealed("t", b"hello object").unwrap();
        assert_eq!(seal_object(&fd).unwrap(), 12);
        let ro = reopen_read_only(&fd).unwrap();
        let mut s = String::new();
        File::from(ro.try_clone().unwrap())
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hello object");
        // no write through the writable descriptor either: sealed
        let mut w = File::from(fd.try_clone().unwrap());
        assert!(w.write_all(b"x").is_err());
        // SAFETY: mmap of a descriptor we own; the result is only compared.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                12,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_eq!(
            p,
            libc::MAP_FAILED,
            "a writable shared mapping of a sealed object"
        );
        // a pipe and a plain file are not objects
        let mut fds = [0; 2];
        // SAFETY: pipe fills two descriptors we then own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors are ours.
        let (a, _b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        assert!(matches!(seal_object(&a), Err(XdtError::BadObject(_))));
        let f = OwnedFd::from(File::open("/etc/hostname").unwrap());
        assert!(matches!(seal_object(&f), Err(XdtError::BadObject(_))));
    }
}
