//! Run-time settings: compiled-in defaults from the [`Alloc`](crate::Alloc)
//! builder, overridden by environment variables read once, at the first
//! allocation (by `start.rs`), without allocating; and [`HOT`], the settings
//! in force as the hot path reads them.
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `HEAPTAG` | `off` (or `0`, `false`) makes the wrapper a pass-through | on |
//! | `HEAPTAG_THRESHOLD` | size from which blocks are tracked exactly (`0`: all) | 64 KiB |
//! | `HEAPTAG_SAMPLE_RATE` | mean bytes between samples of small blocks (`0`: none) | 512 KiB |
//! | `HEAPTAG_SEED` | salt of the sampling hash (reproducible runs) | random |
//!
//! Sizes accept a plain number of bytes or a `K`/`KiB`, `M`/`MiB`, `G`/`GiB`,
//! `T`/`TiB` suffix (binary units, any case; `KB`, `MB`, `GB` are refused
//! rather than guessed): the rule of [`heaptag_format::parse_size`], shared
//! with `heaptag check` policies. A value that does not parse is ignored with
//! a one-line message on stderr and counted in
//! [`Health::config_errors`](crate::Health).

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::health;

/// Settings an [`Alloc`](crate::Alloc) carries as compiled-in defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Whether tracking is on (the `HEAPTAG` variable can still switch it off).
    pub enabled: bool,
    /// Blocks of at least this many bytes are tracked exactly by address.
    pub threshold: usize,
    /// Mean number of bytes between two sampled small blocks; 0 disables sampling.
    pub sample_rate: u64,
    /// Salt of the sampling hash; `None` picks one per run.
    pub seed: Option<u64>,
}

impl Settings {
    /// The defaults DESIGN.md states: on, 64 KiB threshold, 512 KiB sample rate.
    pub const DEFAULT: Settings = Settings {
        enabled: true,
        threshold: 64 * 1024,
        sample_rate: 512 * 1024,
        seed: None,
    };
}

impl Default for Settings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Not yet initialised: the first allocation will read the settings.
pub(crate) const UNINIT: u8 = 0;
/// One thread is reading the settings; others pass through (counted).
pub(crate) const INITIALIZING: u8 = 1;
/// Tracking is on.
pub(crate) const ON: u8 = 2;
/// Tracking is off for the life of the process: a load and a branch per call.
pub(crate) const OFF: u8 = 3;

/// Everything the hot path reads, in one cache line behind one address (a
/// static in another crate costs a GOT load each under PIC).
///
/// `mode` is loaded with Acquire and stored with Release at the end of
/// start-up (`start::tracking`): a thread that sees `ON` also sees the other
/// fields, which are written once before it and read Relaxed.
#[repr(C, align(64))]
pub(crate) struct Hot {
    pub(crate) mode: AtomicU8,
    /// Blocks of at least this many bytes are tracked.
    pub(crate) threshold: AtomicUsize,
    /// Salt of the sampling hash.
    pub(crate) salt: AtomicU64,
    /// `u64::MAX / rate` (0 when sampling is off): the fast-reject scale,
    /// precomputed so the hot path never divides.
    pub(crate) scale: AtomicU64,
    /// Mean bytes between samples (0: off).
    pub(crate) rate: AtomicU64,
}

pub(crate) static HOT: Hot = Hot {
    mode: AtomicU8::new(UNINIT),
    threshold: AtomicUsize::new(Settings::DEFAULT.threshold),
    salt: AtomicU64::new(0),
    scale: AtomicU64::new(u64::MAX / Settings::DEFAULT.sample_rate),
    rate: AtomicU64::new(Settings::DEFAULT.sample_rate),
};
impl Hot {
    /// Stores the settings the hot path reads (all but the mode), with the
    /// sampling `salt` already chosen. Called once by start-up, before the
    /// mode is published.
    pub(crate) fn store_settings(&self, s: &Settings, salt: u64) {
        // Relaxed: published by the Release store of `mode` (see `Hot`).
        self.threshold.store(s.threshold, Ordering::Relaxed);
        self.rate.store(s.sample_rate, Ordering::Relaxed);
        self.scale
            .store(u64::MAX.checked_div(s.sample_rate).unwrap_or(0), Ordering::Relaxed);
        self.salt.store(salt, Ordering::Relaxed);
    }
}

