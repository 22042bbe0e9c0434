//! Byte sizes on the command line and in output.

/// Parse "64M", "1GiB", "4096" (binary units: 1M = 1 MiB, as `dd` and `truncate` read them).
pub fn parse(text: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(text)
        .map_err(|e| format!("{text:?} is not a size ({e}); write e.g. 64M, 1G or 4096"))
}

/// "64 MiB (67108864 bytes)".
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value.fract() == 0.0 {
        format!("{value} {} ({bytes} bytes)", UNITS[unit])
    } else {
        format!("{value:.2} {} ({bytes} bytes)", UNITS[unit])
    }
}
