//! The zygote start type: the floor of a local cold start, for benchmarks.
//!
//! A template is the function's agent, imported and initialised once in a
//! sandbox of its own (same root, agent and environment), running as root
//! without the seccomp filter because it creates namespaces. Each
//! [`Zygote::fork`] hands it a new sandbox's pieces (socket, log, cgroups);
//! it forks a child into fresh pid, mount, net, ipc and uts namespaces, and the
//! child joins the cgroups, mounts its own `/tmp`, brings up loopback, sets the
//! limits, drops to the sandbox's uid, installs the filter and serves the
//! socket: the SOCK / Catalyzer way of starting an instance.
use crate::agent::{self, Reply, Request};
use crate::error::{HostError, Result};
use crate::StartError;
use crate::{seccomp, spawn, Sandbox, SandboxConfig, Slot};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;
use thaw_error::{fail, ResultExt};

/// A live, initialised template of one function.
pub struct Zygote {
    template: Sandbox,
    /// the template's pid namespace: it returns there after each fork
    pidns: File,
}

impl Zygote {
    /// Starts the template (`argv`/`env` as for [`Sandbox::start`]) and loads
    /// the function in it.
    pub fn start(
        cfg: &SandboxConfig,
        root: &Path,
        argv: &[String],
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<Zygote, StartError> {
        let slot = Slot::new(cfg)?;
        let path = argv
            .first()
            .ok_or_else(|| StartError::Config("empty runtime command".into()))?
            .clone();
        let mut env = env.to_vec();
        env.push(("THAW_ZYGOTE".into(), "1".into()));
        let spec = spawn::ChildSpec {
            root,
            fds: slot.stdio_fds(),
            argv: argv.to_vec(),
            env,
            exec: spawn::Exec::Privileged { path },
            rlimits: cfg.rlimits(),
            procs_files: slot.cgroups.procs_files(),
            tmp_bytes: cfg.tmp_bytes,
            shm_bytes: cfg.shm_bytes,
            binds: cfg.binds(),
            net: None,
            before_start: None,
        };
        let pid = spawn::spawn(&spec)?;
        let mut template = slot.into_sandbox(pid, root, None);
        let pidns = File::open(format!("/proc/{pid}/ns/pid"))
            .context("opening the zygote template's pid namespace")?;
        template
            .call(&Request::Load, timeout)
            .map_err(|source| StartError::Sandbox {
                what: "loading the function in the zygote template".into(),
                source,
            })?;
        Ok(Zygote { template, pidns })
    }

    /// Forks one instance from the template into a new sandbox.
    pub fn fork(&mut self, cfg: &SandboxConfig, timeout: Duration) -> Result<Sandbox, StartError> {
        let slot = Slot::new(cfg)?;
        let procs = slot
            .cgroups
            .procs_files()
            .iter()
            .map(|p| {
                OpenOptions::new()
                    .write(true)
                    .open(p)
                    .with_context(|| format!("opening {}", p.display()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        set_passcred(&slot.worker_end, true)?;
        let req = Request::ZygoteFork {
            uid: slot.uid.uid,
            tmp_bytes: cfg.tmp_bytes,
            shm_bytes: cfg.shm_bytes,
            rlimits: cfg.rlimits(),
            filter: hex::encode(seccomp::filter().concat()),
        };
        let mut fds = vec![
            slot.sandbox_end.as_raw_fd(),
            slot.log.as_raw_fd(),
            slot.devnull.as_raw_fd(),
        ];
        fds.extend(procs.iter().map(|f| f.as_raw_fd()));
        fds.push(self.pidns.as_raw_fd());
        crate::cmsg::send_with_fds(
            self.template.channel().socket(),
            &agent::encode_frame(&req),
            &fds,
        )
        .context("handing the zygote template a new sandbox")?;
        let reply = self
            .template
            .channel()
            .recv(timeout)
            .map_err(thaw_error::BoxError::from)
            .and_then(|v| Ok(Reply::decode(&req, v)?))
            .context("the zygote template did not fork")?;
        if !matches!(reply, Reply::ZygoteFork { pid } if pid > 0) {
            fail!(
                HostError::Failed,
                "the zygote template replied without a pid: {reply:?}"
            );
        }
        // the child's first byte carries its pid, translated by the kernel
        // into our pid namespace
        let pid = recv_hello_pid(&slot.worker_end, timeout)
            .with_context(|| format!("zygote child: {}", self.template.log_tail(300)))?;
        set_passcred(&slot.worker_end, false)?;
        Ok(slot.into_sandbox(pid, self.template.root(), None))
    }

    /// The template's own sandbox (its pid, log).
    pub fn template(&self) -> &Sandbox {
        &self.template
    }
}

fn set_passcred(sock: &UnixStream, on: bool) -> Result<()> {
    let v: libc::c_int = on.into();
    #[allow(clippy::cast_possible_truncation)] // a c_int's 4 bytes
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: setsockopt with a live int on our own socket.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&v as *const libc::c_int).cast(),
            len,
        )
    };
    if r != 0 {
        fail!(
            HostError::Failed,
            "SO_PASSCRED: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Reads the child's one-byte hello and returns the sender's pid from the
/// credentials the kernel attached (SO_PASSCRED).
fn recv_hello_pid(sock: &UnixStream, timeout: Duration) -> Result<i32> {
    sock.set_read_timeout(Some(timeout))?;
    let (byte, got) =
        crate::cmsg::recv_one_byte(sock).context("the zygote child did not say hello")?;
    if got.read != 1 || byte != b'Z' {
        fail!(
            HostError::Failed,
            "the zygote child did not say hello ({} bytes)",
            got.read
        );
    }
    match got.sender_pid {
        Some(pid) => Ok(pid),
        None => fail!(
            HostError::Failed,
            "the zygote child's hello carried no credentials"
        ),
    }
}
