//! The records of shared mappings' backings and of the shared memory
//! objects they map, and their checks.
use crate::{Blob, StateError};
use serde::{Deserialize, Serialize};
use thaw_error::fail;

/// Where a shared mapping comes back from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SharedBacking {
    /// this file of the sandbox's /tmp or /dev/shm (restored with them)
    File(String),
    /// shared memory object `n` of [`ProcessState::shared`](crate::ProcessState)
    Object(u32),
}

/// A shared memory object: a memfd of `size` bytes holding `content`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedObject {
    /// the memfd's name (for `/proc/PID/maps`; at most 249 bytes)
    pub name: String,
    pub size: u64,
    /// its first `content.len` bytes, in the image
    pub content: Blob,
}

/// memfd_create's limit on a name.
pub const NAME_MAX: usize = 249;

/// What a restore would trust: a path of the sandbox's /tmp or /dev/shm
/// (no `..`), an object that exists, objects' contents inside their size
/// and the image.
pub(crate) fn validate(
    backing: &Option<SharedBacking>,
    objects: &[SharedObject],
) -> Result<(), StateError> {
    match backing {
        None => Ok(()),
        Some(SharedBacking::File(p)) => {
            let ok = (p.starts_with("/tmp/") || p.starts_with("/dev/shm/"))
                && !p.split('/').any(|c| c == "..")
                && !p.contains('\0');
            if !ok {
                fail!(StateError::Corrupt, "a shared mapping of {p:?}");
            }
            Ok(())
        }
        Some(SharedBacking::Object(i)) => {
            if *i as usize >= objects.len() {
                fail!(
                    StateError::Corrupt,
                    "a shared mapping of object {i}, which does not exist"
                );
            }
            Ok(())
        }
    }
}

/// Objects' contents lie after the saved pages (`pages` bytes), as the
/// files' and descriptors' do; a restore reads them from the verified image.
pub(crate) fn validate_objects(objects: &[SharedObject], pages: u64) -> Result<(), StateError> {
    if objects.len() > thaw_restorer::MAX_SHARED {
        fail!(
            StateError::Corrupt,
            "{} shared memory objects",
            objects.len()
        );
    }
    for o in objects {
        let c = &o.content;
        if o.name.len() > NAME_MAX
            || o.name.contains('\0')
            || c.len > o.size
            || (c.len > 0 && c.image_off < pages)
            || c.image_off.checked_add(c.len).is_none()
        {
            fail!(
                StateError::Corrupt,
                "shared memory object {:?} ({} bytes, content {}+{})",
                o.name,
                o.size,
                c.image_off,
                c.len
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_records_read_back_and_bad_ones_are_refused() {
        let objects = vec![SharedObject {
            name: "sem.x".into(),
            size: 32,
            content: Blob {
                image_off: 8192,
                len: 32,
            },
        }];
        let backings = vec![
            None,
            Some(SharedBacking::File("/tmp/a".into())),
            Some(SharedBacking::Object(0)),
        ];
        let w = postcard::to_allocvec(&(&objects, &backings)).unwrap();
        let back: (Vec<SharedObject>, Vec<Option<SharedBacking>>) =
            postcard::from_bytes(&w).unwrap();
        assert_eq!(back, (objects.clone(), backings.clone()));
        for b in &backings {
            validate(b, &objects).unwrap();
        }
        validate_objects(&objects, 8192).unwrap();
        assert!(
            validate_objects(&objects, 16384).is_err(),
            "content among the pages"
        );
        let mut big = objects.clone();
        big[0].content.len = 33;
        assert!(
            validate_objects(&big, 8192).is_err(),
            "content past its size"
        );
        assert!(validate(&Some(SharedBacking::Object(1)), &objects).is_err());
        assert!(validate(&Some(SharedBacking::File("/etc/passwd".into())), &objects).is_err());
        assert!(validate(&Some(SharedBacking::File("/tmp/../etc".into())), &objects).is_err());
        // an Option's tag, then a backing kind that does not exist
        assert!(postcard::from_bytes::<Option<SharedBacking>>(&[1, 3]).is_err());
    }
}
