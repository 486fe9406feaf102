//! The shim's task service: what containerd calls for each container.
use crate::daemon;
use crate::front::{self, Plan};
use crate::native;
use crate::spec;
use containerd_shim::monitor::{monitor_subscribe, wait_pid, Topic};
use containerd_shim::protos::cgroups::metrics::{
    CPUStat, CPUUsage, MemoryEntry, MemoryStat, Metrics,
};
use containerd_shim::protos::events::task::{TaskCreate, TaskDelete, TaskExit, TaskStart};
use containerd_shim::protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim::protos::protobuf::{MessageDyn, MessageField};
use containerd_shim::protos::shim::shim::{
    ConnectRequest, ConnectResponse, CreateTaskRequest, CreateTaskResponse, DeleteRequest,
    DeleteResponse, ExecProcessRequest, KillRequest, PidsRequest, PidsResponse, ShutdownRequest,
    StartRequest, StartResponse, StateRequest, StateResponse, StatsRequest, StatsResponse,
    WaitRequest, WaitResponse,
};
use containerd_shim::protos::ttrpc::{self, context::Context, Code};
use containerd_shim::protos::types::task::{ProcessInfo, Status};
use containerd_shim::publisher::RemotePublisher;
use containerd_shim::{api, ExitSignal, Flags, StartOpts, TtrpcContext, TtrpcResult};
use std::collections::HashMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};

mod create;
pub use create::CreateError;
use create::Prepared;

/// How long each step of a call took, for the shim's log (`thaw timing:
/// create ID spec=0.1ms mount=0.9ms ...`).
pub struct Steps {
    last: std::time::Instant,
    done: Vec<(&'static str, f64)>,
}

impl Steps {
    pub fn new() -> Steps {
        Steps {
            last: std::time::Instant::now(),
            done: Vec::new(),
        }
    }

    /// The step that ends now.
    pub fn done(&mut self, step: &'static str) {
        let now = std::time::Instant::now();
        self.done
            .push((step, (now - self.last).as_secs_f64() * 1e3));
        self.last = now;
    }
}

impl Default for Steps {
    fn default() -> Steps {
        Steps::new()
    }
}

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (step, ms)) in self.done.iter().enumerate() {
            write!(f, "{}{step}={ms:.2}ms", if i == 0 { "" } else { " " })?;
        }
        Ok(())
    }
}

/// The front's pid, in the bundle: `delete` (after a shim crash) finds it there.
const PID_FILE: &str = "thaw-front.pid";

pub struct Shim {
    exit: Arc<ExitSignal>,
    namespace: String,
    /// The container `start` and `delete` are called for.
    id: String,
    /// The socket this shim serves on (`-socket`; empty for `start` and
    /// `delete`).
    socket: String,
    /// The event thread's queue (once the task service is made): emptied
    /// before the shim exits.
    events: Mutex<Option<Sender<Outgoing>>>,
}

/// What the shim's event thread is given: an event to publish, or a
/// request to answer once every event before it went out.
enum Outgoing {
    Event(&'static str, Box<dyn MessageDyn>),
    Flushed(Sender<()>),
}

/// Publishes the shim's events to containerd in order, on a thread of its
/// own, so that Create, Start and Delete answer without waiting for a round
/// trip to containerd (as containerd's own shims do).
fn event_thread(publisher: RemotePublisher, namespace: String) -> Sender<Outgoing> {
    let (tx, rx) = std::sync::mpsc::channel::<Outgoing>();
    std::thread::spawn(move || {
        for m in rx {
            match m {
                Outgoing::Event(topic, event) => {
                    if let Err(e) = publisher.publish(Context::default(), topic, &namespace, event)
                    {
                        log::warn!("publishing {topic}: {e}");
                    }
                }
                Outgoing::Flushed(ack) => {
                    let _ = ack.send(());
                }
            }
        }
    });
    tx
}

impl containerd_shim::Shim for Shim {
    type T = Service;

