//! `heaptag dups` on a real run: six ways large data is held, one stage each,
//! in one log, and the verdict for each (through the analyzer's JSON).

mod common;

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use heaptag::Tag;
use serde_json::Value;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const SIZE: usize = 4 << 20;

/// Deterministic, non-uniform content.
fn content(seed: u64) -> Vec<u64> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..SIZE / 8)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x
        })
        .collect()
}

/// Runs `f(partition)` on `n` threads under `stage`, partitions 0..n, all
/// alive together until each has finished its part (a barrier).
fn partitions(stage: &'static str, n: u32, f: impl Fn(u32) -> Vec<u64> + Send + Sync + 'static) {
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(n as usize));
    let hs: Vec<_> = (0..n)
        .map(|p| {
            let (f, barrier) = (f.clone(), barrier.clone());
            std::thread::spawn(move || {
                let _t = Tag::new(Some(1), Some(stage), Some(p)).enter();
                let data = f(p);
                barrier.wait(); // every partition's data is alive here
                std::thread::sleep(Duration::from_millis(5));
                barrier.wait();
                drop(black_box(data));
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn six_ways_to_hold_large_data() {
    let path = common::temp_log("dups");
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(10))
        .start()
        .unwrap();

    // 1. Shared once: built once, read by every partition.
    let shared = Arc::new(Tag::new(Some(1), Some("s_shared"), None).scope(|| content(1)));
    {
        let s = shared.clone();
        partitions("s_shared_readers", 3, move |p| {
            black_box(s[p as usize]);
            Vec::new()
        });
    }
    // 2. Per partition: each builds its own identical copy.
    partitions("s_per_partition", 3, |_| content(2));
    // 3. Cloned per partition from a shared original.
    let original = Arc::new(Tag::new(Some(1), Some("s_cloned"), None).scope(|| content(3)));
    {
        let o = original.clone();
        partitions("s_cloned", 2, move |_| (*o).clone());
    }
    // 4. A race: two jobs extract the same data, both alive a while, one dropped.
    let winner = Tag::new(Some(1), Some("s_race"), None).scope(|| content(4));
    let loser = Tag::new(Some(2), Some("s_race"), None).scope(|| content(4));
    std::thread::sleep(Duration::from_millis(20));
    drop(black_box(loser));
    // 5. One site, distinct data per partition: never a duplicate.
    partitions("s_witness", 3, |p| content(100 + u64::from(p)));
    // 6. Zero-filled buffers: never duplicates.
    partitions("s_zeros", 3, |_| vec![0u64; SIZE / 8]);

    heaptag::mark("end");
    drop(shared);
    let summary = heaptag::finish().unwrap();
    assert_eq!(summary.dropped, 0);
    drop(winner);
    drop(original);

    let mut out = Vec::new();
    heaptag_analyzer::run(
        &heaptag_analyzer::Command::Dups {
            logs: vec![path.clone()],
            format: heaptag_analyzer::Format::Json,
        },
        &mut out,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["schema_version"], 2);
    let s = &v["sources"][0];
    assert_eq!(s["fingerprints"], true);
    let verdict = |stage: &str| -> Value {
        s["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["stage"] == stage)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let size = SIZE as u64;

    assert_eq!(verdict("s_shared")["verdict"], "SHARED ONCE");
    assert_eq!(verdict("s_shared")["copies"], 1);

    let pp = verdict("s_per_partition");
    assert_eq!(pp["verdict"], "DUPLICATED", "{pp}");
    assert_eq!(pp["copies"], 3);
    assert_eq!(pp["wasted_bytes"], 2 * size);

    let cl = verdict("s_cloned");
    assert_eq!(cl["verdict"], "DUPLICATED", "{cl}");
    assert_eq!(cl["copies"], 3, "the original and two clones");
    assert_eq!(cl["wasted_bytes"], 2 * size);

    let race = verdict("s_race");
    assert_eq!(race["verdict"], "DUPLICATED", "{race}");
    assert_eq!(race["copies"], 2);
    let group = s["duplicated"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["original"]["stage"] == "s_race")
        .unwrap();
    assert_eq!(group["transient"], true, "{group}");
    let (from, until) = (group["from_s"].as_f64().unwrap(), group["until_s"].as_f64().unwrap());
    assert!(until - from >= 0.015, "both copies alive ~20 ms: {from}..{until}");
    // The first extraction is the original, the second the copy.
    assert_eq!(group["original"]["tag"], "job=1 stage=s_race", "{group}");
    let copies: Vec<&str> = group["extra_copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["tag"].as_str().unwrap())
        .collect();
    assert_eq!(copies, vec!["job=2 stage=s_race"]);

    let w = verdict("s_witness");
    assert_eq!(w["verdict"], "SHARED ONCE", "distinct per-partition data: {w}");
    assert_eq!(w["contents"], 3);

    assert_ne!(verdict("s_zeros")["verdict"], "DUPLICATED");
    assert!(s["filled_blocks"].as_u64().unwrap() >= 3);

    // Only the three duplicated stages appear among the duplicated contents.
    for g in s["duplicated"].as_array().unwrap() {
        let holders = g["extra_copies"].as_array().unwrap().iter().chain([&g["original"]]);
        for h in holders {
            assert!(
                ["s_per_partition", "s_cloned", "s_race"].contains(&h["stage"].as_str().unwrap()),
                "{g}"
            );
        }
    }
    // Each extra copy counted once: the worst moment of the run wastes no
    // more than the largest stage's worst plus the others alive with it.
    assert!(
        s["worst"]["wasted_bytes"].as_u64().unwrap() <= 2 * size,
        "{}",
        s["worst"]
    );
}
