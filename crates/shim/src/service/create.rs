//! Create: the container's spec read, its rootfs mounted (or a function's
//! code read straight from the image's layers), the function deployed to
//! the node's daemon and an instance asked for; and the ttrpc code each
//! way of failing answers with, so containerd (and the kubelet behind it)
//! can tell a bad spec from a busy daemon.
use super::{err, open_stdio, unmount, Run, Service, Steps};
use crate::daemon::{self, DaemonError, Function};
use crate::front::Plan;
use crate::native;
use crate::spec::{self, ContainerSpec, Kind, SpecError};
use containerd_shim::protos::shim::shim::CreateTaskRequest;
use containerd_shim::protos::ttrpc::{self, Code};
use std::path::{Path, PathBuf};

/// Why a container was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("thaw containers have no terminal (run without -t)")]
    Terminal,
    /// the image's rootfs could not be mounted
    #[error("mounting the image's rootfs: {0}")]
    Mount(String),
    /// the bundle does not make a thaw container
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    /// the image names no function and runc failed to run it
    #[error("running the container natively with runc (its image names no THAW_HANDLER, so it is not a thaw function)")]
    Native(#[source] native::RuncError),
    /// the node's daemon did not deploy the function
    #[error(transparent)]
    Daemon(#[from] daemon::DaemonError),
    /// the container's stdio or its rootfs directory
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the image's environment names no function, or not as
    /// `module.function`
    #[error("the image's entry points: {0}")]
    EntryPoint(#[from] thaw_pack::image::InvalidEntryPoint),
}

impl From<CreateError> for ttrpc::Error {
    /// A spec thaw cannot run is the caller's to fix (INVALID_ARGUMENT),
    /// something the container names that is not there NOT_FOUND, a daemon
    /// that is down or busy UNAVAILABLE (asking again may work), a daemon
    /// that refused the function FAILED_PRECONDITION, the rest INTERNAL.
    fn from(e: CreateError) -> ttrpc::Error {
        let code = match &e {
            CreateError::Terminal
            | CreateError::EntryPoint(_)
            | CreateError::Spec(SpecError::Invalid(_)) => Code::INVALID_ARGUMENT,
            CreateError::Spec(SpecError::Unreadable(c)) if missing(c) => Code::NOT_FOUND,
            CreateError::Spec(SpecError::Unreadable(_)) => Code::INVALID_ARGUMENT,
            CreateError::Daemon(DaemonError::NoCode(_)) => Code::NOT_FOUND,
            CreateError::Daemon(DaemonError::Unreachable { .. } | DaemonError::Busy { .. }) => {
                Code::UNAVAILABLE
            }
            CreateError::Daemon(DaemonError::Refused(_)) => Code::FAILED_PRECONDITION,
            CreateError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => Code::NOT_FOUND,
            CreateError::Daemon(DaemonError::Other(_))
            | CreateError::Mount(_)
            | CreateError::Native(_)
            | CreateError::Io(_) => Code::INTERNAL,
        };
        err(code, format!("thaw: {}", thaw_error::chain(&e)))
    }
}

/// Whether a file was missing somewhere down `e`'s chain of causes.
fn missing(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// A key for the container's root filesystem that names the image's
/// layers on this node: each overlay lower directory (a committed,
/// unchanging snapshot of containerd's) with its inode and change time, so
/// a directory made again (containerd's state wiped) gets a new key. None
/// when the rootfs has no lower layers: the daemon names it by its
/// contents.
fn rootfs_key(mounts: &[containerd_shim::protos::types::mount::Mount]) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let mut parts = Vec::new();
    for m in mounts {
        for o in &m.options {
            let Some(dirs) = o.strip_prefix("lowerdir=") else {
                continue;
            };
            for d in dirs.split(':') {
                let meta = std::fs::metadata(d).ok()?;
                parts.push(format!(
                    "{}:{d}:{}:{}:{}.{}",
                    m.type_,
                    meta.dev(),
                    meta.ino(),
                    meta.ctime(),
                    meta.ctime_nsec()
                ));
            }
        }
    }
    (!parts.is_empty()).then(|| thaw_pack::image::content_key(&parts))
}

/// What Create made of a container: how it runs, where its rootfs is
/// mounted, a runc container's init pid, the prewarm's pipe.
pub(super) struct Prepared {
    pub(super) run: Run,
    pub(super) mounted: Option<PathBuf>,
    pub(super) pid: u32,
    pub(super) prewarm: Option<std::os::fd::OwnedFd>,
}

/// Asks the daemon for a ready instance of `function` on a thread of its
/// own; the pipe's read end ends (after the error's text if it failed)
/// once the daemon answered.
fn prewarm_now(socket: &Path, function: &str) -> std::io::Result<std::os::fd::OwnedFd> {
    let (read, write) = std::io::pipe()?;
    let (socket, function) = (socket.to_path_buf(), function.to_string());
    std::thread::spawn(move || {
        let mut write = write;
        if let Err(e) = daemon::prewarm(&socket, &function) {
            // the front reads it; gone (the container deleted unstarted): nothing to tell
            let _ = std::io::Write::write_all(&mut write, thaw_error::chain(&e).as_bytes());
        }
    });
    Ok(read.into())
}

impl Service {
    /// Reads the spec, mounts the rootfs and deploys the function (or has
    /// runc create a native container): every failure undoes the mount and
    /// names the problem.
    pub(super) fn prepare(&self, req: &CreateTaskRequest) -> Result<Prepared, CreateError> {
        if req.terminal {
            return Err(CreateError::Terminal);
        }
        let bundle = PathBuf::from(&req.bundle);
        let mut steps = Steps::new();
        let spec = ContainerSpec::read(&bundle)?;
        steps.done("spec");
        let mut mounted = None;
        // a function's code read straight from the image's layers needs
        // no mount (nor an unmount at delete)
        let direct = match spec.kind() {
            Kind::Function => crate::layers::packed_code(&req.rootfs),
            _ => None,
        };
        if direct.is_some() {
            steps.done("layers");
        }
        // a pod's sandbox runs nothing from its image (its front only
        // holds the pod's namespaces): its rootfs is not mounted
        if !req.rootfs.is_empty() && direct.is_none() && !matches!(spec.kind(), Kind::PodSandbox) {
            std::fs::create_dir_all(&spec.root)?;
            for m in &req.rootfs {
                if let Err(e) = containerd_shim::mount::mount_rootfs(
                    Some(m.type_.as_str()),
                    Some(m.source.as_str()),
                    &m.options,
                    &spec.root,
                ) {
                    unmount(&spec.root);
                    return Err(CreateError::Mount(e.to_string()));
                }
            }
            mounted = Some(spec.root.clone());
            steps.done("mount");
        }
        let planned = (|| {
            match spec.kind() {
                Kind::PodSandbox => {
                    self.prewarm_template(&spec)?;
                    return Ok((
                        Run::Front(Plan {
                            socket: daemon::socket(),
                            function: String::new(),
                            mode: spec.mode()?,
                            netns: spec.netns.clone(),
                            notice: None,
                            prewarm_fd: None,
                        }),
                        0,
                        None,
                    ));
                }
                Kind::Native => {
                    let pid = native::create(
                        &bundle,
                        &req.id,
                        open_stdio(&req.stdout)?,
                        open_stdio(&req.stderr)?,
                    )
                    .map_err(CreateError::Native)?;
                    return Ok((Run::Native, pid, None));
                }
                Kind::Function => {}
            }
            let (handler, init) = thaw_pack::image::entry_points_from_env(&spec.env)?;
            let mode = spec.mode()?;
            let prewarm = spec.prewarm()?;
            steps.done("entry_points");
            let socket = daemon::socket();
            // an image with a root filesystem of its own runs on it (the
            // daemon keeps a copy); one of only the code on thaw's root
            // (code read from the layers: they hold nothing else)
            let root = match direct.is_none() && daemon::has_own_root(&spec.root)? {
                true => Some(daemon::import_root(
                    &socket,
                    &spec.root,
                    rootfs_key(&req.rootfs).as_deref(),
                )?),
                false => None,
            };
            if root.is_some() {
                steps.done("root");
            }
            let function = Function {
                handler,
                init,
                settings: spec.settings()?,
                root,
            };
            let deployed = match direct {
                Some(code) => daemon::deploy_code(
                    &socket,
                    code,
                    &function,
                    &mut steps,
                    daemon::BUSY_DEADLINE,
                )?,
                None => daemon::ensure_deployed(&socket, &spec.root, &function, &mut steps)?,
            };
            crate::function_images::remember(&socket, &spec, &deployed.name);
            // the restore starts now, overlapping the rest of the pod's
            // start (containerd's calls, the front's own start)
            let pipe = match (prewarm, &mode) {
                (true, spec::Mode::Serve { .. }) => Some(self.prewarmed(&socket, &deployed.name)?),
                _ => None,
            };
            Ok((
                Run::Front(Plan {
                    socket,
                    function: deployed.name,
                    mode,
                    netns: spec.netns.clone(),
                    notice: deployed.notice,
                    prewarm_fd: pipe.as_ref().map(std::os::fd::AsRawFd::as_raw_fd),
                }),
                0,
                pipe,
            ))
        })();
        log::info!("thaw timing: create {} {steps}", req.id);
        match planned {
            Ok((run, pid, prewarm)) => Ok(Prepared {
                run,
                mounted,
                pid,
                prewarm,
            }),
            Err(e) => {
                if let Some(m) = &mounted {
                    unmount(m);
                }
                Err(e)
            }
        }
    }

    /// A pod's sandbox: has the daemon restore an instance of each
    /// function the pod's template ran before (unless the pod's
    /// `dev.thaw.prewarm` is `false`), without waiting for them.
    fn prewarm_template(&self, spec: &ContainerSpec) -> Result<(), CreateError> {
        let Some(key) = crate::templates::key(spec) else {
            return Ok(());
        };
        // a bad value asks for nothing here; the function container's
        // Create refuses it with its reason
        if spec.prewarm().unwrap_or(false) {
            let socket = daemon::socket();
            let mut early = self.shared.early.lock().unwrap();
            for function in crate::templates::Templates::beside(&socket).functions(&key) {
                early.push((function.clone(), prewarm_now(&socket, &function)?));
            }
        }
        *self.shared.template.lock().unwrap() = Some(key);
        Ok(())
    }

    /// The pipe of an instance of `function` asked for: the one the pod's
    /// sandbox asked for, else asked for now; the pod's template then
    /// remembers the function.
    fn prewarmed(&self, socket: &Path, function: &str) -> std::io::Result<std::os::fd::OwnedFd> {
        let early = {
            let mut early = self.shared.early.lock().unwrap();
            let i = early.iter().position(|(f, _)| f == function);
            i.map(|i| early.swap_remove(i).1)
        };
        // the request goes first; the file is written while it restores
        let pipe = match early {
            Some(pipe) => pipe,
            None => prewarm_now(socket, function)?,
        };
        if let Some(key) = self.shared.template.lock().unwrap().as_deref() {
            if let Err(e) = crate::templates::Templates::beside(socket).remember(key, function) {
                log::warn!("remembering {function} for the pods of {key}: {e}");
            }
        }
        Ok(pipe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error as IoError, ErrorKind};
    use std::time::Duration;
    use thaw_error::Context;

    /// The code and message a failure answers Create with.
    fn answered(e: CreateError) -> (Code, String) {
        match ttrpc::Error::from(e) {
            ttrpc::Error::RpcStatus(s) => (s.code(), s.message),
            other => panic!("not a status: {other:?}"),
        }
    }

    fn unreadable(kind: ErrorKind) -> CreateError {
        let io = IoError::new(kind, "config.json");
        CreateError::Spec(SpecError::Unreadable(Context::new(
            "reading the bundle's config.json",
            io,
        )))
    }

    #[test]
    fn each_create_failure_answers_with_its_own_code() {
        let unreachable = DaemonError::Unreachable {
            socket: PathBuf::from("/run/thaw.sock"),
            source: thaw_client::Error::Runtime(IoError::other("no loop")),
        };
        let busy = DaemonError::Busy {
            what: "function f".into(),
            attempts: 3,
            waited: Duration::from_secs(100),
            reason: "busy".into(),
        };
        let bad_env =
            thaw_pack::image::entry_points_from_env(&["THAW_HANDLER=bad".into()]).unwrap_err();
        let cases = [
            (CreateError::Terminal, Code::INVALID_ARGUMENT),
            (
                CreateError::Spec(SpecError::Invalid("port 0".into())),
                Code::INVALID_ARGUMENT,
            ),
            (CreateError::EntryPoint(bad_env), Code::INVALID_ARGUMENT),
            (unreadable(ErrorKind::InvalidData), Code::INVALID_ARGUMENT),
            (unreadable(ErrorKind::NotFound), Code::NOT_FOUND),
            (
                CreateError::Daemon(DaemonError::NoCode("no /function".into())),
                Code::NOT_FOUND,
            ),
            (
                CreateError::Io(IoError::from(ErrorKind::NotFound)),
                Code::NOT_FOUND,
            ),
            (CreateError::Daemon(unreachable), Code::UNAVAILABLE),
            (CreateError::Daemon(busy), Code::UNAVAILABLE),
            (
                CreateError::Daemon(DaemonError::Refused("400: memory_mb".into())),
                Code::FAILED_PRECONDITION,
            ),
            (CreateError::Mount("overlay: EINVAL".into()), Code::INTERNAL),
            (
                CreateError::Native(native::RuncError::Failed("runc create".into())),
                Code::INTERNAL,
            ),
            (
                CreateError::Io(IoError::from(ErrorKind::PermissionDenied)),
                Code::INTERNAL,
            ),
        ];
        for (e, want) in cases {
            let text = thaw_error::chain(&e);
            let (code, message) = answered(e);
            assert_eq!(code, want, "{text}");
            assert_eq!(message, format!("thaw: {text}"));
        }
    }
}
