//! Writing to stdout and stderr without ever panicking (`println!` and
//! `eprintln!` panic when the stream is a closed pipe or a full disk).
//!
//! - [`outln!`]: a result line on stdout. If it cannot be written the
//!   command ends: exit 141 on a closed pipe (as a shell reports SIGPIPE),
//!   otherwise a message on stderr and exit 1.
//! - [`errln!`]: progress, warnings and errors on stderr. A failure to write
//!   them is ignored: losing a progress line must never abort work half-way
//!   (a runtime build, say).
use std::io::Write;

/// Exit status when stdout is a closed pipe (128 + SIGPIPE, as a shell shows it).
pub const EXIT_BROKEN_PIPE: i32 = 141;

#[doc(hidden)]
pub fn write_out(args: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|_| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(EXIT_BROKEN_PIPE);
        }
        write_err(format_args!("thaw: error: writing to stdout: {e}\n"));
        std::process::exit(1);
    }
}

#[doc(hidden)]
pub fn write_err(args: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// `println!` that ends the command cleanly when stdout is closed or full.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => { $crate::__line!($crate::write_out, $($arg)*) };
}

/// `eprintln!` that ignores a closed or full stderr.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::__line!($crate::write_err, $($arg)*) };
}

/// `print!` (no newline) with the same behaviour as [`outln!`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::write_out(format_args!($($arg)*)) };
}

/// `eprint!` (no newline) with the same behaviour as [`errln!`].
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::write_err(format_args!($($arg)*)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __line {
    ($write:path $(,)?) => { $write(format_args!("\n")) };
    ($write:path, $($arg:tt)*) => { $write(format_args!("{}\n", format_args!($($arg)*))) };
}
