//! Clocks that neither allocate nor take locks.
//!
//! [`now_ns`], every heaptag time in a log (events, the writer's samples,
//! marks, the header's start), is `CLOCK_MONOTONIC` on one time line. It
//! comes from one of two sources:
//!
//! - `clock_gettime(CLOCK_MONOTONIC)` through the vDSO (about 30 ns here, `examples/clock_cost.rs`):
//!   always on other targets or clock sources, and before calibration;
//! - on x86_64, when CPUID reports an invariant TSC and the kernel's clock
//!   source is `tsc` (the kernel's `CLOCK_MONOTONIC` is then itself a scaled
//!   TSC), the TSC (`rdtsc`, about 14 ns) converted by
//!   `ns = base_ns + ((tsc - base_tsc) * mult) >> 32`.
//!
//! The conversion is calibrated and re-anchored by the log writer thread at
//! its cycles ([`anchor`], at most once per 5 ms): the rate comes from a
//! long baseline (16-32 s) of (TSC, `CLOCK_MONOTONIC`) pairs, so it follows NTP's slew of
//! `CLOCK_MONOTONIC`; each re-anchoring starts from the old conversion's
//! value at the anchor (continuous) and slews the rate, clamped to ±1/1024
//! of the base rate, so the remaining offset is gone by the next anchor.
//! An offset beyond [`STEP_NS`] (VM migration, suspend, a TSC reset) is
//! stepped. A conversion older than [`STALE_NS`] (the writer stalled, or no
//! log runs after `finish()`; a forked child has no writer) is not used:
//! the reader falls back to `clock_gettime`. So errors against
//! `CLOCK_MONOTONIC` never accumulate, whatever the run's length.
//!
//! The hot path reads the conversion without locks from two slots and a
//! generation counter (the writer fills the slot not in use, then bumps the
//! generation; a reader that sees the generation change retries, at most
//! [`READ_TRIES`] times, then reads `clock_gettime`). Each thread keeps the
//! last time it read: a thread's times never decrease, across re-anchoring,
//! steps and the fallback (a step back freezes the thread's clock until
//! `CLOCK_MONOTONIC` catches up).
//!
//! Why not a crate: `quanta` (0.12.6, checked in its source) calibrates
//! once, in a busy loop of up to 200 ms inside the first `now()` (lazily,
//! through a `OnceLock`: here that would be inside `malloc`) and never
//! re-anchors to `CLOCK_MONOTONIC`, so NTP's slew accumulates over a
//! daemon's days; it also does not check the kernel's clock source.

use std::cell::Cell;
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

thread_local! {
    // Const-initialised, no destructor: readable at any point of a thread's
    // life. The last time this thread read from `now_ns`.
    static LAST_NS: Cell<u64> = const { Cell::new(0) };
}

/// Nanoseconds since heaptag initialised (monotonic): `CLOCK_MONOTONIC`,
/// read from the TSC when calibrated (module docs). Never less than the
/// calling thread's previous reading.
#[inline]
pub fn now_ns() -> u64 {
    now_ns_held().0
}

/// [`now_ns`], and whether the reading was held back to the thread's
/// previous one (the clock stepped back, or another source read behind it):
/// then the time is not later than the true one, and a span measured to it
/// may be shorter than the true span.
#[inline]
pub(crate) fn now_ns_held() -> (u64, bool) {
    let abs = tsc::now_abs().unwrap_or_else(|| read(libc::CLOCK_MONOTONIC));
    let t = abs.saturating_sub(START_MONO.load(Ordering::Relaxed));
    LAST_NS.with(|last| {
        let held = t < last.get();
        let t = t.max(last.get());
        last.set(t);
        (t, held)
    })
}

/// The calling thread's last [`now_ns`] reading (0 before its first): not
/// later than its next one. A thread-local load, no clock read.
#[inline]
pub(crate) fn last_ns() -> u64 {
    LAST_NS.try_with(Cell::get).unwrap_or(0)
}

/// Nanoseconds since heaptag initialised, from the kernel's coarse
/// monotonic clock (`CLOCK_MONOTONIC_COARSE`: the time of the last timer
/// tick, a few ms old at most; a vDSO read without the TSC, about a sixth of
/// `clock_gettime(CLOCK_MONOTONIC)`'s cost). Not later than [`now_ns`] read
/// at the same moment, up to the TSC conversion's error (tens of ns).
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

