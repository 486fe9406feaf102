//! thaw-runtime: the runtime root filesystem (built from Debian 12 packages), the
//! in-sandbox agent and the function suite.
//!
//! * [`ensure_root`] builds (or finds, content-addressed) the root under
//!   `HOME/runtime/roots/HASH/root`; [`RootInfo::open`] reopens one by hash.
//! * [`RootInfo::agent_command`] is the argv/env the sandbox starts the agent with.
//! * [`RootInfo::check_output`] runs the trusted checker of a function's output.
//! * [`current_root`] finds the root of the current recipe without building it.
//!
//! Functions run in `thaw-sandbox`'s sandbox; `thaw runtime` lives in the `thaw`
//! binary (crates/cli).
//!
//! See docs/RUNTIME.md and docs/AGENT_PROTOCOL.md.

use crate::error::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use thaw_error::{fail, Context, ResultExt};

pub mod alternatives;
pub mod error;
pub mod java;
pub mod packages;
pub mod recipe;
pub mod treehash;

pub use error::RuntimeError;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/runtime_files.rs"));
}

/// The files of the repository's `runtime/` directory, installed under `/opt/thaw/`.
pub fn runtime_files() -> &'static [(&'static str, &'static [u8])] {
    embedded::RUNTIME_FILES
}

/// Version of the on-disk layout and manifest.
pub const MANIFEST_FORMAT: u32 = 1;
/// The interpreter inside the root.
pub const PYTHON: &str = "/usr/bin/python3.11";
/// Node.js inside the root (Debian's nodejs 18).
pub const NODE: &str = "/usr/bin/node";

/// The language a function is written in, and so which agent serves it.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// CPython 3.11, `runtime/agent.py`
    #[default]
    Python,
    /// Node.js 18, `runtime/agent.js`
    Nodejs,
    /// OpenJDK 17, `runtime/java` (the class `thaw.Agent`)
    Java,
    /// A custom runtime: the function's own `bootstrap` executable, served
    /// through Lambda's Runtime API instead of an agent
    Provided,
}

impl Runtime {
    pub const fn name(self) -> &'static str {
        match self {
            Runtime::Python => "python",
            Runtime::Nodejs => "nodejs",
            Runtime::Java => "java",
            Runtime::Provided => "provided",
        }
    }

    /// The file extension of its function modules.
    pub const fn extension(self) -> &'static str {
        match self {
            Runtime::Python => "py",
            Runtime::Nodejs => "js",
            Runtime::Java => "java",
            Runtime::Provided => "",
        }
    }
}

impl std::str::FromStr for Runtime {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "python" => Ok(Runtime::Python),
            "nodejs" => Ok(Runtime::Nodejs),
            "java" => Ok(Runtime::Java),
            "provided" => Ok(Runtime::Provided),
            _ => fail!(
                RuntimeError::Unknown,
                "unknown runtime {s:?} (runtimes: python, nodejs, java, provided)"
            ),
        }
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
/// Where the agent, functions, inputs and checkers live inside the root.
pub const THAW_DIR: &str = "/opt/thaw";

/// An input size of the function suite (every function has all four).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
pub enum InputSize {
    #[value(name = "I")]
    I,
    #[value(name = "II")]
    II,
    #[value(name = "III")]
    III,
    #[value(name = "IV")]
    IV,
}

impl InputSize {
    pub const ALL: [InputSize; 4] = [InputSize::I, InputSize::II, InputSize::III, InputSize::IV];

    pub const fn name(self) -> &'static str {
        match self {
            InputSize::I => "I",
            InputSize::II => "II",
            InputSize::III => "III",
            InputSize::IV => "IV",
        }
    }
}

impl std::str::FromStr for InputSize {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self> {
        InputSize::ALL
            .into_iter()
            .find(|z| z.name() == s)
            .ok_or_else(|| {
                RuntimeError::Unknown(format!("unknown input size {s:?} (sizes: I, II, III, IV)"))
            })
    }
}

impl std::fmt::Display for InputSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `$THAW_HOME`, or `/var/lib/thaw`.
pub fn default_home() -> PathBuf {
    match std::env::var_os("THAW_HOME") {
        Some(h) if !h.is_empty() => PathBuf::from(h),
        _ => PathBuf::from("/var/lib/thaw"),
    }
}

/// Checks the state home given by `--home` (or the default): it must be a
/// directory. A missing one is created (0700, owned by the caller) when
/// `may_create` (a command whose job is to build what it needs: a runtime
/// build, the demo, a benchmark); for any other command it is an error, so a
/// typo never silently starts a full runtime build somewhere new.
pub fn check_home(home: &Path, may_create: bool) -> Result<()> {
    match std::fs::metadata(home) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => fail!(
            RuntimeError::Home,
            "home {}: not a directory",
            home.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if may_create {
                return mkdir_private(home);
            }
            fail!(
                RuntimeError::Home,
                "home {} does not exist; create it and build a runtime root there with `thaw runtime build --home {}`",
                home.display(),
                home.display()
            )
        }
        Err(e) => Err(Context::new(format!("home {}", home.display()), e).into()),
    }
}

