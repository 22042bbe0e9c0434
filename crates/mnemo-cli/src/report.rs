//! Messages to stderr that cannot fail: `eprintln!` panics when stderr is a closed pipe (a
//! log collector that went away), which would turn an orderly exit into a panic.

use std::io::Write as _;

/// Print `message` and a newline to stderr; a failed write is ignored.
pub fn error(message: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(message);
    let _ = err.write_all(b"\n");
}

/// `eprintln!` that never panics.
#[macro_export]
macro_rules! report {
    ($($arg:tt)*) => {
        $crate::report::error(format_args!($($arg)*))
    };
}
