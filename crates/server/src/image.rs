//! Functions as OCI images. `thaw image build` packs a function's code
//! directory into a layer (the code under `/function`, the handler in the
//! config's environment and labels) on top of a base layer made from thaw's
//! runtime root (so the image's root filesystem is a whole one the function
//! runs on; [`build`] alone makes a code-only image, which runs on the
//! node's runtime root), and writes it as an OCI layout in a tar archive,
//! which `ctr images import` and `skopeo copy oci-archive:` accept. The
//! containerd shim reads the same names back out of a container's spec and
//! rootfs.
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
    Archive(#[from] thaw_pack::ArchiveError),
    #[error(transparent)]
    EntryPoint(#[from] thaw_pack::image::InvalidEntryPoint),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = ImageError> = std::result::Result<T, E>;

pub use thaw_pack::image::{CODE_DIR, ENV_HANDLER, ENV_INIT};
/// The same settings as image labels (what `skopeo inspect` shows).
pub const LABEL_HANDLER: &str = "dev.thaw.handler";
pub const LABEL_INIT: &str = "dev.thaw.init";

const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MEDIA_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// The environment a whole root filesystem's image gives its processes.
const ROOT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A layer made from a directory tree, its gzip'd blob in a file.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Layer {
    pub blob: std::path::PathBuf,
    /// Digest of the blob (the manifest's).
    pub digest: String,
    /// Digest of the uncompressed tar (the config's `diff_ids`).
    pub diff_id: String,
    pub size: u64,
}

/// Counts and hashes what passes through to `inner`.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
    count: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Appends the tree under `dir` (its entries named `prefix/...`, sorted;
/// owners and modes as they are, times 0; links as links; devices, FIFOs
/// and sockets left out) to `ar`.
fn append_tree<W: Write>(ar: &mut tar::Builder<W>, dir: &Path, rel: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut names: Vec<_> = std::fs::read_dir(dir.join(rel))
        .with_context(|| format!("reading {}", dir.join(rel).display()))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()?;
    names.sort();
    for name in names {
        let path = rel.join(&name);
        let full = dir.join(&path);
        let m = std::fs::symlink_metadata(&full)?;
        let mut h = tar::Header::new_gnu();
        h.set_mode(m.mode() & 0o7777);
        h.set_uid(m.uid().into());
        h.set_gid(m.gid().into());
        h.set_mtime(0);
        let ft = m.file_type();
        if ft.is_dir() {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_size(0);
            ar.append_data(&mut h, &path, std::io::empty())?;
            append_tree(ar, dir, &path)?;
        } else if ft.is_file() {
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(m.len());
            let f = std::fs::File::open(&full)
                .with_context(|| format!("reading {}", full.display()))?;
            ar.append_data(&mut h, &path, f)?;
        } else if ft.is_symlink() {
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            ar.append_link(&mut h, &path, std::fs::read_link(&full)?)?;
        }
    }
    Ok(())
}

/// A layer of the tree under `dir`, written to `blob` (replaced).
pub fn layer_from_dir(dir: &Path, blob: &Path) -> Result<Layer> {
    if !dir.is_dir() {
        fail!(ImageError::Invalid, "{} is not a directory", dir.display());
    }
    let tmp = blob.with_extension("partial");
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let compressed = Hashing {
        inner: std::io::BufWriter::new(file),
        hash: Sha256::new(),
        count: 0,
    };
    let gz = flate2::write::GzEncoder::new(compressed, flate2::Compression::fast());
    let plain = Hashing {
        inner: gz,
        hash: Sha256::new(),
        count: 0,
    };
    let mut ar = tar::Builder::new(plain);
    ar.follow_symlinks(false);
    append_tree(&mut ar, dir, Path::new(""))?;
    let plain = ar.into_inner()?;
    let diff_id = format!("sha256:{}", hex::encode(plain.hash.finalize()));
    let mut compressed = plain.inner.finish()?;
    compressed.flush()?;
    let digest = format!("sha256:{}", hex::encode(compressed.hash.finalize()));
    let size = compressed.count;
    compressed
        .inner
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    std::fs::rename(&tmp, blob).with_context(|| format!("writing {}", blob.display()))?;
    Ok(Layer {
        blob: blob.to_path_buf(),
        digest,
        diff_id,
        size,
    })
}

/// The base layer of thaw's runtime root `root` (hash `hash`), cached in
/// `cache` by that hash: the first build writes it, later ones reuse it
/// (one root, one layer digest).
pub fn runtime_layer(root: &Path, hash: &str, cache: &Path) -> Result<Layer> {
    std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    let meta = cache.join(format!("runtime-{hash}.json"));
    let blob = cache.join(format!("runtime-{hash}.tar.gz"));
    if let Some(l) = std::fs::read(&meta)
        .ok()
        .and_then(|t| serde_json::from_slice::<Layer>(&t).ok())
        .filter(|l| std::fs::metadata(&l.blob).is_ok_and(|m| m.len() == l.size))
    {
        return Ok(l);
    }
    let l = layer_from_dir(root, &blob)?;
    let tmp = meta.with_extension("partial");
    std::fs::write(&tmp, serde_json::to_vec(&l)?)?;
    std::fs::rename(&tmp, &meta)?;
    Ok(l)
}

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
    for e in thaw_pack::code_entries(code)? {
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

/// Builds a code-only image (it runs on the node's runtime root) and its
/// OCI-layout archive.
pub fn build(spec: &ImageSpec) -> Result<BuiltImage> {
    let (config, tar) = function_parts(spec, false)?;
    oci_archive(config, &tar, spec.reference)
}

/// Builds an image of `base` (layers of a whole root filesystem, lowest
/// first) and the function's code on top, and writes its OCI-layout
/// archive to `out`. Returns the manifest's digest.
pub fn build_on(spec: &ImageSpec, base: &[Layer], out: &mut dyn Write) -> Result<String> {
    let (config, tar) = function_parts(spec, true)?;
    write_oci(config, base, &tar, spec.reference, out)
}

/// The image config's `config` part and the code layer (uncompressed).
fn function_parts(spec: &ImageSpec, whole_root: bool) -> Result<(Value, Vec<u8>)> {
    thaw_pack::image::check_entry_point("handler", spec.handler)?;
    if let Some(i) = spec.init {
        thaw_pack::image::check_entry_point("init", i)?;
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
    if whole_root {
        env.insert(0, ROOT_PATH.to_string());
    }
    let mut labels = serde_json::Map::new();
    labels.insert(LABEL_HANDLER.into(), json!(spec.handler));
    if let Some(i) = spec.init {
        env.push(format!("{ENV_INIT}={i}"));
        labels.insert(LABEL_INIT.into(), json!(i));
    }
    Ok((
        json!({
            "Env": env,
            "Cmd": ["serve"],
            "WorkingDir": format!("/{CODE_DIR}"),
            "Labels": labels,
        }),
        tar,
    ))
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
    let mut archive = Vec::new();
    let manifest_digest = write_oci(image_config, &[], tar, reference, &mut archive)?;
    Ok(BuiltImage {
        archive,
        manifest_digest,
    })
}

/// Writes the OCI-layout archive of the image of `base` (blobs in files)
/// and `top` (its last layer, uncompressed) with the image config's
/// `config` part to `out`; returns the manifest's digest.
fn write_oci(
    image_config: Value,
    base: &[Layer],
    top: &[u8],
    reference: &str,
    out: &mut dyn Write,
) -> Result<String> {
    let top_diff_id = sha256_digest(top);
    let layer = gzip(top)?;
    let diff_ids: Vec<&str> = base
        .iter()
        .map(|l| l.diff_id.as_str())
        .chain([top_diff_id.as_str()])
        .collect();
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created_by": "thaw image build", "created": "1970-01-01T00:00:00Z"}],
    }))?;
    let layers: Vec<Value> = base
        .iter()
        .map(|l| json!({"mediaType": MEDIA_LAYER, "digest": l.digest, "size": l.size}))
        .chain([
            json!({"mediaType": MEDIA_LAYER, "digest": sha256_digest(&layer), "size": layer.len()}),
        ])
        .collect();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": sha256_digest(&config), "size": config.len()},
        "layers": layers,
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
    let mut ar = tar::Builder::new(out);
    let mut add = |name: &str, size: u64, data: &mut dyn std::io::Read| -> Result<()> {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_size(size);
        ar.append_data(&mut h, name, data)?;
        Ok(())
    };
    let blob_name = |digest: &str| format!("blobs/sha256/{}", &digest["sha256:".len()..]);
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;
    add("oci-layout", layout.len() as u64, &mut &layout[..])?;
    add("index.json", index.len() as u64, &mut index.as_slice())?;
    for blob in [&config, &manifest, &layer] {
        add(
            &blob_name(&sha256_digest(blob)),
            blob.len() as u64,
            &mut blob.as_slice(),
        )?;
    }
    for l in base {
        let mut f = std::fs::File::open(&l.blob)
            .with_context(|| format!("reading {}", l.blob.display()))?;
        add(&blob_name(&l.digest), l.size, &mut f)?;
    }
    ar.into_inner()?.flush()?;
    Ok(manifest_digest)
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
}
