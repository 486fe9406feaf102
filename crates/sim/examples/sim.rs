//! `thaw sim` without the rest of the `thaw` binary (same arguments), for
//! benchmarking the simulator alone: `cargo run -p thaw-sim --release --example sim -- ARGS`.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = thaw_sim::cli_main(&args) {
        eprintln!("thaw sim: error: {e:#}");
        std::process::exit(1);
    }
}