/// Re-anchors the TSC conversion to `CLOCK_MONOTONIC` (calibrating it on the
/// first calls). Called by the log writer thread at every cycle; cheap
/// (three vDSO reads, and every second a read of the kernel's clock source);
/// a no-op where the TSC is not used.
pub(crate) fn anchor() {
    // At most one re-anchoring per `MIN_BASELINE_NS`, however often the
    // writer cycles (every 0.16 ms under load): the calibrator checks the
    // rate over the last interval for a TSC jump only over intervals that
    // long, so anchors closer together would never check it.
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = read(libc::CLOCK_MONOTONIC);
    let last = LAST.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < MIN_BASELINE_NS {
        return;
    }
    // Relaxed: only the writer thread anchors; a figure, not a publication.
    LAST.store(now, Ordering::Relaxed);
    tsc::anchor();
}

/// Which source [`now_ns`] reads at this moment: `"tsc"` (the TSC,
/// converted to `CLOCK_MONOTONIC`; x86_64 with an invariant TSC and the
/// kernel's `tsc` clock source, once a running log's writer has calibrated
/// it) or `"clock_gettime"` (otherwise). Both are on the same time line.
pub fn clock_source() -> &'static str {
    if tsc::now_abs().is_some() {
        "tsc"
    } else {
        "clock_gettime"
    }
}

/// Fixed-point shift of the conversion's `mult`.
const SHIFT: u32 = 32;
/// A conversion is not used this long (ns) after its anchor.
pub(crate) const STALE_NS: u64 = 250_000_000;
/// An offset against `CLOCK_MONOTONIC` beyond this (ns) is stepped, not slewed.
pub(crate) const STEP_NS: u64 = 100_000;
/// The slewed rate stays within the base rate ± base / 2^this (±977 ppm).
const SLEW_LIMIT_SHIFT: u32 = 10;
/// A re-anchoring spreads an offset over at least this long (ns).
const MIN_HORIZON_NS: u64 = 1_000_000;
/// The rate's baseline: its reference pair moves forward after this long (ns),
/// so the baseline is 16-32 s once warm.
const REF_WINDOW_NS: u64 = 16_000_000_000;
/// The shortest baseline a rate is computed from (ns).
const MIN_BASELINE_NS: u64 = 5_000_000;
/// A rate over the last interval this far (1/2^this) from the baseline's
/// means the TSC or the clock jumped in between: calibration starts over.
const JUMP_SHIFT: u32 = 6;
/// Reader attempts before falling back to `clock_gettime`.
const READ_TRIES: usize = 4;

/// A TSC-to-ns conversion: valid for `tsc - base_tsc` in `0..=max_delta`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Conv {
    pub(crate) base_tsc: u64,
    /// `CLOCK_MONOTONIC` ns (absolute) at `base_tsc`.
    pub(crate) base_ns: u64,
    /// ns per TSC cycle, times 2^[`SHIFT`].
    pub(crate) mult: u64,
    /// The most cycles past `base_tsc` the conversion is used for.
    pub(crate) max_delta: u64,
}

impl Conv {
    /// A conversion no TSC value passes (`tsc - 0 > 0` for every read).
    const DISABLED: Conv = Conv {
        base_tsc: 0,
        base_ns: 0,
        mult: 0,
        max_delta: 0,
    };

    /// The time at `tsc`, or `None` outside the conversion's range (before
    /// its anchor, after [`STALE_NS`]).
    #[inline]
    pub(crate) fn eval(&self, tsc: u64) -> Option<u64> {
        let d = tsc.wrapping_sub(self.base_tsc);
        if d > self.max_delta {
            return None;
        }
        Some(self.base_ns.wrapping_add(scale(d, self.mult)))
    }
}

/// `(d * mult) >> SHIFT` without overflow (one 64x64->128 multiply).
#[inline]
fn scale(d: u64, mult: u64) -> u64 {
    ((d as u128 * mult as u128) >> SHIFT) as u64
}

/// One (TSC, `CLOCK_MONOTONIC`) pair read together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) tsc: u64,
    /// Absolute `CLOCK_MONOTONIC` ns.
    pub(crate) ns: u64,
}

