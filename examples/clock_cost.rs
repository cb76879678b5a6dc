//! Nanoseconds per read of heaptag's event clock, against what it replaced.
//!
//! ```text
//! CARGO_INCREMENTAL=0 cargo run --release --example clock_cost [ROUNDS]
//! ```
//!
//! Interleaves, per round, 2,000,000 calls of each: the clock the log used
//! before (`clock_gettime(CLOCK_MONOTONIC)` minus the origin, the old
//! `now_ns`'s body), `heaptag::now_ns()` with no log (its `clock_gettime`
//! fallback), `heaptag::now_ns()` with a log running (the TSC once the
//! writer has calibrated it), a bare `rdtsc` and `CLOCK_MONOTONIC_COARSE`;
//! prints each one's median over the rounds (default 9). A timing on a
//! shared machine: read the medians as ratios within one run.

use std::hint::black_box;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const CALLS: u32 = 2_000_000;

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// ns per call of `f`, over `CALLS` calls.
fn per_call(mut f: impl FnMut() -> u64) -> f64 {
    let t = Instant::now();
    let mut acc = 0u64;
    for _ in 0..CALLS {
        acc = acc.wrapping_add(f());
    }
    black_box(acc);
    t.elapsed().as_nanos() as f64 / CALLS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(9);
    let origin = clock(libc::CLOCK_MONOTONIC);
    drop(black_box(vec![0u8; 1 << 20])); // heaptag starts
    let names = [
        "old now_ns (clock_gettime MONOTONIC)",
        "now_ns, no log (clock_gettime fallback)",
        "now_ns, log on (TSC)",
        "bare rdtsc",
        "clock_gettime MONOTONIC_COARSE",
    ];
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let path = std::env::temp_dir().join(format!("clock_cost-{}.htlog", std::process::id()));
    for _ in 0..rounds {
        runs[0].push(per_call(|| clock(libc::CLOCK_MONOTONIC).saturating_sub(origin)));
        runs[1].push(per_call(heaptag::now_ns));
        let _ = std::fs::remove_file(&path);
        heaptag::LogConfig::new(&path).start().expect("log starts");
        // Bounded wait for the writer's calibration (it needs two cycles).
        for _ in 0..400 {
            if heaptag::clock_source() == "tsc" {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let source = heaptag::clock_source();
        runs[2].push(per_call(heaptag::now_ns));
        heaptag::finish();
        if source != "tsc" {
            eprintln!("the TSC is not used here: the log-on row is clock_gettime");
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: rdtsc exists on every x86_64 CPU.
        runs[3].push(per_call(|| unsafe { core::arch::x86_64::_rdtsc() }));
        runs[4].push(per_call(|| clock(libc::CLOCK_MONOTONIC_COARSE)));
        // The conversion goes stale 250 ms after the log's last anchor: the
        // next round's "no log" row is the fallback again.
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = std::fs::remove_file(&path);
    println!("median ns per call over {rounds} rounds of {CALLS} calls:");
    for (n, r) in names.iter().zip(runs) {
        if !r.is_empty() {
            println!("  {n:<42} {:6.1}", median(r));
        }
    }
}
