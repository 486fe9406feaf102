//! Which image references a node's functions were deployed from. The
//! daemon names a function after its code and settings (`img-` and a
//! digest), which no manifest knows; a Deployment names its image. So each
//! deploy of a pod's container records its image reference (the CRI
//! plugin's annotation) under the function's name, in a directory beside
//! the daemon's socket, and `deploy/kubernetes/snapshot-labels.py` labels
//! the node with the images whose snapshots it holds.
use crate::spec::ContainerSpec;
use std::path::{Path, PathBuf};

/// The image reference the kubelet asked for, which containerd's CRI
/// plugin puts on the container's spec.
const IMAGE_NAME: &str = "io.kubernetes.cri.image-name";
/// Image references kept per function (retagged images, a few at most).
const MAX_IMAGES: usize = 8;
/// The longest image reference recorded (a registry's limit is lower).
const MAX_REFERENCE: usize = 512;

/// The node's record: a file per function (named as the function) listing
/// its image references, the newest first.
pub struct FunctionImages {
    dir: PathBuf,
}

impl FunctionImages {
    pub fn beside(socket: &Path) -> FunctionImages {
        FunctionImages {
            dir: crate::templates::dir_beside(socket, "function-images"),
        }
    }

    /// The image references recorded for `function` (none if unknown).
    pub fn images(&self, function: &str) -> Vec<String> {
        if !crate::templates::is_function_name(function) {
            return Vec::new();
        }
        crate::templates::read_lines(&self.dir.join(function), valid_reference, MAX_IMAGES)
    }

    /// Records that `function` was deployed from `image` (a name the shim
    /// did not make, or a reference no registry takes, is refused),
    /// replacing the file atomically.
    pub fn remember(&self, function: &str, image: &str) -> std::io::Result<()> {
        if !crate::templates::is_function_name(function) || !valid_reference(image) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not a function name and image reference: {function:?} {image:?}"),
            ));
        }
        let images = self.images(function);
        crate::templates::put_first(&self.dir.join(function), images, image, MAX_IMAGES)
    }
}

/// Records the image of `spec`'s container (if the CRI plugin named it)
/// as `function`'s; a failure is logged, never the container's.
pub fn remember(socket: &Path, spec: &ContainerSpec, function: &str) {
    let Some(image) = spec.annotations.get(IMAGE_NAME) else {
        return;
    };
    if let Err(e) = FunctionImages::beside(socket).remember(function, image) {
        log::warn!("recording {function}'s image {image}: {e}");
    }
}

fn valid_reference(r: &str) -> bool {
    !r.is_empty() && r.len() <= MAX_REFERENCE && r.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_functions_images_are_kept_newest_first_and_bad_names_refused() {
        let dir = std::env::temp_dir().join(format!("thaw-function-images-{}", std::process::id()));
        let r = FunctionImages::beside(&dir.join("thaw.sock"));
        let f = format!("img-{:024x}", 7);
        assert!(r.images(&f).is_empty());
        r.remember(&f, "thaw.local/hello:latest").unwrap();
        r.remember(&f, "registry.example/hello:v2").unwrap();
        r.remember(&f, "thaw.local/hello:latest").unwrap();
        assert_eq!(
            r.images(&f),
            ["thaw.local/hello:latest", "registry.example/hello:v2"]
        );
        for (function, image) in [
            ("../etc", "thaw.local/x:1"),
            (f.as_str(), "two\nlines"),
            (f.as_str(), ""),
        ] {
            let e = r.remember(function, image).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        }
        assert!(r.images("../etc").is_empty());
        // a file someone else wrote: only references are taken
        std::fs::write(dir.join("function-images").join(&f), "a b\nok/x:1\n").unwrap();
        assert_eq!(r.images(&f), ["ok/x:1"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
