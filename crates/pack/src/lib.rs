//! thaw-pack: the pure pieces the daemon (`thaw-server`) and the
//! containerd shim (`thaw-shim`) both need, so that the shim, a client of
//! the daemon's API, does not link the daemon:
//!
//! * [`code`]: a function's code directory listed and packed as a tar.gz,
//!   as the daemon's deploy unpacks it;
//! * [`image`]: the names an OCI image built by `thaw image build` gives its
//!   function (the code directory, the handler's environment variables)
//!   and the digests the shim names functions and root filesystems by;
//! * [`cpu`]: a container's CPU shares as a function's CPU weight.
pub mod code;
pub mod cpu;
pub mod image;

pub use code::{code_entries, pack_dir, pack_entries, ArchiveError, CodeEntry};