/// Creates a directory (and missing parents) private to its owner (0700,
/// also when it existed): a state home, the daemon's state, a version.
pub fn mkdir_private(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("setting the mode of {}", dir.display()))?;
    Ok(())
}

/// The built root of the current recipe under `home`; an error (not a build)
/// if there is none.
pub fn current_root(home: &Path) -> Result<RootInfo> {
    let mut quiet = |_: &str| {};
    let r = recipe::recipe()?;
    let pkgs = recipe::resolve(home, &r, &mut quiet)?;
    let hash = recipe::input_hash(&r, &pkgs)?;
    RootInfo::open(home, &hash)
}

/// `HOME/runtime/roots`.
pub fn roots_dir(home: &Path) -> PathBuf {
    home.join("runtime").join("roots")
}

/// What `manifest.json` (next to `root/`) records about a built root.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: u32,
    /// Input hash: the root's identity (directory name).
    pub hash: String,
    /// Hash of the built tree (paths, types, modes, owners, contents, link targets).
    pub tree_hash: String,
    pub size_bytes: u64,
    pub files: u64,
    pub suite: String,
    /// (name, version, architecture), in install order.
    pub packages: Vec<(String, String, String)>,
    pub stubs: Vec<String>,
    /// sha256 of every installed file of the repository's runtime/ directory.
    pub runtime_files: Vec<(String, String)>,
    pub python: String,
    pub build_seconds: f64,
    pub created_unix: u64,
}

/// A built runtime root.
#[derive(Clone, Debug)]
pub struct RootInfo {
    /// Absolute path of the root directory (what the sandbox chroots into).
    pub path: PathBuf,
    /// Hex content hash (of the build inputs; the directory's name).
    pub hash: String,
    /// Directory holding `manifest.json` and `root/`.
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// One function of the suite.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FunctionInfo {
    pub name: String,
    pub sizes: Vec<InputSize>,
    /// The paper workload it mirrors, e.g. "FunctionBench pyaes (vHive/REAP, SYSTOR'22)".
    pub mirrors: String,
    pub description: String,
    /// Libraries it exercises.
    #[serde(default)]
    pub libraries: Vec<String>,
    /// What each size means, e.g. "1 KiB plaintext".
    #[serde(default)]
    pub size_notes: Vec<String>,
    #[serde(default)]
    pub runtime: Runtime,
}

#[derive(Deserialize)]
struct Catalog {
    functions: Vec<FunctionInfo>,
}

/// Builds the root if it is missing and returns it. Content-addressed: with unchanged
/// inputs (package versions, recipe, runtime sources) this returns the existing root
/// in well under a second and writes nothing.
pub fn ensure_root(home: &Path, progress: &mut dyn FnMut(&str)) -> Result<RootInfo> {
    recipe::ensure_root(home, false, progress)
}

