//! Helpers of the tests that drive a real cluster (`thaw_kube_harness::cluster`).
use serde_json::Value;

pub fn must<T>(r: thaw_kube_harness::containerd::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{e:#}"))
}

pub fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

pub fn name(pod: &Value) -> String {
    pod["metadata"]["name"].as_str().unwrap().to_string()
}

/// Each pod's phase and container states, for a failure's message.
pub fn summary(pods: &[Value]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} {} {}",
                name(p),
                p["status"]["phase"],
                p["status"]["containerStatuses"]
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A wait's check: done, or what was seen instead.
pub fn seen(done: bool, instead: String) -> Result<Option<()>, String> {
    if done {
        Ok(Some(()))
    } else {
        Err(instead)
    }
}
