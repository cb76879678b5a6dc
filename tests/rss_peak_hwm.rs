//! Issue 15, item 4, through a real program: a spike of RSS shorter than
//! the sampling interval is the peak (VmHWM), not missed; the RSS
//! decomposition is of the highest sample and says so.

mod common;

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const SPIKE: usize = 256 << 20;

fn run_program(log: &Path) {
    // Samples only at marks (the interval is far longer than the run), so
    // the order is certain: a sample before the spike, one after it.
    heaptag::LogConfig::new(log)
        .interval(Duration::from_secs(3600))
        .start()
        .unwrap();
    heaptag::mark("before");
    // Wait (bounded) until the writer has taken that sample: order, not time.
    for _ in 0..6000 {
        let (recs, _) = common::read_all(log);
        if recs.iter().any(|r| matches!(r, heaptag_format::Record::Rss { .. })) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut v = vec![0u8; SPIKE];
    for i in (0..v.len()).step_by(4096) {
        v[i] = 1;
    }
    black_box(&v);
    drop(v);
    heaptag::purge().ok(); // the pages go back to the system
    heaptag::mark("after");
    heaptag::finish().unwrap();
}

#[test]
fn a_spike_between_samples_is_the_peak() {
    if common::in_child() {
        run_program(Path::new(&std::env::var("RSS_LOG").unwrap()));
        return;
    }
    let log = common::temp_log("rss_peak_hwm");
    let out = common::child(
        "a_spike_between_samples_is_the_peak",
        &[("RSS_LOG", log.to_str().unwrap())],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut json = Vec::new();
    heaptag_analyzer::run(
        &heaptag_analyzer::Command::Report {
            logs: vec![log.clone()],
            format: heaptag_analyzer::Format::Json,
        },
        &mut json,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&json).unwrap();
    let s = &v["sources"][0];
    let peak = s["peak_rss"]["bytes"].as_u64().unwrap();
    assert!(peak >= SPIKE as u64, "the spike is the peak: {}", s["peak_rss"]);
    assert!(
        s["peak_rss_how"]
            .as_str()
            .unwrap()
            .starts_with("VmHWM, reached between"),
        "{}",
        s["peak_rss_how"]
    );
    let d = &s["decomposition"];
    let sampled = d["rss_bytes"].as_u64().unwrap();
    if sampled < peak {
        // Taken apart at the nearest sample, labelled as such.
        assert_eq!(d["peak_rss_bytes"].as_u64(), Some(peak), "{d}");
    }
    // A max_rss gate sees the spike.
    let policy = log.with_extension("toml");
    std::fs::write(&policy, "[[rule]]\nmax_rss = \"200 MiB\"\n").unwrap();
    let mut text = Vec::new();
    let o = heaptag_analyzer::run(
        &heaptag_analyzer::Command::Check {
            logs: vec![log],
            policy,
            baseline: None,
            write_baseline: None,
            format: heaptag_analyzer::Format::Text,
            junit: false,
        },
        &mut text,
    )
    .unwrap();
    assert!(o.failed, "{}", String::from_utf8_lossy(&text));
}
