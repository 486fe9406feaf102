//! `thaw image build`: a function's code as an OCI image archive.
use anyhow::{Context, Result};
use clap::Subcommand;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum ImageCmd {
    /// Pack a function's code directory into an OCI image archive
    /// (`ctr images import` accepts it): thaw's runtime root as its base
    /// layer (the function runs on the image's root filesystem) and the code
    Build {
        /// The function's code (the handler's module at its top)
        dir: PathBuf,
        /// module.function
        #[arg(long)]
        handler: String,
        /// module.function run once before the snapshot
        #[arg(long)]
        init: Option<String>,
        /// The image's reference (default thaw.local/DIRNAME:latest)
        #[arg(long)]
        tag: Option<String>,
        /// The archive to write (default DIRNAME.oci.tar)
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Only the code: the node's daemon supplies the root filesystem
        /// (its runtime root)
        #[arg(long)]
        code_only: bool,
    },
}

pub fn run(home: &Path, cmd: ImageCmd) -> Result<()> {
    let ImageCmd::Build {
        dir,
        handler,
        init,
        tag,
        output,
        code_only,
    } = cmd;
    build(
        home,
        &dir,
        &handler,
        init.as_deref(),
        tag,
        output,
        code_only,
    )
}

fn build(
    home: &Path,
    dir: &Path,
    handler: &str,
    init: Option<&str>,
    tag: Option<String>,
    output: Option<PathBuf>,
    code_only: bool,
) -> Result<()> {
    let base = dir
        .canonicalize()
        .with_context(|| format!("{}", dir.display()))?
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_else(|| "function".into());
    let reference = tag.unwrap_or_else(|| format!("thaw.local/{base}:latest"));
    let spec = thaw_server::image::ImageSpec {
        code: dir,
        handler,
        init,
        reference: &reference,
    };
    let out = output.unwrap_or_else(|| PathBuf::from(format!("{base}.oci.tar")));
    let (manifest_digest, base_layer) = if code_only {
        let built = thaw_server::image::build(&spec)?;
        std::fs::write(&out, &built.archive)
            .with_context(|| format!("writing {}", out.display()))?;
        (built.manifest_digest, None)
    } else {
        let root = thaw_runtime::ensure_root(home, &mut |m| eprintln!("runtime: {m}"))?;
        let layer =
            thaw_server::image::runtime_layer(&root.path, &root.hash, &home.join("images"))?;
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?,
        );
        let digest = thaw_server::image::build_on(&spec, std::slice::from_ref(&layer), &mut f)?;
        f.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .with_context(|| format!("writing {}", out.display()))?;
        (digest, Some(layer.digest))
    };
    println!(
        "{}",
        serde_json::json!({"image": reference, "manifest_digest": manifest_digest, "base_layer": base_layer, "archive": out})
    );
    Ok(())
}
