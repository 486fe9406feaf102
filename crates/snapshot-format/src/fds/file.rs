//! A regular file, directory or device ([`super::FdKind::File`]): its path
//! must be absolute and plain. Captured and planned in
//! `crates/checkpoint/src/fds/file.rs`.
use crate::MAX_PATH;

/// An absolute plain path: no empty, `.` or `..` component, no NUL.
pub fn check_abs_path(p: &str) -> std::result::Result<(), String> {
    let rel = p
        .strip_prefix('/')
        .ok_or_else(|| format!("path {p:?} is not absolute"))?;
    if p.len() > MAX_PATH
        || (!rel.is_empty()
            && rel
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == ".." || c.contains('\0')))
    {
        return Err(format!("path {p:?} is not a plain path"));
    }
    Ok(())
}