    fn new(_runtime_id: &str, args: &Flags, _config: &mut containerd_shim::Config) -> Self {
        Shim {
            exit: Arc::new(ExitSignal::default()),
            namespace: args.namespace.clone(),
            id: args.id.clone(),
            socket: args.socket.clone(),
            events: Mutex::new(None),
        }
    }

    fn start_shim(&mut self, opts: StartOpts) -> containerd_shim::Result<String> {
        // one shim per pod: containerd runs `start` in the container's bundle
        let grouping = spec::grouping(Path::new("."), &opts.id);
        // the pod's shim serves already (a container after the pod's
        // sandbox): its address, without starting a process that would only
        // find the socket taken
        let address = containerd_shim::socket_address(&opts.address, &opts.namespace, &grouping);
        if std::os::unix::net::UnixStream::connect(address.trim_start_matches("unix://")).is_ok() {
            containerd_shim::util::write_address(&address)?;
            return Ok(address);
        }
        let (_pid, address) = containerd_shim::spawn(opts, &grouping, Vec::new())?;
        containerd_shim::util::write_address(&address)?;
        Ok(address)
    }

    /// containerd's cleanup after the shim died: the front (if left), a
    /// runc container (if it was one) and the rootfs mount of the bundle
    /// it runs in.
    fn delete_shim(&mut self) -> containerd_shim::Result<api::DeleteResponse> {
        let bundle =
            std::env::current_dir().map_err(|e| containerd_shim::Error::Other(e.to_string()))?;
        if let Some(pid) = std::fs::read_to_string(bundle.join(PID_FILE))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .filter(|&p| p > 1)
        {
            // SAFETY: a plain syscall; the pid is the front we started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        native::delete(&bundle, &self.id);
        unmount(&bundle.join("rootfs"));
        Ok(api::DeleteResponse {
            exit_status: 128 + libc::SIGKILL as u32,
            exited_at: MessageField::some(now()),
            ..Default::default()
        })
    }

    fn wait(&mut self) {
        self.exit.wait();
        // the events announced so far (the last container's exit and
        // delete) reach containerd before the shim goes
        if let Some(tx) = self.events.lock().unwrap().take() {
            let (ack, flushed) = std::sync::mpsc::channel();
            if tx.send(Outgoing::Flushed(ack)).is_ok() {
                let _ = flushed.recv_timeout(std::time::Duration::from_secs(5));
            }
        }
        // The library removes the socket through the bundle's address file,
        // which containerd may already have deleted with the bundle: remove
        // it here too (open connections stay usable; the path goes).
        let path = Path::new(self.socket.trim_start_matches("unix://"));
        if std::fs::symlink_metadata(path)
            .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
        {
            let _ = std::fs::remove_file(path);
        }
    }

    fn create_task_service(&self, publisher: RemotePublisher) -> Service {
        let events = event_thread(publisher, self.namespace.clone());
        *self.events.lock().unwrap() = Some(events.clone());
        Service {
            shared: Arc::new(Shared {
                containers: Mutex::new(HashMap::new()),
                changed: Condvar::new(),
                exit: self.exit.clone(),
                events,
                template: Mutex::new(None),
                early: Mutex::new(Vec::new()),
            }),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Created,
    Running,
    Stopped,
}

/// What runs a container.
/// Why a thaw container has no exec: its process is the front, and the
/// function runs in the node daemon's sandbox, per request.
const NO_EXEC_FUNCTION: &str = "thaw: exec into a function's container is not supported: its process is thaw's front, and the function runs in the node's thaw daemon, restored per request, with nothing to exec into (kubectl logs shows its output)";
/// The shim does not run `runc exec` for a pod's runc containers.
const NO_EXEC_NATIVE: &str = "thaw: exec into a runc container of a thaw pod is not supported by the thaw shim (run it in a pod without runtimeClassName: thaw)";

enum Run {
    /// The shim's front (a function's, or a pod's pause container).
    Front(Plan),
    /// runc, from the bundle (its init created at Create).
    Native,
}

struct Container {
    bundle: PathBuf,
    stdout: String,
    stderr: String,
    /// Where the shim mounted the image's rootfs (unmounted at delete).
    mounted: Option<PathBuf>,
    run: Run,
    /// The front's end of the pipe that ends when the daemon answered the
    /// shim's prewarm ([`front::Plan::prewarm_fd`]), until Start hands it on.
    prewarm: Option<std::os::fd::OwnedFd>,
    phase: Phase,
    pid: u32,
    exit_status: u32,
    exited_at: Option<Timestamp>,
}

struct Shared {
    containers: Mutex<HashMap<String, Container>>,
    /// Signalled whenever a container stops.
    changed: Condvar,
    exit: Arc<ExitSignal>,
    /// The event thread's queue.
    events: Sender<Outgoing>,
    /// The pod's template (its sandbox's Create read it), under which the
    /// pod's functions are remembered for the template's next pods.
    template: Mutex<Option<String>>,
    /// Instances the pod's sandbox asked for, of the functions its
    /// template ran before: (function, the prewarm's pipe), taken by the
    /// container of that function.
    early: Mutex<Vec<(String, std::os::fd::OwnedFd)>>,
}

#[derive(Clone)]
pub struct Service {
    shared: Arc<Shared>,
}

fn now() -> Timestamp {
    containerd_shim::util::timestamp().unwrap_or_default()
}

fn err(code: Code, msg: impl ToString) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code, msg))
}

fn not_found(id: &str) -> ttrpc::Error {
    err(Code::NOT_FOUND, format!("container {id} not found"))
}

/// Detaches the mount stack at `target` (nothing there: nothing to do).
fn unmount(target: &Path) {
    let Ok(c) = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: umount2 with a valid C string; it fails with EINVAL once
    // nothing is mounted there, which ends the loop.
    while unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {}
}

/// A function's usage as cgroup v1 metrics, the form containerd's CRI
/// plugin reads (memory usage and limit, CPU usage in ns).
fn function_metrics(u: &daemon::Usage) -> Metrics {
    let mut mem = MemoryStat::new();
    let mut usage = MemoryEntry::new();
    usage.set_usage(u.memory_bytes);
    usage.set_limit(u.memory_limit_bytes);
    mem.set_usage(usage);
    let mut cpu = CPUStat::new();
    let mut cpu_usage = CPUUsage::new();
    cpu_usage.set_total(u.cpu_ns);
    cpu.set_usage(cpu_usage);
    let mut m = Metrics::new();
    m.set_memory(mem);
    m.set_cpu(cpu);
    m
}

/// Clears the descriptor's close-on-exec flag, so the next spawned process
/// inherits it.
fn inheritable(fd: &std::os::fd::OwnedFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor we own; only its flags change.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A stdio path containerd gives (a FIFO it reads, or a file); empty: none.
fn open_stdio(path: &str) -> std::io::Result<Stdio> {
    if path.is_empty() {
        return Ok(Stdio::null());
    }
    let path = path.strip_prefix("file://").unwrap_or(path);
    // A FIFO without a reader yet would block a write-only open: open it
    // read-write then (it never blocks), as containerd's own shims do.
    let f = match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?,
        other => other?,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor we own: clear O_NONBLOCK for the child.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    Ok(Stdio::from(f))
}

impl Service {
    fn publish(&self, topic: &'static str, event: Box<dyn MessageDyn>) {
        if self
            .shared
            .events
            .send(Outgoing::Event(topic, event))
            .is_err()
        {
            log::warn!("publishing {topic}: the event thread is gone");
        }
    }

    /// Follows the front until it exits, then records and announces the exit.
    fn watch(&self, id: String, pid: u32, sub: containerd_shim::monitor::Subscription) {
        let me = self.clone();
        std::thread::spawn(move || {
            let code = wait_pid(pid.cast_signed(), sub); // a pid is below 2^22
            let exited_at = now();
            {
                let mut cs = me.shared.containers.lock().unwrap();
                if let Some(c) = cs.get_mut(&id) {
                    c.phase = Phase::Stopped;
                    c.exit_status = code.cast_unsigned();
                    c.exited_at = Some(exited_at.clone());
                    let _ = std::fs::remove_file(c.bundle.join(PID_FILE));
                }
                me.shared.changed.notify_all();
            }
            me.publish(
                "/tasks/exit",
                Box::new(TaskExit {
                    container_id: id.clone(),
                    id,
                    pid,
                    exit_status: code.cast_unsigned(),
                    exited_at: MessageField::some(exited_at),
                    ..Default::default()
                }),
            );
        });
    }
}

impl containerd_shim::Task for Service {
    fn create(
        &self,
        _ctx: &TtrpcContext,
        req: CreateTaskRequest,
    ) -> TtrpcResult<CreateTaskResponse> {
        if self.shared.containers.lock().unwrap().contains_key(&req.id) {
            return Err(err(
                Code::ALREADY_EXISTS,
                format!("container {} exists", req.id),
            ));
        }
        let Prepared {
            run,
            mounted,
            pid,
            prewarm,
        } = self.prepare(&req)?;
        self.shared.containers.lock().unwrap().insert(
            req.id.clone(),
            Container {
                bundle: PathBuf::from(&req.bundle),
                stdout: req.stdout.clone(),
                stderr: req.stderr.clone(),
                mounted,
                run,
                prewarm,
                phase: Phase::Created,
                pid,
                exit_status: 0,
                exited_at: None,
            },
        );
        self.publish(
            "/tasks/create",
            Box::new(TaskCreate {
                container_id: req.id.clone(),
                bundle: req.bundle.clone(),
                ..Default::default()
            }),
        );
        Ok(CreateTaskResponse {
            pid,
            ..Default::default()
        })
    }

    fn start(&self, _ctx: &TtrpcContext, req: StartRequest) -> TtrpcResult<StartResponse> {
        if !req.exec_id.is_empty() {
            return Err(err(Code::UNIMPLEMENTED, "thaw containers have no exec"));
        }
        let mut cs = self.shared.containers.lock().unwrap();
        let c = cs.get_mut(&req.id).ok_or_else(|| not_found(&req.id))?;
        if c.phase != Phase::Created {
            return Err(err(Code::FAILED_PRECONDITION, "already started"));
        }
        let spawned = || -> Result<u32, thaw_error::BoxError> {
            let plan = match &c.run {
                Run::Native => {
                    native::start(&c.bundle, &req.id)?;
                    return Ok(c.pid);
                }
                Run::Front(plan) => plan,
            };
            let exe = std::env::current_exe()?;
            let mut cmd = Command::new(exe);
            cmd.arg(front::SUBCOMMAND)
                .arg(serde_json::to_string(plan)?)
                .current_dir("/")
                .stdin(Stdio::null())
                .stdout(open_stdio(&c.stdout)?)
                .stderr(open_stdio(&c.stderr)?);
            // the front inherits the prewarm's pipe under the same number
            // (a spawn without a pre_exec hook stays a vfork-style spawn; a
            // process another thread spawns meanwhile may inherit it too,
            // which keeps nothing waiting: the pipe ends when the shim's
            // writer closes)
            if let Some(fd) = &c.prewarm {
                inheritable(fd)?;
            }
            Ok(cmd.spawn()?.id())
        };
        // subscribe before the process can exit, so its exit cannot be missed
        let sub = monitor_subscribe(Topic::Pid)
            .map_err(|e| err(Code::INTERNAL, format!("subscribing to exits: {e}")))?;
        let mut steps = Steps::new();
        let pid = spawned().map_err(|e| {
            err(
                Code::INTERNAL,
                format!("starting the container: {}", thaw_error::chain(&*e)),
            )
        })?;
        steps.done("spawn");
        log::info!("thaw timing: start {} {steps}", req.id);
        // the front has its copy
        c.prewarm = None;
        c.pid = pid;
        c.phase = Phase::Running;
        let _ = std::fs::write(c.bundle.join(PID_FILE), pid.to_string());
        drop(cs);
        self.watch(req.id.clone(), pid, sub);
        self.publish(
            "/tasks/start",
            Box::new(TaskStart {
                container_id: req.id,
                pid,
                ..Default::default()
            }),
        );
        Ok(StartResponse {
            pid,
            ..Default::default()
        })
    }

    /// `kubectl exec` / `crictl exec`: refused, saying why.
    fn exec(&self, _ctx: &TtrpcContext, req: ExecProcessRequest) -> TtrpcResult<api::Empty> {
        let cs = self.shared.containers.lock().unwrap();
        let c = cs.get(&req.id).ok_or_else(|| not_found(&req.id))?;
        let why = match c.run {
            Run::Front(_) => NO_EXEC_FUNCTION,
            Run::Native => NO_EXEC_NATIVE,
        };
        Err(err(Code::UNIMPLEMENTED, why))
    }

    fn state(&self, _ctx: &TtrpcContext, req: StateRequest) -> TtrpcResult<StateResponse> {
        let cs = self.shared.containers.lock().unwrap();
        let c = cs.get(&req.id).ok_or_else(|| not_found(&req.id))?;
        let status = match c.phase {
            Phase::Created => Status::CREATED,
            Phase::Running => Status::RUNNING,
            Phase::Stopped => Status::STOPPED,
        };
        Ok(StateResponse {
            id: req.id,
            bundle: c.bundle.to_string_lossy().into_owned(),
            pid: c.pid,
            status: status.into(),
            stdout: c.stdout.clone(),
            stderr: c.stderr.clone(),
            exit_status: c.exit_status,
            exited_at: MessageField::from_option(c.exited_at.clone()),
            ..Default::default()
        })
    }

    fn kill(&self, _ctx: &TtrpcContext, req: KillRequest) -> TtrpcResult<api::Empty> {
        let mut cs = self.shared.containers.lock().unwrap();
        let c = cs.get_mut(&req.id).ok_or_else(|| not_found(&req.id))?;
        match c.phase {
            Phase::Running => {
                let (Ok(pid), Ok(signal)) =
                    (libc::pid_t::try_from(c.pid), i32::try_from(req.signal))
                else {
                    return Err(err(
                        Code::INVALID_ARGUMENT,
                        format!("signal {}", req.signal),
                    ));
                };
                // SAFETY: a plain syscall on the front we started (not yet
                // reaped while Running: the watcher sets Stopped first).
                if unsafe { libc::kill(pid, signal) } != 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::ESRCH) {
                        return Err(err(Code::INTERNAL, format!("kill: {e}")));
                    }
                }
            }
            Phase::Created => {
                // never started: it stops as if killed
                c.phase = Phase::Stopped;
                c.exit_status = 128 + req.signal;
                c.exited_at = Some(now());
                self.shared.changed.notify_all();
            }
            Phase::Stopped => return Err(err(Code::NOT_FOUND, "process already finished")),
        }
        Ok(api::Empty::default())
    }

