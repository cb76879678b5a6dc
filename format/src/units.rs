//! The units people write in settings and policies: sizes (`64K`, `30 GiB`)
//! and durations (`100ms`, `2s`). One parser each, shared by the allocator's
//! environment variables, `heaptag run --interval` and `heaptag check`
//! policies, so a value means the same everywhere.
//!
//! Neither parser allocates: the allocator calls them while it reads its
//! settings at the first allocation.

use std::time::Duration;

/// Parses a size: a number of bytes, or a number with a binary unit.
///
/// The one rule (documented in `docs/CI.md` and the allocator's settings):
/// units are binary and case-insensitive: `B`, `K`/`KiB`, `M`/`MiB`,
/// `G`/`GiB`, `T`/`TiB`, with or without a space (`64K`, `30 GiB`). A
/// fraction is allowed and rounded to the byte (`1.5 GiB`). Decimal-looking
/// units (`KB`, `MB`, `GB`) are refused rather than guessed, as are signs,
/// empty input and values beyond `u64`.
///
/// Takes `&str` or bytes (the allocator reads the environment as bytes).
pub fn parse_size(v: impl AsRef<[u8]>) -> Option<u64> {
    let v = trim(v.as_ref());
    let int_len = v.iter().take_while(|b| b.is_ascii_digit()).count();
    let (int, rest) = v.split_at(int_len);
    let (frac, rest) = match rest.split_first() {
        Some((b'.', after)) => {
            let n = after.iter().take_while(|b| b.is_ascii_digit()).count();
            after.split_at(n)
        }
        _ => (&[][..], rest),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let unit = trim(rest);
    let shift = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit))?.1;
    let mut n: u64 = 0;
    for &b in int {
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    let whole = n.checked_mul(1u64 << shift)?;
    // The fraction, in units of the suffix, rounded to the byte.
    let mut f = 0.0f64;
    let mut scale = 0.1f64;
    for &b in frac.iter().take(20) {
        f += f64::from(b - b'0') * scale;
        scale /= 10.0;
    }
    whole.checked_add((f * (1u64 << shift) as f64).round() as u64)
}

/// Unit suffixes (compared ignoring ASCII case) and their power of two.
const UNITS: [(&[u8], u32); 10] = [
    (b"", 0),
    (b"b", 0),
    (b"k", 10),
    (b"kib", 10),
    (b"m", 20),
    (b"mib", 20),
    (b"g", 30),
    (b"gib", 30),
    (b"t", 40),
    (b"tib", 40),
];

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end]
}

/// Parses a sampling interval as written in `HEAPTAG_INTERVAL` and
/// `heaptag run --interval`: `100ms`, `2s`, `500us`, `1m` (or `1min`), `1h`;
/// a bare number is milliseconds. Zero and anything else is `None`.
pub fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..split].parse().ok()?;
    let d = match v[split..].trim() {
        "" | "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "us" => Duration::from_micros(n),
        "m" | "min" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        _ => return None,
    };
    (!d.is_zero()).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("100ms"), Some(Duration::from_millis(100)));
        assert_eq!(parse_duration("250"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), None);
        assert_eq!(parse_duration("fast"), None);
        assert_eq!(parse_duration("10 parsecs"), None);
    }

    #[test]
    fn sizes_in_binary_units() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size(b"65536"), Some(65536));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size(b" 64 KiB "), Some(65536));
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("30 GiB"), Some(30 << 30));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("2 TiB"), Some(2 << 40));
        assert_eq!(parse_size("7 B"), Some(7));
    }

    #[test]
    fn decimal_units_and_junk_are_refused() {
        for bad in [
            "30 GB",
            "64KB",
            "1 MB",
            "",
            "K",
            "12X",
            "-1",
            "-1 GiB",
            "lots",
            ".",
            "1.5.5G",
            "99999999999999999999",
            "99999999999G",
        ] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }
}
