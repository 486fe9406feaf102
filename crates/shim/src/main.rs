//! `containerd-shim-thaw-v1`: containerd's runtime `io.containerd.thaw.v1`.
//! The same binary is the container's process (`front`), which the shim
//! starts for each container.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(thaw_shim::front::SUBCOMMAND) {
        std::process::exit(thaw_shim::front::main(&args[2..]));
    }
    containerd_shim::run::<thaw_shim::service::Shim>(thaw_shim::RUNTIME_ID, None);
}
