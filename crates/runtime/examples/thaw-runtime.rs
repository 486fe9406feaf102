//! `thaw runtime` without the full `thaw` binary: `cargo run -p thaw-runtime --example
//! thaw-runtime -- build`.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = thaw_runtime::cli_main(&args) {
        eprintln!("thaw runtime: error: {e:#}");
        std::process::exit(1);
    }
}
