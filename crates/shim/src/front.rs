//! The container's process as containerd sees it (its pid, its exit, the
//! target of its signals): a small client of the node's daemon, started by
//! the shim as `containerd-shim-thaw-v1 front PLAN`. The function itself
//! runs in the daemon's sandbox, restored from its snapshot; the front
//! gives it a container's shape. With `invoke` it invokes once, writes the
//! function's output and its answer to stdout and exits 0 (1 if the
//! invocation failed); with `serve` it listens on `$PORT` in the
//! container's network namespace (the pod's, so pod IPs, Services and
//! probes reach it) and turns every HTTP request into one invocation until
//! it is signalled.
use crate::daemon;
use crate::spec::{Mode, Netns};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use thaw_error::{Context, ResultExt};

pub const SUBCOMMAND: &str = "front";

/// Everything the front needs, passed as one JSON argument.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub socket: PathBuf,
    pub function: String,
    pub mode: Mode,
    pub netns: Netns,
    /// Written to the container's stderr as it starts (what the node did
    /// about the function's shared snapshot, when the cluster's owner
    /// should know).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// The descriptor (inherited from the shim) on which the shim's request
    /// for a ready instance (made at the container's Create, `serve` only)
    /// ends: end of file once the daemon answered, after an error's text if
    /// it failed. Requests wait for it, so they use that instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prewarm_fd: Option<i32>,
}

pub fn main(args: &[String]) -> i32 {
    let plan: Plan = match args.first().map(|a| serde_json::from_str(a)) {
        Some(Ok(p)) => p,
        _ => {
            eprintln!("thaw front: expected one JSON plan argument (the shim starts this)");
            return 2;
        }
    };
    if let Some(n) = &plan.notice {
        eprintln!("thaw: {n}");
    }
    match &plan.mode {
        Mode::Invoke { event } => invoke_once(&plan, event.as_bytes()),
        Mode::Pause {
            new_uts,
            new_ipc,
            hostname,
        } => {
            if let Err(e) = hold_pod_namespaces(&plan.netns, *new_uts, *new_ipc, hostname) {
                eprintln!("thaw: the pod's namespaces: {e:#}");
                return 1;
            }
            loop {
                // SAFETY: pause() only waits for a signal; the default
                // dispositions end the process on SIGTERM and SIGKILL.
                unsafe { libc::pause() };
            }
        }
        Mode::Serve { port } => match serve(&plan, *port) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("thaw: {e:#}");
                1
            }
        },
    }
}

/// Copies the function's output of one invocation to our stdout.
fn copy_output(plan: &Plan, r: &thaw_client::Response) {
    let Some(id) = r.header("thaw-invocation-id") else {
        return;
    };
    match daemon::invocation_output(&plan.socket, &plan.function, id) {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(out.as_bytes());
            let _ = stdout.flush();
        }
        Err(e) => eprintln!(
            "thaw: the function's output is lost: {}",
            thaw_error::chain(&e)
        ),
    }
}

fn invoke_once(plan: &Plan, event: &[u8]) -> i32 {
    let r = match daemon::invoke(&plan.socket, &plan.function, event) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("thaw: {}", thaw_error::chain(&e));
            return 1;
        }
    };
    copy_output(plan, &r);
    if r.status != 200 {
        eprintln!(
            "thaw: the invocation failed ({}): {}",
            r.status,
            daemon::error_message(&r)
        );
        return 1;
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&r.body);
    let _ = stdout.write_all(b"\n");
    let _ = stdout.flush();
    0
}

fn enter_netns(netns: &Netns) -> Result<(), Context> {
    use std::os::fd::AsRawFd;
    match netns {
        Netns::Host => Ok(()),
        Netns::Path(p) => {
            let f = std::fs::File::open(p).with_context(|| format!("opening netns {p}"))?;
            // SAFETY: a plain syscall on a descriptor we own; the process is
            // still single-threaded, so every later socket is in the namespace.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("joining netns {p}"));
            }
            Ok(())
        }
        Netns::New => {
            // SAFETY: a plain syscall; single-threaded here.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error()).context("a new netns");
            }
            set_loopback_up().context("bringing up the loopback of a new netns")
        }
    }
}

