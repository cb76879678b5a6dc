//! Issue 15, item 5, through a real program: the RSS decomposition of a
//! run adds up to RSS from one sample, and an annotation larger than what
//! is resident outside jemalloc is never shown as a part larger than its
//! whole.

mod common;

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn run_program(log: &Path) {
    heaptag::LogConfig::new(log)
        .interval(Duration::from_secs(3600))
        .start()
        .unwrap();
    let data = {
        let _s = heaptag::stage("work");
        vec![3u8; 32 << 20]
    };
    black_box(&data);
    // A pinned-buffer pool announced but never touched: 1 GiB annotated,
    // next to nothing resident.
    let _pool = heaptag::external_alloc(1 << 30, "pinned_pool");
    heaptag::mark("sample");
    heaptag::finish().unwrap();
}

#[test]
fn parts_add_up_and_never_exceed_their_whole() {
    if common::in_child() {
        run_program(Path::new(&std::env::var("DEC_LOG").unwrap()));
        return;
    }
    let log = common::temp_log("rss_decomposition");
    let out = common::child(
        "parts_add_up_and_never_exceed_their_whole",
        &[("DEC_LOG", log.to_str().unwrap())],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = |format| {
        let mut o = Vec::new();
        heaptag_analyzer::run(
            &heaptag_analyzer::Command::Report {
                logs: vec![log.clone()],
                format,
            },
            &mut o,
        )
        .unwrap();
        String::from_utf8(o).unwrap()
    };
    let v: Value = serde_json::from_str(&run(heaptag_analyzer::Format::Json)).unwrap();
    let d = &v["sources"][0]["decomposition"];
    let n = |k: &str| d[k].as_i64().unwrap_or_else(|| panic!("{k} in {d}"));
    // One sample: the parts add up to its RSS exactly.
    assert_eq!(
        n("tracked_bytes")
            + n("small_bytes")
            + n("jemalloc_rounding_bytes")
            + n("allocator_overhead_bytes")
            + n("outside_jemalloc_bytes"),
        n("rss_bytes"),
        "{d}"
    );
    assert!(n("tracked_bytes") >= 32 << 20, "{d}");
    assert_eq!(n("external_bytes"), 1 << 30, "JSON keeps the annotation: {d}");
    // The text never shows 1 GiB inside an "outside jemalloc" of a few MiB.
    let text = run(heaptag_analyzer::Format::Text);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("of which annotated external"))
        .unwrap_or_else(|| panic!("{text}"));
    let shown = row.split_whitespace().nth(4).unwrap_or_default();
    assert!(
        row.contains("<= ") || row.contains("the whole is unknown"),
        "the annotation is bounded by its whole or the whole is unknown: {row}"
    );
    assert_ne!(shown, "1.0", "not shown as a 1 GiB part: {row}");
}
