//! A host the egress tests and benches make themselves: a network namespace
//! joined to this machine by a veth, with a few addresses, running servers
//! (HTTP, TCP echo, a DNS answerer) that the test starts in it. Nothing it
//! does reaches any other address. Dropping it stops the servers and removes
//! the namespace (and with it the veth).
use crate::error::{HostError, Result};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use thaw_error::{fail, ResultExt};
use thaw_store::secure::{self, FileLock};

/// Leases of test-host subnets (machine-wide: tests of several engineers
/// run at once). Each is a /29 of 10.224.0.0/16.
const LEASE_DIR: &str = "/run/thaw/nethost";
const BASE: u32 = u32::from_be_bytes([10, 224, 0, 0]);
const LEASES: u32 = 8192;

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct NetHost {
    name: String,
    host_if: String,
    first: u32,
    servers: Vec<Child>,
    _lease: FileLock,
}

impl NetHost {
    /// A new namespace: this machine's end is [`NetHost::host_addr`], the
    /// namespace holds [`NetHost::addr`] 0, 1 and 2.
    pub fn create() -> Result<NetHost> {
        let dir = Path::new(LEASE_DIR);
        secure::ensure_private_dir(dir)
            .with_context(|| format!("the test hosts' lease directory {}", dir.display()))?;
        let (index, lease) = (0..LEASES)
            .find_map(|i| {
                secure::flock(&dir.join(format!("{i}.lock")), true, true)
                    .ok()
                    .flatten()
                    .map(|l| (i, l))
            })
            .ok_or_else(|| HostError::Failed("no free test-host subnet".into()))?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let h = NetHost {
            name: format!("thaw-nethost-{pid}-{n}"),
            host_if: format!("tnh{}x{n}", pid % 10_000_000),
            first: BASE + index * 8,
            servers: Vec::new(),
            _lease: lease,
        };
        h.set_up()?;
        Ok(h)
    }

    fn set_up(&self) -> Result<()> {
        let (ns, hif) = (&self.name, &self.host_if);
        // a namespace of this name left by a killed run of the same pid
        let _ = run(&["ip", "netns", "del", ns]);
        run(&["ip", "netns", "add", ns])?;
        let host = format!("{}/29", self.host_addr());
        run(&[
            "ip", "link", "add", hif, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ])?;
        run(&["ip", "addr", "add", &host, "dev", hif])?;
        run(&["ip", "link", "set", hif, "up"])?;
        for i in 0..3 {
            let a = format!("{}/29", self.addr(i));
            run(&["ip", "-n", ns, "addr", "add", &a, "dev", "eth0"])?;
        }
        run(&["ip", "-n", ns, "link", "set", "eth0", "up"])?;
        run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        // other test hosts (and nothing else) are reached through this machine
        let via = self.host_addr().to_string();
        let hosts = format!("{}/16", Ipv4Addr::from(BASE));
        run(&["ip", "-n", ns, "route", "add", &hosts, "via", &via])
    }

    /// This machine's address on the link (a host address: sandboxes are
    /// refused it).
    pub fn host_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.first + 1)
    }

    /// The namespace's addresses, `i` in 0..3.
    pub fn addr(&self, i: u32) -> Ipv4Addr {
        assert!(i < 3, "a test host has three addresses");
        Ipv4Addr::from(self.first + 2 + i)
    }

    /// Starts `argv` inside the namespace (stopped when the host drops).
    pub fn spawn(&mut self, argv: &[&str]) -> Result<()> {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {argv:?} in {}", self.name))?;
        self.servers.push(child);
        Ok(())
    }

    /// Starts the HTTP server (`GET /` answers `hello from the test host`,
    /// `GET /bytes/N` streams N bytes) on `addr(i):port`.
    pub fn http_server(&mut self, i: u32, port: u16) -> Result<()> {
        let a = self.addr(i).to_string();
        self.spawn(&["python3", "-c", HTTP_SERVER, &a, &port.to_string()])?;
        self.wait_tcp(i, port)
    }

    /// Starts a TCP echo server on `addr(i):port`.
    pub fn echo_server(&mut self, i: u32, port: u16) -> Result<()> {
        let a = self.addr(i).to_string();
        self.spawn(&["python3", "-c", ECHO_SERVER, &a, &port.to_string()])?;
        self.wait_tcp(i, port)
    }

    /// Starts dnsmasq on `addr(i)`, answering `name` with `answer` and
    /// nothing else (no upstream).
    pub fn dns_server(&mut self, i: u32, name: &str, answer: Ipv4Addr) -> Result<()> {
        let listen = format!("--listen-address={}", self.addr(i));
        let record = format!("--address=/{name}/{answer}");
        self.spawn(&[
            "dnsmasq",
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--user=root",
            "--pid-file",
            &listen,
            &record,
        ])?;
        // dnsmasq also answers on TCP 53
        self.wait_tcp(i, 53)
    }

    fn wait_tcp(&self, i: u32, port: u16) -> Result<()> {
        let to = SocketAddr::from((self.addr(i), port));
        let t = Instant::now();
        while TcpStream::connect_timeout(&to, Duration::from_millis(200)).is_err() {
            if t.elapsed() > Duration::from_secs(10) {
                fail!(
                    HostError::Failed,
                    "the test host's server on {to} did not come up"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Runs `argv` in the namespace to its end (a plain process there, the
    /// baseline of the egress bench).
    pub fn exec(&self, argv: &[&str]) -> Result<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(argv)
            .output()?;
        if !out.status.success() {
            fail!(
                HostError::Failed,
                "{argv:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn host_if(&self) -> &str {
        &self.host_if
    }
}

impl Drop for NetHost {
    fn drop(&mut self) {
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        // ip netns exec's children were killed with it only if they are
        // its own process (exec): they are, ip execs the command
        let _ = run(&["ip", "netns", "del", &self.name]);
        let _ = run(&["ip", "link", "del", &self.host_if]);
    }
}

fn run(argv: &[&str]) -> Result<()> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", argv[0]))?;
    if !out.status.success() {
        fail!(
            HostError::Failed,
            "{}: {}",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

const HTTP_SERVER: &str = r#"
import sys, http.server, socketserver
CHUNK = b"x" * (1 << 20)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/bytes/"):
            n = int(self.path[len("/bytes/"):])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            while n > 0:
                k = min(n, len(CHUNK))
                self.wfile.write(CHUNK[:k])
                n -= k
            return
        body = b"hello from the test host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
# a TCP server, not http.server's: that one looks its own name up in DNS
class S(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
S((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"#;

const ECHO_SERVER: &str = r#"
import sys, socket, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
def serve(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;
