//! Creating a sandboxed process: clone into fresh pid, mount, net, ipc and uts
//! namespaces, join the cgroups, mount the read-only runtime root with a
//! private /tmp and a minimal /dev (with a private /dev/shm), pivot into it, bring up loopback, set
//! limits, arrange descriptors and exec. Used both to start a runtime and to
//! start the restorer (which drops privileges itself).
//!
//! Between clone and exec the child may only make raw system calls (the
//! parent is multi-threaded), so everything it needs is prepared up front.
use crate::error::{HostError, Result};
use std::ffi::CString;
use std::io::Error;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use thaw_error::{fail, ResultExt};

mod net;
use net::{configure_egress, configure_egress6, sockaddr, Net6};

/// What the child execs.
pub enum Exec {
    /// A program inside the runtime root, after privileges are dropped and the
    /// seccomp filter installed.
    Runtime {
        path: String,
        uid: u32,
        gid: u32,
        filter: Vec<[u8; 8]>,
    },
    /// An ELF in a memfd, executed as root (the restorer).
    Memfd { fd: RawFd },
    /// A program inside the runtime root, executed as root without the seccomp
    /// filter: a zygote template, which must create namespaces for its children
    /// (each child drops to its own uid and installs the filter itself).
    Privileged { path: String },
}

pub struct ChildSpec<'a> {
    pub root: &'a Path,
    /// (descriptor in the parent, number in the child)
    pub fds: Vec<(RawFd, RawFd)>,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub exec: Exec,
    pub rlimits: Vec<(u32, u64)>,
    pub procs_files: Vec<PathBuf>,
    /// Size of the private /tmp.
    pub tmp_bytes: u64,
    /// Size of the private /dev/shm (POSIX shared memory and semaphores).
    pub shm_bytes: u64,
    /// Host directories bind-mounted read-only at mount points (absolute
    /// paths inside the root): a deployed function's code and packages, or
    /// a file onto a file (its resolver configuration).
    pub binds: Vec<(&'a Path, &'static str)>,
    /// A function given egress: its veth is plugged into the child's
    /// namespace before the child goes on, and the child configures its end.
    pub net: Option<&'a thaw_egress::SandboxNet>,
    /// Runs with the child's pid once its namespaces exist, before it goes
    /// on (a custom runtime's Runtime API listeners are made there).
    pub before_start: Option<&'a dyn Fn(i32) -> Result<()>>,
}

/// The private shared-memory mount inside the sandbox.
pub const SHM_DIR: &str = "/dev/shm";

const ERR_FD: RawFd = 900;
const EXEC_FD: RawFd = 901;

/// Steps of the child's set-up, for error messages.
const STEPS: &[&str] = &[
    "waiting for the parent",
    "arranging descriptors",
    "making mounts private",
    "bind-mounting the runtime root",
    "remounting the root read-only",
    "mounting /tmp",
    "mounting /dev",
    "creating device nodes",
    "pivoting into the root",
    "bringing up loopback",
    "setting limits",
    "dropping privileges",
    "installing the seccomp filter",
    "exec",
    "leaving the worker's session (setsid)",
    "mounting the function code or packages",
    "mounting /dev/shm",
    "configuring the egress interface",
    "joining its cgroups",
];
const STEP_CODE: u32 = 15;
const STEP_SHM: u32 = 16;
const STEP_EGRESS: u32 = 17;
const STEP_CGROUPS: u32 = 18;

/// Index of the setsid step in [`STEPS`].
const STEP_SETSID: u32 = 14;

struct Prepared {
    root: CString,
    tmp: CString,
    dev: CString,
    shm: CString,
    tmp_opts: CString,
    shm_opts: CString,
    devs: Vec<(CString, u64)>,
    _argv_c: Vec<CString>,
    _env_c: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    path: CString,
    fds: Vec<(RawFd, RawFd)>,
    rlimits: Vec<(u32, u64)>,
    creds: Option<(u32, u32)>,
    filter: Vec<[u8; 8]>,
    memfd: Option<RawFd>,
    /// (host directory, mount point inside the root, before pivoting)
    binds: Vec<(CString, CString)>,
    /// the sandbox's end of its egress veth: (address, gateway)
    net: Option<(libc::sockaddr_in, libc::sockaddr_in)>,
    /// and its IPv6 configuration, for a function with IPv6 destinations
    net6: Option<Net6>,
    /// the sandbox's cgroups' `cgroup.procs`, open for writing: the child
    /// joins them itself (writing 0) before anything else
    procs: Vec<std::fs::File>,
}

