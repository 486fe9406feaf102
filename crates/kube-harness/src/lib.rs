//! What the shim's end-to-end tests and the Kubernetes benchmarks
//! (`thaw-bench-kube`) run on: a private containerd with the thaw runtime
//! registered and its CRI plugin ([`containerd`]), the kubelet's CRI calls
//! over gRPC ([`cri_client`]), and a Kubernetes cluster of one or more
//! nodes ([`cluster`]). Its tests (`tests/`) drive the shim binary built
//! beside them (`cargo build --release -p thaw-shim`). Test and benchmark
//! infrastructure only: neither `thaw` nor the shim links it.

pub mod cluster;
pub mod containerd;
pub mod cri_client;