/// The settings in force (after the environment was read).
pub fn settings() -> Settings {
    Settings {
        // Acquire: the settings are published with the mode.
        enabled: HOT.mode.load(Ordering::Acquire) == ON,
        threshold: HOT.threshold.load(Ordering::Relaxed),
        sample_rate: HOT.rate.load(Ordering::Relaxed),
        seed: Some(HOT.salt.load(Ordering::Relaxed)),
    }
}

/// `defaults` overridden by the `HEAPTAG*` environment variables; values
/// that do not parse are ignored, reported on stderr and counted.
pub(crate) fn from_env(defaults: &Settings) -> Settings {
    let mut s = *defaults;
    if let Some(v) = getenv(c"HEAPTAG") {
        match v {
            b"off" | b"0" | b"false" | b"no" => s.enabled = false,
            b"on" | b"1" | b"true" | b"yes" | b"" => s.enabled = true,
            _ => complain(b"HEAPTAG", v, b"expected on or off"),
        }
    }
    if let Some(v) = getenv(c"HEAPTAG_THRESHOLD") {
        match parse_size(v) {
            Some(n) => s.threshold = usize::try_from(n).unwrap_or(usize::MAX),
            None => complain(b"HEAPTAG_THRESHOLD", v, b"expected a size such as 65536 or 64K"),
        }
    }
    if let Some(v) = getenv(c"HEAPTAG_SAMPLE_RATE") {
        match parse_size(v) {
            Some(n) => s.sample_rate = n,
            None => complain(b"HEAPTAG_SAMPLE_RATE", v, b"expected a size such as 512K"),
        }
    }
    if let Some(v) = getenv(c"HEAPTAG_SEED") {
        match parse_size(v) {
            Some(n) => s.seed = Some(n),
            None => complain(b"HEAPTAG_SEED", v, b"expected an integer"),
        }
    }
    s
}

/// Reads an environment variable without allocating.
pub(crate) fn getenv(name: &std::ffi::CStr) -> Option<&'static [u8]> {
    // SAFETY: `name` is NUL-terminated. getenv returns a pointer into the
    // environment block, which stays valid unless the program calls setenv
    // concurrently (a documented hazard of setenv itself); we copy nothing and
    // read it only here, during initialisation.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: a non-null getenv result is a NUL-terminated C string.
    Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
}

/// Parses `123`, `64K`, `64KiB`, `1M`, `2GiB` (binary units, any case)
/// without allocating: heaptag-format's one size parser.
pub(crate) use heaptag_format::parse_size;

/// Writes `heaptag: ignoring NAME=VALUE: WHY` to stderr without allocating.
fn complain(name: &[u8], value: &[u8], why: &[u8]) {
    health::CONFIG_ERRORS.fetch_add(1, Ordering::Relaxed);
    let mut buf = [0u8; 256];
    let mut len = 0;
    for part in [b"heaptag: ignoring ".as_slice(), name, b"=", value, b": ", why, b"\n"] {
        let n = part.len().min(buf.len() - len);
        buf[len..len + n].copy_from_slice(&part[..n]);
        len += n;
    }
    // SAFETY: `buf[..len]` is initialised memory we own; fd 2 may be closed,
    // in which case write fails harmlessly and we ignore it.
    let _ = unsafe { libc::write(2, buf.as_ptr().cast(), len) };
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size(b"0"), Some(0));
        assert_eq!(parse_size(b"65536"), Some(65536));
        assert_eq!(parse_size(b"64K"), Some(65536));
        assert_eq!(parse_size(b" 64 KiB "), Some(65536));
        assert_eq!(parse_size(b"1M"), Some(1 << 20));
        assert_eq!(parse_size(b"2GiB"), Some(2 << 30));
    }

    #[test]
    fn bad_sizes_are_rejected() {
        assert_eq!(parse_size(b""), None);
        assert_eq!(parse_size(b"K"), None);
        assert_eq!(parse_size(b"12X"), None);
        assert_eq!(parse_size(b"-1"), None);
        assert_eq!(parse_size(b"99999999999999999999"), None);
        assert_eq!(parse_size(b"99999999999G"), None);
    }
}