/// The pause container's part: be in the pod's namespaces, which the
/// pod's other containers join through `/proc/PID/ns/*` (the CRI plugin
/// names the pause container's pid in their specs): the network namespace
/// the CRI plugin made, and new UTS (with the pod's hostname) and IPC ones.
fn hold_pod_namespaces(
    netns: &Netns,
    new_uts: bool,
    new_ipc: bool,
    hostname: &Option<String>,
) -> Result<(), Context> {
    enter_netns(netns)?;
    let mut flags = 0;
    if new_uts {
        flags |= libc::CLONE_NEWUTS;
    }
    if new_ipc {
        flags |= libc::CLONE_NEWIPC;
    }
    // SAFETY: a plain syscall; the process is single-threaded.
    if flags != 0 && unsafe { libc::unshare(flags) } != 0 {
        return Err(std::io::Error::last_os_error()).context("new UTS/IPC namespaces");
    }
    if let (true, Some(h)) = (new_uts, hostname) {
        // SAFETY: the pointer and length describe `h`'s bytes.
        if unsafe { libc::sethostname(h.as_ptr().cast(), h.len()) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("setting the hostname {h:?}"));
        }
    }
    Ok(())
}

/// The descriptor `fd` the shim left open for this process, if it is one
/// (a plan naming a descriptor that is not open gets none).
fn inherited(fd: i32) -> Option<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: fcntl only reads the descriptor's flags; -1 if it is not open.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: the descriptor is open, and nothing else in this process
    // uses it: the shim passed it for this alone.
    Some(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// A new network namespace starts with its loopback down.
fn set_loopback_up() -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket() returns a new descriptor or -1; OwnedFd closes it.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh descriptor nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo") {
        *dst = src.cast_signed();
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we pass.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        #[allow(clippy::cast_possible_truncation)] // IFF_UP is 1
        let up = libc::IFF_UP as libc::c_short;
        req.ifr_ifru.ifru_flags |= up;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn serve(plan: &Plan, port: u16) -> Result<(), Context> {
    enter_netns(&plan.netns)?;
    let listener = std::net::TcpListener::bind(("0.0.0.0", port))
        .with_context(|| format!("listening on port {port}"))?;
    listener
        .set_nonblocking(true)
        .context("a non-blocking listener")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("the front's event loop")?;
    let plan = std::sync::Arc::new(plan.clone());
    let warm = Prewarm::start(&plan);
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .with_context(|| format!("listening on port {port}"))?;
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // out of descriptors, say: the connections that end
                    // free them, so wait a little rather than spin
                    eprintln!("thaw: accepting on port {port}: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (plan, warm) = (plan.clone(), warm.clone());
            let service = hyper::service::service_fn(move |req| {
                forward(plan.clone(), warm.clone(), req.into_body())
            });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                // a client that goes away mid-request ends only its connection
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    })
}

