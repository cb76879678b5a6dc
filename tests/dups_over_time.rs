//! Issue 14, through a real program under the allocator: duplicate verdicts
//! a CI gate can rely on. Each case has stages of its own, in one log:
//!
//! 1. a buffer filled with a copy's bytes only after the copy was freed (a
//!    mark in between saw it zero-filled) is no duplicate;
//! 2. a block that held X at a mark and was overwritten later still held X
//!    then, alongside its clone;
//! 3. a cache built once and cloned by six partitions blames the cloners,
//!    not the builder;
//! 4. two x2 episodes that never overlap waste one copy at the worst
//!    moment, not two;
//! 5. holders are grouped in words and lines fit a terminal.

mod common;

use std::hint::black_box;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use heaptag::Tag;
use serde_json::Value;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const SIZE: usize = 4 << 20;
const BYTES: u64 = SIZE as u64;

/// Deterministic, non-uniform content.
fn content(seed: u64) -> Vec<u64> {
    let mut v = vec![0u64; SIZE / 8];
    fill(&mut v, seed);
    v
}

fn fill(v: &mut [u64], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for e in v {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *e = x;
    }
}

fn run_program(log: &Path) {
    heaptag::LogConfig::new(log)
        .interval(Duration::from_millis(10))
        .start()
        .unwrap();

    // 1. Filled later: B is allocated while A holds X, seen zero-filled at a
    // mark after A is gone, and only then filled with X.
    let a = Tag::new(Some(1), Some("t_filled_a"), None).scope(|| content(10));
    let mut b = Tag::new(Some(1), Some("t_filled_b"), None).scope(|| vec![0u64; SIZE / 8]);
    drop(black_box(a));
    heaptag::mark("a freed, b still zero");
    fill(&mut b, 10);
    drop(black_box(b));

    // 2. Overwritten: A and its clone B hold X at a mark; then A is
    // overwritten with Y before it is freed.
    let mut a = Tag::new(Some(1), Some("t_over_a"), None).scope(|| content(11));
    let b = Tag::new(Some(1), Some("t_over_b"), None).scope(|| a.clone());
    heaptag::mark("a and its clone");
    fill(&mut a, 12);
    drop(black_box(a));
    drop(black_box(b));

    // 3. A cache built once under t_cache, cloned by six partitions of
    // t_synth that are all alive together.
    let cache = Arc::new(Tag::new(Some(1), Some("t_cache"), None).scope(|| content(13)));
    let barrier = Arc::new(Barrier::new(6));
    let hs: Vec<_> = (0..6)
        .map(|p| {
            let (cache, barrier) = (cache.clone(), barrier.clone());
            std::thread::spawn(move || {
                let _t = Tag::new(Some(1), Some("t_synth"), Some(p)).enter();
                let mine = (*cache).clone();
                barrier.wait();
                barrier.wait();
                drop(black_box(mine));
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }

    // 4. Two x2 episodes of one stage that never overlap.
    for seed in [14, 15] {
        let _t = Tag::new(Some(1), Some("t_episodes"), None).enter();
        let x = content(seed);
        let y = x.clone();
        drop(black_box(x));
        drop(black_box(y));
    }

    heaptag::mark("end");
    let summary = heaptag::finish().unwrap();
    assert_eq!(summary.dropped, 0, "nothing may be lost for these verdicts");
    drop(cache);
}

#[test]
fn duplicate_verdicts_a_gate_can_rely_on() {
    if common::in_child() {
        run_program(Path::new(&std::env::var("DUPS_LOG").unwrap()));
        return;
    }
    let log = common::temp_log("dups_over_time");
    let out = common::child(
        "duplicate_verdicts_a_gate_can_rely_on",
        &[("DUPS_LOG", log.to_str().unwrap())],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let v: Value = serde_json::from_str(&common::dups(&log, heaptag_analyzer::Format::Json)).unwrap();
    assert_eq!(v["schema_version"], 2);
    let s = &v["sources"][0];
    assert!(s["unverified"].is_null(), "{}", s["unverified"]);
    let verdict = |stage: &str| -> Value {
        s["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["stage"] == stage)
            .cloned()
            .unwrap_or_else(|| panic!("no verdict for {stage}: {}", s["verdicts"]))
    };
    let groups: Vec<&Value> = s["duplicated"].as_array().unwrap().iter().collect();
    let group_of = |stage: &str| -> Vec<&Value> {
        groups
            .iter()
            .copied()
            .filter(|g| {
                g["original"]["stage"] == stage
                    || g["extra_copies"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|c| c["stage"] == stage)
            })
            .collect()
    };

    // 1. Filled later: no duplicate, both stages shared once.
    for stage in ["t_filled_a", "t_filled_b"] {
        assert!(group_of(stage).is_empty(), "{stage}: {:?}", group_of(stage));
    }
    assert_eq!(verdict("t_filled_b")["verdict"], "SHARED ONCE");
    let (failed, out) = common::check(
        &log,
        "case1",
        "[[rule]]\nname = \"filled later\"\nstage = \"t_filled_*\"\nmax_copies = 1\n",
    );
    assert!(!failed, "max_copies = 1 must pass on the buffer filled later:\n{out}");

    // 2. Overwritten: at the mark A and its clone both held X.
    let g = group_of("t_over_b");
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0]["copies"], 2);
    assert_eq!(g[0]["original"]["stage"], "t_over_a");
    assert_eq!(g[0]["extra_copies"][0]["stage"], "t_over_b");
    assert_eq!(verdict("t_over_b")["verdict"], "DUPLICATED");
    assert_eq!(verdict("t_over_a")["verdict"], "SHARED ONCE");
    let (failed, _) = common::check(&log, "case2", "[[rule]]\nstage = \"t_over_*\"\nmax_copies = 1\n");
    assert!(failed, "a real duplicate fails max_copies = 1");

    // 3. The cloners are blamed, the builder holds the original once.
    let synth = verdict("t_synth");
    assert_eq!(synth["verdict"], "DUPLICATED", "{synth}");
    assert_eq!(synth["copies"], 7, "the cache and six clones: {synth}");
    assert_eq!(synth["copies_made"], 6, "{synth}");
    assert_eq!(synth["copied_from"], serde_json::json!(["t_cache"]), "{synth}");
    assert_eq!(synth["wasted_bytes"], 6 * BYTES, "{synth}");
    let cache = verdict("t_cache");
    assert_eq!(cache["verdict"], "SHARED ONCE", "{cache}");
    assert_eq!(cache["wasted_bytes"], 0);
    assert_eq!(cache["originals"], 1, "{cache}");
    let g = group_of("t_cache");
    assert_eq!(g.len(), 1);
    assert_eq!(g[0]["original"]["stage"], "t_cache");
    assert_eq!(g[0]["extra_copies"].as_array().unwrap().len(), 6);
    assert_eq!(g[0]["copies_by"], "6 partitions of job 1 in t_synth");
    let (failed, out) = common::check(&log, "case3", "[[rule]]\nstage = \"t_synth\"\nmax_copies = 1\n");
    assert!(failed, "{out}");
    assert!(out.contains("original job=1 stage=t_cache"), "{out}");

    // 4. Waste at one moment: one extra copy at a time.
    let epi = verdict("t_episodes");
    assert_eq!(epi["verdict"], "DUPLICATED");
    assert_eq!(epi["wasted_bytes"], BYTES, "two episodes that never overlap: {epi}");
    assert_eq!(group_of("t_episodes").len(), 2);
    // The run's worst moment is case 3's six clones, each counted once.
    assert_eq!(s["worst"]["wasted_bytes"], 6 * BYTES, "{}", s["worst"]);
    assert_eq!(s["worst"]["extra_copies"], 6);

    // 5. Readable text: no "transient" label, held-by in words, narrow lines.
    let text = common::dups(&log, heaptag_analyzer::Format::Text);
    assert!(!text.contains("transient"), "{text}");
    assert!(
        text.contains("t_synth: copies of contents first made by t_cache, up to x7"),
        "{text}"
    );
    assert!(
        text.contains("t_cache: holds the original of 1 content that other stages copied, each once"),
        "{text}"
    );
    for line in text.lines() {
        assert!(line.chars().count() <= 200, "{} columns: {line}", line.chars().count());
    }
}
