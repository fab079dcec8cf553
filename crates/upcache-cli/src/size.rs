//! SIZE and DURATION arguments: parsed by the library's one parser ([`upcache::parse_size`],
//! [`upcache::parse_duration`]), printed compactly here.

pub use upcache::{parse_duration, parse_size};

/// Formats a byte count compactly with a binary unit, e.g. 4096 → `4KiB`, 1536 → `1.5KiB`.
pub fn fmt_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut i = 0;
    while i + 1 < UNITS.len() && n >= 1u64 << (10 * (i + 1)) {
        i += 1;
    }
    let v = n as f64 / (1u64 << (10 * i)) as f64;
    if v.fract() == 0.0 {
        format!("{v}{}", UNITS[i])
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_size(4096), "4KiB");
        assert_eq!(fmt_size(1536), "1.5KiB");
        assert_eq!(fmt_size(256 << 20), "256MiB");
        assert_eq!(fmt_size(100), "100B");
    }
}
