//! Verdict rules on crafted logs: a stage shares in a duplicate only while it
//! holds a copy; without fingerprints, site and size give a suspected finding.

mod common;

use common::{LogBuilder, MIB, MS};
use heaptag_analyzer::{run, Command, Format};
use heaptag_format::{Fill, FpWhen, Record};
use serde_json::Value;

fn dups(b: &mut LogBuilder, name: &str) -> Value {
    let p = common::temp(name);
    b.write(&p);
    let mut out = Vec::new();
    run(
        &Command::Dups {
            logs: vec![p],
            format: Format::Json,
        },
        &mut out,
    )
    .unwrap();
    serde_json::from_slice(&out).unwrap()
}

fn verdict(v: &Value, stage: &str) -> Value {
    v["sources"][0]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["stage"] == stage)
        .cloned()
        .unwrap()
}

#[test]
fn a_lone_later_copy_does_not_make_its_stage_a_duplicate() {
    let mut b = LogBuilder::new();
    b.tag(1, None, Some("a"), Some(0))
        .tag(2, None, Some("a"), Some(1))
        .tag(3, None, Some("b"), None);
    // Stage a: two copies alive together, both freed by 30 ms.
    b.alloc(10 * MS, 1, 0, 0x1000, 2 * MIB)
        .alloc(11 * MS, 2, 0, 0x2000, 2 * MIB)
        .fp(20 * MS, 0x1000, 2 * MIB, 7, Fill::Mixed, FpWhen::Free)
        .free(20 * MS, 0x1000, 2 * MIB)
        .fp(30 * MS, 0x2000, 2 * MIB, 7, Fill::Mixed, FpWhen::Free)
        .free(30 * MS, 0x2000, 2 * MIB);
    // Stage b, later: one copy of the same content.
    b.alloc(50 * MS, 3, 0, 0x3000, 2 * MIB)
        .fp(60 * MS, 0x3000, 2 * MIB, 7, Fill::Mixed, FpWhen::Finish)
        .rec(Record::End {
            time_ns: 60 * MS,
            dropped: 0,
        });
    let v = dups(&mut b, "lone");
    assert_eq!(verdict(&v, "a")["verdict"], "DUPLICATED");
    assert_eq!(verdict(&v, "a")["wasted_bytes"], 2 * MIB);
    assert_eq!(verdict(&v, "b")["verdict"], "SHARED ONCE");
}

#[test]
fn without_fingerprints_site_and_size_give_a_suspected_duplicate() {
    let mut b = LogBuilder::new();
    b.tag(1, None, Some("pce"), Some(0)).tag(2, None, Some("pce"), Some(1));
    b.alloc(10 * MS, 1, 5, 0x1000, 2 * MIB)
        .alloc(11 * MS, 2, 5, 0x2000, 2 * MIB)
        .free(20 * MS, 0x1000, 2 * MIB)
        .free(21 * MS, 0x2000, 2 * MIB)
        .rec(Record::End {
            time_ns: 30 * MS,
            dropped: 0,
        });
    let v = dups(&mut b, "suspected");
    let pce = verdict(&v, "pce");
    assert_eq!(pce["verdict"], "SUSPECTED DUPLICATE");
    assert_eq!(pce["suspected"], true);
    assert_eq!(v["sources"][0]["fingerprints"], false);
    let g = &v["sources"][0]["duplicated"][0];
    assert_eq!(g["suspected"], true);
    assert_eq!(g["hash"], Value::Null);
}

/// Blocks freed sooner than their size takes to write at
/// `heaptag_format::FILL_BYTES_PER_NS` carry no fingerprint (the allocator
/// takes none) and held no content: not a suspected duplicate, however
/// many overlap at one site and size; counted as `unfilled_blocks`. The
/// same blocks living one nanosecond longer are suspected again.
#[test]
fn blocks_freed_before_they_could_be_filled_are_no_suspects() {
    let size = 64 * MIB;
    let window = size / heaptag_format::FILL_BYTES_PER_NS; // 65,536 ns
    let run = |life: u64, name: &str| {
        let mut b = LogBuilder::new();
        b.tag(1, None, Some("scratch"), Some(0))
            .tag(2, None, Some("scratch"), Some(1));
        // Two partitions' scratch buffers alive together, freed at once.
        for round in 0..3u64 {
            let t = (10 + round) * MS;
            b.alloc(t, 1, 5, 0x1000_0000, size)
                .alloc(t + 1, 2, 5, 0x9000_0000, size)
                .free(t + life, 0x1000_0000, size)
                .free(t + 1 + life, 0x9000_0000, size);
        }
        b.rec(Record::End {
            time_ns: 30 * MS,
            dropped: 0,
        });
        dups(&mut b, name)
    };
    let v = run(window - 1, "unfilled");
    let verdicts = v["sources"][0]["verdicts"].as_array().unwrap();
    assert!(
        verdicts.iter().all(|x| x["stage"] != "scratch"),
        "a stage that held no content has no verdict: {v}"
    );
    assert_eq!(v["sources"][0]["unfilled_blocks"], 6, "{v}");
    assert!(v["sources"][0]["duplicated"].as_array().unwrap().is_empty(), "{v}");
    let v = run(window, "filled");
    assert_eq!(verdict(&v, "scratch")["verdict"], "SUSPECTED DUPLICATE", "{v}");
    assert_eq!(v["sources"][0].get("unfilled_blocks"), None, "absent when 0: {v}");
}

#[test]
fn a_moving_realloc_keeps_its_record_across_the_reuse_of_its_old_address() {
    let mut b = LogBuilder::new();
    b.tag(1, None, Some("grow"), None).tag(2, None, Some("other"), None);
    b.alloc(10 * MS, 1, 0, 0x1000, MIB)
        .rec(Record::ReallocBegin {
            time_ns: 11 * MS,
            thread: 1,
            addr: 0x1000,
        })
        // Another thread gets the old address before the Realloc is queued.
        .alloc(12 * MS, 2, 0, 0x1000, MIB)
        .rec(Record::Realloc {
            time_ns: 13 * MS,
            thread: 1,
            tag: 1,
            old_addr: 0x1000,
            old_size: MIB,
            addr: 0x9000,
            size: 4 * MIB,
        })
        .rec(Record::End {
            time_ns: 20 * MS,
            dropped: 0,
        });
    let p = common::temp("realloc");
    b.write(&p);
    let mut out = Vec::new();
    run(
        &Command::Report {
            logs: vec![p],
            format: Format::Json,
        },
        &mut out,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let row = |stage: &str| {
        v["sources"][0]["tags"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["stage"] == stage)
            .cloned()
            .unwrap()
    };
    assert_eq!(row("grow")["live_end_bytes"], 4 * MIB);
    assert_eq!(row("other")["live_end_bytes"], MIB);
    assert_eq!(v["sources"][0]["source"]["unmatched_frees"], 0);
}
