//! The one `thaw` binary.
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "thaw", about = "serverless snapshot worker, bench and simulator")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Trace-driven fleet simulator (see docs/SIMULATOR.md).
    #[command(disable_help_flag = true)]
    Sim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Sim { args } => thaw_sim::cli_main(&args),
    };
    if let Err(e) = res {
        eprintln!("thaw: error: {e:#}");
        std::process::exit(1);
    }
}
