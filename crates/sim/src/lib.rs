//! thaw-sim: trace-driven simulator (placeholder entry point, filled by the sim work).

/// Entry point for `thaw sim ARGS...`.
pub fn cli_main(_args: &[String]) -> anyhow::Result<()> {
    anyhow::bail!("thaw sim is not built yet")
}
