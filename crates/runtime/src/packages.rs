//! A deployed function's own Debian packages, built with the runtime root's
//! machinery: apt resolves the requested names against the root's package
//! set (what the root has is never fetched or unpacked again), the .debs go
//! to the root's download cache, and the closure is unpacked into a tree of
//! its own, cached by content hash (root + resolved names and versions) so
//! every function asking for the same set shares one tree. The sandbox
//! mounts the tree read-only at `/opt/thaw/packages`.

use crate::alternatives;
use crate::error::{Result, RuntimeError};
use crate::recipe::{self, Pkg};
use crate::{treehash, RootInfo};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use thaw_error::{fail, Context, ResultExt};

/// Most package names one function may request.
pub const MAX_REQUESTED: usize = 32;
/// Most packages the resolved closure may hold (beyond the root's).
pub const MAX_CLOSURE: usize = 256;
/// Bump when the tree's build steps change what they produce.
const TREE_FORMAT: u32 = 2;

/// Why a package set was refused: the caller's input, not the host (4xx).
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    BadName(String),
    TooMany { given: usize, max: usize },
    Unknown(Vec<String>),
    Unresolvable(String),
    TooLarge { bytes: u64, max: u64 },
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::BadName(n) => write!(
                f,
                "{n:?} is not a Debian package name (lowercase letters, digits, \
                 '+', '-' and '.', starting with a letter or digit, 2 to 100 characters; \
                 no versions, architectures or options)"
            ),
            Refused::TooMany { given, max } => {
                write!(f, "{given} packages requested; at most {max}")
            }
            Refused::Unknown(names) => write!(
                f,
                "unknown Debian package(s) (not in the apt lists): {}",
                names.join(", ")
            ),
            Refused::Unresolvable(why) => {
                write!(f, "apt cannot resolve the package set: {why}")
            }
            Refused::TooLarge { bytes, max } => write!(
                f,
                "the packages unpack to {} MiB; at most {} MiB",
                bytes >> 20,
                max >> 20
            ),
        }
    }
}

impl std::error::Error for Refused {}

/// Why [`ensure`] failed: the request's fault (4xx) or the host's.
#[derive(Debug, thiserror::Error)]
pub enum PackagesError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Host(#[from] RuntimeError),
}

impl From<std::io::Error> for PackagesError {
    fn from(e: std::io::Error) -> Self {
        PackagesError::Host(e.into())
    }
}

impl From<Context> for PackagesError {
    fn from(e: Context) -> Self {
        PackagesError::Host(e.into())
    }
}

impl From<serde_json::Error> for PackagesError {
    fn from(e: serde_json::Error) -> Self {
        PackagesError::Host(e.into())
    }
}

/// Debian policy 5.6.1: lowercase letters, digits, `+`, `-`, `.`; at least
/// two characters, starting alphanumeric. Stricter: at most 100 characters
/// and no trailing `-` (apt-get reads `NAME-` as "remove NAME").
pub fn check_name(n: &str) -> Result<(), Refused> {
    let b = n.as_bytes();
    let ok = (2..=100).contains(&b.len())
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"+-.".contains(&c))
        && !n.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Refused::BadName(n.chars().take(120).collect()))
    }
}

/// Checks and normalises (sorted, deduplicated) a requested package list.
pub fn check_names(names: &[String]) -> Result<Vec<String>, Refused> {
    if names.len() > MAX_REQUESTED {
        return Err(Refused::TooMany {
            given: names.len(),
            max: MAX_REQUESTED,
        });
    }
    for n in names {
        check_name(n)?;
    }
    let mut v = names.to_vec();
    v.sort();
    v.dedup();
    Ok(v)
}

/// What `manifest.json` next to a tree records.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TreeManifest {
    pub format: u32,
    /// Content hash of the inputs (root, resolved packages): the directory name.
    pub hash: String,
    /// The runtime root it was resolved against.
    pub root: String,
    pub requested: Vec<String>,
    /// The closure beyond the root, in install order (empty when the root
    /// has everything requested).
    pub packages: Vec<Pkg>,
    pub tree_hash: String,
    pub size_bytes: u64,
    pub files: u64,
    pub build_seconds: f64,
}

/// An unpacked package tree.
#[derive(Clone, Debug)]
pub struct Tree {
    /// The directory to mount (holds `usr/`).
    pub path: PathBuf,
    pub manifest: TreeManifest,
    /// Found in the cache rather than built now.
    pub reused: bool,
}