impl RootInfo {
    /// Opens the root with this hash under `home`; errors if it is missing or its
    /// manifest does not match.
    pub fn open(home: &Path, hash: &str) -> Result<RootInfo> {
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            fail!(
                RuntimeError::Corrupt,
                "runtime root hash {hash:?} is not 64 hex characters"
            );
        }
        let dir = roots_dir(home).join(hash);
        let mpath = dir.join("manifest.json");
        let text = match std::fs::read_to_string(&mpath) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fail!(
                RuntimeError::NotBuilt,
                "runtime root {hash} is not built under {} (no {}); run `thaw runtime build`",
                home.display(),
                mpath.display()
            ),
            Err(e) => return Err(Context::new(format!("reading {}", mpath.display()), e).into()),
        };
        let manifest: Manifest = serde_json::from_str(&text)
            .with_context(|| format!("runtime root manifest {} is corrupt", mpath.display()))?;
        if manifest.format != MANIFEST_FORMAT {
            fail!(
                RuntimeError::Corrupt,
                "runtime root {hash}: manifest format {} (expected {MANIFEST_FORMAT})",
                manifest.format
            );
        }
        if manifest.hash != hash {
            fail!(
                RuntimeError::Corrupt,
                "runtime root manifest {} names hash {}, not {hash}",
                mpath.display(),
                manifest.hash
            );
        }
        let path = dir.join("root");
        for p in [
            "usr/bin/python3.11",
            "usr/bin/node",
            "opt/thaw/agent.py",
            "opt/thaw/agent.js",
            "dev",
            "proc",
            "tmp",
        ] {
            if std::fs::symlink_metadata(path.join(p)).is_err() {
                fail!(
                    RuntimeError::Corrupt,
                    "runtime root {hash} is incomplete: /{p} is missing"
                );
            }
        }
        let path = path
            .canonicalize()
            .with_context(|| format!("canonicalize {}", path.display()))?;
        Ok(RootInfo {
            path,
            hash: hash.to_string(),
            dir,
            manifest,
        })
    }

    /// Re-hashes the whole tree; errors if anything changed since the build.
    pub fn verify_full(&self) -> Result<()> {
        let t = treehash::hash_tree(&self.path)?;
        if t.hash != self.manifest.tree_hash {
            fail!(
                RuntimeError::Corrupt,
                "runtime root {} changed since it was built: tree hash {} != manifest {} \
                 ({} files / {} bytes now, {} / {} at build)",
                self.hash,
                t.hash,
                self.manifest.tree_hash,
                t.files,
                t.size_bytes,
                self.manifest.files,
                self.manifest.size_bytes
            );
        }
        Ok(())
    }

    /// The runtime of a suite function: Node.js if its module is
    /// `functions/NAME.js`, Java if it is `functions/NAME.java`, else Python.
    pub fn runtime_of(&self, function: &str) -> Runtime {
        let module = |r: Runtime| {
            let p = format!("opt/thaw/functions/{function}.{}", r.extension());
            !function.contains('/') && self.path.join(p).is_file()
        };
        [Runtime::Nodejs, Runtime::Java]
            .into_iter()
            .find(|&r| module(r))
            .unwrap_or(Runtime::Python)
    }

    /// argv (argv[0] is an absolute path inside the root) and the complete environment
    /// to start the agent serving suite function `function` (in its runtime).
    pub fn agent_command(&self, function: &str) -> (Vec<String>, Vec<(String, String)>) {
        agent_command_for(self.runtime_of(function), function)
    }

    /// argv and environment of `runtime`'s agent serving `function` (`--user`:
    /// a deployed function).
    pub fn agent_command_for(
        &self,
        runtime: Runtime,
        function: &str,
    ) -> (Vec<String>, Vec<(String, String)>) {
        agent_command_for(runtime, function)
    }

    /// The Python agent's argv and environment.
    fn python_command(function: &str) -> (Vec<String>, Vec<(String, String)>) {
        // `-m`: run from the root's byte-compiled agent, as an import would;
        // a script is compiled from source at every start (4 ms, and its
        // 2 MB of scratch memory would be in every snapshot). The module is
        // found through PYTHONPATH (`agent_env`); `-P` keeps the working
        // directory off `sys.path`.
        let argv = vec![
            PYTHON.to_string(),
            "-s".to_string(),
            "-P".to_string(),
            "-m".to_string(),
            "agent".to_string(),
            function.to_string(),
        ];
        (argv, agent_env())
    }

    /// The function suite (test-only functions, named `_test_*`, are not listed).
    pub fn functions(&self) -> Result<Vec<FunctionInfo>> {
        let p = self.path.join("opt/thaw/catalog.json");
        let text = std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))?;
        let c: Catalog =
            serde_json::from_str(&text).with_context(|| format!("parse {}", p.display()))?;
        Ok(c.functions)
    }

    /// Verifies a function's output for an input size by running the function's checker
    /// (trusted code: `chroot ROOT python3 /opt/thaw/check.py FUNCTION SIZE`, output
    /// JSON on stdin). The error says what is wrong.
    pub fn check_output(
        &self,
        function: &str,
        size: InputSize,
        output: &serde_json::Value,
    ) -> Result<()> {
        let known = self.functions()?;
        if !known.iter().any(|f| f.name == function) {
            fail!(RuntimeError::Unknown, "unknown function {function:?}");
        }
        let data = serde_json::to_vec(output)?;
        let out = recipe::run_in_root(
            &self.path,
            &[
                PYTHON,
                "-B",
                "-s",
                "/opt/thaw/check.py",
                function,
                size.name(),
            ],
            &agent_env(),
            Some(&data),
        )?;
        if !out.status.success() {
            let msg = String::from_utf8_lossy(&out.stderr);
            let msg = msg.trim();
            let line = msg
                .lines()
                .rev()
                .find(|l| l.starts_with("CHECK FAILED"))
                .unwrap_or(msg);
            fail!(RuntimeError::CheckFailed, "{function} size {size}: {line}");
        }
        Ok(())
    }
}

fn agent_command_for(runtime: Runtime, function: &str) -> (Vec<String>, Vec<(String, String)>) {
    match runtime {
        Runtime::Python => RootInfo::python_command(function),
        Runtime::Nodejs => node_command(function),
        Runtime::Java => java::command(function, java::DEFAULT_HEAP_MB),
        Runtime::Provided => (vec![BOOTSTRAP.to_string()], provided_env()),
    }
}

