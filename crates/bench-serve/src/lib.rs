//! thaw-bench-serve: the daemon measured through its API, each against a
//! baseline in the same run (docs/BENCHMARKS.md):
//!
//! * [`serve`]: `thaw bench serve`, the daemon against the worker it wraps;
//! * [`capacity`]: `thaw bench density` and `thaw bench burst`, the idle
//!   instances a node holds and bursts of cold requests against prewarms;
//! * [`xdt`]: `thaw bench xdt`, passing data between functions by reference
//!   against the object-store baseline, on one worker and across a [`pair`];
//! * [`egress`]: `thaw bench egress`, a function's network egress;
//! * [`lambda`]: `thaw bench lambda`, Lambda's API through boto3 against
//!   thaw's own, cold and warm, and [`lambda_provided`], Go and Rust
//!   custom runtimes restored against their fresh starts;
//! * [`cri`]: `thaw bench cri`, pod starts through the CRI, runc against
//!   thaw, and a node restoring the snapshot another node published;
//! * [`kube`]: `thaw bench kube`, pod starts through a real kubelet, thaw
//!   against runc and against the floor of a pod that answers at once;
//! * [`pair`]: two daemons in network namespaces of their own (also what
//!   the cross-worker tests run on).
pub mod capacity;
pub mod cri;
pub mod egress;
mod error;
pub mod kube;
pub mod kube_nodes;
pub mod lambda;
pub mod lambda_provided;
pub mod pair;
pub mod serve;
pub mod xdt;

pub use error::{BenchServeError, Result};
