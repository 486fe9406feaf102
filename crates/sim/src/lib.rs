//! thaw-sim: trace-driven fleet simulator over thaw-policy (see docs/SIMULATOR.md).
//!
//! Inputs: the Azure Functions 2019 trace ([`azure2019`]), the 2021 per-invocation
//! trace ([`azure2021`]) and a synthetic generator ([`synthetic`]), all streamed.
//! The core ([`run`]) is single-threaded over virtual time and deterministic for a
//! seed. Outputs: JSON summary, CSV table, SVG CDF plot ([`output`]).

pub mod azure2019;
pub mod azure2021;
pub mod calib;
pub mod cli;
pub mod error;
pub mod hist;
pub mod output;
pub mod placement;
pub mod rng;
pub mod run;
pub mod source;
pub mod synthetic;

pub use error::SimError;

/// Entry point for `thaw sim ARGS...` (ARGS exclude "sim").
pub fn cli_main(args: &[String]) -> Result<(), SimError> {
    cli::main(args)
}
