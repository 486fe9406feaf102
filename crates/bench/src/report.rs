//! A benchmark's report as the commands give it: the markdown tables
//! printed, and written with the whole report as JSON where asked.
use std::path::Path;
use thaw_error::{Context, ResultExt};

/// Prints `md`; writes `report` as JSON to `json` and `md` to `markdown`
/// if given.
pub fn emit(
    md: &str,
    report: &impl serde::Serialize,
    json: Option<&Path>,
    markdown: Option<&Path>,
) -> Result<(), Context> {
    println!("{md}");
    if let Some(p) = json {
        let bytes = serde_json::to_vec_pretty(report).context("encoding the report")?;
        std::fs::write(p, bytes).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = markdown {
        std::fs::write(p, md).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
