//! The event clock against `CLOCK_MONOTONIC`: every event time of a real log
//! lies between the `clock_gettime(CLOCK_MONOTONIC)` reads taken just before
//! and just after the call that made it, and one thread's event times never
//! decrease, on two threads at once, in a second log after `finish()`, and
//! in a forked child. Where this machine can use the TSC (x86_64, the
//! kernel's clock source `tsc`, the CPU's `constant_tsc` and `nonstop_tsc`
//! flags in /proc/cpuinfo: an independent check of what heaptag reads from
//! CPUID), the TSC source must be the one in use.
//!
//! The tolerance, 1 ms either side, is not a timing window (preemption
//! between the reads only widens the window being checked): it is the
//! conversion's worst designed error against `CLOCK_MONOTONIC`, an offset
//! slewed away only below 100 us (larger ones are stepped) plus at most
//! 250 ms of a rate slewed by at most 977 ppm (244 us) before a conversion
//! is no longer used. A conversion off by more (an offset never corrected,
//! a rate wrong by 10% between two anchors) is outside it. The test prints
//! how far outside its window the worst event was (0 when all were inside).

mod common;

use std::hint::black_box;
use std::time::Duration;

use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// 1 ms: see the module docs.
const TOLERANCE_NS: u64 = 1_000_000;
/// Blocks each thread allocates and frees per log.
const PAIRS: usize = 3_000;

fn mono() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether the TSC should be usable here, from the kernel's view.
fn tsc_expected() -> bool {
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource").unwrap_or_default();
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = flags.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    cfg!(target_arch = "x86_64") && source.trim() == "tsc" && has("constant_tsc") && has("nonstop_tsc")
}

/// Waits (a bounded number of polls) until the writer has calibrated the
/// TSC where it should, and returns the source in use.
fn settled_source() -> &'static str {
    for _ in 0..1_000 {
        if heaptag::clock_source() == "tsc" || !tsc_expected() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    heaptag::clock_source()
}

/// One thread's windows: (before, after) for each Alloc and each Free of
/// its blocks of `size` bytes, in its order.
fn churn(size: usize) -> Vec<(u64, u64)> {
    let mut w = Vec::with_capacity(2 * PAIRS);
    for i in 0..PAIRS {
        let a = mono();
        let v = black_box(vec![i as u8; size]);
        let b = mono();
        w.push((a, b));
        let a = mono();
        drop(v);
        let b = mono();
        w.push((a, b));
    }
    w
}

