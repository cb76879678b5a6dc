//! Issue 16: the analyzer's budgets on long runs change no figure. Block
//! lifetimes that can be part of no duplicate are left out past a budget
//! (lowered here so a small log crosses it many times): the duplicate
//! findings must be those of the log analyzed whole.

mod common;

use common::{LogBuilder, MIB, MS};
use heaptag_analyzer::dups;
use heaptag_analyzer::model::{LoadOptions, Model};
use heaptag_format::{Fill, FpWhen, Record};

/// 3,000 one-after-another 1 MiB blocks of distinct contents, a 3 MiB block
/// alive throughout, and in the middle two overlapping copies of one
/// content (stages `a` and `b`) and two overlapping blocks of one site and
/// size that are never fingerprinted (a suspected pair, stage `c`).
fn long_log(path: &std::path::Path) {
    let mut b = LogBuilder::new();
    b.tag(1, Some(1), Some("a"), None)
        .tag(2, Some(1), Some("b"), None)
        .tag(3, Some(1), Some("c"), None)
        .alloc(0, 1, 0, 0x9000_0000, 3 * MIB)
        .flush();
    let mut t = MS;
    for i in 0..3000u64 {
        let addr = 0x1000_0000 + (i % 7) * 0x100_0000;
        b.alloc(t, 1 + (i % 2) as u32, 0, addr, MIB);
        t += MS;
        b.fp(t, addr, MIB, 0x1_0000 + i, Fill::Mixed, FpWhen::Free)
            .free(t, addr, MIB);
        t += MS;
        if i == 1500 {
            b.alloc(t, 1, 5, 0x5000_0000, 2 * MIB)
                .alloc(t + 1, 2, 6, 0x5100_0000, 2 * MIB)
                .alloc(t + 2, 3, 7, 0x5200_0000, 4 * MIB)
                .alloc(t + 3, 3, 7, 0x5300_0000, 4 * MIB);
            t += 10 * MS;
            b.fp(t, 0x5000_0000, 2 * MIB, 0xD0B, Fill::Mixed, FpWhen::Free)
                .free(t, 0x5000_0000, 2 * MIB)
                .fp(t + 1, 0x5100_0000, 2 * MIB, 0xD0B, Fill::Mixed, FpWhen::Free)
                .free(t + 1, 0x5100_0000, 2 * MIB)
                .free(t + 2, 0x5200_0000, 4 * MIB)
                .free(t + 3, 0x5300_0000, 4 * MIB);
            t += MS;
        }
        if i % 100 == 0 {
            b.flush();
        }
    }
    b.rec(Record::End { time_ns: t, dropped: 0 });
    b.write(path);
}

fn analyzed(path: &std::path::Path, kept: Option<usize>) -> (Model, serde_json::Value) {
    let opts = LoadOptions {
        intervals: true,
        intervals_kept: kept,
        ..LoadOptions::default()
    };
    let m = Model::load_set(&[path.to_path_buf()], &opts).unwrap().remove(0);
    let mut v = serde_json::to_value(dups::analyze(&m)).unwrap();
    v.as_object_mut().unwrap().remove("lifetimes_left_out");
    (m, v)
}

#[test]
fn leaving_out_lifetimes_that_overlap_no_same_content_changes_no_finding() {
    let path = common::temp("long-run-dups");
    long_log(&path);
    let (whole, want) = analyzed(&path, None);
    assert_eq!(whole.intervals_pruned, 0);
    let (pruned, got) = analyzed(&path, Some(64));
    // Pruned many times over, the 3 MiB block alive throughout (another
    // size) holding nothing back.
    assert!(pruned.intervals_pruned > 2900, "{}", pruned.intervals_pruned);
    assert!(pruned.intervals.len() < 200, "{}", pruned.intervals.len());
    assert_eq!(got, want);
    // And the findings are the ones built in: one duplicated content (a
    // and b), one suspected pair (c), 3,000 distinct contents besides.
    let d = &want["duplicated"];
    assert_eq!(d.as_array().unwrap().len(), 2, "{d}");
    let verdicts: Vec<(String, String, u64)> = want["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["stage"].as_str().unwrap().to_string(),
                v["verdict"].as_str().unwrap().to_string(),
                v["contents"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        verdicts.contains(&("b".into(), "DUPLICATED".into(), 1501)),
        "{verdicts:?}"
    );
    assert!(
        verdicts.contains(&("c".into(), "SUSPECTED DUPLICATE".into(), 1)),
        "{verdicts:?}"
    );
    std::fs::remove_file(&path).ok();
}
