//! Clocks that neither allocate nor take locks (vDSO `clock_gettime`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Monotonic nanoseconds at initialisation; times in records are relative to it.
// Relaxed: written once during start-up (`start::tracking`), before the mode
// is published (Release), which orders it for every thread that tracks.
static START_MONO: AtomicU64 = AtomicU64::new(0);

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used here are
    // always supported on Linux. On failure `ts` stays zero.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Records the process's time origin.
pub(crate) fn init() {
    START_MONO.store(read(libc::CLOCK_MONOTONIC), Ordering::Relaxed);
}

/// Nanoseconds since heaptag initialised (monotonic).
#[inline]
pub fn now_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC).saturating_sub(START_MONO.load(Ordering::Relaxed))
}

/// Nanoseconds since heaptag initialised, from the kernel's coarse
/// monotonic clock (`CLOCK_MONOTONIC_COARSE`: the time of the last timer
/// tick, a few ms old at most; a vDSO read without the TSC, about a sixth of
/// [`now_ns`]'s cost). Never later than [`now_ns`] read at the same moment.
/// For the birth time of a block recorded while no log runs (only
/// `tracked_blocks()` shows it: a log started later carries only blocks of
/// its own events), not for events.
#[inline]
pub(crate) fn coarse_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC_COARSE).saturating_sub(START_MONO.load(Ordering::Relaxed))
}

/// The monotonic clock's value at initialisation, in ns.
pub(crate) fn start_mono_ns() -> u64 {
    START_MONO.load(Ordering::Relaxed)
}

/// Wall-clock nanoseconds since the Unix epoch.
pub(crate) fn wall_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}
