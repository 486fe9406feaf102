//! Functions as OCI images. `thaw image build` packs a function's code
//! directory into a one-layer image (the code under `/function`, the handler
//! in the config's environment and labels) and writes it as an OCI layout in
//! a tar archive, which `ctr images import` and `skopeo copy oci-archive:`
//! accept. The containerd shim reads the same names back out of a container's
//! spec and rootfs.
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;
use thaw_error::{fail, Context, ResultExt};

/// Why an image was not built or its entry points not read.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// an entry point that is not `module.function`, a code directory that
    /// is not one, a tag that is not a reference
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Archive(#[from] crate::archive::ArchiveError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = ImageError> = std::result::Result<T, E>;

/// Where the function's code lives in the image's root filesystem.
pub const CODE_DIR: &str = "function";
/// Environment the image config carries; the shim reads it from the spec.
pub const ENV_HANDLER: &str = "THAW_HANDLER";
pub const ENV_INIT: &str = "THAW_INIT";
/// The same settings as image labels (what `skopeo inspect` shows).
pub const LABEL_HANDLER: &str = "dev.thaw.handler";
pub const LABEL_INIT: &str = "dev.thaw.init";

const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MEDIA_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// What `thaw image build` puts into an image.
pub struct ImageSpec<'a> {
    pub code: &'a Path,
    pub handler: &'a str,
    pub init: Option<&'a str>,
    /// The image's reference, e.g. `thaw.local/hello:latest`.
    pub reference: &'a str,
}

/// The built image: the archive's bytes and the manifest's digest.
pub struct BuiltImage {
    pub archive: Vec<u8>,
    pub manifest_digest: String,
}

fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

fn check_entry_point(what: &str, v: &str) -> Result<()> {
    if !crate::deploy::is_entry_point(v) {
        fail!(ImageError::Invalid, "{what} {v:?} is not module.function");
    }
    Ok(())
}

/// A tar stream with fixed owners, modes and times, so the same code gives
/// the same layer digest (and the same function key in the shim).
fn code_layer(code: &Path) -> Result<Vec<u8>> {
    if !code.is_dir() {
        fail!(ImageError::Invalid, "{} is not a directory", code.display());
    }
    let mut ar = tar::Builder::new(Vec::new());
    let header = |path: &Path, kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(size);
        (h, path.to_path_buf())
    };
    let (mut h, p) = header(Path::new(CODE_DIR), tar::EntryType::Directory, 0o755, 0);
    ar.append_data(&mut h, p, std::io::empty())?;
    for e in crate::archive::code_entries(code)? {
        let in_image = Path::new(CODE_DIR).join(&e.rel);
        if e.is_dir {
            let (mut h, p) = header(&in_image, tar::EntryType::Directory, 0o755, 0);
            ar.append_data(&mut h, p, std::io::empty())?;
        } else {
            let data =
                std::fs::read(&e.path).with_context(|| format!("reading {}", e.path.display()))?;
            let (mut h, p) = header(&in_image, tar::EntryType::Regular, 0o644, data.len() as u64);
            ar.append_data(&mut h, p, data.as_slice())?;
        }
    }
    Ok(ar.into_inner()?)
}

fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(data)?;
    Ok(gz.finish()?)
}

/// Builds the image and its OCI-layout archive.
pub fn build(spec: &ImageSpec) -> Result<BuiltImage> {
    check_entry_point("handler", spec.handler)?;
    if let Some(i) = spec.init {
        check_entry_point("init", i)?;
    }
    let module = spec.handler.rsplit_once('.').map_or("", |(m, _)| m);
    let module_file = spec.code.join(module.replace('.', "/") + ".py");
    let package_init = spec.code.join(module.replace('.', "/")).join("__init__.py");
    if !module_file.is_file() && !package_init.is_file() {
        fail!(
            ImageError::Invalid,
            "handler module {module:?} not found in {} (no {})",
            spec.code.display(),
            module_file.display()
        );
    }
    let tar = code_layer(spec.code)?;
    let mut env = vec![format!("{ENV_HANDLER}={}", spec.handler)];
    let mut labels = serde_json::Map::new();
    labels.insert(LABEL_HANDLER.into(), json!(spec.handler));
    if let Some(i) = spec.init {
        env.push(format!("{ENV_INIT}={i}"));
        labels.insert(LABEL_INIT.into(), json!(i));
    }
    oci_archive(
        json!({
            "Env": env,
            "Cmd": ["serve"],
            "WorkingDir": format!("/{CODE_DIR}"),
            "Labels": labels,
        }),
        &tar,
        spec.reference,
    )
}

/// An image of plain files (no function: runc runs it), e.g. a static
/// binary as its entry point: `(path in the image, content, mode)`.
pub fn build_native(
    files: &[(&str, &[u8], u32)],
    entrypoint: &[&str],
    reference: &str,
) -> Result<BuiltImage> {
    let entries: Vec<Entry> = files
        .iter()
        .map(|&(path, data, mode)| Entry::File { path, data, mode })
        .collect();
    build_plain(
        &entries,
        json!({"Entrypoint": entrypoint, "WorkingDir": "/"}),
        reference,
    )
}

