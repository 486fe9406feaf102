//! The Java part of the runtime root: Debian's OpenJDK 17 JRE (a recipe
//! package), Lambda's and CRaC's API jars from Maven Central (pinned by
//! SHA-256 in the recipe), the Java agent (`runtime/java`) and the suite's
//! Java functions (`runtime/functions/*.java`) compiled with the host's
//! `javac`. (Debian's package ships the JVM's default class-data-sharing
//! archive, `lib/server/classes.jsa`.)

use crate::error::{Result, RuntimeError};
use crate::recipe::Recipe;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use thaw_error::{fail, ResultExt};

/// The JVM inside the root.
pub const JAVA_HOME: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
/// `JAVA_HOME/bin/java`.
pub const JAVA: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java";
/// Where the agent's classes, the API jars and the CRaC implementation live.
pub const JAVA_DIR: &str = "/opt/thaw/java";
/// Debian's Jackson jars (libjackson2-*-java), on the agent's class path.
pub const JACKSON_JARS: [&str; 3] = [
    "/usr/share/java/jackson-core.jar",
    "/usr/share/java/jackson-databind.jar",
    "/usr/share/java/jackson-annotations.jar",
];

/// The heap limit of an agent whose memory is not known (suite functions).
pub const DEFAULT_HEAP_MB: u64 = 256;

/// The heap limit for a function of `memory_mb`: three quarters of it (the
/// rest for the JVM's own memory: classes, compiled code, thread stacks), at
/// least 16 MiB. The JVM cannot see the sandbox's cgroup (no /proc), so it is
/// told.
pub fn heap_mb(memory_mb: u64) -> u64 {
    (memory_mb * 3 / 4).max(16)
}

/// The Java agent's argv for `function` (a suite name or `--user`) with a
/// heap of `heap_mb`. The flags keep the JVM's threads and memory few and the
/// same at every start: the serial collector (no GC worker threads; a full
/// collection before the snapshot compacts the heap and, with the free
/// ratios, gives the unused part back, so it is not in the image), no
/// perf-data file (`/tmp/hsperfdata_*` would be a shared file mapping), no
/// attach listener, no container probing (there is no /proc to probe).
/// `--add-opens`: the agent reads fd 3 through a FileDescriptor and re-seeds
/// the JDK's generators through their private fields. CRaC's `org.crac`
/// facade finds thaw's implementation through `org.crac.Core.Compat`.
pub fn command(function: &str, heap_mb: u64) -> (Vec<String>, Vec<(String, String)>) {
    let class_path = format!(
        "{JAVA_DIR}/classes:{JAVA_DIR}/lib/*:{}",
        JACKSON_JARS.join(":")
    );
    let mut argv: Vec<String> = [
        JAVA,
        "-XX:+UseSerialGC",
        "-XX:MinHeapFreeRatio=10",
        "-XX:MaxHeapFreeRatio=20",
        "-Xms8m",
        "-XX:-UsePerfData",
        "-XX:+DisableAttachMechanism",
        "-XX:-UseContainerSupport",
        "-Xshare:auto",
        "-Djava.io.tmpdir=/tmp",
        "-Duser.home=/tmp",
        "-Dorg.crac.Core.Compat=thaw.crac",
        "--add-opens=java.base/java.io=ALL-UNNAMED",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.util=ALL-UNNAMED",
        "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    ]
    .map(String::from)
    .to_vec();
    argv.push(format!("-Xmx{heap_mb}m"));
    argv.extend([
        "-cp".into(),
        class_path,
        "thaw.Agent".into(),
        function.into(),
    ]);
    (argv, env())
}

/// Replaces the heap limit in an agent argv made by [`command`].
pub fn set_heap(argv: &mut [String], heap_mb: u64) {
    for a in argv.iter_mut().filter(|a| a.starts_with("-Xmx")) {
        *a = format!("-Xmx{heap_mb}m");
    }
}

/// The Java agent's environment.
pub fn env() -> Vec<(String, String)> {
    let mut env = crate::with_base_env(&[("JAVA_HOME", JAVA_HOME), ("MALLOC_ARENA_MAX", "1")]);
    // the launcher's RPATH is $ORIGIN, which the dynamic loader finds
    // through /proc/self/exe: the sandbox has no /proc
    env.push(("LD_LIBRARY_PATH".into(), format!("{JAVA_HOME}/lib")));
    env
}

/// A jar of Maven Central, `group:artifact:version`, and its SHA-256.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct MavenJar {
    pub artifact: String,
    pub sha256: String,
}

