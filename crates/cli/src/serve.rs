//! `thaw serve`: the daemon, its configuration file overridden by flags.
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct ServeArgs {
    /// TOML configuration file (flags override it)
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also listen on TCP, ADDR:PORT (default: $PORT on 127.0.0.1 if set)
    #[arg(long)]
    listen: Option<String>,
    /// Bearer token file for the TCP listener (required off loopback)
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Unix socket path (default HOME/serve/thaw.sock)
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Where the runtime root is built/cached (default: HOME)
    #[arg(long)]
    runtime_home: Option<PathBuf>,
    /// text or json
    #[arg(long)]
    log_format: Option<String>,
    /// RAM for instances, MiB
    #[arg(long)]
    memory_budget_mb: Option<u64>,
    /// What idle instances are charged in that budget: measured (their own
    /// pages, the snapshot's shared pages once per function) or declared
    /// (their memory_mb)
    #[arg(long)]
    memory_accounting: Option<String>,
    /// Keep-alive policy: ttl, lru-mem, tiered-lru, greedy-dual, tiered-greedy-dual
    #[arg(long)]
    policy: Option<String>,
    /// ttl: seconds an idle instance stays warm
    #[arg(long)]
    keep_alive_s: Option<u64>,
    /// The two snapshot tiers, FAST,SLOW (default tmpfs,disk; SLOW may be
    /// remote: restores from it stream)
    #[arg(long)]
    snapshot_tiers: Option<String>,
    /// Share snapshots with other nodes through the remote SLOW tier:
    /// publish what this node takes, restore what another node published
    /// (every node needs the same HOME/remote.key)
    #[arg(long)]
    shared_snapshots: bool,
    /// A directory whose subdirectories (containers' root filesystems) the
    /// containerd shim may have the daemon import (repeatable; default
    /// /run/containerd)
    #[arg(long = "image-roots-from")]
    image_roots_from: Vec<PathBuf>,
}

pub fn serve(home: Option<PathBuf>, a: ServeArgs) -> Result<()> {
    let mut cfg = match &a.config {
        Some(p) => thaw_server::Config::from_file(p)?,
        None => thaw_server::Config::default(),
    };
    if let Some(h) = home {
        cfg.home = h;
    }
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = a.$f { cfg.$f = v.into(); } )* };
    }
    set!(listen, token_file, socket, runtime_home);
    if let Some(v) = a.log_format {
        cfg.log_format = v;
    }
    if let Some(v) = a.memory_budget_mb {
        cfg.memory_budget_mb = v;
    }
    if let Some(v) = a.memory_accounting {
        cfg.memory_accounting = v;
    }
    if let Some(v) = a.policy {
        cfg.policy = v;
    }
    if let Some(v) = a.keep_alive_s {
        cfg.keep_alive_s = v;
    }
    if let Some(v) = a.snapshot_tiers {
        cfg.snapshot_tiers = thaw_server::config::SnapshotTiers::parse(&v)?;
    }
    if a.shared_snapshots {
        cfg.shared_snapshots = true;
    }
    if !a.image_roots_from.is_empty() {
        cfg.image_roots_from = a.image_roots_from;
    }
    Ok(thaw_server::serve_forever(cfg)?)
}