/// What a re-anchoring did (for tests and the health figures).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Update {
    /// Not enough baseline yet, or calibration started over: readers use
    /// `clock_gettime`.
    Uncalibrated,
    /// Continuous from the old conversion, rate slewed (clamped or not).
    Slewed { clamped: bool },
    /// The first conversion, one after a stale one, or an offset beyond
    /// [`STEP_NS`]: anchored at the sample's `CLOCK_MONOTONIC`.
    Stepped,
}

/// The writer's calibration state: pure arithmetic on samples, so tests can
/// drive it with synthetic inputs.
#[derive(Debug, Default)]
pub(crate) struct Calibrator {
    /// The baseline's reference pairs: `refs[0]` the older.
    refs: Option<[Sample; 2]>,
    /// The previous sample.
    last: Option<Sample>,
    /// The conversion last published.
    conv: Option<Conv>,
}

impl Calibrator {
    /// An uncalibrated state.
    pub(crate) const fn new() -> Calibrator {
        Calibrator {
            refs: None,
            last: None,
            conv: None,
        }
    }

    /// The conversion last returned by [`update`](Self::update).
    #[cfg(test)]
    pub(crate) fn conv(&self) -> Option<Conv> {
        self.conv
    }

    /// Re-anchors at sample `s`: returns what to publish (`None`: use
    /// `clock_gettime`) and what was done.
    pub(crate) fn update(&mut self, s: Sample) -> (Option<Conv>, Update) {
        let last = self.last.replace(s);
        let Some(rate) = self.rate(s, last) else {
            self.conv = None;
            return (None, Update::Uncalibrated);
        };
        let max_delta = max_delta(rate);
        // The old conversion's value at the anchor, if it is still in use.
        let cur = self.conv.and_then(|c| c.eval(s.tsc));
        let (conv, what) = match (cur, last) {
            (Some(cur), Some(last)) if s.ns.abs_diff(cur) <= STEP_NS => {
                let horizon = s.ns.saturating_sub(last.ns).max(MIN_HORIZON_NS);
                let (mult, clamped) = slewed_rate(rate, s.ns as i128 - cur as i128, horizon);
                (
                    Conv {
                        base_tsc: s.tsc,
                        base_ns: cur,
                        mult,
                        max_delta,
                    },
                    Update::Slewed { clamped },
                )
            }
            _ => (
                Conv {
                    base_tsc: s.tsc,
                    base_ns: s.ns,
                    mult: rate,
                    max_delta,
                },
                Update::Stepped,
            ),
        };
        self.conv = Some(conv);
        (Some(conv), what)
    }

    /// The base rate (`mult`) over the baseline ending at `s`, moving the
    /// reference pairs forward; `None` while the baseline is too short or
    /// after a jump (the baseline starts again at `s`).
    fn rate(&mut self, s: Sample, last: Option<Sample>) -> Option<u64> {
        let Some([old, new]) = self.refs else {
            self.refs = Some([s, s]);
            return None;
        };
        let Some(rate) = rate_between(old, s) else {
            self.refs = Some([s, s]);
            return None;
        };
        // A jump between the last sample and this one (the TSC reset or
        // moved, a suspend): the baseline spans it, so start over.
        if let Some(l) = last {
            let jumped = match rate_between(l, s) {
                None => true,
                Some(short) => s.ns - l.ns >= MIN_BASELINE_NS && short.abs_diff(rate) > rate >> JUMP_SHIFT,
            };
            if jumped {
                self.refs = Some([s, s]);
                return None;
            }
        }
        if s.ns - new.ns >= REF_WINDOW_NS {
            self.refs = Some([new, s]);
        }
        (s.ns - old.ns >= MIN_BASELINE_NS).then_some(rate)
    }
}

/// ns per cycle times 2^SHIFT between two samples; `None` unless both the
/// TSC and the clock advanced (and the rate is representable).
fn rate_between(a: Sample, b: Sample) -> Option<u64> {
    let dt = b.tsc.checked_sub(a.tsc).filter(|&d| d > 0)?;
    let dn = b.ns.checked_sub(a.ns).filter(|&d| d > 0)?;
    let m = ((dn as u128) << SHIFT) / dt as u128;
    u64::try_from(m).ok().filter(|&m| m > 0)
}