impl MavenJar {
    /// (path under the repository root, file name).
    fn location(&self) -> Result<(String, String)> {
        let parts: Vec<&str> = self.artifact.split(':').collect();
        let ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if parts.len() != 3 || !parts.iter().all(|p| ok(p)) || parts[1].starts_with('.') {
            fail!(
                RuntimeError::Corrupt,
                "recipe: maven artifact {:?} is not group:artifact:version",
                self.artifact
            );
        }
        let file = format!("{}-{}.jar", parts[1], parts[2]);
        Ok((
            format!(
                "{}/{}/{}/{file}",
                parts[0].replace('.', "/"),
                parts[1],
                parts[2]
            ),
            file,
        ))
    }
}

const MAVEN_CENTRAL: &str = "https://repo.maven.apache.org/maven2";

/// The recipe's jars in `HOME/runtime/maven`, downloaded when missing and
/// checked against their SHA-256 every time.
pub(crate) fn fetch_jars(
    home: &Path,
    r: &Recipe,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<PathBuf>> {
    let cache = home.join("runtime").join("maven");
    fs::create_dir_all(&cache)?;
    let mut out = Vec::new();
    for jar in &r.maven {
        let (rel, file) = jar.location()?;
        let dest = cache.join(&file);
        if !dest.is_file() {
            crate::recipe::need_tool("curl", "curl")?;
            progress(&format!("downloading {} from Maven Central", jar.artifact));
            let part = cache.join(format!(".{file}.{}", std::process::id()));
            let st = Command::new("curl")
                .args(["--fail", "--silent", "--show-error", "--location"])
                .args(["--proto", "=https", "--max-time", "120", "-o"])
                .arg(&part)
                .arg(format!("{MAVEN_CENTRAL}/{rel}"))
                .status()
                .context("run curl")?;
            if !st.success() {
                let _ = fs::remove_file(&part);
                fail!(
                    RuntimeError::Host,
                    "downloading {} from {MAVEN_CENTRAL} failed ({st})",
                    jar.artifact
                );
            }
            fs::rename(&part, &dest)?;
        }
        let got = hex::encode(Sha256::digest(fs::read(&dest)?));
        if got != jar.sha256 {
            let _ = fs::remove_file(&dest);
            fail!(
                RuntimeError::Corrupt,
                "{} has SHA-256 {got}, the recipe pins {} (the cached copy was removed)",
                jar.artifact,
                jar.sha256
            );
        }
        out.push(dest);
    }
    Ok(out)
}

/// Installs the jars and compiles the agent and the suite's Java functions
/// into `root`.
pub(crate) fn install(root: &Path, jars: &[PathBuf], progress: &mut dyn FnMut(&str)) -> Result<()> {
    if !root.join(JAVA.trim_start_matches('/')).is_file() {
        return Ok(());
    }
    crate::recipe::need_tool("javac", "openjdk-17-jdk-headless")?;
    let java = root.join(JAVA_DIR.trim_start_matches('/'));
    let lib = java.join("lib");
    fs::create_dir_all(&lib)?;
    for j in jars {
        fs::copy(j, lib.join(j.file_name().expect("a jar file")))?;
    }
    let mut class_path: Vec<PathBuf> = JACKSON_JARS
        .iter()
        .map(|j| root.join(j.trim_start_matches('/')))
        .collect();
    class_path.extend(jars.iter().cloned());
    progress("compiling the Java agent (host javac, --release 17)");
    let agent_src = sources(&java.join("src"))?;
    javac(&class_path, &java.join("classes"), &agent_src)?;
    class_path.push(java.join("classes"));
    let functions = root.join("opt/thaw/functions");
    for e in fs::read_dir(&functions)?.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "java") {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            javac(&class_path, &functions.join(&name), &[p])?;
        }
    }
    Ok(())
}

/// Every `.java` file under `dir`, sorted (javac's output does not depend
/// on the order, but its error messages do).
fn sources(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "java") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn javac(class_path: &[PathBuf], dest: &Path, files: &[PathBuf]) -> Result<()> {
    fs::create_dir_all(dest)?;
    let cp = class_path
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    crate::recipe::run_ok(
        Command::new("javac")
            .args(["--release", "17", "-encoding", "UTF-8", "-nowarn", "-cp"])
            .arg(cp)
            .arg("-d")
            .arg(dest)
            .args(files)
            .env("LC_ALL", "C"),
        "javac",
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maven_locations() {
        let j = |a: &str| MavenJar {
            artifact: a.into(),
            sha256: String::new(),
        };
        assert_eq!(
            j("io.github.crac:org-crac:0.1.3").location().unwrap(),
            (
                "io/github/crac/org-crac/0.1.3/org-crac-0.1.3.jar".into(),
                "org-crac-0.1.3.jar".into()
            )
        );
        for bad in ["a:b", "a:b:c:d", "a/../b:c:1", "a::1", "a:.b:1", "a:b:1 2"] {
            assert!(j(bad).location().is_err(), "{bad}");
        }
    }
}
