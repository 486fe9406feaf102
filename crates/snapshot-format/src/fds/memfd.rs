//! A memfd ([`super::FdKind::Memfd`]): a name the kernel takes, data within
//! its size and after the pages, known seals. Captured and planned in
//! `crates/checkpoint/src/fds/memfd.rs`.
use super::Table;
use crate::Blob;

/// Every seal `F_ADD_SEALS` knows (F_SEAL_SEAL to F_SEAL_EXEC).
const F_SEAL_ALL: u32 = 0x3f;

/// A memfd's record besides its position (any offset is valid).
pub(super) fn check(
    name: &str,
    size: u64,
    seals: u32,
    data: &Blob,
    table: &Table<'_>,
) -> Result<(), String> {
    table.blob(data)?;
    // memfd_create takes names of at most 249 bytes
    if name.len() > 249 || name.contains('\0') || data.len > size {
        return Err("a malformed memfd".into());
    }
    if seals & !F_SEAL_ALL != 0 {
        return Err(format!("memfd seals {seals:#x}"));
    }
    Ok(())
}
