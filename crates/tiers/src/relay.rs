//! A TCP relay that adds a fixed one-way delay in each direction: the
//! emulated remote's propagation delay. This kernel has no `netem` qdisc
//! (CONFIG_NET_SCH_NETEM is off), so the delay is added here, inside the
//! object store's network namespace, in front of the server; the link rate
//! is still limited in the kernel (a `tbf` qdisc on both veth ends).
//!
//! Each direction of a connection has a reader that stamps every chunk with
//! its due time and a writer that sends it when due, so the delay is added
//! once per chunk, not once per byte, and bandwidth is not capped by it.
use crate::error::Result;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use thaw_error::ResultExt;

const BUF: usize = 256 << 10;

/// Serves forever: accepts on `listen`, connects each client to `upstream`.
pub fn serve(listen: &str, upstream: &str, delay: Duration) -> Result<()> {
    // sleep to the microsecond, not the default 50 us timer slack: the
    // delay is 250 us each way
    // SAFETY: prctl on this process with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64) };
    let l = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    for c in l.incoming() {
        let Ok(client) = c else { continue };
        let upstream = upstream.to_string();
        std::thread::spawn(move || {
            if let Ok(server) = TcpStream::connect(&upstream) {
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                relay_pair(client, server, delay);
            }
        });
    }
    Ok(())
}

fn relay_pair(a: TcpStream, b: TcpStream, delay: Duration) {
    let (a2, b2) = match (a.try_clone(), b.try_clone()) {
        (Ok(x), Ok(y)) => (x, y),
        _ => return,
    };
    let t = std::thread::spawn(move || pump(a2, b2, delay));
    pump(b, a, delay);
    let _ = t.join();
}

/// Copies `from` to `to`, each chunk `delay` after it arrived. Buffers
/// go back to the reader once written (no allocation per chunk).
fn pump(mut from: TcpStream, to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>, usize)>();
    let (back, spare) = mpsc::channel::<Vec<u8>>();
    let writer = std::thread::spawn(move || {
        let mut to = to;
        for (due, data, n) in rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&data[..n]).is_err() {
                break;
            }
            let _ = back.send(data);
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    loop {
        let mut buf = spare.try_recv().unwrap_or_else(|_| vec![0u8; BUF]);
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send((Instant::now() + delay, buf, n)).is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.join();
}
