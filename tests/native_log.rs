//! Issue 19 (`native` feature), through the log: C buffers and a C++ vector
//! appear as `alloc` records each followed by a `native` record, `heaptag
//! report` shows them per tag as native (and in the RSS decomposition), and
//! `heaptag dups` fingerprints them: two partitions holding the same C
//! buffer are a duplicate.
#![cfg(feature = "native")]

mod common;

use std::collections::HashSet;
use std::ffi::c_void;
use std::time::Duration;

use heaptag::Tag;
use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

extern "C" {
    fn ht_buf_new(n: usize, seed: u64) -> *mut u8;
    fn ht_buf_free(p: *mut u8);
    fn ht_vec_new(n: usize, seed: u64) -> *mut c_void;
    fn ht_vec_free(v: *mut c_void);
}

const MIB: usize = 1 << 20;

#[test]
fn native_blocks_reach_the_log_report_and_dups() {
    let path = common::temp_log("native_log");
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(10))
        .start()
        .expect("log starts");
    let part = |p| Tag::new(Some(7), Some("c_side"), Some(p));
    // The same 4 MiB content built by partitions 0 and 1 (a duplicate), a
    // C++ vector of 2 MiB under partition 2.
    // SAFETY: the C/C++ functions of tests/native/, valid arguments.
    let (a, b, v) = unsafe {
        (
            part(0).scope(|| ht_buf_new(4 * MIB, 42)) as usize,
            part(1).scope(|| ht_buf_new(4 * MIB, 42)) as usize,
            part(2).scope(|| ht_vec_new(MIB / 4, 9)) as usize,
        )
    };
    std::thread::sleep(Duration::from_millis(50)); // memory samples
    heaptag::mark("all alive");
    // Partition 1's copy freed by another thread.
    // SAFETY: made above, freed once.
    std::thread::spawn(move || unsafe { ht_buf_free(b as *mut u8) })
        .join()
        .unwrap();
    heaptag::finish().expect("a log was running");

    let (recs, reader) = common::read_all(&path);
    assert_eq!(reader.unknown_records(), 0);
    let allocs: HashSet<u64> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Alloc { addr, .. } => Some(*addr),
            _ => None,
        })
        .collect();
    let natives: Vec<u64> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Native { addr } => Some(*addr),
            _ => None,
        })
        .collect();
    for want in [a, b] {
        assert!(natives.contains(&(want as u64)), "no native record for {want:#x}");
    }
    assert!(natives.len() >= 3, "the vector's storage too: {natives:?}");
    // Each native record names a block allocated before it.
    for (i, r) in recs.iter().enumerate() {
        if let Record::Native { addr } = r {
            let before = recs[..i].iter().rev().find_map(|r| match r {
                Record::Alloc { addr: x, .. } | Record::SampleAlloc { addr: x, .. } if x == addr => Some(()),
                _ => None,
            });
            assert!(before.is_some(), "native record {addr:#x} without its alloc");
        }
    }
    assert!(allocs.contains(&(a as u64)));

    // report: per tag, native figures; partition 0 still holds its 4 MiB.
    let v_json = common::report_json(&path);
    let tags = v_json["sources"][0]["tags"].as_array().expect("tags");
    let row = |p: u64| {
        tags.iter()
            .find(|t| t["stage"] == "c_side" && t["partition"] == p)
            .unwrap_or_else(|| panic!("no row for partition {p}: {tags:?}"))
    };
    assert_eq!(row(0)["native_live_end_bytes"], 4 * MIB as u64);
    assert_eq!(row(0)["native_peak_bytes"], 4 * MIB as u64);
    // 0, so left out of the JSON.
    assert_eq!(
        row(1).get("native_live_end_bytes"),
        None,
        "freed on another thread, charged back"
    );
    assert_eq!(row(1)["native_allocated_bytes"], 4 * MIB as u64);
    assert_eq!(row(2)["native_peak_bytes"], 2 * MIB as u64);
    let (text, _) = common::analyze(&heaptag_analyzer::Command::Report {
        logs: vec![path.clone()],
        format: heaptag_analyzer::Format::Text,
    });
    assert!(text.contains("native at end"), "{text}");
    let dec = &v_json["sources"][0]["decomposition"];
    assert!(
        dec["native_bytes"].as_u64().unwrap_or(0) >= 4 * MIB as u64,
        "native bytes in the RSS decomposition: {dec}"
    );

    // dups: partitions 0 and 1 held the same C buffer at once.
    let dups = common::dups(&path, heaptag_analyzer::Format::Text);
    let line = dups
        .lines()
        .find(|l| l.starts_with("c_side"))
        .unwrap_or_else(|| panic!("no verdict for c_side:\n{dups}"));
    assert!(line.contains("DUPLICATED"), "{dups}");

    // SAFETY: made above, freed once.
    unsafe {
        ht_buf_free(a as *mut u8);
        ht_vec_free(v as *mut c_void);
    }
    let _ = std::fs::remove_file(&path);
}