fn cstr(s: &[u8]) -> Result<CString> {
    Ok(CString::new(s).context("path or argument contains a NUL byte")?)
}

fn prepare(spec: &ChildSpec) -> Result<Prepared> {
    let root = spec
        .root
        .canonicalize()
        .with_context(|| format!("runtime root {}", spec.root.display()))?;
    for d in ["tmp", "dev"] {
        if !root.join(d).is_dir() {
            fail!(
                HostError::Failed,
                "runtime root {} has no /{d} directory to mount on",
                root.display()
            );
        }
    }
    let rb = root.as_os_str().as_bytes();
    let join = |s: &str| cstr(&[rb, s.as_bytes()].concat());
    let devs = vec![
        (join("/dev/null")?, libc::makedev(1, 3)),
        (join("/dev/zero")?, libc::makedev(1, 5)),
        (join("/dev/random")?, libc::makedev(1, 8)),
        (join("/dev/urandom")?, libc::makedev(1, 9)),
    ];
    let argv_c = spec
        .argv
        .iter()
        .map(|a| cstr(a.as_bytes()))
        .collect::<Result<Vec<_>>>()?;
    let env_c = spec
        .env
        .iter()
        .map(|(k, v)| cstr(format!("{k}={v}").as_bytes()))
        .collect::<Result<Vec<_>>>()?;
    let mut binds = Vec::new();
    for (dir, at) in &spec.binds {
        let target = root.join(at.trim_start_matches('/'));
        let kind_matches = match dir.is_dir() {
            true => target.is_dir(),
            false => target.is_file(),
        };
        if !kind_matches {
            fail!(
                HostError::Failed,
                "runtime root {} has no {at} to mount on \
                 (rebuild it with `thaw runtime build`)",
                root.display(),
            );
        }
        let src = dir
            .canonicalize()
            .with_context(|| format!("{at} source {}", dir.display()))?;
        binds.push((
            cstr(src.as_os_str().as_bytes())?,
            cstr(target.as_os_str().as_bytes())?,
        ));
    }
    let mut argv: Vec<_> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<_> = env_c.iter().map(|c| c.as_ptr()).collect();
    envp.push(std::ptr::null());
    if spec.fds.iter().any(|&(_, t)| !(0..ERR_FD).contains(&t)) {
        fail!(
            HostError::Failed,
            "descriptor targets must be below {ERR_FD}"
        );
    }
    let (path, creds, filter, memfd) = match &spec.exec {
        Exec::Runtime {
            path,
            uid,
            gid,
            filter,
        } => (
            cstr(path.as_bytes())?,
            Some((*uid, *gid)),
            filter.clone(),
            None,
        ),
        Exec::Memfd { fd } => (cstr(b"")?, None, Vec::new(), Some(*fd)),
        Exec::Privileged { path } => (cstr(path.as_bytes())?, None, Vec::new(), None),
    };
    Ok(Prepared {
        tmp: join("/tmp")?,
        dev: join("/dev")?,
        shm: join(SHM_DIR)?,
        root: cstr(rb)?,
        tmp_opts: cstr(format!("size={},mode=1777", spec.tmp_bytes).as_bytes())?,
        shm_opts: cstr(format!("size={},mode=1777", spec.shm_bytes).as_bytes())?,
        devs,
        _argv_c: argv_c,
        _env_c: env_c,
        argv,
        envp,
        path,
        fds: spec.fds.clone(),
        procs: spec
            .procs_files
            .iter()
            .map(|f| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(f)
                    .with_context(|| format!("opening {}", f.display()))
                    .map_err(HostError::from)
            })
            .collect::<Result<_>>()?,
        rlimits: spec.rlimits.clone(),
        creds,
        filter,
        memfd,
        binds,
        net: spec.net.map(|n| {
            let (addr, gateway) = n.child_config();
            (sockaddr(addr), sockaddr(gateway))
        }),
        net6: spec
            .net
            .and_then(|n| n.child_config6())
            .map(|(addr, gateway)| -> Result<Net6> {
                let conf = |key: &str| {
                    cstr(
                        format!("/proc/sys/net/ipv6/conf/{}/{key}", thaw_egress::SANDBOX_IF)
                            .as_bytes(),
                    )
                };
                Ok(Net6 {
                    addr: libc::in6_addr {
                        s6_addr: addr.octets(),
                    },
                    gateway: libc::in6_addr {
                        s6_addr: gateway.octets(),
                    },
                    sysctls: [(conf("addr_gen_mode")?, b"1"), (conf("accept_dad")?, b"0")],
                })
            })
            .transpose()?,
    })
}

