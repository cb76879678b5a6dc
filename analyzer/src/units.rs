//! Figures as people read them: bytes in binary units and times in seconds.
//! Every report value and renderer goes through these, so one figure reads
//! the same in every output.

/// Bytes in binary units: `512 B`, `1.5 KiB`, `25.7 GiB`.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Signed bytes: `-2.0 KiB`.
pub fn sbytes(b: i64) -> String {
    if b < 0 {
        format!("-{}", bytes(b.unsigned_abs()))
    } else {
        bytes(b as u64)
    }
}

/// Nanoseconds since the log's start as seconds, rounded to the
/// millisecond (the precision of every report).
pub fn secs(ns: u64) -> f64 {
    (ns as f64 / 1e9 * 1000.0).round() / 1000.0
}

/// Seconds as reports write them: `1.250 s`.
pub fn seconds(s: f64) -> String {
    format!("{s:.3} s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(25_700 << 20), "25.1 GiB");
        assert_eq!(sbytes(-2048), "-2.0 KiB");
    }

    #[test]
    fn seconds_to_the_millisecond() {
        assert_eq!(secs(1_234_567_890), 1.235);
        assert_eq!(seconds(secs(250_000_000)), "0.250 s");
        assert_eq!(seconds(secs(0)), "0.000 s");
    }
}
