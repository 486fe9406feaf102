//! Building the runtime root from Debian packages: resolve the dependency closure with
//! apt (a private, empty dpkg status plus stubs), `apt-get download` the .debs into a
//! cache, unpack them with `dpkg-deb --fsys-tarfile | tar -x` into a merged-/usr tree,
//! redo what the maintainer scripts would have done (alternatives symlinks, ldconfig,
//! byte-compilation), install `/opt/thaw`, generate the function inputs inside the
//! root, hash the tree, write the manifest and rename the finished directory into place.

use crate::error::{Result, RuntimeError};
use crate::packages::{PackagesError, Refused};
use crate::{roots_dir, runtime_files, treehash, Manifest, RootInfo, MANIFEST_FORMAT, PYTHON};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use thaw_error::{fail, ResultExt};

/// `runtime/recipe.json`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Recipe {
    pub recipe_version: u32,
    pub suite: String,
    pub packages: Vec<String>,
    pub stubs: Vec<String>,
    pub prune: Vec<String>,
    /// Jars from Maven Central for the Java runtime (`java.rs`).
    #[serde(default)]
    pub maven: Vec<crate::java::MavenJar>,
}

/// One resolved package.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Pkg {
    pub name: String,
    pub version: String,
    pub arch: String,
}

impl Pkg {
    /// The file name `apt-get download` gives it.
    pub fn deb_name(&self) -> String {
        format!(
            "{}_{}_{}.deb",
            self.name,
            self.version.replace(':', "%3a"),
            self.arch
        )
    }
}

pub fn recipe() -> Result<Recipe> {
    let (_, bytes) = runtime_files()
        .iter()
        .find(|(p, _)| *p == "recipe.json")
        .ok_or_else(|| RuntimeError::Host("runtime/recipe.json is not embedded".into()))?;
    Ok(serde_json::from_slice(bytes).context("parse runtime/recipe.json")?)
}

const APT_LISTS: &str = "/var/lib/apt/lists";

pub(crate) fn lists_present() -> bool {
    fs::read_dir(APT_LISTS)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().contains("_Packages"))
        })
        .unwrap_or(false)
}

pub(crate) fn need_tool(tool: &str, package: &str) -> Result<()> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if !found {
        fail!(
            RuntimeError::Host,
            "Debian packages need `{tool}` on the host (Debian package {package})"
        );
    }
    Ok(())
}

pub(crate) fn apt_update(progress: &mut dyn FnMut(&str)) -> Result<()> {
    progress("apt-get update (package lists are missing or stale)");
    let out = Command::new("apt-get")
        .args(["update", "-q"])
        .env("LC_ALL", "C")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .context("run apt-get update")?;
    if !out.status.success() {
        fail!(
            RuntimeError::Host,
            "apt-get update failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Key of a resolution cache: what was asked (`request`) and the apt lists'
/// identity.
pub(crate) fn lists_key(request: &impl Serialize) -> Result<String> {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(request)?);
    let mut lists: Vec<_> = fs::read_dir(APT_LISTS)
        .with_context(|| format!("read {APT_LISTS}"))?
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.contains("_Packages") || n.ends_with("Release")
        })
        .collect();
    lists.sort_by_key(|e| e.file_name());
    for e in lists {
        let m = e.metadata()?;
        h.update(e.file_name().as_bytes());
        h.update(m.len().to_le_bytes());
        h.update(m.mtime().to_le_bytes());
        h.update(m.mtime_nsec().to_le_bytes());
    }
    Ok(hex::encode(h.finalize()))
}

pub(crate) fn stub_status(r: &Recipe) -> String {
    let mut s = String::new();
    for p in &r.stubs {
        s.push_str(&format!(
            "Package: {p}\nStatus: install ok installed\nVersion: 99999\nArchitecture: all\n\
             Maintainer: thaw\nDescription: stub (not unpacked into the runtime root)\n\n"
        ));
    }
    s
}

/// Resolves the package closure with apt against an empty dpkg status (plus stubs).
fn resolve_uncached(home: &Path, r: &Recipe) -> Result<Vec<Pkg>> {
    Ok(simulate_install(
        &home.join("runtime").join("apt"),
        &stub_status(r),
        &r.packages,
    )?)
}