/// One entry of a plain image's layer.
pub enum Entry<'a> {
    File {
        path: &'a str,
        data: &'a [u8],
        mode: u32,
    },
    Dir {
        path: &'a str,
        mode: u32,
    },
    Symlink {
        path: &'a str,
        target: &'a str,
    },
}

/// An image of `entries` (owned by root, time 0) with the image config's
/// `config` part (entry point, environment, working directory).
pub fn build_plain(entries: &[Entry], config: Value, reference: &str) -> Result<BuiltImage> {
    let mut ar = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_ustar();
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        match *e {
            Entry::File { path, data, mode } => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(mode);
                h.set_size(data.len() as u64);
                ar.append_data(&mut h, path.trim_start_matches('/'), data)?;
            }
            Entry::Dir { path, mode } => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(mode);
                h.set_size(0);
                ar.append_data(&mut h, path.trim_start_matches('/'), std::io::empty())?;
            }
            Entry::Symlink { path, target } => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                ar.append_link(&mut h, path.trim_start_matches('/'), target)?;
            }
        }
    }
    oci_archive(config, &ar.into_inner()?, reference)
}

/// The OCI-layout archive of a one-layer image (`tar`: the layer,
/// uncompressed) with the image config's `config` part.
fn oci_archive(image_config: Value, tar: &[u8], reference: &str) -> Result<BuiltImage> {
    let diff_id = sha256_digest(tar);
    let layer = gzip(tar)?;
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "thaw image build", "created": "1970-01-01T00:00:00Z"}],
    }))?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": sha256_digest(&config), "size": config.len()},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": sha256_digest(&layer), "size": layer.len()}],
    }))?;
    let manifest_digest = sha256_digest(&manifest);
    let tag = reference
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .map_or("latest", |(_, t)| t);
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": MEDIA_MANIFEST,
            "digest": manifest_digest,
            "size": manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }))?;
    let mut ar = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8]| -> Result<()> {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_size(data.len() as u64);
        ar.append_data(&mut h, name, data)?;
        Ok(())
    };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    add("index.json", &index)?;
    for blob in [&config, &manifest, &layer] {
        let digest = sha256_digest(blob);
        add(
            &format!("blobs/sha256/{}", &digest["sha256:".len()..]),
            blob,
        )?;
    }
    Ok(BuiltImage {
        archive: ar.into_inner()?,
        manifest_digest,
    })
}

/// The function a container runs, as the shim reads it from the OCI spec's
/// environment (the image config's `Env`, merged by containerd).
pub fn entry_points_from_env(env: &[String]) -> Result<(String, Option<String>)> {
    let get = |k: &str| {
        env.iter()
            .rev()
            .find_map(|e| e.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
    };
    let handler = get(ENV_HANDLER).filter(|h| !h.is_empty()).ok_or_else(|| {
        ImageError::Invalid(format!("the image names no handler: its config has no {ENV_HANDLER}=module.function (build it with `thaw image build`)"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("thaw-image-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn same_code_same_digest_and_the_layout_is_complete() {
        let d = tmp("digest");
        std::fs::write(d.join("main.py"), "def handler(e):\n    return 1\n").unwrap();
        let spec = ImageSpec {
            code: &d,
            handler: "main.handler",
            init: None,
            reference: "thaw.local/x:v1",
        };
        let a = build(&spec).unwrap();
        let b = build(&spec).unwrap();
        assert_eq!(a.manifest_digest, b.manifest_digest);
        let mut names = Vec::new();
        let mut index = Value::Null;
        for e in tar::Archive::new(a.archive.as_slice()).entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            if name == "index.json" {
                index = serde_json::from_reader(&mut e).unwrap();
            }
            names.push(name);
        }
        assert!(names.contains(&"oci-layout".to_string()));
        assert_eq!(names.iter().filter(|n| n.starts_with("blobs/")).count(), 3);
        assert_eq!(index["manifests"][0]["digest"], json!(a.manifest_digest));
        assert_eq!(
            index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
            json!("v1")
        );
        std::fs::write(d.join("main.py"), "def handler(e):\n    return 2\n").unwrap();
        assert_ne!(build(&spec).unwrap().manifest_digest, a.manifest_digest);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_handlers_and_missing_modules_are_refused() {
        let d = tmp("bad");
        std::fs::write(d.join("main.py"), "").unwrap();
        for h in ["main", "main.", ".f", "1x.f", "ma in.f"] {
            let spec = ImageSpec {
                code: &d,
                handler: h,
                init: None,
                reference: "x",
            };
            assert!(build(&spec).is_err(), "{h}");
        }
        let spec = ImageSpec {
            code: &d,
            handler: "other.handler",
            init: None,
            reference: "x",
        };
        let e = build(&spec).err().unwrap().to_string();
        assert!(e.contains("not found"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

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
}
