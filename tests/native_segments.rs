//! Issue 19 (`native` feature) with a rotated log: a native block alive when
//! a segment begins is carried into it and marked again (a `native` record
//! after the carried records), so a segment read alone knows it is C's.
#![cfg(feature = "native")]

mod common;

use std::time::Duration;

use heaptag::Tag;
use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

extern "C" {
    fn ht_buf_new(n: usize, seed: u64) -> *mut u8;
    fn ht_buf_free(p: *mut u8);
}

#[test]
fn carried_native_blocks_are_marked_in_later_segments() {
    let path = common::temp_log("native_segments");
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(5))
        .max_age(Duration::from_millis(20))
        .start()
        .expect("log starts");
    let tag = Tag::new(Some(8), Some("c_held"), Some(1));
    // SAFETY: a C buffer, freed below.
    let a = tag.scope(|| unsafe { ht_buf_new(1 << 20, 5) }) as u64;
    // Bounded: until a later segment exists, at most 200 rounds.
    let second = path.with_file_name("native_segments.0001.htlog");
    for _ in 0..200 {
        if second.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        heaptag::mark("tick");
    }
    std::thread::sleep(Duration::from_millis(30));
    heaptag::finish().expect("a log was running");
    assert!(second.exists(), "no second segment was written");
    let (recs, _) = common::read_all(&second);
    let carried = recs
        .iter()
        .position(|r| matches!(r, Record::Carried { addr, .. } if *addr == a));
    let marked = recs
        .iter()
        .position(|r| matches!(r, Record::Native { addr } if *addr == a));
    let (Some(c), Some(m)) = (carried, marked) else {
        panic!("segment 1: carried {carried:?}, native {marked:?}");
    };
    assert!(c < m, "the native mark comes after the carried record");
    // The whole set read: one native block, counted once.
    let v = common::report_json(&path);
    let row = v["sources"][0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["stage"] == "c_held")
        .cloned()
        .expect("c_held row");
    assert_eq!(row["native_live_end_bytes"], 1u64 << 20, "{row}");
    // SAFETY: made above, freed once.
    unsafe { ht_buf_free(a as *mut u8) };
    for i in 0..100 {
        let seg = if i == 0 {
            path.clone()
        } else {
            path.with_file_name(format!("native_segments.{i:04}.htlog"))
        };
        if std::fs::remove_file(seg).is_err() && i > 0 {
            break;
        }
    }
}
