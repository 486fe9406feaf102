//! `thaw deploy`: start a suite function, run its init and snapshot it onto a tier.
use anyhow::Result;
use std::path::Path;

#[derive(clap::Args)]
pub struct Args {
    function: String,
    #[arg(long, default_value = "tmpfs")]
    tier: String,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    let w = crate::worker(home)?;
    let (snap, rep) = w.deploy(&a.function, &w.tier(&a.tier)?)?;
    thaw_output::outln!("{}", snap.dir.display());
    thaw_output::outln!("{}", serde_json::to_string_pretty(&rep)?);
    Ok(())
}
