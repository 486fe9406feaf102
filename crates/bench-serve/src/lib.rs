//! thaw-bench-serve: the daemon measured through its API, each against a
//! baseline in the same run (docs/BENCHMARKS.md):
//!
//! * [`serve`]: `thaw bench serve`, the daemon against the worker it wraps;
//! * [`capacity`]: `thaw bench density` and `thaw bench burst`, the idle
//!   instances a node holds and bursts of cold requests against prewarms;
//! * [`xdt`]: `thaw bench xdt`, passing data between functions by reference
//!   against the object-store baseline, on one worker and across a [`pair`];
//! * [`egress`]: `thaw bench egress`, a function's network egress;
//! * [`estimates`]: `thaw bench estimates`, placement's cold-start
//!   estimates against the restores the daemon then serves;
//! * [`lambda`]: `thaw bench lambda`, Lambda's API through boto3 against
//!   thaw's own, cold and warm, and [`lambda_provided`], Go and Rust
//!   custom runtimes restored against their fresh starts, and
//!   [`lambda_peers`], AWS's Runtime Interface Emulator beside thaw;
//! * [`pair`]: two daemons in network namespaces of their own (also what
//!   the cross-worker tests run on).
pub mod capacity;
pub mod egress;
mod error;
pub mod estimates;
pub mod lambda;
pub mod lambda_peers;
pub mod lambda_provided;
pub mod pair;
pub mod serve;
pub mod xdt;

pub use error::{BenchServeError, Result};

/// `method path` with `body` through `c`; any status but 2xx is an error
/// naming the request and the daemon's answer.
pub(crate) fn request_ok(
    c: &mut thaw_client::Client,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Result<thaw_client::Response> {
    let r = c.request(method, path, body)?;
    if !(200..300).contains(&r.status) {
        thaw_error::fail!(
            BenchServeError::Failed,
            "{method} {path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok(r)
}