/// Starts the child; returns its pid once it has exec'd (or the reason it could not).
pub fn spawn(spec: &ChildSpec) -> Result<i32> {
    let p = prepare(spec)?;
    // A child that needs nothing from this side before it goes on (no veth
    // to plug in, no listener to open in its namespaces) shares the worker's
    // memory until it execs, and this thread waits meanwhile (CLONE_VM |
    // CLONE_VFORK, as posix_spawn does): a fork would copy the page tables
    // of a worker that maps hundreds of MiB and write-protect its pages,
    // which in a burst of restores cost more CPU than the rest of a
    // sandbox's set-up. Either way it runs on a stack of its own. Only a
    // forked child waits for the parent's word, on the `go` pipe.
    let handshake = spec.net.is_some() || spec.before_start.is_some();
    let go = if handshake { Some(pipe()?) } else { None };
    let (go_r, go_w) = (go.map(|g| g.0), go.map(|g| g.1));
    let (err_r, err_w) = pipe()?;
    let shared = if handshake {
        0
    } else {
        libc::CLONE_VM | libc::CLONE_VFORK
    };
    let flags = shared
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::SIGCHLD;
    let stack = ChildStack::new()?;
    let args = ChildArgs {
        p: &p,
        go_r,
        go_w,
        err_w,
    };
    // SAFETY: the child runs `child_entry` on its own stack and never
    // returns; it only makes raw system calls on `p` and `args`. Sharing
    // this memory, it has exec'd or died before `clone` returns here (this
    // thread is suspended meanwhile, its errno untouched by ours), and
    // `p`, `args` and the stack outlive it.
    let pid = unsafe {
        libc::clone(
            child_entry,
            stack.top(),
            flags,
            (&args as *const ChildArgs).cast_mut().cast(),
        )
    };
    if pid < 0 {
        let e = Error::last_os_error();
        close([Some(err_r), Some(err_w), go_r, go_w]);
        fail!(HostError::Failed, "clone with new namespaces failed: {e}");
    }
    let pid = pid as i32;
    close([Some(err_w), go_r]);
    let joined = spec
        .net
        .map_or(Ok(()), |n| n.plug(pid).map_err(HostError::from));
    let joined = joined.and_then(|()| spec.before_start.map_or(Ok(()), |f| f(pid)));
    if let Err(e) = joined {
        kill_and_reap(pid);
        close([Some(err_r), go_w]);
        return Err(e);
    }
    if let Some(go_w) = go_w {
        // SAFETY: one byte from a local into a pipe we own.
        unsafe { libc::write(go_w, [1u8].as_ptr().cast(), 1) };
        close([Some(go_w)]);
    }
    let mut rep = [0u8; 8];
    let n = read_full(err_r, &mut rep);
    close([Some(err_r)]);
    if n == 0 {
        drop(p);
        return Ok(pid);
    }
    kill_and_reap(pid);
    let step = u32::from_le_bytes(rep[0..4].try_into().expect("4 bytes")) as usize;
    let errno = i32::from_le_bytes(rep[4..8].try_into().expect("4 bytes"));
    fail!(
        HostError::Failed,
        "sandbox set-up failed while {}: {}",
        STEPS.get(step).unwrap_or(&"an unknown step"),
        Error::from_raw_os_error(errno)
    )
}

