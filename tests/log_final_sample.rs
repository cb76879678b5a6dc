//! The last counters record of a log holds the process's final figures,
//! however soon after the previous sample `finish()` comes. Session 37's
//! writer took a sample that was asked for at most once per 10 ms (or the
//! interval), `finish()`'s final one included: a block freed right after a
//! sample stayed alive in the log's last counters (a rotated log's test
//! caught it about every other run).

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use heaptag::Tag;
use heaptag_format::{LogReader, Record};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// The tag id defined for `stage`, and the tracked bytes of each counters
/// record of the log so far for it, in order.
fn counters_of(path: &std::path::Path, stage: &str) -> (Option<u32>, Vec<u64>) {
    let Ok(r) = LogReader::open(path) else {
        return (None, Vec::new());
    };
    let (mut id, mut live) = (None, Vec::new());
    // (a log being written: its last frame may be partial, a problem the
    // reader reports and this ignores)
    for rec in r {
        match rec {
            Record::TagDef {
                id: i, stage: Some(s), ..
            } if s == stage => id = Some(i),
            Record::Counters { tags, .. } => {
                if let Some(c) = tags.iter().find(|c| Some(c.tag) == id) {
                    live.push(c.tracked_live);
                }
            }
            _ => {}
        }
    }
    (id, live)
}

#[test]
fn the_last_counters_are_the_final_figures_even_right_after_a_sample() {
    let path = common::temp_log("final_sample");
    // An hour between timed samples: only the mark's and the final one come.
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_secs(3600))
        .start()
        .expect("log starts");
    let tag = Tag::new(Some(7), Some("final_sample_work"), Some(0));
    let block: Vec<u8> = tag.scope(|| vec![1u8; 4 << 20]);
    // A sample that sees the block, waited for in the file: the final
    // sample below then comes within a few ms of it.
    heaptag::mark("held");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, live) = counters_of(&path, "final_sample_work");
        if live.last().is_some_and(|&b| b >= 4 << 20) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no counters record with the block after 120 s: {live:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(black_box(block));
    let summary = heaptag::finish().expect("a log was running");
    assert!(summary.ended && summary.dropped == 0, "{summary:?}");

    let (id, live) = counters_of(&path, "final_sample_work");
    assert!(id.is_some(), "the tag is defined");
    assert!(live.len() >= 2, "the mark's sample and the final one: {live:?}");
    assert_eq!(
        live.last(),
        Some(&0),
        "the last counters: the block is freed ({live:?})"
    );
    let _ = std::fs::remove_file(&path);
}