/// Opens the cached tree `hash` under `cache`.
pub fn open(cache: &Path, hash: &str) -> Result<Tree> {
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        fail!(
            RuntimeError::Corrupt,
            "package tree hash {hash:?} is not 64 hex characters"
        );
    }
    let dir = cache.join(hash);
    let text = fs::read_to_string(dir.join("manifest.json"))
        .with_context(|| format!("package tree {hash} is not in {}", cache.display()))?;
    let manifest: TreeManifest = serde_json::from_str(&text)
        .with_context(|| format!("package tree {hash}: corrupt manifest"))?;
    if manifest.format != TREE_FORMAT || manifest.hash != hash {
        fail!(
            RuntimeError::Corrupt,
            "package tree {hash}: manifest does not match"
        );
    }
    let path = dir.join("tree");
    if !path.is_dir() {
        fail!(RuntimeError::Corrupt, "package tree {hash} is incomplete");
    }
    Ok(Tree {
        path,
        manifest,
        reused: true,
    })
}

/// Resolves, downloads and unpacks `names` for functions running on `root`
/// (cached under `cache`; .debs under `runtime_home`'s download cache).
pub fn ensure(
    runtime_home: &Path,
    cache: &Path,
    root: &RootInfo,
    names: &[String],
    max_bytes: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<Tree, PackagesError> {
    let names = check_names(names)?;
    if names.is_empty() {
        return Err(RuntimeError::Host("no packages requested".into()).into());
    }
    recipe::need_tool("apt-get", "apt")?;
    recipe::need_tool("apt-cache", "apt")?;
    if !recipe::lists_present() {
        recipe::apt_update(progress)?;
    }
    fs::create_dir_all(cache)?;
    // one preparation at a time (threads of one daemon too: each takes its
    // own open file description): the caches' temporary files are per process
    let _lock = recipe::lock(&cache.join(".lock"))?;
    let pkgs = resolve(cache, root, &names, progress)?;
    let hash = tree_hash_key(root, &pkgs)?;
    if let Ok(t) = open(cache, &hash) {
        return Ok(t);
    }
    let installed = installed_bytes(&pkgs)?;
    if installed > max_bytes {
        return Err(Refused::TooLarge {
            bytes: installed,
            max: max_bytes,
        }
        .into());
    }
    for e in fs::read_dir(cache)?.flatten() {
        if e.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = fs::remove_dir_all(e.path());
        }
    }
    let t0 = Instant::now();
    let mut re_resolve = |progress: &mut dyn FnMut(&str)| -> Result<Vec<Pkg>, PackagesError> {
        recipe::apt_update(progress)?;
        resolve_uncached(cache, root, &names)
    };
    let pkgs = recipe::download(runtime_home, pkgs, &mut re_resolve, progress)?;
    // a refresh during the download may have changed versions
    let hash = tree_hash_key(root, &pkgs)?;
    let tmp = cache.join(format!(".tmp-{}-{}", &hash[..16], std::process::id()));
    let built = build(runtime_home, &tmp, &names, &pkgs, max_bytes, progress).and_then(|mut m| {
        m.hash = hash.clone();
        m.root = root.hash.clone();
        m.build_seconds = t0.elapsed().as_secs_f64();
        Ok(recipe::write_atomic(
            &tmp.join("manifest.json"),
            &serde_json::to_vec_pretty(&m)?,
        )?)
    });
    if let Err(e) = built {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let dest = cache.join(&hash);
    let _ = fs::remove_dir_all(&dest);
    fs::rename(&tmp, &dest)?;
    recipe::sync_dir(cache);
    let mut t = open(cache, &hash)?;
    t.reused = false;
    progress(&format!(
        "packages ready: {} package(s), {} files, {:.1} MiB in {:.1}s",
        t.manifest.packages.len(),
        t.manifest.files,
        t.manifest.size_bytes as f64 / (1 << 20) as f64,
        t.manifest.build_seconds
    ));
    Ok(t)
}

fn tree_hash_key(root: &RootInfo, pkgs: &[Pkg]) -> Result<String> {
    let doc = serde_json::json!({"format": TREE_FORMAT, "root": root.hash, "packages": pkgs});
    Ok(hex::encode(Sha256::digest(serde_json::to_vec(&doc)?)))
}

/// The closure beyond the root, cached by (names, root, apt lists).
fn resolve(
    cache: &Path,
    root: &RootInfo,
    names: &[String],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Pkg>, PackagesError> {
    let file = cache.join("resolve").join(format!(
        "{}.json",
        recipe::lists_key(&("function-packages", names, &root.hash))?
    ));
    if let Ok(text) = fs::read_to_string(&file) {
        if let Ok(p) = serde_json::from_str::<Vec<Pkg>>(&text) {
            return Ok(p);
        }
    }
    let unknown: Vec<String> = names
        .iter()
        .filter(|n| !known(n).unwrap_or(false))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(Refused::Unknown(unknown).into());
    }
    progress(&format!("resolving {} with apt", names.join(" ")));
    let pkgs = resolve_uncached(cache, root, names)?;
    recipe::write_atomic(&file, &serde_json::to_vec_pretty(&pkgs)?)?;
    Ok(pkgs)
}

/// Whether `name` is a real package in the apt lists, by exact name (apt-get
/// itself would read an unknown name as a regular expression or glob).
fn known(name: &str) -> Result<bool> {
    let out = Command::new("apt-cache")
        .args(["pkgnames", name])
        .env("LC_ALL", "C")
        .output()
        .context("run apt-cache pkgnames")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l == name))
}