    fn wait(&self, _ctx: &TtrpcContext, req: WaitRequest) -> TtrpcResult<WaitResponse> {
        let mut cs = self.shared.containers.lock().unwrap();
        loop {
            let c = cs.get(&req.id).ok_or_else(|| not_found(&req.id))?;
            if c.phase == Phase::Stopped {
                return Ok(WaitResponse {
                    exit_status: c.exit_status,
                    exited_at: MessageField::from_option(c.exited_at.clone()),
                    ..Default::default()
                });
            }
            cs = self.shared.changed.wait(cs).unwrap();
        }
    }

    fn delete(&self, _ctx: &TtrpcContext, req: DeleteRequest) -> TtrpcResult<DeleteResponse> {
        let mut cs = self.shared.containers.lock().unwrap();
        let c = cs.get(&req.id).ok_or_else(|| not_found(&req.id))?;
        if c.phase == Phase::Running {
            return Err(err(
                Code::FAILED_PRECONDITION,
                format!("container {} is running: kill it first", req.id),
            ));
        }
        let c = cs.remove(&req.id).expect("looked up above");
        drop(cs);
        if let Run::Native = c.run {
            native::delete(&c.bundle, &req.id);
        }
        if let Some(m) = &c.mounted {
            unmount(m);
        }
        let exited_at = c.exited_at.unwrap_or_else(now);
        self.publish(
            "/tasks/delete",
            Box::new(TaskDelete {
                container_id: req.id.clone(),
                id: req.id,
                pid: c.pid,
                exit_status: c.exit_status,
                exited_at: MessageField::some(exited_at.clone()),
                ..Default::default()
            }),
        );
        Ok(DeleteResponse {
            pid: c.pid,
            exit_status: c.exit_status,
            exited_at: MessageField::some(exited_at),
            ..Default::default()
        })
    }

