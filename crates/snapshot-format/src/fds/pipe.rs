//! A pipe's end or a FIFO's open ([`super::FdKind::Pipe`]): its size, where
//! its unread bytes are carried, and the record it pairs with. Captured and
//! planned in `crates/checkpoint/src/fds/pipe.rs`.
use super::{FdKind, Table};
use crate::Blob;

/// Largest pipe a snapshot recreates (`/proc/sys/fs/pipe-max-size`'s default).
pub const MAX_PIPE_SIZE: u32 = 1 << 20;

/// Descriptor `fd`'s pipe record: the unread bytes in the pipe's carrier
/// (a pipe's read end, a FIFO's first open), any later record naming an
/// earlier one of the same pipe (the other end) or FIFO (any open).
pub(super) fn check(
    fd: i32,
    first: i32,
    read: bool,
    size: u32,
    fifo: Option<&str>,
    unread: &Blob,
    table: &Table<'_>,
) -> Result<(), String> {
    table.blob(unread)?;
    if !size.is_power_of_two() || !(4096..=MAX_PIPE_SIZE).contains(&size) {
        return Err(format!("a pipe of {size} bytes"));
    }
    let carrier = if fifo.is_some() { first == fd } else { read };
    if unread.len > u64::from(size) || (!carrier && unread.len != 0) {
        return Err(format!("{} unread bytes in a pipe of {size}", unread.len));
    }
    if first != fd {
        // a FIFO is opened any number of times, each by its path; a pipe
        // has one other end
        let matches = table.get(first).is_some_and(|o| {
            o.fd < fd
                && matches!(&o.kind, FdKind::Pipe { first: f2, read: r2, fifo: p2, size: s2, .. }
                    if *f2 == first && p2.as_deref() == fifo && *s2 == size
                        && (fifo.is_some() || *r2 != read))
        });
        if !matches {
            return Err(match fifo {
                Some(_) => format!("a FIFO opened first at {first}, which is not"),
                None => format!("the other end of pipe {first}, which is not"),
            });
        }
    }
    if let Some(p) = fifo {
        crate::check_path(p).map_err(|e| e.to_string())?;
    }
    Ok(())
}