/// What `apt-get install packages` would unpack on a system whose dpkg
/// status is `status` (a private file under `work`): the closure in install
/// order. apt refusing (unknown package, unmet dependencies, a removal) is a
/// [`Refused::Unresolvable`].
pub(crate) fn simulate_install(
    work: &Path,
    status: &str,
    packages: &[String],
) -> Result<Vec<Pkg>, PackagesError> {
    fs::create_dir_all(work)?;
    let status_file = work.join(format!("status.{}", std::process::id()));
    fs::write(&status_file, status)?;
    let mut cmd = Command::new("apt-get");
    cmd.arg("-s")
        .arg("-q")
        .arg("-o")
        .arg(format!("Dir::State::status={}", status_file.display()))
        .args([
            "-o",
            "APT::Install-Recommends=false",
            "-o",
            "APT::Install-Suggests=false",
            "-o",
            "Debug::NoLocking=1",
            "install",
        ])
        .args(packages)
        .env("LC_ALL", "C");
    let out = cmd.output().context("run apt-get -s install");
    let _ = fs::remove_file(&status_file);
    let out = out?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let why = stdout
            .lines()
            .filter(|l| l.contains("Depends") || l.contains("Conflicts") || l.starts_with("E:"))
            .map(str::trim)
            .chain(
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .filter(|l| l.starts_with("E:")),
            )
            .collect::<Vec<_>>()
            .join("; ");
        return Err(Refused::Unresolvable(why).into());
    }
    let mut pkgs = Vec::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("Remv ") {
            let name = rest.split_whitespace().next().unwrap_or("");
            return Err(Refused::Unresolvable(format!("it would remove {name}")).into());
        }
        // Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64])
        let Some(rest) = line.strip_prefix("Inst ") else {
            continue;
        };
        let name = rest.split_whitespace().next().unwrap_or("").to_string();
        let paren = rest
            .find('(')
            .ok_or_else(|| RuntimeError::Host(format!("unexpected apt output: {line}")))?;
        let inner = &rest[paren + 1..];
        let inner = &inner[..inner.find(')').unwrap_or(inner.len())];
        let version = inner.split_whitespace().next().unwrap_or("").to_string();
        let arch = inner
            .rfind('[')
            .and_then(|i| {
                inner[i + 1..]
                    .find(']')
                    .map(|j| inner[i + 1..i + 1 + j].to_string())
            })
            .ok_or_else(|| RuntimeError::Host(format!("unexpected apt output: {line}")))?;
        if name.is_empty() || version.is_empty() {
            return Err(RuntimeError::Host(format!("unexpected apt output: {line}")).into());
        }
        pkgs.push(Pkg {
            name,
            version,
            arch,
        });
    }
    for want in packages {
        if !pkgs.iter().any(|p| &p.name == want) {
            return Err(Refused::Unresolvable(format!(
                "apt's resolution does not contain requested package {want}"
            ))
            .into());
        }
    }
    Ok(pkgs)
}

/// Where the resolution for `r` under the current apt lists is cached.
fn resolution_cache(home: &Path, r: &Recipe) -> Result<PathBuf> {
    let key = lists_key(&(&r.suite, &r.packages, &r.stubs))?;
    Ok(home
        .join("runtime")
        .join("resolve")
        .join(format!("{key}.json")))
}

/// Resolved packages, cached under `HOME/runtime/resolve/` by the apt lists' identity.
pub fn resolve(home: &Path, r: &Recipe, progress: &mut dyn FnMut(&str)) -> Result<Vec<Pkg>> {
    need_tool("apt-get", "apt")?;
    if !lists_present() {
        apt_update(progress)?;
    }
    let cache = resolution_cache(home, r)?;
    if let Ok(text) = fs::read_to_string(&cache) {
        if let Ok(p) = serde_json::from_str::<Vec<Pkg>>(&text) {
            return Ok(p);
        }
    }
    progress("resolving packages with apt");
    let pkgs = match resolve_uncached(home, r) {
        Ok(p) => p,
        Err(e) => {
            progress(&format!(
                "resolution failed ({}); refreshing package lists",
                thaw_error::chain(&e)
            ));
            apt_update(progress)?;
            resolve_uncached(home, r)?
        }
    };
    let cache = resolution_cache(home, r)?;
    write_atomic(&cache, &serde_json::to_vec_pretty(&pkgs)?)?;
    Ok(pkgs)
}

