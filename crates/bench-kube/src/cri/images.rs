//! The images both runtimes run: the function's thaw image, and a runc
//! image whose container runs the same function in a fresh Python behind
//! a small HTTP server, on the runtime root's directories mounted
//! read-only (or, for a pod without volumes, with the runtime root inside
//! the image).
use super::{Images, Node, SIZE};
use crate::error::Result;
use serde_json::json;
use std::path::{Path, PathBuf};
use thaw_error::ResultExt;
use thaw_server::image::{self, Entry};

/// The server a runc container runs: a fresh Python imports the function,
/// runs its init, and answers every POST with the handler's value.
pub(super) const SERVER: &str = r#"import http.server, importlib, json, os, sys
sys.path.insert(0, "/function")
module, _, name = os.environ["FN_HANDLER"].rpartition(".")
mod = importlib.import_module(module)
if os.environ.get("FN_INIT"):
    getattr(mod, os.environ["FN_INIT"].rpartition(".")[2])()
handler = getattr(mod, name)

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n)
        out = json.dumps(handler(json.loads(body) if body else None)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass

http.server.HTTPServer(("0.0.0.0", int(os.environ.get("PORT", "8080"))), Handler).serve_forever()
"#;

/// A suite function's source and entry points (its module is `main`: a
/// suite function named like the library it imports, pyaes, would import
/// itself).
struct Source {
    src: Vec<u8>,
    handler: String,
    init: Option<String>,
}

fn source(root: &thaw_runtime::RootInfo, function: &str) -> Result<Source> {
    let src_path = root.path.join(format!("opt/thaw/functions/{function}.py"));
    let src =
        std::fs::read(&src_path).with_context(|| format!("reading {}", src_path.display()))?;
    let has_init = String::from_utf8_lossy(&src).contains("\ndef init(");
    Ok(Source {
        src,
        handler: "main.handler".into(),
        init: has_init.then(|| "main.init".into()),
    })
}

/// The runc server's environment: the agent's (Python's paths) and the
/// function's entry points.
fn server_env(s: &Source) -> Vec<(String, String)> {
    let mut env = thaw_runtime::agent_env();
    env.push(("FN_HANDLER".into(), s.handler.clone()));
    if let Some(i) = &s.init {
        env.push(("FN_INIT".into(), i.clone()));
    }
    env
}

/// Builds and imports `function`'s thaw image and its runc image.
pub(crate) fn build_images(
    n: &Node,
    root: &thaw_runtime::RootInfo,
    function: &str,
) -> Result<Images> {
    let source = source(root, function)?;
    let Source { src, handler, init } = &source;
    let dir = n.cri.c.dir.join(format!("code-{function}"));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("main.py"), src)?;
    let thaw = format!("thaw.local/{}:bench", function.replace('_', "-"));
    let built = image::build(&image::ImageSpec {
        code: &dir,
        handler,
        init: init.as_deref(),
        reference: &thaw,
    })?;
    let thaw_archive = import(n, &format!("{function}-thaw"), &built.archive)?;
    let runc = format!("thaw.local/{}-runc:bench", function.replace('_', "-"));
    let code_path = "function/main.py".to_string();
    let env: Vec<String> = server_env(&source)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let python = root.manifest.python.clone();
    let (links, dirs) = (root_links(root)?, root_dirs(root)?);
    let mut entries = vec![
        Entry::Dir {
            path: "function",
            mode: 0o755,
        },
        Entry::File {
            path: &code_path,
            data: src,
            mode: 0o644,
        },
        Entry::Dir {
            path: "srv",
            mode: 0o755,
        },
        Entry::File {
            path: "srv/server.py",
            data: SERVER.as_bytes(),
            mode: 0o644,
        },
        Entry::Dir {
            path: "tmp",
            mode: 0o1777,
        },
    ];
    for (name, target) in &links {
        entries.push(Entry::Symlink { path: name, target });
    }
    // mount points of the root's directories
    for d in &dirs {
        entries.push(Entry::Dir {
            path: d,
            mode: 0o755,
        });
    }
    let built = image::build_plain(
        &entries,
        json!({"Entrypoint": [python, "/srv/server.py"], "Env": env, "WorkingDir": "/function"}),
        &runc,
    )?;
    import(n, &format!("{function}-runc"), &built.archive)?;
    let event_path = root
        .path
        .join(format!("opt/thaw/inputs/{function}/{SIZE}.json"));
    let event = std::fs::read_to_string(&event_path)
        .with_context(|| format!("reading {}", event_path.display()))?;
    Ok(Images {
        function: function.to_string(),
        thaw,
        thaw_archive,
        runc,
        event,
    })
}

