//! Issue 15, item 5: the RSS decomposition never shows a part larger than
//! its whole, says what it cannot know, and takes every part from one
//! sample.

mod common;

use common::{LogBuilder, MIB, MS};
use heaptag_format::Record;

fn log(name: &str, resident: u64, external: u64) -> std::path::PathBuf {
    let path = common::temp(name);
    let mut b = LogBuilder::new();
    b.tag(1, Some(1), Some("srs_load"), None)
        .alloc(5 * MS, 1, 0, 0x1000_0000, 8 * MIB)
        .rec(Record::External {
            time_ns: 6 * MS,
            tag: 1,
            what: "srs_mmap".into(),
            bytes: external as i64,
        })
        // RSS 40 MiB; jemalloc allocated 9 MiB, resident `resident`; the
        // process's totals at the sample count one more 64 KiB block than
        // the replay has seen (its event is in a later frame).
        .sample(
            10 * MS,
            40 * MIB,
            9 * MIB,
            resident,
            8 * MIB + MIB / 2 + 64 * 1024,
            8 * MIB + 64 * 1024,
        )
        .rec(Record::End {
            time_ns: 20 * MS,
            dropped: 0,
        });
    b.write(&path);
    path
}

fn report(path: &std::path::Path) -> (String, serde_json::Value) {
    let (code, text, err) = common::heaptag(&["report", path.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let (_, json, _) = common::heaptag(&["report", "--format", "json", path.to_str().unwrap()], &[]);
    (text, serde_json::from_str(&json).unwrap())
}

fn row<'a>(text: &'a str, part: &str) -> &'a str {
    text.lines()
        .find(|l| l.trim_start().starts_with(part))
        .unwrap_or_else(|| panic!("no {part:?} row in\n{text}"))
}

#[test]
fn annotated_external_larger_than_outside_jemalloc_is_not_shown_larger() {
    // Outside jemalloc: 40 - 8 = 32 MiB; 100 MiB annotated (a mapping not
    // all resident).
    let (text, v) = report(&log("ext-larger", 8 * MIB, 100 * MIB));
    let d = &v["sources"][0]["decomposition"];
    assert_eq!(d["outside_jemalloc_bytes"], 32 * MIB);
    assert_eq!(d["external_bytes"], 100 * MIB, "JSON keeps what was annotated");
    let r = row(&text, "of which annotated external");
    assert!(r.contains("<= 32.0 MiB"), "{r}");
    assert!(r.contains("100.0 MiB counted, more than the whole"), "{r}");
}

#[test]
fn a_negative_outside_jemalloc_is_unknown() {
    // jemalloc resident 50 MiB > RSS 40 MiB: resident counts untouched pages.
    let (text, v) = report(&log("neg-outside", 50 * MIB, 0));
    let d = &v["sources"][0]["decomposition"];
    assert_eq!(d["outside_jemalloc_known"], false);
    let r = row(&text, "outside jemalloc");
    assert!(r.contains("unknown"), "{r}");
    assert!(r.contains("= -10.0 MiB"), "{r}");
    for part in ["of which annotated external", "of which heaptag's own"] {
        assert!(row(&text, part).contains("the whole is unknown"), "{text}");
    }
}

#[test]
fn tracked_and_small_come_from_the_same_sample() {
    let (_, v) = report(&log("one-instant", 8 * MIB, 0));
    let d = &v["sources"][0]["decomposition"];
    // Both from the sample's totals (not tracked from the replay): 8 MiB +
    // 64 KiB tracked, 0.5 MiB small.
    assert_eq!(d["tracked_bytes"], 8 * MIB + 64 * 1024);
    assert_eq!(d["small_bytes"], MIB / 2);
    let parts = d["tracked_bytes"].as_i64().unwrap()
        + d["small_bytes"].as_i64().unwrap()
        + d["jemalloc_rounding_bytes"].as_i64().unwrap()
        + d["allocator_overhead_bytes"].as_i64().unwrap()
        + d["outside_jemalloc_bytes"].as_i64().unwrap();
    assert_eq!(
        parts,
        d["rss_bytes"].as_i64().unwrap(),
        "the parts add up to RSS exactly: {d}"
    );
}