    fn pids(&self, _ctx: &TtrpcContext, req: PidsRequest) -> TtrpcResult<PidsResponse> {
        let cs = self.shared.containers.lock().unwrap();
        let c = cs.get(&req.id).ok_or_else(|| not_found(&req.id))?;
        let processes = (c.phase == Phase::Running)
            .then(|| ProcessInfo {
                pid: c.pid,
                ..Default::default()
            })
            .into_iter()
            .collect();
        Ok(PidsResponse {
            processes,
            ..Default::default()
        })
    }

    /// A runc container's cgroup (memory, CPU, pids), as containerd's own
    /// runc shim reports it. A function's container has no cgroup of its
    /// own: its figures are the function's instances in the node's daemon
    /// (their cgroups' memory now, their CPU time so far), which every
    /// container of the function on the node shares.
    fn stats(&self, _ctx: &TtrpcContext, req: StatsRequest) -> TtrpcResult<StatsResponse> {
        // a runc container's pid, or the function's daemon socket and name
        let of =
            {
                let cs = self.shared.containers.lock().unwrap();
                let c = cs.get(&req.id).ok_or_else(|| not_found(&req.id))?;
                match (&c.run, c.phase) {
                    (Run::Native, Phase::Running) => Ok(c.pid),
                    (Run::Native, _) => {
                        return Err(err(
                            Code::FAILED_PRECONDITION,
                            "the container is not running",
                        ))
                    }
                    (Run::Front(plan), _) if plan.function.is_empty() => return Err(err(
                        Code::UNIMPLEMENTED,
                        "a pod's sandbox container runs no function: it has no figures of its own",
                    )),
                    (Run::Front(plan), _) => Err((plan.socket.clone(), plan.function.clone())),
                }
            };
        let metrics = match of {
            Ok(pid) => containerd_shim::cgroup::get_cgroup(pid)
                .and_then(|cg| containerd_shim::cgroup::collect_metrics(&cg))
                .map_err(|e| err(Code::INTERNAL, format!("the container's cgroup: {e}")))?,
            Err((socket, function)) => {
                let u = daemon::usage(&socket, &function).map_err(|e| {
                    err(
                        Code::UNAVAILABLE,
                        format!("thaw: {}", thaw_error::chain(&e)),
                    )
                })?;
                function_metrics(&u)
            }
        };
        let stats = containerd_shim::util::convert_to_any(Box::new(metrics))
            .map_err(|e| err(Code::INTERNAL, format!("encoding the stats: {e}")))?;
        Ok(StatsResponse {
            stats: MessageField::some(stats),
            ..Default::default()
        })
    }

    fn connect(&self, _ctx: &TtrpcContext, req: ConnectRequest) -> TtrpcResult<ConnectResponse> {
        let cs = self.shared.containers.lock().unwrap();
        Ok(ConnectResponse {
            shim_pid: std::process::id(),
            task_pid: cs.get(&req.id).map_or(0, |c| c.pid),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        })
    }

    fn shutdown(&self, _ctx: &TtrpcContext, _req: ShutdownRequest) -> TtrpcResult<api::Empty> {
        // the pod's last container gone: the shim goes too
        if self.shared.containers.lock().unwrap().is_empty() {
            self.shared.exit.signal();
        }
        Ok(api::Empty::default())
    }
}