/// A runc image that needs no volume, and how its container runs.
pub(crate) struct RootedRunc {
    pub(crate) image: String,
    pub(crate) command: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
}

/// `function`'s runc image with the runtime root inside it: `thaw image
/// build`'s base layer of the root (cached in `cache`) under the function
/// and the server in `/function`, so its pod mounts nothing. Imported into
/// the node's containerd.
pub(crate) fn build_rooted_runc(
    n: &Node,
    root: &thaw_runtime::RootInfo,
    function: &str,
    cache: &Path,
) -> Result<RootedRunc> {
    let source = source(root, function)?;
    let dir = n.cri.c.dir.join(format!("rooted-{function}"));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("main.py"), &source.src)?;
    std::fs::write(dir.join("server.py"), SERVER)?;
    let base = image::runtime_layer(&root.path, &root.hash, cache)?;
    let reference = format!(
        "thaw.local/{}-rooted-runc:bench",
        function.replace('_', "-")
    );
    let archive = n.cri.c.dir.join(format!("{function}-rooted-runc.oci.tar"));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&archive)?);
    let spec = image::ImageSpec {
        code: &dir,
        handler: &source.handler,
        init: source.init.as_deref(),
        reference: &reference,
    };
    image::build_on(&spec, &[base], &mut out)?;
    std::io::Write::flush(&mut out)?;
    drop(out);
    n.cri.c.import(&archive)?;
    // the blob is in containerd's store now
    std::fs::remove_file(&archive)?;
    Ok(RootedRunc {
        image: reference,
        command: vec![root.manifest.python.clone(), "/function/server.py".into()],
        env: server_env(&source),
    })
}

/// Writes `archive` beside the node's containerd and imports it; its path.
pub(crate) fn import(n: &Node, name: &str, archive: &[u8]) -> Result<PathBuf> {
    let p = n.cri.c.dir.join(format!("{name}.oci.tar"));
    std::fs::write(&p, archive)?;
    n.cri.c.import(&p)?;
    Ok(p)
}

/// Top-level symlinks of the runtime root (`bin -> usr/bin`, ...): the
/// runc image carries them.
pub(super) fn root_links(root: &thaw_runtime::RootInfo) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(&root.path)? {
        let e = e?;
        if e.file_type()?.is_symlink() {
            let target = std::fs::read_link(e.path())?;
            out.push((
                e.file_name().to_string_lossy().into_owned(),
                target.to_string_lossy().into_owned(),
            ));
        }
    }
    out.sort();
    Ok(out)
}

/// Directories of the runtime root the runc container gets read-only
/// (everything Python and the inputs need; not `/etc` or `/tmp`, which the
/// container runtime provides).
pub(crate) fn root_dirs(root: &thaw_runtime::RootInfo) -> Result<Vec<String>> {
    const OWN: [&str; 9] = [
        "etc", "tmp", "proc", "sys", "dev", "run", "function", "srv", "var",
    ];
    let mut out = Vec::new();
    for e in std::fs::read_dir(&root.path)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type()?.is_dir() && !OWN.contains(&name.as_str()) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}