/// The instance the shim asked the daemon for at the container's Create
/// (the pod was started because requests are coming): the restore overlaps
/// the rest of the pod's start, and requests that arrive meanwhile wait for
/// it rather than restore a second instance.
#[derive(Clone)]
struct Prewarm(std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

/// How long a request waits for the prewarm before it invokes anyway (the
/// daemon then restores another instance or queues it).
const PREWARM_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Prewarm {
    fn start(plan: &Plan) -> Prewarm {
        let warm = Prewarm(Default::default());
        let w = warm.clone();
        let pipe = plan.prewarm_fd.and_then(inherited);
        std::thread::spawn(move || {
            if let Some(mut pipe) = pipe {
                let mut failed = String::new();
                let _ = std::io::Read::read_to_string(&mut pipe, &mut failed);
                if !failed.is_empty() {
                    eprintln!(
                        "thaw: no instance made ready at start (the first request restores one): {failed}"
                    );
                }
            }
            let (done, cv) = &*w.0;
            *done.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
        });
        warm
    }

    /// Blocks until the prewarm answered (or [`PREWARM_WAIT`] passed).
    fn wait(&self) {
        let (done, cv) = &*self.0;
        let guard = done.lock().unwrap_or_else(|e| e.into_inner());
        let _ = cv.wait_timeout_while(guard, PREWARM_WAIT, |d| !*d);
    }
}

/// The largest request body the front reads: an event (larger ones are
/// answered 413).
const MAX_EVENT_BYTES: usize = 2 << 20;

type Answer = hyper::Response<http_body_util::Full<bytes::Bytes>>;

/// An answer of `status` with `body` of `content_type`.
fn answer(
    status: hyper::StatusCode,
    content_type: &'static str,
    body: impl Into<bytes::Bytes>,
) -> Answer {
    let mut resp = hyper::Response::new(http_body_util::Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}

/// One HTTP request: its body is the event (empty: null), the answer is the
/// function's, with the daemon's status and `Thaw-*` headers.
async fn forward(
    plan: std::sync::Arc<Plan>,
    warm: Prewarm,
    body: hyper::body::Incoming,
) -> Result<Answer, std::convert::Infallible> {
    use http_body_util::BodyExt;
    use hyper::header::{HeaderName, HeaderValue};
    use hyper::StatusCode;
    let body = match http_body_util::Limited::new(body, MAX_EVENT_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let msg = format!("the event is over {MAX_EVENT_BYTES} bytes");
            return Ok(answer(
                StatusCode::PAYLOAD_TOO_LARGE,
                "text/plain; charset=utf-8",
                msg,
            ));
        }
        Err(e) => {
            let msg = format!("reading the request: {e}");
            return Ok(answer(
                StatusCode::BAD_REQUEST,
                "text/plain; charset=utf-8",
                msg,
            ));
        }
    };
    let invoked = tokio::task::spawn_blocking(move || {
        warm.wait();
        let event: &[u8] = if body.is_empty() { b"null" } else { &body };
        let r = daemon::invoke(&plan.socket, &plan.function, event);
        if let Ok(r) = &r {
            let (plan, r) = (plan.clone(), r.clone());
            std::thread::spawn(move || copy_output(&plan, &r));
        }
        r
    })
    .await;
    Ok(match invoked {
        Ok(Ok(r)) => {
            let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut resp = answer(status, "application/json", r.body);
            let headers = resp.headers_mut();
            for (k, v) in &r.headers {
                if k.starts_with("thaw-") || k == "server-timing" || k == "retry-after" {
                    if let (Ok(k), Ok(v)) = (
                        HeaderName::from_bytes(k.as_bytes()),
                        HeaderValue::from_str(v),
                    ) {
                        headers.insert(k, v);
                    }
                }
            }
            resp
        }
        Ok(Err(e)) => {
            let body = serde_json::json!({"error": "daemon_unreachable", "message": thaw_error::chain(&e)});
            answer(
                StatusCode::BAD_GATEWAY,
                "application/json",
                body.to_string(),
            )
        }
        Err(e) => answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            e.to_string(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;
    use std::time::{Duration, Instant};

    fn plan(prewarm_fd: Option<i32>) -> Plan {
        Plan {
            socket: PathBuf::from("/nonexistent/thaw.sock"),
            function: "f".into(),
            mode: Mode::Serve { port: 8080 },
            netns: Netns::Host,
            notice: None,
            prewarm_fd,
        }
    }

    #[test]
    fn requests_wait_for_the_shims_prewarm_until_its_pipe_ends() {
        let (read, mut write) = std::io::pipe().unwrap();
        let warm = Prewarm::start(&plan(Some(read.into_raw_fd())));
        let t = Instant::now();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let _ = std::io::Write::write_all(&mut write, b"refused");
        });
        warm.wait();
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < PREWARM_WAIT,
            "waited {waited:?}"
        );
    }

    #[test]
    fn without_a_pipe_or_with_one_not_open_nothing_is_waited_for() {
        for fd in [None, Some(-1), Some(1 << 20)] {
            let t = Instant::now();
            Prewarm::start(&plan(fd)).wait();
            assert!(t.elapsed() < Duration::from_secs(5), "{fd:?}");
        }
    }
}
