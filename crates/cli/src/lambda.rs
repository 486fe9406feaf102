//! `thaw lambda ...`: what Lambda's clients need from this node.
use anyhow::{Context, Result};
use clap::Subcommand;
use std::path::Path;

#[derive(Subcommand)]
pub enum LambdaCmd {
    /// Print the access key Lambda clients sign with (made on first use),
    /// as environment assignments: `export $(thaw lambda credentials)`
    Credentials,
}

pub fn run(home: &Path, cmd: LambdaCmd) -> Result<()> {
    match cmd {
        LambdaCmd::Credentials => credentials(home),
    }
}

/// Prints the daemon's access key as environment assignments (made on first use).
fn credentials(home: &Path) -> Result<()> {
    let state = thaw_server::Config {
        home: home.to_path_buf(),
        ..Default::default()
    }
    .state_dir();
    thaw_server::registry::mkdir_private(&state)?;
    let c = thaw_server::lambda::sigv4::load_or_create(&state).with_context(|| {
        format!(
            "reading {}",
            thaw_server::lambda::sigv4::key_file(&state).display()
        )
    })?;
    thaw_output::outln!("AWS_ACCESS_KEY_ID={}", c.access_key_id);
    thaw_output::outln!("AWS_SECRET_ACCESS_KEY={}", c.secret_access_key);
    thaw_output::outln!("AWS_DEFAULT_REGION={}", c.region);
    Ok(())
}
