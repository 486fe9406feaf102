//! thaw-bench-kube: pods through Kubernetes' paths, each against a
//! baseline in the same run (docs/BENCHMARKS.md), on the containerd/CRI
//! harness the shim's tests use (crate `thaw-kube-harness`): a
//! crate and binary of their own, `thaw-bench-kube`, which `thaw bench
//! cri` and `thaw bench kube` run, so the `thaw` binary links no harness.
//!
//! * [`cri`]: `thaw bench cri`, pod starts through the CRI, runc against
//!   thaw, and a node restoring the snapshot another node published;
//! * [`kube`]: `thaw bench kube`, pod starts through a real kubelet, thaw
//!   against runc and against the floor of a pod that answers at once;
//! * [`kube_nodes`]: `thaw bench kube --two-nodes`, two nodes sharing
//!   snapshots through the remote tier.
pub mod cri;
mod error;
pub mod kube;
pub mod kube_nodes;

pub use error::{BenchKubeError, Result};