fn resolve_uncached(
    cache: &Path,
    root: &RootInfo,
    names: &[String],
) -> Result<Vec<Pkg>, PackagesError> {
    let has = |n: &str| {
        root.manifest.packages.iter().any(|(p, _, _)| p == n)
            || root.manifest.stubs.iter().any(|p| p == n)
    };
    if let Some(s) = names.iter().find(|n| root.manifest.stubs.contains(n)) {
        return Err(Refused::Unresolvable(format!(
            "{s} is marked present in the runtime root without being unpacked \
             (a stub: runtime/recipe.json), so it cannot be installed"
        ))
        .into());
    }
    // what the root already has is satisfied as it is
    let wanted: Vec<String> = names.iter().filter(|n| !has(n)).cloned().collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let status = root_status(cache, root)?;
    let pkgs = recipe::simulate_install(&cache.join("apt"), &status, &wanted)?;
    if let Some(p) = pkgs.iter().find(|p| has(&p.name)) {
        return Err(Refused::Unresolvable(format!(
            "it needs {} {}, but the runtime root has another version",
            p.name, p.version
        ))
        .into());
    }
    if pkgs.len() > MAX_CLOSURE {
        return Err(Refused::Unresolvable(format!(
            "the closure holds {} packages; at most {MAX_CLOSURE}",
            pkgs.len()
        ))
        .into());
    }
    Ok(pkgs)
}

/// A dpkg status file in which the root's packages (and the recipe's stubs)
/// are installed, with the fields apt needs to satisfy dependencies on them
/// (versions, `Multi-Arch` for `python3:any`, `Provides`) and those it
/// hashes to tell one build of a version from another (relations,
/// `Installed-Size`): without them an installed package is another build of
/// its version, which apt would "upgrade" to the lists' one as soon as a
/// requested package touches it (libopenblas0-pthread, the root's
/// libopenblas0-serial). Cached per root.
fn root_status(cache: &Path, root: &RootInfo) -> Result<String> {
    let file = cache
        .join("status")
        .join(format!("{}.{TREE_FORMAT}", root.hash));
    if let Ok(s) = fs::read_to_string(&file) {
        return Ok(s);
    }
    let specs: Vec<String> = root
        .manifest
        .packages
        .iter()
        .map(|(n, v, _)| format!("{n}={v}"))
        .collect();
    let stanzas = show(&specs)?;
    let mut s = String::new();
    for (name, version, arch) in &root.manifest.packages {
        s.push_str("Status: install ok installed\n");
        match stanzas.iter().find(|st| field(st, "Package") == Some(name)) {
            Some(st) => {
                for k in [
                    "Package",
                    "Version",
                    "Architecture",
                    "Multi-Arch",
                    "Provides",
                    "Depends",
                    "Pre-Depends",
                    "Conflicts",
                    "Breaks",
                    "Replaces",
                    "Installed-Size",
                ] {
                    if let Some(v) = field(st, k) {
                        s.push_str(&format!("{k}: {v}\n"));
                    }
                }
            }
            // no longer in the lists: what the manifest knows
            None => s.push_str(&format!(
                "Package: {name}\nVersion: {version}\nArchitecture: {arch}\n"
            )),
        }
        s.push_str("Maintainer: thaw\nDescription: in the runtime root\n\n");
    }
    let r = recipe::recipe()?;
    s.push_str(&recipe::stub_status(&recipe::Recipe {
        stubs: root.manifest.stubs.clone(),
        ..r
    }));
    recipe::write_atomic(&file, s.as_bytes())?;
    Ok(s)
}