fn pipe() -> Result<(RawFd, RawFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        fail!(HostError::Failed, "pipe: {}", Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// Closes those of `fds` this call was given (a pipe not made is None).
fn close<const N: usize>(fds: [Option<RawFd>; N]) {
    for fd in fds.into_iter().flatten() {
        // SAFETY: closing descriptors this module created.
        unsafe { libc::close(fd) };
    }
}

fn read_full(fd: RawFd, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reading into the unfilled tail of our buffer.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n < 0 && Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        let Ok(n @ 1..) = usize::try_from(n) else {
            break;
        };
        got += n;
    }
    got
}

pub fn kill_and_reap(pid: i32) {
    // SAFETY: pidfd_open, kill and waitpid on a pid we started (directly, or
    // through a zygote template); the pidfd is closed below.
    unsafe {
        // taken first: a child of a zygote template is not ours to reap, but
        // it stays a zombie (its pid held) until the template reaps it
        let pidfd = RawFd::try_from(libc::syscall(libc::SYS_pidfd_open, pid, 0)).unwrap_or(-1);
        libc::kill(pid, libc::SIGKILL);
        let mut st = 0;
        let mut r = libc::waitpid(pid, &mut st, libc::__WALL);
        while r < 0 && *libc::__errno_location() == libc::EINTR {
            r = libc::waitpid(pid, &mut st, libc::__WALL);
        }
        if r < 0 && *libc::__errno_location() == libc::ECHILD && pidfd >= 0 {
            // not our child: readable once it has exited (and left its cgroups)
            let mut pfd = libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            while libc::poll(&mut pfd, 1, 5000) < 0 && *libc::__errno_location() == libc::EINTR {}
        }
        if pidfd >= 0 {
            libc::close(pidfd);
        }
    }
}

/// What the child of [`spawn`] gets through `clone`'s one argument.
struct ChildArgs<'a> {
    p: &'a Prepared,
    /// where to wait for the parent's word (None: go on at once)
    go_r: Option<RawFd>,
    /// the parent's end of that pipe, which the child's copy of the
    /// descriptor table holds too: closed there first, so that the wait
    /// ends (end of file) if the parent dies before its word
    go_w: Option<RawFd>,
    err_w: RawFd,
}