/// The root's identity: recipe, resolved packages and the runtime sources.
pub fn input_hash(r: &Recipe, pkgs: &[Pkg]) -> Result<String> {
    let files: Vec<(&str, String)> = runtime_files()
        .iter()
        .map(|(p, b)| (*p, hex::encode(Sha256::digest(b))))
        .collect();
    let doc = serde_json::json!({
        "format": MANIFEST_FORMAT,
        "builder": BUILDER_VERSION,
        "recipe": r,
        "packages": pkgs,
        "runtime_files": files,
    });
    Ok(hex::encode(Sha256::digest(serde_json::to_vec(&doc)?)))
}

/// Bump when the build steps below change in a way that changes the output.
const BUILDER_VERSION: u32 = 2;

pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap();
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    Ok(())
}

pub(crate) struct Lock(#[allow(dead_code)] fs::File);

/// An exclusive lock on file `p` (created if missing), held until dropped.
pub(crate) fn lock(p: &Path) -> Result<Lock> {
    fs::create_dir_all(p.parent().unwrap())?;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(p)
        .with_context(|| format!("open {}", p.display()))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on an fd we own.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    if rc != 0 {
        fail!(
            RuntimeError::Host,
            "flock {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(Lock(f))
}

/// See [`crate::ensure_root`]. `force` rebuilds even when a root with this hash exists.
pub fn ensure_root(home: &Path, force: bool, progress: &mut dyn FnMut(&str)) -> Result<RootInfo> {
    let r = recipe()?;
    let pkgs = resolve(home, &r, progress)?;
    let hash = input_hash(&r, &pkgs)?;
    if !force {
        if let Ok(info) = RootInfo::open(home, &hash) {
            return Ok(info);
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        fail!(
            RuntimeError::Host,
            "building the runtime root needs root (chroot, file ownership)"
        );
    }
    need_tool("dpkg-deb", "dpkg")?;
    need_tool("tar", "tar")?;
    let _lock = lock(&home.join("runtime").join(".build.lock"))?;
    if !force {
        if let Ok(info) = RootInfo::open(home, &hash) {
            return Ok(info);
        }
    }
    let roots = roots_dir(home);
    fs::create_dir_all(&roots)?;
    fs::set_permissions(&roots, fs::Permissions::from_mode(0o755))?;
    // Leftovers of interrupted builds (we hold the lock, so nobody is using them).
    for e in fs::read_dir(&roots)?.flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        if n.starts_with(".tmp-") || n.starts_with(".old-") {
            progress(&format!("removing leftover {n}"));
            let _ = fs::remove_dir_all(e.path());
        }
    }
    let t0 = Instant::now();
    let mut re_resolve = |progress: &mut dyn FnMut(&str)| -> Result<Vec<Pkg>> {
        apt_update(progress)?;
        let pkgs = resolve_uncached(home, &r)?;
        write_atomic(
            &resolution_cache(home, &r)?,
            &serde_json::to_vec_pretty(&pkgs)?,
        )?;
        Ok(pkgs)
    };
    let pkgs = download(home, pkgs, &mut re_resolve, progress)?;
    let jars = crate::java::fetch_jars(home, &r, progress)?;
    // A refresh of the lists during download may have changed versions.
    let hash = input_hash(&r, &pkgs)?;
    let tmp = roots.join(format!(".tmp-{}-{}", &hash[..16], std::process::id()));
    let res = build_into(&tmp, &hash, &r, &pkgs, &jars, t0, progress);
    if let Err(e) = res {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let dest = roots.join(&hash);
    if dest.exists() {
        let old = roots.join(format!(".old-{}-{}", &hash[..16], std::process::id()));
        fs::rename(&dest, &old)?;
        fs::rename(&tmp, &dest)?;
        let _ = fs::remove_dir_all(&old);
    } else {
        fs::rename(&tmp, &dest)?;
    }
    sync_dir(&roots);
    let info = RootInfo::open(home, &hash)?;
    progress(&format!(
        "runtime root {} ready: {} files, {:.1} MiB, built in {:.1}s",
        &hash[..16],
        info.manifest.files,
        info.manifest.size_bytes as f64 / (1 << 20) as f64,
        info.manifest.build_seconds
    ));
    Ok(info)
}

pub(crate) fn sync_dir(p: &Path) {
    if let Ok(f) = fs::File::open(p) {
        let _ = f.sync_all();
    }
}

/// Refreshes the apt lists and resolves again (a download failed: the
/// lists named versions the mirror no longer has).
pub(crate) type ReResolve<'a, E> = dyn FnMut(&mut dyn FnMut(&str)) -> Result<Vec<Pkg>, E> + 'a;

/// Makes sure every package's .deb is in `HOME/runtime/debs` (one cache for
/// the root and every function's packages). `E` is the caller's error, so
/// a refusal from `re_resolve` reaches it typed.
pub(crate) fn download<E: From<RuntimeError>>(
    home: &Path,
    pkgs: Vec<Pkg>,
    re_resolve: &mut ReResolve<E>,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Pkg>, E> {
    let debs = home.join("runtime").join("debs");
    let mut pkgs = pkgs;
    if let Err(err) = fetch_debs(&debs, &pkgs, progress)? {
        progress(&format!(
            "download failed ({err}); refreshing package lists"
        ));
        pkgs = re_resolve(progress)?;
        if let Err(err) = fetch_debs(&debs, &pkgs, progress)? {
            return Err(RuntimeError::Host(format!("apt-get download failed: {err}")).into());
        }
    }
    let still: Vec<String> = pkgs
        .iter()
        .filter(|p| !debs.join(p.deb_name()).is_file())
        .map(|p| p.deb_name())
        .collect();
    if !still.is_empty() {
        return Err(RuntimeError::Host(format!(
            "packages missing after download: {}",
            still.join(", ")
        ))
        .into());
    }
    Ok(pkgs)
}

/// One `apt-get download` of the .debs missing from `debs`; the inner error
/// is apt's own complaint (the lists may be stale).
fn fetch_debs(
    debs: &Path,
    pkgs: &[Pkg],
    progress: &mut dyn FnMut(&str),
) -> Result<std::result::Result<(), String>> {
    fs::create_dir_all(debs)?;
    let missing: Vec<&Pkg> = pkgs
        .iter()
        .filter(|p| !debs.join(p.deb_name()).is_file())
        .collect();
    if missing.is_empty() {
        return Ok(Ok(()));
    }
    progress(&format!(
        "downloading {} of {} packages with apt-get download",
        missing.len(),
        pkgs.len()
    ));
    let part = debs.join(format!(".partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&part);
    fs::create_dir_all(&part)?;
    let out = Command::new("apt-get")
        .args(["download", "-q", "-o", "APT::Sandbox::User=root"])
        .args(missing.iter().map(|p| format!("{}={}", p.name, p.version)))
        .current_dir(&part)
        .env("LC_ALL", "C")
        .output()
        .context("run apt-get download")?;
    for e in fs::read_dir(&part)?.flatten() {
        if e.file_name().to_string_lossy().ends_with(".deb") {
            fs::rename(e.path(), debs.join(e.file_name()))?;
        }
    }
    let _ = fs::remove_dir_all(&part);
    if out.status.success() {
        return Ok(Ok(()));
    }
    Ok(Err(String::from_utf8_lossy(&out.stderr).trim().to_string()))
}

pub(crate) fn run_ok(cmd: &mut Command, what: &str) -> Result<Output> {
    let out = cmd.output().with_context(|| format!("run {what}"))?;
    if !out.status.success() {
        fail!(
            RuntimeError::Host,
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

fn extract(deb: &Path, root: &Path) -> Result<()> {
    let mut d = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("run dpkg-deb")?;
    let stdout = d.stdout.take().unwrap();
    let t = Command::new("tar")
        .args([
            "-x",
            "--keep-directory-symlink",
            "--numeric-owner",
            "-p",
            "-C",
        ])
        .arg(root)
        .stdin(stdout)
        .output()
        .context("run tar")?;
    let dout = d.wait_with_output()?;
    if !dout.status.success() {
        fail!(
            RuntimeError::Host,
            "dpkg-deb --fsys-tarfile {}: {}",
            deb.display(),
            String::from_utf8_lossy(&dout.stderr).trim()
        );
    }
    if !t.status.success() {
        fail!(
            RuntimeError::Host,
            "tar -x of {}: {}",
            deb.display(),
            String::from_utf8_lossy(&t.stderr).trim()
        );
    }
    Ok(())
}

/// Runs `argv` chrooted into `root` with exactly `env`; as uid/gid 65534 when
/// `as_nobody`.
pub fn run_in_root_as(
    root: &Path,
    argv: &[&str],
    env: &[(String, String)],
    stdin: Option<&[u8]>,
    as_nobody: bool,
) -> Result<Output> {
    let croot = CString::new(root.as_os_str().as_bytes())
        .with_context(|| format!("{}: path holds a NUL byte", root.display()))?;
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::chroot(croot.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if as_nobody
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(65534) != 0
                    || libc::setuid(65534) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("chroot {} {}", root.display(), argv.join(" ")))?;
    if let Some(data) = stdin {
        let mut w = child.stdin.take().unwrap();
        let data = data.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
        let out = child.wait_with_output()?;
        let _ = writer.join();
        Ok(out)
    } else {
        Ok(child.wait_with_output()?)
    }
}

/// Trusted helper runs (checkers): as uid 65534, so they cannot change the root.
pub fn run_in_root(
    root: &Path,
    argv: &[&str],
    env: &[(String, String)],
    stdin: Option<&[u8]>,
) -> Result<Output> {
    run_in_root_as(root, argv, env, stdin, true)
}

/// Unpacks `pkgs[i]` from the download cache `debs` into `root`, saying
/// so; returns its .deb.
pub(crate) fn unpack(
    debs: &Path,
    pkgs: &[Pkg],
    i: usize,
    root: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf> {
    let p = &pkgs[i];
    progress(&format!(
        "[{}/{}] unpacking {} {}",
        i + 1,
        pkgs.len(),
        p.name,
        p.version
    ));
    let deb = debs.join(p.deb_name());
    extract(&deb, root)?;
    Ok(deb)
}

/// Merged /usr, as a bookworm debootstrap would make it: `/lib/...` paths
/// of the packages land under `usr/`.
pub(crate) fn merged_usr(root: &Path) -> Result<()> {
    for d in ["usr/bin", "usr/sbin", "usr/lib", "usr/lib64"] {
        fs::create_dir_all(root.join(d))?;
    }
    for (l, t) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        std::os::unix::fs::symlink(t, root.join(l))?;
    }
    Ok(())
}

fn build_into(
    dir: &Path,
    hash: &str,
    r: &Recipe,
    pkgs: &[Pkg],
    jars: &[PathBuf],
    t0: Instant,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    let root = dir.join("root");
    fs::create_dir_all(&root)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755))?;
    merged_usr(&root)?;
    let debs = dir.parent().unwrap().parent().unwrap().join("debs");
    let mut alternatives = crate::alternatives::Alternatives::default();
    for i in 0..pkgs.len() {
        let deb = unpack(&debs, pkgs, i, &root, progress)?;
        alternatives.add(&deb)?;
    }
    progress("maintainer-script fix-ups: alternatives, passwd, ld.so.cache, mount points");
    alternatives.link(&root)?;
    for p in &r.prune {
        let _ = fs::remove_dir_all(root.join(p));
    }
    for (d, mode) in [
        ("dev", 0o755),
        ("proc", 0o555),
        ("tmp", 0o1777),
        ("etc", 0o755),
    ] {
        let p = root.join(d);
        fs::create_dir_all(&p)?;
        fs::set_permissions(&p, fs::Permissions::from_mode(mode))?;
    }
    fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    )?;
    fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")?;
    fs::write(root.join("etc/hostname"), "thaw\n")?;
    // empty: a function given a resolver gets it bind-mounted over this
    fs::write(root.join("etc/resolv.conf"), "")?;
    fs::write(
        root.join("etc/ld.so.conf"),
        "include /etc/ld.so.conf.d/*.conf\n",
    )?;
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| {
            RuntimeError::Host(
                "building the runtime root needs ldconfig on the host (libc-bin)".into(),
            )
        })?;
    run_ok(Command::new(ldconfig).arg("-r").arg(&root), "ldconfig -r")?;

    progress("installing /opt/thaw (agent, functions, generators, checkers)");
    let thaw = root.join("opt/thaw");
    for (rel, bytes) in runtime_files() {
        let p = thaw.join(rel);
        fs::create_dir_all(p.parent().unwrap())?;
        fs::write(&p, bytes)?;
    }
    let env = build_env();
    progress("byte-compiling Python (what py3compile does in postinst)");
    let out = run_in_root_as(
        &root,
        &[
            PYTHON,
            "-m",
            "compileall",
            "-q",
            "-q",
            "--invalidation-mode",
            "unchecked-hash",
            "-x",
            "/(test|tests)/.*bad|lib2to3/tests/data",
            "/usr/lib/python3.11",
            "/usr/lib/python3/dist-packages",
            "/opt/thaw",
        ],
        &env,
        None,
        false,
    )?;
    if !out.status.success() {
        progress(&format!(
            "note: compileall reported problems (ignored): {}",
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    crate::java::install(&root, jars, progress)?;
    progress("generating function inputs (deterministic, inside the root)");
    let out = run_in_root_as(
        &root,
        &[PYTHON, "-B", "-s", "/opt/thaw/gen_inputs.py", "/opt/thaw"],
        &env,
        None,
        false,
    )?;
    if !out.status.success() {
        fail!(
            RuntimeError::Host,
            "input generation failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        progress(l);
    }
    // Nothing may be left in the mount points.
    for d in ["dev", "proc", "tmp"] {
        for e in fs::read_dir(root.join(d))?.flatten() {
            let p = e.path();
            if p.is_dir() {
                fs::remove_dir_all(&p)?;
            } else {
                fs::remove_file(&p)?;
            }
        }
    }
    progress("making everything world-readable, hashing the tree");
    make_world_readable(&root)?;
    let tree = treehash::hash_tree(&root)?;
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        hash: hash.to_string(),
        tree_hash: tree.hash,
        size_bytes: tree.size_bytes,
        files: tree.files,
        suite: r.suite.clone(),
        packages: pkgs
            .iter()
            .map(|p| (p.name.clone(), p.version.clone(), p.arch.clone()))
            .collect(),
        stubs: r.stubs.clone(),
        runtime_files: runtime_files()
            .iter()
            .map(|(p, b)| (p.to_string(), hex::encode(Sha256::digest(b))))
            .collect(),
        python: PYTHON.to_string(),
        build_seconds: t0.elapsed().as_secs_f64(),
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    write_atomic(
        &dir.join("manifest.json"),
        &serde_json::to_vec_pretty(&manifest)?,
    )?;
    sync_dir(dir);
    Ok(())
}

/// Environment of build-time runs inside the root: deterministic hashing for
/// reproducible outputs (pickles, pyc), single-threaded BLAS.
fn build_env() -> Vec<(String, String)> {
    let mut env = crate::agent_env();
    env.retain(|(k, _)| k != "PYTHONDONTWRITEBYTECODE");
    env.push(("PYTHONHASHSEED".into(), "0".into()));
    env.push(("SOURCE_DATE_EPOCH".into(), "1700000000".into()));
    env
}

pub(crate) fn make_world_readable(root: &Path) -> Result<()> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d)? {
            let e = e?;
            let p: PathBuf = e.path();
            let m = fs::symlink_metadata(&p)?;
            let ft = m.file_type();
            if ft.is_symlink() {
                continue;
            }
            let mode = m.permissions().mode() & 0o7777;
            let want = if ft.is_dir() || mode & 0o111 != 0 {
                mode | 0o555
            } else {
                mode | 0o444
            };
            if want != mode {
                fs::set_permissions(&p, fs::Permissions::from_mode(want))?;
            }
            if ft.is_dir() {
                stack.push(p);
            }
        }
    }
    Ok(())
}
