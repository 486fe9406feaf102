//! The image's `/function` read straight from the overlay layers of the
//! container's rootfs, without mounting it: when exactly one layer holds
//! `/function`, no layer holds anything else at its top and nothing in the
//! way carries overlayfs's own attributes (whiteouts, opaque or redirected
//! directories, metacopy files), the merged view of `/function` is that
//! layer's directory, entry for entry and byte for byte. Anything else
//! (an image with a root of its own, code split over layers, a whiteout, a
//! device file, a symbolic link) answers None: the shim mounts the rootfs
//! and packs it as before, so it fails or succeeds exactly as it did.

use containerd_shim::protos::types::mount::Mount;
use std::path::{Path, PathBuf};
use thaw_pack::image::CODE_DIR;

/// The image's code, packed as [`thaw_pack::pack_dir`] packs
/// the mounted `/function`, if the rootfs's layers give it directly.
pub fn packed_code(mounts: &[Mount]) -> Option<Vec<u8>> {
    let dir = code_dir(mounts)?;
    let entries = thaw_pack::code_entries(&dir).ok()?;
    if entries.iter().any(|e| has_overlay_xattr(&e.path)) {
        return None;
    }
    thaw_pack::pack_entries(&entries).ok()
}

/// The one layer's `/function` directory (see the module's note).
fn code_dir(mounts: &[Mount]) -> Option<PathBuf> {
    let [m] = mounts else { return None };
    if m.type_ != "overlay" {
        return None;
    }
    // the writable layer first, then the lower ones, top first
    let mut layers = Vec::new();
    for o in &m.options {
        if let Some(d) = o.strip_prefix("upperdir=") {
            layers.insert(0, d);
        } else if let Some(ds) = o.strip_prefix("lowerdir=") {
            layers.extend(ds.split(':'));
        }
    }
    // escaped separators and data-only layers (`::`) are not read here
    if layers.is_empty() || layers.iter().any(|d| d.is_empty() || d.contains('\\')) {
        return None;
    }
    let mut holder = None;
    for layer in layers {
        let layer = Path::new(layer);
        if has_overlay_xattr(layer) {
            return None;
        }
        for e in std::fs::read_dir(layer).ok()? {
            if e.ok()?.file_name() != CODE_DIR || holder.is_some() {
                return None;
            }
            holder = Some(layer.join(CODE_DIR));
        }
    }
    let dir = holder?;
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && !has_overlay_xattr(&dir)).then_some(dir)
}

/// Whether `path` (not followed) carries an attribute overlayfs acts on
/// when it merges layers (`trusted.overlay.*`, or `user.overlay.*` on a
/// `userxattr` mount; not [`IDENTITY_ONLY`]); an unreadable list counts as
/// one.
fn has_overlay_xattr(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return true;
    };
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: llistxattr with a valid C string and a buffer of the
        // length given; it writes at most that many bytes.
        let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if let Ok(n) = usize::try_from(n) {
            buf.truncate(n);
            break;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOTSUP) => return false,
            Some(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            _ => return true,
        }
    }
    buf.split(|b| *b == 0).any(|name| {
        let ours = name
            .strip_prefix(b"trusted.overlay.")
            .or_else(|| name.strip_prefix(b"user.overlay."));
        ours.is_some_and(|a| !IDENTITY_ONLY.contains(&a))
    })
}

/// overlayfs's attributes that only name a layer or an inode's origin
/// (the upper layer's root gets `uuid` at the first mount): they change
/// inode numbers, never which entries show or their contents.
const IDENTITY_ONLY: [&[u8]; 3] = [b"uuid", b"origin", b"impure"];

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(options: &[String]) -> Vec<Mount> {
        vec![Mount {
            type_: "overlay".into(),
            source: "overlay".into(),
            options: options.to_vec(),
            ..Default::default()
        }]
    }

    /// A fresh directory of the test's own (emptied first); the test
    /// removes it when it passed.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("thaw-layers-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn layer(root: &Path, name: &str, files: &[&str]) -> String {
        let l = root.join(name);
        std::fs::create_dir_all(&l).unwrap();
        for f in files {
            let p = l.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, f.as_bytes()).unwrap();
        }
        l.display().to_string()
    }

    #[test]
    fn one_layer_of_plain_code_is_read_directly() {
        let t = scratch("direct");
        let code = layer(&t, "code", &["function/app.py", "function/lib/m.py"]);
        let empty = layer(&t, "env", &[]);
        let upper = layer(&t, "upper", &[]);
        let m = overlay(&[
            format!("upperdir={upper}"),
            format!("lowerdir={empty}:{code}"),
        ]);
        let want = thaw_pack::pack_dir(&Path::new(&code).join(CODE_DIR)).unwrap();
        assert_eq!(packed_code(&m), Some(want));
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn anything_else_falls_back_to_mounting() {
        let t = scratch("fallback");
        let code = layer(&t, "code", &["function/app.py"]);
        let more = layer(&t, "more", &["function/extra.py"]);
        let own = layer(&t, "own", &["etc/passwd"]);
        // code split over two layers; a root of its own; not an overlay
        assert_eq!(
            code_dir(&overlay(&[format!("lowerdir={more}:{code}")])),
            None
        );
        assert_eq!(
            code_dir(&overlay(&[format!("lowerdir={own}:{code}")])),
            None
        );
        let mut bind = overlay(&[format!("lowerdir={code}")]);
        bind[0].type_ = "bind".into();
        assert_eq!(code_dir(&bind), None);
        // no /function at all: the mounted path names the error
        assert_eq!(code_dir(&overlay(&[format!("lowerdir={own}")])), None);
        // a symbolic link in the code: refused by the packer, so mounted
        let link = layer(&t, "link", &["function/app.py"]);
        std::os::unix::fs::symlink("/etc/shadow", Path::new(&link).join("function/s")).unwrap();
        assert_eq!(packed_code(&overlay(&[format!("lowerdir={link}")])), None);
        // /function itself a symbolic link
        let flink = layer(&t, "flink", &[]);
        std::os::unix::fs::symlink(&code, Path::new(&flink).join("function")).unwrap();
        assert_eq!(code_dir(&overlay(&[format!("lowerdir={flink}")])), None);
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn overlay_attributes_fall_back_to_mounting() {
        let t = scratch("xattr");
        let code = layer(&t, "code", &["function/app.py", "function/gone.py"]);
        let m = overlay(&[format!("lowerdir={code}")]);
        assert!(packed_code(&m).is_some());
        let gone = std::ffi::CString::new(format!("{code}/function/gone.py")).unwrap();
        // SAFETY: lsetxattr with valid C strings and an empty value.
        let r = unsafe {
            libc::lsetxattr(
                gone.as_ptr(),
                c"trusted.overlay.whiteout".as_ptr(),
                std::ptr::null(),
                0,
                0,
            )
        };
        assert_eq!(
            r,
            0,
            "setting a trusted xattr needs root and a filesystem with xattrs: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(packed_code(&m), None);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
