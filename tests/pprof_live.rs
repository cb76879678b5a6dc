//! `heaptag::pprof::heap_profile()` in a process whose threads allocate and
//! free (tracked and small blocks, under tags) while profiles are taken: it
//! never deadlocks with the allocator, and once the threads are quiet its
//! figures are the hand-computed live bytes and the snapshot's counters;
//! and a tag whose sample outweighs what it allocated keeps exact allocated
//! figures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use heaptag_pprof::proto::Profile;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn sum(p: &Profile, index: usize, stage: &str) -> i64 {
    let s = |i: i64| p.string_table[i as usize].as_str();
    p.sample
        .iter()
        .filter(|x| x.label.iter().any(|l| s(l.key) == "stage" && s(l.str) == stage))
        .map(|x| x.value[index])
        .sum()
}

#[test]
fn profiles_under_concurrent_allocation_then_exact_figures() {
    // Stacks are captured while the log runs: start it, so the profile has them.
    let log = std::env::temp_dir().join(format!("heaptag-pprof-live-{}.htlog", std::process::id()));
    heaptag::LogConfig::new(&log).start().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3u32)
        .map(|w| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let _stage = heaptag::stage("churn");
                let _part = heaptag::partition(w);
                let mut rounds = 0u64;
                // Bounded: stops when asked, or after many rounds.
                while !stop.load(Ordering::Relaxed) && rounds < 2_000_000 {
                    let big = vec![w as u8; 200 << 10];
                    let small: Vec<String> = (0..16).map(|i| format!("{w}-{i}")).collect();
                    std::hint::black_box((&big, &small));
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    for _ in 0..20 {
        let p = heaptag_pprof::decode(&heaptag::pprof::heap_profile()).unwrap();
        assert_eq!(p.sample_type.len(), 4);
    }
    stop.store(true, Ordering::Relaxed);
    let rounds: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(rounds > 0);

    // Quiet now: 5 blocks of 100 KiB under stage "kept", allocated here.
    let kept: Vec<Vec<u8>> = {
        let _stage = heaptag::stage("kept");
        (0..5).map(|i| vec![i as u8; 100 << 10]).collect()
    };
    let p = heaptag_pprof::decode(&heaptag::pprof::heap_profile()).unwrap();
    assert_eq!(sum(&p, 3, "kept"), 5 * (100 << 10), "in use: the 5 blocks, exactly");
    assert_eq!(sum(&p, 2, "kept"), 5);
    let snap = heaptag::snapshot();
    let kept_tag = snap.tags_where(|t| t.stage == Some("kept")).next().unwrap();
    assert_eq!(
        sum(&p, 1, "kept") as u64,
        kept_tag.alloc_bytes,
        "allocated: the tag's counter"
    );
    assert_eq!(sum(&p, 0, "kept") as u64, kept_tag.alloc_count);
    // The churned tags hold nothing tracked now.
    let churn_tracked: u64 = snap
        .tags_where(|t| t.stage == Some("churn"))
        .map(|t| t.tracked.live_bytes)
        .sum();
    assert_eq!(churn_tracked, 0);
    // The kept blocks' stack names this test's function (symbolized in process).
    let s = |i: i64| p.string_table[i as usize].as_str();
    let named = p.sample.iter().any(|x| {
        x.label.iter().any(|l| s(l.str) == "kept")
            && x.location_id.iter().any(|&id| {
                let loc = p.location.iter().find(|l| l.id == id).unwrap();
                loc.line.iter().any(|ln| {
                    let f = p.function.iter().find(|f| f.id == ln.function_id).unwrap();
                    s(f.name).contains("profiles_under_concurrent_allocation")
                        && s(f.filename).ends_with("pprof_live.rs")
                })
            })
    });
    assert!(named, "a frame of this test, with its file");
    drop(kept);
    heaptag::finish();
    let _ = std::fs::remove_file(&log);
}

/// A tag whose one small block was sampled: the sample stands for
/// `s / p(s)` bytes (p(s) = 1 - exp(-s/R), R = 512 KiB: at least R), far
/// more than the tag allocated. Its in-use values are still the snapshot's
/// estimate, and its allocated values still sum to its exact counters (the
/// live sample gets the tag's exact small bytes as its share; clamping the
/// rest at 0 used to leave the sample's whole weight there, which made
/// `tests/pprof_server.rs` fail whenever a partition's small block was
/// sampled). Deterministic: partitions are tried, each with one block,
/// until one is sampled (p = 0.11 each; bounded).
#[test]
fn a_sample_outweighing_its_tags_allocations_keeps_the_exact_allocated_figures() {
    const SIZE: usize = 60_000; // below the 64 KiB threshold: small, sampled
    let mut kept = Vec::with_capacity(2000);
    let sampled = (0..2000u32).find(|&k| {
        let block = heaptag::Tag::new(None, Some("outweighed"), Some(k)).scope(|| vec![1u8; SIZE]);
        kept.push(block);
        let snap = heaptag::snapshot();
        let t = snap
            .tags_where(|t| t.stage == Some("outweighed") && t.partition == Some(k))
            .next()
            .unwrap();
        t.small.sampled_live == 1
    });
    let k = sampled.expect("one of 2000 blocks sampled (each with p = 0.11)");
    let p = heaptag_pprof::decode(&heaptag::pprof::heap_profile()).unwrap();
    let snap = heaptag::snapshot();
    let t = snap
        .tags_where(|t| t.stage == Some("outweighed") && t.partition == Some(k))
        .next()
        .unwrap();
    // Hand-computed: the tag allocated one block of SIZE bytes; its live
    // estimate is that block's weight, some 555 KB.
    assert_eq!((t.alloc_bytes, t.alloc_count), (SIZE as u64, 1));
    assert!(t.live_bytes > 9 * SIZE as u64, "the weight outweighs the block: {t:?}");
    let s = |i: i64| p.string_table[i as usize].as_str();
    let part = k.to_string();
    let of_tag = |index: usize| -> i64 {
        p.sample
            .iter()
            .filter(|x| {
                x.label.iter().any(|l| s(l.key) == "stage" && s(l.str) == "outweighed")
                    && x.label.iter().any(|l| s(l.key) == "partition" && s(l.str) == part)
            })
            .map(|x| x.value[index])
            .sum()
    };
    assert_eq!(of_tag(3) as u64, t.live_bytes, "in use: the estimate");
    assert_eq!(of_tag(1), SIZE as i64, "allocated: the tag's exact bytes");
    assert_eq!(of_tag(0), 1, "allocated: the tag's one block");
    drop(kept);
}

/// The cost of one profile with many live blocks, for docs/PERFORMANCE.md
/// (prints, asserts nothing on time): `cargo test --release --features
/// pprof --test pprof_live -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_profile_cost() {
    let log = std::env::temp_dir().join(format!("heaptag-pprof-cost-{}.htlog", std::process::id()));
    heaptag::LogConfig::new(&log).start().unwrap();
    let mut keep = Vec::new();
    for i in 0..10_000u32 {
        let _stage = heaptag::stage(["witness", "table", "proof", "msm"][(i % 4) as usize]);
        let _part = heaptag::partition(i % 16);
        keep.push(vec![i as u8; 64 << 10]);
        for j in 0..20 {
            keep.push(vec![j as u8; 1000]);
        }
    }
    for round in ["first (symbolizes)", "second (cached symbols)"] {
        let t = std::time::Instant::now();
        let gz = heaptag::pprof::heap_profile();
        let took = t.elapsed();
        let p = heaptag_pprof::decode(&gz).unwrap();
        println!(
            "heap_profile {round}: {:.1} ms, {} samples, {} locations, {} KiB gzipped, {} blocks recorded",
            took.as_secs_f64() * 1e3,
            p.sample.len(),
            p.location.len(),
            gz.len() / 1024,
            heaptag::live_blocks().len()
        );
    }
    drop(keep);
    heaptag::finish();
    let _ = std::fs::remove_file(&log);
}
