//! Where the Runtime API's connections come from: the worker's listeners
//! in a sandbox's network namespace, and which of the bootstrap's sockets
//! is its waiting connection (a restore makes that one again).
use super::{ADDRESS, PORT};
use crate::error::{HostError, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use thaw_error::fail;

/// What the bootstrap's waiting call on a connection asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// `/runtime/invocation/next`: an event
    Event,
    /// `/runtime/restore/next`: word that the instance was restored
    Restore,
}

impl Waiting {
    pub(crate) const ALL: [Waiting; 2] = [Waiting::Event, Waiting::Restore];

    /// The abstract unix address a restored connection waiting so is made to.
    pub fn reconnect_name(self) -> &'static [u8] {
        match self {
            Waiting::Event => b"thaw-runtime-api",
            Waiting::Restore => b"thaw-runtime-api-restore",
        }
    }
}

/// The connection a checkpoint keeps live: the bootstrap's port, and what
/// it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingConn {
    pub port: u16,
    pub waiting: Waiting,
}
/// The worker's listeners in one sandbox's network namespace.
pub(crate) struct Listeners {
    pub(super) tcp: std::net::TcpListener,
    /// by [`Waiting::ALL`]
    pub(super) unix: [UnixListener; 2],
}

impl Listeners {
    /// Listens at [`ADDRESS`] and the reconnect names in runtime `pid`'s
    /// namespace (bringing its loopback up: a fresh sandbox's child does so
    /// only after this).
    pub(crate) fn open(pid: i32) -> Result<Listeners> {
        crate::netns::in_netns(pid, || {
            loopback_up()?;
            let tcp = std::net::TcpListener::bind(ADDRESS)?;
            tcp.set_nonblocking(true)?;
            let listen = |w: Waiting| -> Result<UnixListener> {
                let name = SocketAddr::from_abstract_name(w.reconnect_name())?;
                let l = UnixListener::bind_addr(&name)?;
                l.set_nonblocking(true)?;
                Ok(l)
            };
            let unix = [listen(Waiting::ALL[0])?, listen(Waiting::ALL[1])?];
            Ok(Listeners { tcp, unix })
        })
    }
}

fn loopback_up() -> Result<()> {
    // SAFETY: a socket for ioctls only, closed by OwnedFd.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            fail!(
                HostError::Failed,
                "socket: {}",
                std::io::Error::last_os_error()
            );
        }
        let s = OwnedFd::from_raw_fd(s);
        crate::netns::interface_up(s.as_raw_fd(), "lo")
            .map_err(|(step, e)| HostError::Failed(format!("lo {step}: {e}")))?;
    }
    Ok(())
}

/// Whether a connected socket with these raw addresses is the bootstrap's
/// end of the API connection from port `port`.
pub fn is_pending_connection(local: &[u8], peer: &[u8], port: u16) -> bool {
    let v4 = |a: &[u8], p: u16| {
        a.len() >= 8
            && i32::from(u16::from_ne_bytes([a[0], a[1]])) == libc::AF_INET
            && a[2..4] == p.to_be_bytes()
            && a[4..8] == [127, 0, 0, 1]
    };
    v4(local, port) && v4(peer, PORT)
}
