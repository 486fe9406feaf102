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
        let dir = socket
            .parent()
            .unwrap_or(Path::new("/"))
            .join("pod-templates");
        Templates { dir }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir
            .join(&thaw_server::image::content_key(&[key.to_string()])[..32])
    }

    /// The functions the template's pods ran (none if unknown or unreadable).
    pub fn functions(&self, key: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(key))
            .unwrap_or_default()
            .lines()
            .filter(|l| is_function_name(l))
            .take(MAX_FUNCTIONS)
            .map(str::to_string)
            .collect()
    }

    /// Adds `function` to the template's functions (the newest first; the
    /// oldest go past [`MAX_FUNCTIONS`]), replacing the file atomically.
    pub fn remember(&self, key: &str, function: &str) -> std::io::Result<()> {
        let mut functions = self.functions(key);
        if functions.first().is_some_and(|f| f == function) {
            return Ok(());
        }
        functions.retain(|f| f != function);
        functions.insert(0, function.to_string());
        functions.truncate(MAX_FUNCTIONS);
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(key);
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(functions.join("\n").as_bytes())?;
        f.write_all(b"\n")?;
        drop(f);
        std::fs::rename(&tmp, &path)
    }
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
