//! Sizes (`4k`, `1GiB`, `4096`) and durations (`10s`, `500ms`, `1m`) as people write them, one
//! parser for every front end (the CLI's flags, the shim's `UPCACHE_MEMORY`).
//!
//! Size units are binary whatever their spelling (`k`, `K`, `kB` and `KiB` all mean 1024),
//! as in fio's default `kb_base=1024`: a block size of `4k` must be one page, not 4000 bytes.

use std::time::Duration;

/// Splits `s` into a decimal number and a unit suffix, e.g. `"1.5GiB"` → `("1.5", "gib")`.
fn split_number(s: &str) -> Result<(&str, String), String> {
    let s = s.trim();
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(format!("{s:?} does not start with a number"));
    }
    Ok((num, unit.trim().to_ascii_lowercase()))
}

/// `num * mult / div`, exactly, from a decimal string; fails unless the result is a whole number.
fn scale(num: &str, mult: u128, div: u128, what: &str) -> Result<u64, String> {
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if frac.len() > 18 {
        return Err(format!("too many decimals in {num:?}"));
    }
    let parse = |d: &str| if d.is_empty() { Ok(0) } else { d.parse::<u128>() };
    let int = parse(int).map_err(|_| format!("{num:?} is too large"))?;
    let frac_val = parse(frac).map_err(|_| format!("bad number {num:?}"))?;
    let pow = 10u128.pow(frac.len() as u32);
    // value = (int + frac_val / pow) * mult / div, computed without rounding.
    let numer = int
        .checked_mul(pow)
        .and_then(|v| v.checked_add(frac_val))
        .and_then(|v| v.checked_mul(mult))
        .ok_or_else(|| format!("{num:?} is too large"))?;
    let denom = pow * div;
    if numer % denom != 0 {
        return Err(format!("{num:?} is not a whole number of {what}"));
    }
    u64::try_from(numer / denom).map_err(|_| format!("{num:?} is too large"))
}

/// Parses `on` or `off` (the switches of `upcache bench`, `upcache serve` and the shim).
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim() {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("expected on or off, got {other:?}")),
    }
}

/// `on` or `off`, as [`parse_on_off`] reads them.
pub fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// Parses a byte count: a number with an optional binary unit (b, k, kb, kib, m, g, t, ...;
/// any case). `1.5k` is allowed when it comes to whole bytes.
///
/// ```
/// assert_eq!(upcache::parse_size("4k"), Ok(4096));
/// assert_eq!(upcache::parse_size("1.5GiB"), Ok(3 << 29));
/// assert!(upcache::parse_size("4x").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, unit) = split_number(s)?;
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("unknown size unit {unit:?} in {s:?} (use k, m, g, t, KiB, MiB, GiB, ...)")),
    };
    scale(num, 1u128 << shift, 1, "bytes")
}

/// Parses dirty ratios `BG,FG`, two fractions of the cache (checked against each other where
/// a cache is made).
///
/// ```
/// assert_eq!(upcache::parse_ratios("0.25,0.5"), Ok((0.25, 0.5)));
/// assert!(upcache::parse_ratios("0.25").is_err());
/// ```
pub fn parse_ratios(s: &str) -> Result<(f64, f64), String> {
    let (bg, fg) = s.split_once(',').ok_or_else(|| format!("expected BG,FG, e.g. 0.5,0.75; got {s:?}"))?;
    let num = |v: &str| v.trim().parse::<f64>().map_err(|e| format!("bad ratio {v:?}: {e}"));
    Ok((num(bg)?, num(fg)?))
}

/// Parses a duration: a number with a unit (ns, us, ms, s, m/min, h); a plain number is seconds.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(upcache::parse_duration("500ms"), Ok(Duration::from_millis(500)));
/// assert_eq!(upcache::parse_duration("30"), Ok(Duration::from_secs(30)));
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = split_number(s)?;
    let nanos_per: u128 = match unit.as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(format!("unknown time unit {unit:?} in {s:?} (use ms, s, m, h)")),
    };
    scale(num, nanos_per, 1, "nanoseconds").map(Duration::from_nanos)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for (s, want) in [
            ("4096", 4096),
            ("0", 0),
            ("4k", 4096),
            ("4K", 4096),
            ("4KiB", 4096),
            ("4kb", 4096),
            ("1m", 1 << 20),
            ("1MiB", 1 << 20),
            ("1g", 1 << 30),
            ("1GiB", 1 << 30),
            ("2t", 2 << 40),
            ("512b", 512),
            (" 8k ", 8192),
            ("1.5k", 1536),
            ("0.5m", 512 << 10),
        ] {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn bad_sizes() {
        for s in ["", "k", "4x", "-4k", "4 kk", "1.1", "1.2.3k", "99999999999999999999999t", "0x10"] {
            assert!(parse_size(s).is_err(), "{s} should fail");
        }
    }

    #[test]
    fn durations() {
        for (s, want) in [
            ("10s", Duration::from_secs(10)),
            ("10", Duration::from_secs(10)),
            ("500ms", Duration::from_millis(500)),
            ("1m", Duration::from_secs(60)),
            ("2min", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
        ] {
            assert_eq!(parse_duration(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn bad_durations() {
        for s in ["", "s", "10x", "-1s", "1.5ns", "1e3s"] {
            assert!(parse_duration(s).is_err(), "{s} should fail");
        }
    }
}