/// The rate that removes an offset `err` (ns, `CLOCK_MONOTONIC` minus the
/// conversion) over `horizon` ns: `rate * (1 + err / horizon)`, clamped to
/// `rate ± rate >> SLEW_LIMIT_SHIFT`. Returns it and whether it was clamped.
pub(crate) fn slewed_rate(rate: u64, err: i128, horizon: u64) -> (u64, bool) {
    let want = rate as i128 + rate as i128 * err / horizon.max(1) as i128;
    let limit = (rate >> SLEW_LIMIT_SHIFT) as i128;
    let (lo, hi) = (rate as i128 - limit, rate as i128 + limit);
    let got = want.clamp(lo, hi);
    (got as u64, got != want)
}

/// The cycles [`STALE_NS`] lasts at `rate`.
fn max_delta(rate: u64) -> u64 {
    let d = ((STALE_NS as u128) << SHIFT) / rate.max(1) as u128;
    u64::try_from(d).unwrap_or(u64::MAX)
}

#[cfg(target_arch = "x86_64")]
mod tsc {
    //! The TSC source: the published conversion and the writer's side.

    use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
    use std::sync::{Mutex, TryLockError};

    use super::{read, Calibrator, Conv, Sample, READ_TRIES};

    /// One published conversion (atomics: a reader may race the writer's
    /// stores to the slot; the generation check discards such a read).
    struct Slot {
        base_tsc: AtomicU64,
        base_ns: AtomicU64,
        mult: AtomicU64,
        max_delta: AtomicU64,
    }

    impl Slot {
        const fn new() -> Slot {
            Slot {
                base_tsc: AtomicU64::new(0),
                base_ns: AtomicU64::new(0),
                mult: AtomicU64::new(0),
                max_delta: AtomicU64::new(0),
            }
        }
    }

    static SLOTS: [Slot; 2] = [Slot::new(), Slot::new()];
    /// The generation: the conversion in use is `SLOTS[GEN & 1]`; 0 before
    /// the first publication (readers use `clock_gettime`).
    static GEN: AtomicU64 = AtomicU64::new(0);
    /// The writer's state (only the log writer calls `anchor`; `try_lock`
    /// skips a call that would wait).
    static CAL: Mutex<Calibrator> = Mutex::new(Calibrator::new());
    /// Whether the TSC may be used: checked by the writer (CPUID once, the
    /// clock source every second).
    static USABLE: AtomicBool = AtomicBool::new(false);
    /// `CLOCK_MONOTONIC` when the clock source was last checked (0: never).
    static CHECKED_NS: AtomicU64 = AtomicU64::new(0);
    /// How often the clock source is read again (ns).
    const RECHECK_NS: u64 = 1_000_000_000;

    #[inline]
    fn rdtsc() -> u64 {
        // SAFETY: `rdtsc` exists on every x86_64 CPU and has no memory
        // effects; it is only called for a conversion published after the
        // writer checked the TSC is invariant and the kernel's clocksource.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Absolute `CLOCK_MONOTONIC` ns from the TSC, or `None` (uncalibrated,
    /// stale, disabled, or the conversion changed under every attempt).
    #[inline]
    pub(super) fn now_abs() -> Option<u64> {
        for _ in 0..READ_TRIES {
            // Acquire: the slot's stores before the generation's Release.
            let g = GEN.load(Ordering::Acquire);
            if g == 0 {
                return None;
            }
            let s = &SLOTS[(g & 1) as usize];
            let conv = Conv {
                base_tsc: s.base_tsc.load(Ordering::Relaxed),
                base_ns: s.base_ns.load(Ordering::Relaxed),
                mult: s.mult.load(Ordering::Relaxed),
                max_delta: s.max_delta.load(Ordering::Relaxed),
            };
            let tsc = rdtsc();
            // Acquire fence: if a field load above saw a store of a later
            // publication (made after the writer's Release fence), the
            // generation load below sees that publication's predecessor or
            // later, so it differs from `g`.
            fence(Ordering::Acquire);
            if GEN.load(Ordering::Relaxed) == g {
                return conv.eval(tsc);
            }
        }
        None
    }

    /// Publishes `conv` into the slot not in use, then the generation.
    fn publish(conv: Conv) {
        let g = GEN.load(Ordering::Relaxed);
        let next = g.wrapping_add(1).max(1);
        // Release fence: a reader whose field loads see the stores below
        // also sees the generation at `g` or later (it read a generation
        // two before `next`, the last one that used this slot).
        fence(Ordering::Release);
        let s = &SLOTS[(next & 1) as usize];
        s.base_tsc.store(conv.base_tsc, Ordering::Relaxed);
        s.base_ns.store(conv.base_ns, Ordering::Relaxed);
        s.mult.store(conv.mult, Ordering::Relaxed);
        s.max_delta.store(conv.max_delta, Ordering::Relaxed);
        // Release: the slot's stores before the new generation.
        GEN.store(next, Ordering::Release);
    }

    /// A (TSC, `CLOCK_MONOTONIC`) pair: the TSC between two clock reads,
    /// paired with their midpoint; the tightest of three tries.
    fn sample() -> Sample {
        let mut best: Option<(u64, Sample)> = None;
        for _ in 0..3 {
            let a = read(libc::CLOCK_MONOTONIC);
            let tsc = rdtsc();
            let b = read(libc::CLOCK_MONOTONIC);
            let width = b.saturating_sub(a);
            let s = Sample { tsc, ns: a + width / 2 };
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((width, s));
            }
        }
        best.map_or(
            Sample {
                tsc: rdtsc(),
                ns: read(libc::CLOCK_MONOTONIC),
            },
            |(_, s)| s,
        )
    }

