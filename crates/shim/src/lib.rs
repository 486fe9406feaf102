//! thaw as a containerd runtime (shim v2). The shim is a thin client of the
//! node's `thaw serve`: Create reads the container's OCI spec, packs the
//! image's function code and deploys it to the daemon if the daemon does not
//! have it yet (the daemon snapshots it); Start runs the container's process,
//! the *front*, which restores or invokes the function through the daemon's
//! API: once (`invoke EVENT`: the answer on stdout, the exit status says
//! whether it succeeded) or as an HTTP server on `$PORT` in the container's
//! network namespace (`serve`, the image's default), forwarding every request
//! to the daemon. The container lives as long as the front; its stdout and
//! stderr go to the paths containerd gives, with the function's own output.
//! See docs/KUBERNETES.md. Its end-to-end tests (under containerd, the CRI
//! and a kubelet, against a daemon) and their harness are the crate
//! `thaw-kube-harness` (crates/kube-harness).

pub mod daemon;
pub mod front;
pub mod function_images;
pub mod layers;
pub mod native;
pub mod service;
pub mod spec;
pub mod templates;

/// containerd's name for this runtime (the binary is `containerd-shim-thaw-v1`).
pub const RUNTIME_ID: &str = "io.containerd.thaw.v1";