/// `apt-cache show` of `specs` (`NAME=VERSION`), one stanza per package
/// (the first one apt prints).
fn show(specs: &[String]) -> Result<Vec<String>> {
    let out = Command::new("apt-cache")
        .arg("show")
        .args(specs)
        .env("LC_ALL", "C")
        .output()
        .context("run apt-cache show")?;
    // missing ones make it fail but the others are printed
    let text = String::from_utf8_lossy(&out.stdout);
    let mut seen = std::collections::HashSet::new();
    Ok(text
        .split("\n\n")
        .filter(|st| field(st, "Package").is_some_and(|p| seen.insert(p.to_string())))
        .map(str::to_string)
        .collect())
}

fn field<'a>(stanza: &'a str, key: &str) -> Option<&'a str> {
    stanza.lines().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix(": "))
            .map(str::trim)
    })
}

/// Sum of the closure's `Installed-Size` (KiB in the lists).
fn installed_bytes(pkgs: &[Pkg]) -> Result<u64> {
    let specs: Vec<String> = pkgs
        .iter()
        .map(|p| format!("{}={}", p.name, p.version))
        .collect();
    Ok(show(&specs)?
        .iter()
        .filter_map(|st| field(st, "Installed-Size")?.parse::<u64>().ok())
        .sum::<u64>()
        << 10)
}

/// Unpacks the closure into `dir/tree` and hashes it.
fn build(
    runtime_home: &Path,
    dir: &Path,
    names: &[String],
    pkgs: &[Pkg],
    max_bytes: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<TreeManifest, PackagesError> {
    let tree = dir.join("tree");
    fs::create_dir_all(&tree)?;
    fs::set_permissions(&tree, fs::Permissions::from_mode(0o755))?;
    recipe::merged_usr(&tree)?;
    let debs = runtime_home.join("runtime").join("debs");
    // the alternatives the packages install (libopenblas0-pthread's
    // libblas.so.3, found before the root's through LD_LIBRARY_PATH)
    let mut alternatives = alternatives::Alternatives::default();
    for i in 0..pkgs.len() {
        let deb = recipe::unpack(&debs, pkgs, i, &tree, progress)?;
        alternatives.add(&deb)?;
    }
    alternatives.link(&tree)?;
    for p in recipe::recipe()?.prune {
        let _ = fs::remove_dir_all(tree.join(p));
    }
    recipe::make_world_readable(&tree)?;
    let th = treehash::hash_tree(&tree).context("hashing the package tree")?;
    if th.size_bytes > max_bytes {
        return Err(Refused::TooLarge {
            bytes: th.size_bytes,
            max: max_bytes,
        }
        .into());
    }
    Ok(TreeManifest {
        format: TREE_FORMAT,
        hash: String::new(),
        root: String::new(),
        requested: names.to_vec(),
        packages: pkgs.to_vec(),
        tree_hash: th.hash,
        size_bytes: th.size_bytes,
        files: th.files,
        build_seconds: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names() {
        for ok in [
            "python3-six",
            "g++",
            "libstdc++6",
            "python3-zope.interface",
            "r8",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a",
            "-o",
            "--option=x",
            "Python3",
            "python3-six=1.0",
            "python3-six:amd64",
            "six-",
            "a b",
            "a/b",
            "../x",
            "x;rm",
            ".hidden",
            &"a".repeat(101),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let many: Vec<String> = (0..=MAX_REQUESTED).map(|i| format!("p{i}")).collect();
        assert!(matches!(check_names(&many), Err(Refused::TooMany { .. })));
        assert_eq!(
            check_names(&["b2".into(), "a1".into(), "b2".into()]).unwrap(),
            vec!["a1".to_string(), "b2".to_string()]
        );
    }

    #[test]
    fn stanza_fields() {
        let st = "Package: python3\nVersion: 3.11.2-1+b1\nMulti-Arch: allowed\n";
        assert_eq!(field(st, "Multi-Arch"), Some("allowed"));
        assert_eq!(field(st, "Provides"), None);
    }
}