extern "C" fn child_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` that `spawn` keeps alive until this
    // child has exec'd or died.
    let a = unsafe { &*arg.cast::<ChildArgs>() };
    child(a.p, a.go_r, a.go_w, a.err_w)
}

/// The stack a [`spawn`] child runs on until it execs, with a guard page
/// below it.
struct ChildStack {
    base: *mut libc::c_void,
}

impl ChildStack {
    const SIZE: usize = 256 << 10;
    const GUARD: usize = 4096;

    fn new() -> Result<ChildStack> {
        // SAFETY: a fresh anonymous private mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::SIZE + Self::GUARD,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            fail!(
                HostError::Failed,
                "a child stack: {}",
                Error::last_os_error()
            );
        }
        // SAFETY: the lowest page of the mapping just made; an overflow
        // faults there instead of writing below the stack.
        if unsafe { libc::mprotect(base, Self::GUARD, libc::PROT_NONE) } != 0 {
            let e = Error::last_os_error();
            // SAFETY: unmapping the mapping just made, unused.
            unsafe { libc::munmap(base, Self::SIZE + Self::GUARD) };
            fail!(HostError::Failed, "a child stack's guard page: {e}");
        }
        Ok(ChildStack { base })
    }

    /// The highest address (the stack grows down), 16-byte aligned.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is page-aligned.
        unsafe { self.base.cast::<u8>().add(Self::SIZE + Self::GUARD).cast() }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made; its child has exec'd or died.
        unsafe { libc::munmap(self.base, Self::SIZE + Self::GUARD) };
    }
}

/// The child: never returns. Reports (step, errno) on ERR_FD and exits on failure.
fn child(p: &Prepared, go_r: Option<RawFd>, go_w: Option<RawFd>, err_w: RawFd) -> ! {
    // SAFETY: (the whole function) raw system calls on data prepared before
    // clone; no allocation, no locks, as required between clone and exec.
    unsafe {
        let mut err_fd = err_w;
        let fail = |fd: RawFd, step: u32| -> ! { fail_step(fd, step) };
        // a parent killed from here on takes the child with it: before the
        // word by the pipe's end of file (a child that waited forever held
        // the daemon's descriptors, its egress subnet's lease among them),
        // after it by the death signal
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if let Some(w) = go_w {
            libc::close(w);
        }
        let mut b = 0u8;
        if go_r.is_some_and(|r| libc::read(r, (&mut b as *mut u8).cast(), 1) != 1) {
            fail(err_fd, 0);
        }
        // its cgroups, before it allocates anything they should count
        for f in &p.procs {
            if libc::write(f.as_raw_fd(), c"0".as_ptr().cast(), 1) != 1 {
                fail(err_fd, STEP_CGROUPS);
            }
        }
        // its own session and process group: kill(0, ...) or a signal to
        // the worker's group never crosses between worker and sandbox
        if libc::setsid() < 0 {
            fail(err_fd, STEP_SETSID);
        }
        // the veth is in the namespace now; its IPv6 settings, through the
        // host's /proc (the root has none), before the link comes up
        if let Some(n6) = &p.net6 {
            for (path, value) in &n6.sysctls {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, value.as_ptr().cast(), value.len()) < 0 {
                    fail(err_fd, STEP_EGRESS);
                }
                libc::close(fd);
            }
        }

        // descriptors: lift every source above the targets, then place them
        let mut lifted = [0 as RawFd; 64];
        if p.fds.len() > lifted.len() {
            fail(err_fd, 1);
        }
        for (i, &(src, _)) in p.fds.iter().enumerate() {
            lifted[i] = libc::fcntl(src, libc::F_DUPFD_CLOEXEC, 1000);
            if lifted[i] < 0 {
                fail(err_fd, 1);
            }
        }
        // the error pipe and the memfd are lifted too: in a worker holding
        // hundreds of descriptors either may already be 900 or 901 (dup3
        // onto itself is EINVAL) or be overwritten by the other's move
        let err_lifted = libc::fcntl(err_fd, libc::F_DUPFD_CLOEXEC, 1000);
        let memfd_lifted = p.memfd.map(|m| libc::fcntl(m, libc::F_DUPFD_CLOEXEC, 1000));
        if err_lifted < 0 || memfd_lifted.is_some_and(|m| m < 0) {
            fail(err_fd, 1);
        }
        if libc::dup3(err_lifted, ERR_FD, libc::O_CLOEXEC) < 0 {
            fail(err_fd, 1);
        }
        err_fd = ERR_FD;
        if let Some(m) = memfd_lifted {
            if libc::dup3(m, EXEC_FD, libc::O_CLOEXEC) < 0 {
                fail(err_fd, 1);
            }
        }
        for (i, &(_, target)) in p.fds.iter().enumerate() {
            if libc::dup2(lifted[i], target) < 0 {
                fail(err_fd, 1);
            }
        }
        let max_target = p.fds.iter().map(|&(_, t)| t).max().unwrap_or(2);
        #[allow(clippy::cast_sign_loss)] // descriptor numbers: dup2 above took each one
        libc::syscall(
            libc::SYS_close_range,
            (max_target + 1) as u32,
            (ERR_FD - 1) as u32,
            0u32,
        );
        let keep_to = if p.memfd.is_some() { EXEC_FD } else { ERR_FD };
        libc::syscall(
            libc::SYS_close_range,
            keep_to.unsigned_abs() + 1,
            u32::MAX,
            0u32,
        );

        // filesystem: read-only root, private /tmp, minimal /dev
        let null = std::ptr::null::<libc::c_char>();
        if libc::mount(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            fail(err_fd, 2);
        }
        if libc::mount(
            p.root.as_ptr(),
            p.root.as_ptr(),
            null,
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ) != 0
        {
            fail(err_fd, 3);
        }
        let ro =
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
        if libc::mount(null, p.root.as_ptr(), null, ro, std::ptr::null()) != 0 {
            fail(err_fd, 4);
        }
        for (src, target) in &p.binds {
            // not recursive: nothing mounted below the directory comes along
            if libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                null,
                libc::MS_BIND,
                std::ptr::null(),
            ) != 0
                || libc::mount(null, target.as_ptr(), null, ro, std::ptr::null()) != 0
            {
                fail(err_fd, STEP_CODE);
            }
        }
        let tmpfs = c"tmpfs".as_ptr();
        if libc::mount(
            tmpfs,
            p.tmp.as_ptr(),
            tmpfs,
            libc::MS_NOSUID | libc::MS_NODEV,
            p.tmp_opts.as_ptr().cast(),
        ) != 0
        {
            fail(err_fd, 5);
        }
        if libc::mount(
            tmpfs,
            p.dev.as_ptr(),
            tmpfs,
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c"size=64k,mode=755".as_ptr().cast(),
        ) != 0
        {
            fail(err_fd, 6);
        }
        libc::umask(0);
        for (path, dev) in &p.devs {
            if libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, *dev) != 0 {
                fail(err_fd, 7);
            }
        }
        if libc::mkdir(p.shm.as_ptr(), 0o755) != 0 {
            fail(err_fd, STEP_SHM);
        }
        if libc::mount(
            null,
            p.dev.as_ptr(),
            null,
            libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_RDONLY,
            std::ptr::null(),
        ) != 0
        {
            fail(err_fd, 6);
        }
        // mounted on the read-only /dev: the mount itself stays writable
        if libc::mount(
            tmpfs,
            p.shm.as_ptr(),
            tmpfs,
            libc::MS_NOSUID | libc::MS_NODEV,
            p.shm_opts.as_ptr().cast(),
        ) != 0
        {
            fail(err_fd, STEP_SHM);
        }
        if libc::chdir(p.root.as_ptr()) != 0
            || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
            || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0
            || libc::chdir(c"/".as_ptr()) != 0
        {
            fail(err_fd, 8);
        }

        // network: loopback only (the namespace has nothing else)
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            fail(err_fd, 9);
        }
        if crate::netns::interface_up(s, "lo").is_err() {
            fail(err_fd, 9);
        }
        if let Some((addr, gateway)) = &p.net {
            configure_egress(s, addr, gateway, err_fd);
        }
        if let Some(n6) = &p.net6 {
            configure_egress6(s, n6, err_fd);
        }
        libc::close(s);
        libc::sethostname(c"thaw".as_ptr(), 4);

        for &(res, val) in &p.rlimits {
            let lim = libc::rlimit {
                rlim_cur: val,
                rlim_max: val,
            };
            if libc::setrlimit(res as _, &lim) != 0 {
                fail(err_fd, 10);
            }
        }
        // ASLR off: the restorer rebuilds the runtime at the same addresses
        libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
        libc::umask(0o022);

        if let Some((uid, gid)) = p.creds {
            // raw system calls: glibc's wrappers broadcast credential
            // changes to every thread it knows of, and after a raw clone it
            // still believes the parent's threads are ours (a deadlock)
            if libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) != 0
                || libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
            {
                fail(err_fd, 11);
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                fail(err_fd, 12);
            }
            let Ok(len) = u16::try_from(p.filter.len()) else {
                fail(err_fd, 12);
            };
            let prog = libc::sock_fprog {
                len,
                filter: p.filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::syscall(
                libc::SYS_seccomp,
                1u32, /* SET_MODE_FILTER */
                0u32,
                &prog,
            ) != 0
            {
                fail(err_fd, 12);
            }
        }
        if p.memfd.is_some() {
            libc::syscall(
                libc::SYS_execveat,
                EXEC_FD,
                c"".as_ptr(),
                p.argv.as_ptr(),
                p.envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            );
        } else {
            // a program file just written (a deployed bootstrap) may still be
            // open for writing in another thread's child between its clone
            // and exec: ETXTBSY, gone once that child execs (200 ms at most)
            for _ in 0..200 {
                libc::execve(p.path.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
                if *libc::__errno_location() != libc::ETXTBSY {
                    break;
                }
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 1_000_000,
                };
                libc::nanosleep(&pause, std::ptr::null_mut());
            }
        }
        fail(err_fd, 13);
    }
}

/// Reports (step, errno) to the parent and exits: the child's failure path.
///
/// # Safety
/// Only in the child, between clone and exec.
unsafe fn fail_step(fd: RawFd, step: u32) -> ! {
    let errno = *libc::__errno_location();
    let mut rep = [0u8; 8];
    rep[0..4].copy_from_slice(&step.to_le_bytes());
    rep[4..8].copy_from_slice(&errno.to_le_bytes());
    libc::write(fd, rep.as_ptr().cast(), 8);
    libc::_exit(127);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child sharing the worker's memory reports the step it failed at,
    /// and the worker goes on (its memory intact) once it has gone.
    #[test]
    fn a_failed_set_up_names_its_step() {
        let root = std::env::temp_dir().join(format!("thaw-spawn-fail-{}", std::process::id()));
        for d in ["tmp", "dev"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let marker = vec![7u8; 4096];
        let spec = ChildSpec {
            root: &root,
            fds: vec![],
            argv: vec!["nothing".into()],
            env: vec![],
            exec: Exec::Privileged {
                path: "/no/such/program".into(),
            },
            rlimits: vec![],
            procs_files: vec![],
            tmp_bytes: 1 << 20,
            shm_bytes: 1 << 20,
            binds: vec![],
            net: None,
            before_start: None,
        };
        for _ in 0..3 {
            let e = spawn(&spec).unwrap_err().to_string();
            assert!(e.contains("while exec"), "{e}");
            assert!(e.contains("No such file"), "{e}");
        }
        assert!(marker.iter().all(|&b| b == 7));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