    pub(super) fn anchor() {
        let mut cal = match CAL.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let now = read(libc::CLOCK_MONOTONIC);
        let checked = CHECKED_NS.load(Ordering::Relaxed);
        if checked == 0 || now.saturating_sub(checked) >= RECHECK_NS {
            CHECKED_NS.store(now.max(1), Ordering::Relaxed);
            let usable = invariant_tsc() && clocksource_is_tsc();
            if !usable && USABLE.load(Ordering::Relaxed) {
                // Readers fall back to clock_gettime from now on.
                publish(Conv::DISABLED);
                *cal = Calibrator::new();
            }
            USABLE.store(usable, Ordering::Relaxed);
        }
        if !USABLE.load(Ordering::Relaxed) {
            return;
        }
        let (conv, _) = cal.update(sample());
        match conv {
            Some(c) => publish(c),
            None if GEN.load(Ordering::Relaxed) != 0 => publish(Conv::DISABLED),
            None => {}
        }
    }

    /// CPUID: an invariant TSC (leaf 0x8000_0007, EDX bit 8).
    // `__cpuid` is a safe function from Rust 1.87 (the MSRV); the blocks
    // keep their SAFETY notes for the instruction's preconditions.
    #[allow(unused_unsafe)]
    fn invariant_tsc() -> bool {
        use core::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86_64 CPU; leaves above the
        // reported maximum are not queried.
        let max = unsafe { __cpuid(0x8000_0000) }.eax;
        // SAFETY: as above; the leaf is at most the maximum.
        max >= 0x8000_0007 && unsafe { __cpuid(0x8000_0007) }.edx & (1 << 8) != 0
    }

    /// Whether the kernel's current clock source is `tsc`, read into a
    /// stack buffer with `open`/`read` (nothing allocated).
    fn clocksource_is_tsc() -> bool {
        let mut buf = [0u8; 64];
        let Some(n) = read_small(
            c"/sys/devices/system/clocksource/clocksource0/current_clocksource",
            &mut buf,
        ) else {
            return false;
        };
        super::clocksource_named_tsc(&buf[..n])
    }

