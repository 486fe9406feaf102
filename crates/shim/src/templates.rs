//! Pods of one template (a Deployment's or a Knative revision's pods,
//! `NAME-HASH-XXXXX`; a StatefulSet's, `NAME-N`) run the same functions.
//! The node remembers which functions a template's pods ran, so the next
//! pod's sandbox has their instances restored while containerd is still
//! creating its containers (the kubelet pulls and creates them only after
//! the sandbox runs, so the image is not known earlier).
use crate::spec::ContainerSpec;
use std::io::Write;
use std::path::{Path, PathBuf};

const SANDBOX_NAME: &str = "io.kubernetes.cri.sandbox-name";
const SANDBOX_NAMESPACE: &str = "io.kubernetes.cri.sandbox-namespace";
/// Functions remembered per template (a pod rarely runs more than one).
const MAX_FUNCTIONS: usize = 8;

/// The template of a pod's sandbox: its namespace and its name without the
/// last `-` part; none for a name without one (a pod of its own).
pub fn key(spec: &ContainerSpec) -> Option<String> {
    let name = spec.annotations.get(SANDBOX_NAME)?;
    let namespace = spec
        .annotations
        .get(SANDBOX_NAMESPACE)
        .map_or("", String::as_str);
    let (stem, _) = name.rsplit_once('-')?;
    (!stem.is_empty()).then(|| format!("{namespace}/{stem}"))
}

/// Whether `name` is a function name the shim deploys (`img-` and 24 hex
/// digits): anything else read back from the store is ignored.
pub(crate) fn is_function_name(name: &str) -> bool {
    name.strip_prefix("img-")
        .is_some_and(|h| h.len() == 24 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The node's record of templates, a file per template (named by a digest
/// of its key) listing its functions, in a directory beside the daemon's
/// socket.
pub struct Templates {
    dir: PathBuf,
}

impl Templates {
    pub fn beside(socket: &Path) -> Templates {
        Templates {
            dir: dir_beside(socket, "pod-templates"),
        }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir
            .join(&thaw_pack::image::content_key(&[key.to_string()])[..32])
    }

    /// The functions the template's pods ran (none if unknown or unreadable).
    pub fn functions(&self, key: &str) -> Vec<String> {
        read_lines(&self.path(key), is_function_name, MAX_FUNCTIONS)
    }

    /// Adds `function` to the template's functions (the newest first; the
    /// oldest go past [`MAX_FUNCTIONS`]), replacing the file atomically.
    pub fn remember(&self, key: &str, function: &str) -> std::io::Result<()> {
        let functions = self.functions(key);
        put_first(&self.path(key), functions, function, MAX_FUNCTIONS)
    }
}

/// The node's directory `name` beside the daemon's socket.
pub(crate) fn dir_beside(socket: &Path, name: &str) -> PathBuf {
    socket.parent().unwrap_or(Path::new("/")).join(name)
}

/// The first `max` lines of `path` that `keep` takes (none if the file
/// is missing or unreadable).
pub(crate) fn read_lines(path: &Path, keep: impl Fn(&str) -> bool, max: usize) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| keep(l))
        .take(max)
        .map(str::to_string)
        .collect()
}

/// Writes `items` to `path` with `item` first (once) and at most `max`
/// lines, through a temporary file renamed over it; nothing if `item` is
/// first already.
pub(crate) fn put_first(
    path: &Path,
    mut items: Vec<String>,
    item: &str,
    max: usize,
) -> std::io::Result<()> {
    if items.first().is_some_and(|f| f == item) {
        return Ok(());
    }
    items.retain(|f| f != item);
    items.insert(0, item.to_string());
    items.truncate(max);
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(items.join("\n").as_bytes())?;
    f.write_all(b"\n")?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sandbox(name: Option<&str>) -> ContainerSpec {
        let mut annotations = BTreeMap::new();
        if let Some(n) = name {
            annotations.insert(SANDBOX_NAME.to_string(), n.to_string());
            annotations.insert(SANDBOX_NAMESPACE.to_string(), "shop".to_string());
        }
        ContainerSpec {
            args: Vec::new(),
            env: Vec::new(),
            root: PathBuf::from("/nonexistent"),
            annotations,
            netns: crate::spec::Netns::Host,
            new_namespaces: Vec::new(),
            hostname: None,
            resources: Default::default(),
        }
    }

    #[test]
    fn a_pods_template_is_its_name_without_the_last_part() {
        let k = |n| key(&sandbox(n));
        assert_eq!(
            k(Some("hello-7d9c8b6f5-x2v4q")).as_deref(),
            Some("shop/hello-7d9c8b6f5")
        );
        assert_eq!(k(Some("db-0")).as_deref(), Some("shop/db"));
        assert_eq!(k(Some("standalone")), None);
        assert_eq!(k(Some("-x")), None);
        assert_eq!(k(None), None);
    }

    #[test]
    fn templates_keep_their_newest_functions_and_ignore_other_names() {
        let dir = std::env::temp_dir().join(format!("thaw-templates-{}", std::process::id()));
        let t = Templates::beside(&dir.join("thaw.sock"));
        let f = |i: u32| format!("img-{i:024x}");
        assert!(t.functions("shop/a").is_empty());
        t.remember("shop/a", &f(1)).unwrap();
        t.remember("shop/a", &f(2)).unwrap();
        t.remember("shop/a", &f(1)).unwrap();
        assert_eq!(t.functions("shop/a"), [f(1), f(2)]);
        assert!(t.functions("shop/b").is_empty(), "templates are apart");
        for i in 3..20 {
            t.remember("shop/a", &f(i)).unwrap();
        }
        assert_eq!(t.functions("shop/a").len(), MAX_FUNCTIONS);
        assert_eq!(t.functions("shop/a")[0], f(19));
        // a file someone else wrote: only function names are taken
        std::fs::write(
            t.path("shop/c"),
            format!("../../etc/passwd\nimg-xyz\n{}\n", f(7)),
        )
        .unwrap();
        assert_eq!(t.functions("shop/c"), [f(7)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
