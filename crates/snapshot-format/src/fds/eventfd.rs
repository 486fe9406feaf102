//! An eventfd ([`super::FdKind::EventFd`]): a count the kernel can hold.
//! Captured and planned in `crates/checkpoint/src/fds/eventfd.rs`.

/// The count of an eventfd: the kernel's counter stops at 2^64-2.
pub(super) fn check(count: u64) -> Result<(), String> {
    if count == u64::MAX {
        return Err("an eventfd count of 2^64-1".into());
    }
    Ok(())
}