    /// Reads up to `buf.len()` bytes of a small file; `None` if it cannot.
    fn read_small(path: &core::ffi::CStr, buf: &mut [u8]) -> Option<usize> {
        // SAFETY: `path` is NUL-terminated; the flags are valid.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let mut n = 0;
        while n < buf.len() {
            // SAFETY: `buf[n..]` is valid for writes of its length.
            let r = unsafe { libc::read(fd, buf[n..].as_mut_ptr().cast(), buf.len() - n) };
            if r > 0 {
                n += r as usize;
            } else if r == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
        }
        // SAFETY: `fd` is ours and open.
        unsafe { libc::close(fd) };
        Some(n)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tsc {
    //! No TSC: `now_ns` is always `clock_gettime`.

    #[inline]
    pub(super) fn now_abs() -> Option<u64> {
        None
    }

    pub(super) fn anchor() {}
}

/// Whether a `current_clocksource` file's content names `tsc`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn clocksource_named_tsc(content: &[u8]) -> bool {
    content.trim_ascii() == b"tsc"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic TSC at 3 GHz (1/3 ns per cycle).
    const HZ: u64 = 3_000_000_000;

    fn at(tsc: u64, ns: u64) -> Sample {
        Sample { tsc, ns }
    }

    /// Cycles of `ns` at `HZ`.
    fn cyc(ns: u64) -> u64 {
        (ns as u128 * HZ as u128 / 1_000_000_000) as u64
    }

    /// Drives a calibrator with samples every `tick` ns of a clock that
    /// runs `ppm` faster than the TSC's nominal rate, from `t0`/`n0`;
    /// returns the calibrator after `ticks` samples.
    fn run(
        cal: &mut Calibrator,
        t0: u64,
        n0: u64,
        tick: u64,
        ticks: u64,
        ppm: i64,
    ) -> Vec<(Option<Conv>, Update, Sample)> {
        let mut out = Vec::new();
        for i in 0..ticks {
            let t = t0 + cyc(i * tick);
            let elapsed = i * tick;
            let ns = n0 + (elapsed as i128 + elapsed as i128 * ppm as i128 / 1_000_000) as u64;
            let s = at(t, ns);
            let (c, u) = cal.update(s);
            out.push((c, u, s));
        }
        out
    }

    #[test]
    fn uncalibrated_until_a_baseline_then_stepped_to_the_clock() {
        let mut cal = Calibrator::new();
        let (c, u) = cal.update(at(1_000, 5_000_000_000));
        assert_eq!((c, u), (None, Update::Uncalibrated));
        // 1 ms later: baseline too short.
        let (c, u) = cal.update(at(1_000 + cyc(1_000_000), 5_001_000_000));
        assert_eq!((c, u), (None, Update::Uncalibrated));
        // 10 ms after the first: calibrated, anchored at the sample.
        let s = at(1_000 + cyc(10_000_000), 5_010_000_000);
        let (c, u) = cal.update(s);
        let c = c.unwrap();
        assert_eq!(u, Update::Stepped);
        assert_eq!(c.base_ns, s.ns);
        assert_eq!(c.eval(s.tsc), Some(s.ns));
        // Rate: 1/3 ns per cycle, within rounding.
        let want = (1u128 << SHIFT) * 1_000_000_000 / HZ as u128;
        assert!((c.mult as i128 - want as i128).abs() <= 2, "{} vs {want}", c.mult);
        // 1 ms of cycles later reads 1 ms later, within a ns.
        assert!(c.eval(s.tsc + cyc(1_000_000)).unwrap().abs_diff(s.ns + 1_000_000) <= 1);
    }

    #[test]
    fn continuous_at_every_reanchoring() {
        let mut cal = Calibrator::new();
        let steps = run(&mut cal, 77, 1 << 40, 10_000_000, 300, 40);
        let mut prev: Option<Conv> = None;
        for (c, u, s) in steps.iter().copied() {
            if let (Some(p), Some(c), Update::Slewed { .. }) = (prev, c, u) {
                // The new conversion starts exactly where the old one is.
                assert_eq!(p.eval(s.tsc), Some(c.base_ns));
                assert_eq!(c.eval(s.tsc), Some(c.base_ns));
            }
            prev = c.or(prev);
        }
        assert!(steps.iter().filter(|x| matches!(x.1, Update::Slewed { .. })).count() >= 295);
    }

    #[test]
    fn converges_after_an_injected_offset() {
        let mut cal = Calibrator::new();
        let tick = 10_000_000;
        let steps = run(&mut cal, 0, 1 << 40, tick, 50, 0);
        let last = steps.last().unwrap().2;
        // The conversion is 30 us behind the clock (within the step limit):
        // slewed, not stepped.
        let off = 30_000u64;
        let c = cal.conv.as_mut().unwrap();
        c.base_ns -= off;
        let mut errs = Vec::new();
        for i in 1..=20 {
            let s = at(last.tsc + cyc(i * tick), last.ns + i * tick);
            let cur = cal.conv().unwrap().eval(s.tsc).unwrap();
            errs.push(s.ns as i64 - cur as i64);
            let (_, u) = cal.update(s);
            let clamped = i <= 3;
            assert_eq!(u, Update::Slewed { clamped }, "tick {i}: {errs:?}");
        }
        // 30 us over 10 ms is 3000 ppm: clamped to 977 ppm, so 9.77 us go
        // per tick; the rest is slewed unclamped at the 4th, then gone.
        assert!(errs[0].abs_diff(off as i64) <= 2, "{errs:?}");
        assert!(errs[1].abs_diff(off as i64 - 9_766) <= 3, "{errs:?}");
        assert!(errs[2].abs_diff(off as i64 - 2 * 9_766) <= 3, "{errs:?}");
        for e in &errs[4..] {
            assert!(e.abs() <= 2, "{errs:?}");
        }
        // The other way (the conversion ahead): the same, mirrored.
        let c = cal.conv.as_mut().unwrap();
        c.base_ns += off;
        let last = at(last.tsc + cyc(20 * tick), last.ns + 20 * tick);
        let mut errs = Vec::new();
        for i in 1..=20 {
            let s = at(last.tsc + cyc(i * tick), last.ns + i * tick);
            errs.push(s.ns as i64 - cal.conv().unwrap().eval(s.tsc).unwrap() as i64);
            cal.update(s);
        }
        assert!(errs[0].abs_diff(-(off as i64)) <= 2, "{errs:?}");
        for e in &errs[4..] {
            assert!(e.abs() <= 2, "{errs:?}");
        }
    }

    #[test]
    fn converges_after_an_injected_rate_error() {
        // The clock runs 200 ppm fast against the TSC for 30 s (NTP slew):
        // the baseline follows it and the offset stays small throughout.
        let mut cal = Calibrator::new();
        let tick = 10_000_000;
        let steps = run(&mut cal, 5, 1 << 41, tick, 3_000, 0);
        let last = steps.last().unwrap().2;
        let mut worst_late = 0i64;
        for i in 1..=3_000u64 {
            let e = i * tick;
            let s = at(last.tsc + cyc(e), last.ns + e + e / 5_000);
            let cur = cal.conv().unwrap().eval(s.tsc).unwrap();
            let err = s.ns as i64 - cur as i64;
            // 200 ppm of one 10 ms tick is 2 us: never more than that
            // accumulates before the next anchor corrects it.
            assert!(err.abs() <= 2_100, "tick {i}: {err}");
            if i > 100 {
                worst_late = worst_late.max(err.abs());
            }
            let (_, u) = cal.update(s);
            assert!(matches!(u, Update::Slewed { .. }), "{u:?}");
        }
        // Once the baseline has moved (16-32 s), the base rate itself has
        // absorbed the 200 ppm and the error is rounding.
        let c = cal.conv().unwrap();
        let want = (1u128 << SHIFT) * 1_000_000_000 * 1_000_200 / 1_000_000 / HZ as u128;
        let got_ppm = (c.mult as f64 / want as f64 - 1.0) * 1e6;
        assert!(got_ppm.abs() < 10.0, "{got_ppm} ppm");
        assert!(worst_late <= 2_100);
    }

    #[test]
    fn slew_is_clamped() {
        let rate = 1 << 30;
        let limit = rate >> SLEW_LIMIT_SHIFT;
        assert_eq!(slewed_rate(rate, 0, 10_000_000), (rate, false));
        assert_eq!(slewed_rate(rate, 1_000_000, 10_000_000), (rate + limit, true));
        assert_eq!(slewed_rate(rate, -1_000_000, 10_000_000), (rate - limit, true));
        // 5 us over 10 ms is 500 ppm: within the limit.
        let (m, clamped) = slewed_rate(rate, 5_000, 10_000_000);
        assert!(!clamped);
        assert_eq!(m, rate + rate / 2_000);
        // A zero horizon does not divide by zero.
        assert!(slewed_rate(rate, 1, 0).1);
    }

    #[test]
    fn large_offsets_are_stepped_and_stale_conversions_unused() {
        let mut cal = Calibrator::new();
        let tick = 10_000_000;
        let steps = run(&mut cal, 1_000, 1 << 40, tick, 20, 0);
        let last = steps.last().unwrap().2;
        // Suspend-like: the clock moved 5 ms beyond the TSC's elapsed time.
        let s = at(last.tsc + cyc(tick), last.ns + tick + 5_000_000);
        let (c, u) = cal.update(s);
        // The short-interval rate is 50% off the baseline's: a jump, so
        // calibration starts over and readers use clock_gettime.
        assert_eq!((c, u), (None, Update::Uncalibrated));
        let s2 = at(s.tsc + cyc(tick), s.ns + tick);
        let (c, u) = cal.update(s2);
        assert_eq!(u, Update::Stepped);
        assert_eq!(c.unwrap().eval(s2.tsc), Some(s2.ns));
        // An offset beyond STEP_NS but without a rate jump (the writer
        // stalled 2 s with the conversion's rate slightly off): stepped.
        let c = c.unwrap();
        assert_eq!(c.eval(s2.tsc + cyc(STALE_NS) + 10), None, "stale after STALE_NS");
        assert!(c.eval(s2.tsc - 1).is_none(), "before the anchor (a TSC reset)");
        let s3 = at(s2.tsc + cyc(2_000_000_000), s2.ns + 2_000_000_000);
        let (c3, u3) = cal.update(s3);
        assert_eq!(u3, Update::Stepped, "the old conversion is stale");
        assert_eq!(c3.unwrap().base_ns, s3.ns);
        // A TSC that went backwards: calibration starts over.
        let (c, u) = cal.update(at(10, s3.ns + tick));
        assert_eq!((c, u), (None, Update::Uncalibrated));
    }

    #[test]
    fn monotonic_across_reanchorings_with_noisy_samples() {
        // Samples with +-40 ns of pairing noise and a clock drifting
        // 100 ppm: reading the published conversion at every 1/7 of a
        // tick, before and after each re-anchoring, never goes back.
        let mut cal = Calibrator::new();
        let tick = 10_000_000u64;
        let mut conv: Option<Conv> = None;
        let mut last_read = 0u64;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..2_000u64 {
            let e = i * tick;
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let noise = (rng >> 33) % 81;
            let s = at(cyc(e) + 123, (1u64 << 40) + e + e / 10_000 + noise);
            if let Some(c) = conv {
                // Up to the anchor itself (k = 7): the old conversion there.
                for k in 0..=7 {
                    let t = cyc(e) + 123 - cyc(tick) + cyc(tick) * k / 7;
                    if let Some(v) = c.eval(t) {
                        assert!(v >= last_read, "tick {i}.{k}: {v} < {last_read}");
                        last_read = v;
                    }
                }
            }
            let (c, _) = cal.update(s);
            if let Some(c) = c {
                // The new conversion at the anchor is where the old one was.
                let v = c.eval(s.tsc).unwrap();
                assert!(v >= last_read, "tick {i}: anchor {v} < {last_read}");
                last_read = v;
            }
            conv = c;
        }
    }

    #[test]
    fn clamped_rate_and_scale_do_not_overflow() {
        // The largest delta a conversion is used for, at the fastest
        // slewed rate of a slow (1 MHz) counter: no overflow.
        let rate = rate_between(at(0, 0), at(1_000_000, 1_000_000_000)).unwrap();
        let (m, _) = slewed_rate(rate, 1 << 40, 1);
        let c = Conv {
            base_tsc: 0,
            base_ns: 1 << 60,
            mult: m,
            max_delta: max_delta(m),
        };
        let v = c.eval(c.max_delta).unwrap();
        assert!(v > 1 << 60 && v - (1 << 60) <= STALE_NS + 1);
        assert_eq!(Conv::DISABLED.eval(12345), None);
        assert_eq!(rate_between(at(5, 5), at(5, 10)), None);
        assert_eq!(rate_between(at(5, 5), at(10, 5)), None);
    }

    #[test]
    fn clocksource_names() {
        assert!(clocksource_named_tsc(b"tsc\n"));
        assert!(!clocksource_named_tsc(b"kvm-clock\n"));
        assert!(!clocksource_named_tsc(b"tsc-early\n"));
        assert!(!clocksource_named_tsc(b""));
    }
}