/// A custom runtime's program: `bootstrap` at the top of the function's code.
pub const BOOTSTRAP: &str = "/opt/thaw/user/bootstrap";

/// A custom runtime's base environment (Lambda's own variables are the
/// worker's: they name the function and its Runtime API).
pub fn provided_env() -> Vec<(String, String)> {
    [
        ("PATH", "/usr/local/bin:/usr/bin:/bin:/opt/thaw/user"),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("TZ", ":UTC"),
        ("LAMBDA_TASK_ROOT", "/opt/thaw/user"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The Node agent's argv and environment. Node starts threads of its own
/// (V8's platform workers, a delayed-task scheduler, the inspector's signal
/// watcher, libuv's pool on first use); the flags keep their number small
/// and the same at every start: one V8 worker instead of one per CPU (4
/// threads in all, not 7 on two CPUs), no V8 background jobs (compiles and
/// GC on the main thread: no job is ever half done when the process is
/// frozen for a checkpoint), libuv's pool at one thread.
fn node_command(function: &str) -> (Vec<String>, Vec<(String, String)>) {
    let argv = [
        NODE,
        "--v8-pool-size=1",
        "--single-threaded",
        "/opt/thaw/agent.js",
        function,
    ]
    .map(String::from)
    .to_vec();
    (argv, node_env())
}

/// The Node agent's environment.
pub fn node_env() -> Vec<(String, String)> {
    with_base_env(&[
        ("UV_THREADPOOL_SIZE", "1"),
        // Debian's node reads /etc/ssl/certs/ca-certificates.crt (not in
        // the root; the sandbox has no network) unless this is set empty
        ("NODE_EXTRA_CA_CERTS", ""),
        ("MALLOC_ARENA_MAX", "1"),
    ])
}

/// What every agent's environment starts with (the root's tools, a home
/// and temporary directory in the private /tmp, UTF-8), then `extra`.
pub(crate) fn with_base_env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    [
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The environment of `runtime`'s agent.
pub fn runtime_env(runtime: Runtime) -> Vec<(String, String)> {
    match runtime {
        Runtime::Python => agent_env(),
        Runtime::Nodejs => node_env(),
        Runtime::Java => java::env(),
        Runtime::Provided => provided_env(),
    }
}

/// Variables the runtimes set, which a function's own environment may not.
pub fn reserved_env(name: &str) -> bool {
    agent_env()
        .iter()
        .chain(node_env().iter())
        .chain(java::env().iter())
        .chain(provided_env().iter())
        .any(|(k, _)| k == name)
        || name.starts_with("AWS_LAMBDA_")
}

/// The agent's environment: single threaded everything, no bytecode writes, HOME=/tmp.
pub fn agent_env() -> Vec<(String, String)> {
    let mut env = with_base_env(&[
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("PYTHONUNBUFFERED", "1"),
        ("PYTHONNOUSERSITE", "1"),
        // where `agent` (and the functions' `thaw` SDK) is imported from
        ("PYTHONPATH", THAW_DIR),
        ("OPENBLAS_NUM_THREADS", "1"),
        ("OMP_NUM_THREADS", "1"),
        ("OMP_THREAD_LIMIT", "1"),
        ("OMP_DYNAMIC", "FALSE"),
        ("GOTO_NUM_THREADS", "1"),
        ("MKL_NUM_THREADS", "1"),
        ("NUMEXPR_NUM_THREADS", "1"),
        ("VECLIB_MAXIMUM_THREADS", "1"),
        ("BLIS_NUM_THREADS", "1"),
        ("JOBLIB_MULTIPROCESSING", "0"),
        ("LOKY_MAX_CPU_COUNT", "1"),
        ("MALLOC_ARENA_MAX", "1"),
    ]);
    // Older OpenBLAS (bookworm's 0.3.21) mis-detects some CPUs; hosts that need it set
    // these, and the runtime must see the same.
    for k in ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"] {
        if let Ok(v) = std::env::var(k) {
            if !v.is_empty() {
                env.push((k.to_string(), v));
            }
        }
    }
    env
}

#[cfg(test)]
mod home_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_missing_home_is_created_private_only_when_allowed() {
        let base = std::env::temp_dir().join(format!("thaw-home-test-{}", std::process::id()));
        let home = base.join("a").join("home");
        let err = check_home(&home, false).unwrap_err();
        assert!(matches!(err, RuntimeError::Home(_)), "{err}");
        assert!(!home.exists(), "a refused home was created");
        check_home(&home, true).unwrap();
        let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        // an existing home is accepted either way; a file is not a home
        check_home(&home, false).unwrap();
        let file = base.join("file");
        std::fs::write(&file, b"").unwrap();
        let err = check_home(&file, true).unwrap_err();
        assert!(matches!(err, RuntimeError::Home(_)), "{err}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
