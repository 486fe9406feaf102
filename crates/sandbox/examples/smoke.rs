use serde_json::json;
use std::time::Duration;
use thaw_sandbox::*;
fn main() -> anyhow::Result<()> {
    let root = std::path::Path::new(&std::env::args().nth(1).unwrap_or("/".into())).to_owned();
    let cfg = SandboxConfig::default();
    let argv = vec![
        "/usr/bin/python3.11".to_string(),
        "-S".into(),
        "/opt/thaw-dev/agent.py".into(),
    ];
    let mut sb = Sandbox::start(&cfg, &root, &argv, &[])?;
    let t = Duration::from_secs(10);
    println!("load {}", sb.call(&json!({"op":"load","mb":8}), t)?);
    println!("inv {}", sb.call(&json!({"op":"invoke"}), t)?);
    let dir = std::path::PathBuf::from("/dev/shm/thaw-smoke/snap");
    let _ = std::fs::remove_dir_all(&dir);
    let (snap, rep) = checkpoint(&mut sb, &dir, "dev", "devroot")?;
    println!("ckpt {rep:?}");
    println!("inv after ckpt {}", sb.call(&json!({"op":"invoke"}), t)?);
    for s in ["eager", "mmap", "uffd"] {
        let strat = thaw_memory::strategy_by_name(s)?;
        let (mut r, rep) = restore(&snap, &root, "devroot", strat.as_ref(), &cfg)?;
        let t0 = std::time::Instant::now();
        let out = r.call(&json!({"op":"invoke","write":"clone"}), t)?;
        println!(
            "{s}: {rep:?}\n   first {:?} {out} faults={:?}",
            t0.elapsed(),
            r.pager().map(|p| p.stats.faults())
        );
    }
    Ok(())
}