/// Runs two threads of churn under a fresh log and checks its times;
/// returns the header's `start_mono_ns`.
fn one_log(name: &str) -> u64 {
    let path = common::temp_log(name);
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(20))
        .start()
        .expect("log starts");
    let source = settled_source();
    if tsc_expected() {
        assert_eq!(source, "tsc", "the TSC should be in use here");
    }
    // Distinct sizes (above the 64 KiB threshold, all tracked) tell the
    // threads' events apart in the log.
    let sizes = [70_001usize, 70_003];
    let windows: Vec<Vec<(u64, u64)>> = std::thread::scope(|s| {
        let hs: Vec<_> = sizes.iter().map(|&n| s.spawn(move || churn(n))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let a = mono();
    heaptag::mark("after the churn");
    let b = mono();
    let summary = heaptag::finish().expect("a log was running");
    assert_eq!(summary.dropped, 0, "every event is in the log");

    let (recs, reader) = common::read_all(&path);
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    let start = reader.header().start_mono_ns;
    let worst = std::cell::Cell::new(0u64);
    let within = |t: u64, (a, b): (u64, u64), what: &str| {
        let t = t + start;
        worst.set(worst.get().max(a.saturating_sub(t)).max(t.saturating_sub(b)));
        assert!(
            t + TOLERANCE_NS >= a && t <= b + TOLERANCE_NS,
            "{what}: {t} outside [{a}, {b}] (by {} ns before, {} ns after; source {source})",
            a.saturating_sub(t),
            t.saturating_sub(b),
        );
    };
    for (k, &size) in sizes.iter().enumerate() {
        // This thread's Alloc/Free of its size, in log order.
        let mut times = Vec::new();
        let mut thread = None;
        for r in &recs {
            let (t, th) = match *r {
                Record::Alloc {
                    time_ns,
                    thread,
                    size: s,
                    ..
                } if s == size as u64 => (time_ns, thread),
                Record::Free {
                    time_ns,
                    thread,
                    size: s,
                    ..
                } if s == size as u64 => (time_ns, thread),
                _ => continue,
            };
            assert_eq!(*thread.get_or_insert(th), th, "one thread makes size {size}");
            times.push(t);
        }
        assert_eq!(times.len(), windows[k].len(), "every pair of thread {k} is in the log");
        for (i, (&t, &w)) in times.iter().zip(&windows[k]).enumerate() {
            within(t, w, &format!("thread {k} event {i}"));
        }
        assert!(
            times.windows(2).all(|p| p[0] <= p[1]),
            "thread {k}'s times never decrease"
        );
        // Every event of that thread (its Vec's growth too), in log order.
        let th = thread.unwrap();
        let all: Vec<u64> = recs
            .iter()
            .filter_map(|r| match *r {
                Record::Alloc { time_ns, thread, .. } | Record::Free { time_ns, thread, .. } if thread == th => {
                    Some(time_ns)
                }
                _ => None,
            })
            .collect();
        assert!(
            all.windows(2).all(|p| p[0] <= p[1]),
            "thread {k}'s times never decrease"
        );
    }
    let mark = recs
        .iter()
        .find_map(|r| match r {
            Record::Mark { time_ns, label, .. } if label == "after the churn" => Some(*time_ns),
            _ => None,
        })
        .expect("the mark is in the log");
    within(mark, (a, b), "the mark");
    eprintln!(
        "{name}: source {source}, worst event outside its window by {} ns",
        worst.get()
    );
    // The writer's samples are on the same line: none after the end.
    let end = mono();
    let rss: Vec<u64> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Rss { time_ns, .. } => Some(*time_ns),
            _ => None,
        })
        .collect();
    assert!(!rss.is_empty(), "the writer sampled");
    assert!(
        rss.windows(2).all(|p| p[0] <= p[1]),
        "the writer's times never decrease"
    );
    assert!(
        rss.iter().all(|&t| t + start <= end + TOLERANCE_NS),
        "a sample after the end"
    );
    std::fs::remove_file(&path).unwrap();
    start
}

#[test]
fn event_times_lie_between_clock_monotonic_reads() {
    let start = one_log("clock-first");
    // After finish() and a new start: the same time line.
    assert_eq!(one_log("clock-second"), start, "one origin for every log");

    // A forked child keeps a valid clock (same TSC, the parent's
    // conversion while fresh, clock_gettime after): its readings lie
    // between its own CLOCK_MONOTONIC reads too, and never decrease.
    let path = common::temp_log("clock-fork");
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(20))
        .start()
        .unwrap();
    let source = settled_source();
    // SAFETY: the child only reads clocks and exits with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let origin = start;
        let mut prev = 0;
        let mut ok = true;
        // Past the conversion's 250 ms life (the child has no writer), so
        // both sources are exercised; bounded by a count, not by time.
        for i in 0..400_000u32 {
            let a = mono();
            let t = heaptag::now_ns();
            let b = mono();
            ok &= t >= prev;
            ok &= t + origin + TOLERANCE_NS >= a && t + origin <= b + TOLERANCE_NS;
            prev = t;
            if i % 1_000 == 0 {
                // SAFETY: plain sleep in the child.
                unsafe { libc::usleep(1_000) };
            }
        }
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's clock (source {source} at the fork) was consistent: {status}"
    );
    heaptag::finish().unwrap();
    let _ = std::fs::remove_file(&path);
}
