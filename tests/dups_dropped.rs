//! Issue 14, defect 4, through a real program: when the writer dropped
//! events (a tiny event buffer and a burst of tracked blocks), every
//! duplicate verdict says it cannot be relied on, and `heaptag check` fails
//! `max_copies` as unverifiable unless the policy allows dropped events.

mod common;

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use heaptag::Tag;
use serde_json::Value;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const SIZE: usize = 4 << 20;

fn content(seed: u64) -> Vec<u64> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..SIZE / 8)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x
        })
        .collect()
}

fn run_program(log: &Path) {
    heaptag::LogConfig::new(log)
        .interval(Duration::from_millis(50))
        .buffer_events(64)
        .start()
        .unwrap();
    // A real duplicate, whose few events are queued before the ring fills...
    let a = Tag::new(Some(1), Some("d_dup"), Some(0)).scope(|| content(1));
    let b = Tag::new(Some(1), Some("d_dup"), Some(1)).scope(|| content(1));
    drop(black_box(a));
    drop(black_box(b));
    // ... then a burst of tracked blocks far faster than a 64-event ring drains.
    {
        let _t = Tag::new(Some(1), Some("d_burst"), None).enter();
        for i in 0..200_000u32 {
            let v = vec![i as u8; 64 << 10];
            black_box(&v);
        }
    }
    let s = heaptag::finish().unwrap();
    // The precondition of this test, not its finding: without drops there is
    // nothing to check, and the test says so instead of passing vacuously.
    assert!(s.dropped > 0, "a 64-event ring did not overflow: {s:?}");
}

#[test]
fn verdicts_on_a_log_with_dropped_events_are_unverified() {
    if common::in_child() {
        run_program(Path::new(&std::env::var("DUPS_LOG").unwrap()));
        return;
    }
    let log = common::temp_log("dups_dropped");
    let out = common::child(
        "verdicts_on_a_log_with_dropped_events_are_unverified",
        &[("DUPS_LOG", log.to_str().unwrap())],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let dups = |format| common::dups(&log, format);
    let v: Value = serde_json::from_str(&dups(heaptag_analyzer::Format::Json)).unwrap();
    let why = v["sources"][0]["unverified"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("events were dropped"), "{v}");
    let text = dups(heaptag_analyzer::Format::Text);
    assert!(text.contains("UNVERIFIED: "), "{text}");
    for line in text.lines().skip_while(|l| !l.starts_with("stage ")).skip(1) {
        if line.is_empty() || line.starts_with("- ") {
            break;
        }
        assert!(line.contains("(unverified)"), "every verdict says so: {line}");
    }

    // A stage with no duplicate at all still cannot be certified...
    let (failed, out) = common::check(&log, "strict", "[[rule]]\nstage = \"d_burst\"\nmax_copies = 1\n");
    assert!(failed, "{out}");
    assert!(out.contains("found unverifiable"), "{out}");
    assert!(out.contains("allow_dropped_events = true"), "says what to do: {out}");
    // ... unless the policy accepts logs with drops; then the verdicts count.
    let (failed, out) = common::check(
        &log,
        "lenient",
        "allow_dropped_events = true\n[[rule]]\nstage = \"d_burst\"\nmax_copies = 1\n",
    );
    assert!(!failed, "{out}");
    let (failed, out) = common::check(
        &log,
        "lenient_dup",
        "allow_dropped_events = true\n[[rule]]\nstage = \"d_dup\"\nmax_copies = 1\n",
    );
    assert!(failed, "the real duplicate still fails: {out}");
    assert!(out.contains("found 2"), "{out}");
}
