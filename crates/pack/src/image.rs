//! The names a function's OCI image carries (`thaw image build` writes
//! them, the shim reads them back from a container's spec and rootfs), and
//! the digests the shim names functions and root filesystems by.
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Where the function's code lives in the image's root filesystem.
pub const CODE_DIR: &str = "function";
/// Environment the image config carries; the shim reads it from the spec.
pub const ENV_HANDLER: &str = "THAW_HANDLER";
pub const ENV_INIT: &str = "THAW_INIT";

/// An image whose environment names no function, or not as one.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidEntryPoint(pub String);

/// `module.function`, the module possibly dotted: what a handler, init or
/// after-restore hook must look like.
pub fn is_entry_point(s: &str) -> bool {
    s.len() <= 200
        && s.split('.').count() >= 2
        && s.split('.').all(|p| {
            !p.is_empty()
                && !p.as_bytes()[0].is_ascii_digit()
                && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

/// `what` (an environment variable's name) set to `v`, refused unless
/// `v` is `module.function`.
pub fn check_entry_point(what: &str, v: &str) -> Result<(), InvalidEntryPoint> {
    if !is_entry_point(v) {
        return Err(InvalidEntryPoint(format!(
            "{what} {v:?} is not module.function"
        )));
    }
    Ok(())
}

/// The function a container runs, as the shim reads it from the OCI spec's
/// environment (the image config's `Env`, merged by containerd).
pub fn entry_points_from_env(
    env: &[String],
) -> Result<(String, Option<String>), InvalidEntryPoint> {
    let get = |k: &str| {
        env.iter()
            .rev()
            .find_map(|e| e.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
    };
    let handler = get(ENV_HANDLER).filter(|h| !h.is_empty()).ok_or_else(|| {
        InvalidEntryPoint(format!("the image names no handler: its config has no {ENV_HANDLER}=module.function (build it with `thaw image build`)"))
    })?;
    check_entry_point(ENV_HANDLER, handler)?;
    let init = get(ENV_INIT).filter(|i| !i.is_empty());
    if let Some(i) = init {
        check_entry_point(ENV_INIT, i)?;
    }
    Ok((handler.to_string(), init.map(str::to_string)))
}

/// The image's function as one value: a digest of its code and settings.
/// The shim names the daemon's function after it, so two containers of the
/// same image and settings share one snapshot.
pub fn function_key(code_archive: &[u8], settings: &Value) -> String {
    let mut h = Sha256::new();
    h.update(Sha256::digest(code_archive));
    h.update(serde_json::to_vec(settings).unwrap_or_default());
    hex::encode(h.finalize())
}

/// A digest (64 hex digits) of `parts` in order: the key the shim names
/// an image's root filesystem by.
pub fn content_key(parts: &[String]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update(b"\0");
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_environment_names_the_function() {
        let env = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (h, i) =
            entry_points_from_env(&env(&["PATH=/bin", "THAW_HANDLER=m.h", "THAW_INIT=m.i"]))
                .unwrap();
        assert_eq!((h.as_str(), i.as_deref()), ("m.h", Some("m.i")));
        let e = entry_points_from_env(&env(&["PATH=/bin"])).unwrap_err();
        assert!(e.to_string().contains("no THAW_HANDLER"), "{e}");
        assert!(entry_points_from_env(&env(&["THAW_HANDLER=bad"])).is_err());
    }

    #[test]
    fn content_keys_separate_their_parts() {
        let k = |p: &[&str]| content_key(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(k(&["ab", "c"]).len(), 64);
        assert_ne!(k(&["ab", "c"]), k(&["a", "bc"]));
        assert_eq!(k(&["ab", "c"]), k(&["ab", "c"]));
    }
}
