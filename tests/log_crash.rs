//! A logging child killed with SIGKILL leaves a log that reads up to its last
//! written frame; a child whose file stops growing (RLIMIT_FSIZE: writes fail
//! with EFBIG, as on a full disk) drops events, finishes normally, and the
//! log says how many were lost.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

#[test]
fn sigkill_leaves_a_log_readable_to_the_last_frame() {
    if common::in_child() {
        // Started from HEAPTAG_LOG before main. Allocate forever.
        let _g = heaptag::stage("doomed");
        let mut keep = Vec::new();
        for i in 0u64.. {
            keep.push(vec![i as u8; 128 * 1024]);
            if keep.len() > 64 {
                keep.clear();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        return;
    }
    let path = common::temp_log("killed");
    let mut c = common::child(
        "sigkill_leaves_a_log_readable_to_the_last_frame",
        &[("HEAPTAG_LOG", path.to_str().unwrap()), ("HEAPTAG_INTERVAL", "10ms")],
    )
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&path).map_or(0, |m| m.len()) < 64 * 1024 {
        assert!(Instant::now() < deadline, "the child never wrote 64 KiB of log");
        std::thread::sleep(Duration::from_millis(20));
    }
    c.kill().unwrap(); // SIGKILL: no atexit, no finish
    let status = c.wait().unwrap();
    assert!(!status.success());
    let (recs, r) = common::read_all(&path);
    assert!(!r.ended(), "no end record after SIGKILL");
    let allocs = recs.iter().filter(|r| matches!(r, Record::Alloc { .. })).count();
    assert!(allocs > 100, "events up to the kill are there: {allocs}");
    // Any damage is a truncated tail, reported; nothing in the middle.
    for p in r.problems() {
        assert_eq!(p.kind, heaptag_format::ProblemKind::Truncated, "{p}");
    }
    // No symbols were written (no finish()); the analyzer resolves the
    // frames offline from the module map and this binary's debug info.
    assert!(!recs.iter().any(|r| matches!(r, Record::Symbol { .. })));
    let mut out = Vec::new();
    heaptag_analyzer::run(
        &heaptag_analyzer::Command::Sites {
            logs: vec![path.clone()],
            format: heaptag_analyzer::Format::Json,
            top: 3,
            options: Default::default(),
        },
        &mut out,
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let top = v["sources"][0]["by_allocated"][0]["site"].as_str().unwrap().to_string();
    assert!(
        top.contains("sigkill_leaves_a_log_readable_to_the_last_frame"),
        "site named offline: {top}"
    );
}

#[test]
fn a_file_that_stops_growing_drops_events_and_says_how_many() {
    if common::in_child() {
        // Writes past 40 KiB fail with EFBIG (SIGXFSZ ignored), like a full disk.
        // SAFETY: plain libc calls on this process's own limits and signals.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 40 * 1024,
                rlim_max: libc::RLIM_INFINITY,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
        }
        let path = std::env::var("CHILD_LOG").unwrap();
        heaptag::LogConfig::new(&path)
            .interval(Duration::from_millis(5))
            .start()
            .unwrap();
        let _g = heaptag::stage("filling");
        for i in 0..20_000u64 {
            drop(black_box(vec![i as u8; 70_000]));
            if i % 1000 == 0 {
                std::thread::sleep(Duration::from_millis(6));
            }
        }
        let s = heaptag::finish().unwrap();
        let health = heaptag::snapshot().health;
        println!("DROPPED {} WRITE_ERRORS {}", s.dropped, health.log_write_errors);
        assert!(s.dropped > 0);
        assert_eq!(health.dropped_events, s.dropped);
        return;
    }
    let path = common::temp_log("full");
    let out = common::child(
        "a_file_that_stops_growing_drops_events_and_says_how_many",
        &[("CHILD_LOG", path.to_str().unwrap())],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the program finishes normally: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = &stdout[stdout.find("DROPPED ").expect("child's report")..];
    let dropped: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let errors: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(dropped > 0 && errors > 0, "{line}");
    assert!(std::fs::metadata(&path).unwrap().len() <= 40 * 1024);
    let (recs, r) = common::read_all(&path);
    assert!(
        r.problems().is_empty(),
        "partial frames are cut off: {:?}",
        r.problems()
    );
    let said = recs
        .iter()
        .filter_map(|r| match r {
            Record::Dropped { events, .. } => Some(*events),
            _ => None,
        })
        .max()
        .expect("the log says events were lost");
    assert_eq!(said, dropped, "the reserve frame holds the final count");
}
