//! A host the egress tests and benches make themselves: a network namespace
//! joined to this machine by a veth, with a few addresses (IPv4, and IPv6
//! when the host has it), running servers (HTTP, TCP echo, a DNS answerer,
//! PostgreSQL) that the test starts in it. Nothing it does reaches any other
//! address. Dropping it stops the servers and removes the namespace (and
//! with it the veth) and the servers' directories.
use crate::{EgressError, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use thaw_error::{fail, ResultExt};
use thaw_store::secure::{self, FileLock};

/// Leases of test-host subnets (machine-wide: tests of several engineers
/// run at once). Each is a /29 of 10.224.0.0/16 and the /64 of the same
/// number in `fd74:6861:7701::/48` (beside the sandboxes' IPv6 range).
const LEASE_DIR: &str = "/run/thaw/nethost";
const BASE: u32 = u32::from_be_bytes([10, 224, 0, 0]);
const BASE6: u128 = 0xfd74_6861_7701_u128 << 80;
const LEASES: u32 = 8192;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Held by a test binary's tests that run daemons with egress, one at a
/// time: daemons lease the lowest free egress subnet machine-wide, so a
/// daemon another test starts could take a stopped or killed one's subnet
/// (and with it the leftovers) while a test checks what was left there.
pub fn one_network_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct NetHost {
    name: String,
    host_if: String,
    index: u32,
    first: u32,
    /// the host has IPv6: the link has the /64 too
    ipv6: bool,
    /// (server, the signal that stops it cleanly)
    servers: Vec<(Child, i32)>,
    /// the servers' own directories, removed once they stopped
    dirs: Vec<PathBuf>,
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
            .ok_or_else(|| EgressError::Failed("no free test-host subnet".into()))?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let h = NetHost {
            name: format!("thaw-nethost-{pid}-{n}"),
            host_if: format!("tnh{}x{n}", pid % 10_000_000),
            index,
            first: BASE + index * 8,
            ipv6: crate::ipv6_unavailable().is_none(),
            servers: Vec::new(),
            dirs: Vec::new(),
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
        run(&["ip", "-n", ns, "route", "add", &hosts, "via", &via])?;
        if self.ipv6 {
            let host6 = format!("{}/64", self.host_addr6());
            run(&["ip", "addr", "add", &host6, "dev", hif, "nodad"])?;
            for i in 0..3 {
                let a = format!("{}/64", self.addr6(i));
                run(&["ip", "-n", ns, "addr", "add", &a, "dev", "eth0", "nodad"])?;
            }
            let via = self.host_addr6().to_string();
            let hosts = format!("{}/48", Ipv6Addr::from(BASE6));
            run(&["ip", "-n", ns, "-6", "route", "add", &hosts, "via", &via])?;
        }
        Ok(())
    }

    /// This machine's IPv6 address on the link (refused to sandboxes).
    pub fn host_addr6(&self) -> Ipv6Addr {
        Ipv6Addr::from(BASE6 | (self.index as u128) << 64 | 1)
    }

    /// The namespace's IPv6 addresses, `i` in 0..3 (when the host has IPv6:
    /// see [`crate::ipv6_unavailable`]).
    pub fn addr6(&self, i: u32) -> Ipv6Addr {
        assert!(i < 3, "a test host has three addresses");
        Ipv6Addr::from(BASE6 | (self.index as u128) << 64 | (2 + i) as u128)
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
        self.spawn_logged(argv, None, libc::SIGKILL)
    }

    /// Starts `argv` inside the namespace, its stderr into `log`; `stop` is
    /// the signal that ends it when the host drops.
    fn spawn_logged(&mut self, argv: &[&str], log: Option<&Path>, stop: i32) -> Result<()> {
        let stderr = match log {
            Some(p) => Stdio::from(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            ),
            None => Stdio::null(),
        };
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {argv:?} in {}", self.name))?;
        self.servers.push((child, stop));
        Ok(())
    }

    /// Starts the HTTP server (`GET /` answers `hello from the test host`,
    /// `GET /bytes/N` streams N bytes) on `addr(i):port`.
    pub fn http_server(&mut self, i: u32, port: u16) -> Result<()> {
        self.serve(HTTP_SERVER, self.addr(i).into(), port)
    }

    /// The same HTTP server on `addr6(i):port`.
    pub fn http_server6(&mut self, i: u32, port: u16) -> Result<()> {
        self.serve(HTTP_SERVER, self.addr6(i).into(), port)
    }

    /// Starts a TCP echo server on `addr(i):port`.
    pub fn echo_server(&mut self, i: u32, port: u16) -> Result<()> {
        self.serve(ECHO_SERVER, self.addr(i).into(), port)
    }

    /// The same TCP echo server on `addr6(i):port`.
    pub fn echo_server6(&mut self, i: u32, port: u16) -> Result<()> {
        self.serve(ECHO_SERVER, self.addr6(i).into(), port)
    }

    fn serve(&mut self, script: &str, addr: IpAddr, port: u16) -> Result<()> {
        let a = addr.to_string();
        self.spawn(&["python3", "-c", script, &a, &port.to_string()])?;
        wait_tcp(SocketAddr::from((addr, port)))
    }

    /// Starts dnsmasq on `addr(i)`, answering `name` with each of `answers`
    /// (A for IPv4, AAAA for IPv6) and nothing else (no upstream).
    pub fn dns_server(&mut self, i: u32, name: &str, answers: &[IpAddr]) -> Result<()> {
        let listen = format!("--listen-address={}", self.addr(i));
        let records: Vec<String> = answers
            .iter()
            .map(|a| format!("--address=/{name}/{a}"))
            .collect();
        let mut argv = vec![
            "dnsmasq",
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--user=root",
            "--pid-file",
            &listen,
        ];
        argv.extend(records.iter().map(String::as_str));
        self.spawn(&argv)?;
        // dnsmasq also answers on TCP 53
        wait_tcp(SocketAddr::from((self.addr(i), 53)))
    }

    /// Starts PostgreSQL (Debian's, as the `postgres` user) on
    /// `addr(i):port`: a cluster `initdb` makes in a directory of its own,
    /// no unix socket but in that directory, trusting the `thaw` role from
    /// this machine's addresses on the link (where sandboxes' connections
    /// come from, NAT'd), and one log line per connection.
    pub fn postgres_server(&mut self, i: u32, port: u16) -> Result<Postgres> {
        let bin = postgres_bin()?;
        let dir = PathBuf::from(format!("/tmp/{}-pg{port}", self.name));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        self.dirs.push(dir.clone());
        run(&["chown", "postgres:postgres", &dir.to_string_lossy()])?;
        let data = dir.join("data");
        let as_pg = [
            "setpriv",
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
        ];
        let initdb = bin.join("initdb").to_string_lossy().into_owned();
        let data_s = data.to_string_lossy().into_owned();
        let mut argv = as_pg.to_vec();
        argv.extend([
            initdb.as_str(),
            "--no-sync",
            "--auth=trust",
            "--username=postgres",
            "-D",
            &data_s,
        ]);
        run(&argv).context("initdb (is postgresql installed? scripts/setup.sh --tests)")?;
        let mut hba = String::from("local all postgres trust\n");
        hba += &format!("host all thaw {}/32 trust\n", self.host_addr());
        if self.ipv6 {
            hba += &format!("host all thaw {}/128 trust\n", self.host_addr6());
        }
        std::fs::write(data.join("pg_hba.conf"), hba)?;
        let postgres = bin.join("postgres").to_string_lossy().into_owned();
        let listen = format!("listen_addresses={}", self.addr(i));
        let sockets = format!("unix_socket_directories={}", dir.display());
        let log = dir.join("postgres.log");
        let port_s = port.to_string();
        let mut argv = as_pg.to_vec();
        argv.extend([
            postgres.as_str(),
            "-D",
            &data_s,
            "-p",
            &port_s,
            "-c",
            &listen,
            "-c",
            &sockets,
            "-c",
            "log_connections=on",
            "-c",
            "log_line_prefix=%p ",
            "-c",
            "fsync=off",
        ]);
        // a fast shutdown (SIGINT) ends the sessions and removes the
        // shared memory
        self.spawn_logged(&argv, Some(&log), libc::SIGINT)?;
        let pg = Postgres { dir, port, log };
        // it listens before it accepts sessions ("starting up")
        let t = Instant::now();
        while let Err(e) = pg.psql("postgres", "select 1") {
            if t.elapsed() > Duration::from_secs(30) {
                return Err(e)
                    .context("PostgreSQL did not come up")
                    .map_err(Into::into);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        wait_tcp(SocketAddr::from((self.addr(i), port)))?;
        Ok(pg)
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
                EgressError::Failed,
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
        // ip netns exec's children are stopped by signalling it only as
        // they are its own process (exec): they are, ip (and setpriv) exec
        // the command
        for (c, stop) in &mut self.servers {
            if *stop != libc::SIGKILL {
                if let Ok(pid) = libc::pid_t::try_from(c.id()) {
                    // SAFETY: kill has no memory-safety preconditions; the pid
                    // is a server this host started and has not reaped yet.
                    unsafe { libc::kill(pid, *stop) };
                }
                let t = Instant::now();
                while matches!(c.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(10) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = run(&["ip", "netns", "del", &self.name]);
        let _ = run(&["ip", "link", "del", &self.host_if]);
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A PostgreSQL server of a [`NetHost`] (stopped with it).
pub struct Postgres {
    dir: PathBuf,
    port: u16,
    log: PathBuf,
}

impl Postgres {
    /// Runs `sql` with `psql` as the `postgres` superuser on database `db`
    /// (through the server's unix socket); its unaligned output.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String> {
        let psql = postgres_bin()?.join("psql");
        let out = Command::new("setpriv")
            .args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
            .arg(psql)
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-U",
                "postgres",
            ])
            .arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-d", db, "-c", sql])
            .stdin(Stdio::null())
            .output()
            .context("running psql")?;
        if !out.status.success() {
            fail!(
                EgressError::Failed,
                "psql {sql:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The backend pids of the connections `user` opened so far, in order
    /// (the server's log: `PID LOG:  connection authorized: user=...`).
    pub fn connections_of(&self, user: &str) -> Result<Vec<u32>> {
        let log = std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading {}", self.log.display()))?;
        let tag = format!("connection authorized: user={user} ");
        Ok(log
            .lines()
            .filter(|l| l.contains(&tag))
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .collect())
    }
}

/// The directory of Debian's PostgreSQL programs (the newest installed).
fn postgres_bin() -> Result<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .context("/usr/lib/postgresql: is postgresql installed? (scripts/setup.sh --tests)")?
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, b)| b.join("postgres").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b).ok_or_else(|| {
        EgressError::Failed("no PostgreSQL server in /usr/lib/postgresql/*/bin".into())
    })
}

/// Waits until a TCP server answers on `to` (10 s at most).
fn wait_tcp(to: SocketAddr) -> Result<()> {
    let t = Instant::now();
    while TcpStream::connect_timeout(&to, Duration::from_millis(200)).is_err() {
        if t.elapsed() > Duration::from_secs(10) {
            fail!(
                EgressError::Failed,
                "the test host's server on {to} did not come up"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn run(argv: &[&str]) -> Result<()> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", argv[0]))?;
    if !out.status.success() {
        fail!(
            EgressError::Failed,
            "{}: {}",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

const HTTP_SERVER: &str = r#"
import sys, socket, http.server, socketserver
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
    address_family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
S((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"#;

const ECHO_SERVER: &str = r#"
import sys, socket, threading
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
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
