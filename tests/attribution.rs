//! Exact attribution of tracked blocks: many threads, two jobs, realloc growth
//! and shrinking, blocks freed by other threads under other tags.

use std::hint::black_box;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};

use heaptag::{Snapshot, Tag};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const THRESHOLD: usize = 64 * 1024;

fn tracked_live(s: &Snapshot, tag: &Tag) -> u64 {
    s.tag(tag).map_or(0, |t| t.tracked.live_bytes)
}

fn tag(job: u64, partition: u32) -> Tag {
    Tag::new(Some(job), Some("stress"), Some(partition))
}

/// What one worker expects to be charged to its tag right now.
fn size_if_tracked(bytes: usize) -> u64 {
    if bytes >= THRESHOLD {
        bytes as u64
    } else {
        0
    }
}

#[test]
fn stress_many_threads_exact_tracked_live_per_phase() {
    const JOBS: u64 = 2;
    const PARTS: u32 = 3;
    const WORKERS: usize = (JOBS as usize) * (PARTS as usize);
    let barrier = Arc::new(Barrier::new(WORKERS + 1));
    // Worker i hands blocks to worker (i + 1) % WORKERS.
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..WORKERS).map(|_| mpsc::channel::<Vec<u8>>()).unzip();
    let (report_tx, report_rx) = mpsc::channel::<(usize, u64, u64)>();
    let mut handles = Vec::new();
    for (i, rx) in rxs.into_iter().enumerate() {
        let barrier = barrier.clone();
        let next = txs[(i + 1) % WORKERS].clone();
        let report = report_tx.clone();
        handles.push(std::thread::spawn(move || {
            let job = i as u64 / u64::from(PARTS) + 1;
            let part = i as u32 % PARTS;
            let _j = heaptag::job(job);
            let _p = heaptag::partition(part);
            let _s = heaptag::stage("stress");

            // Phase 1: large blocks of odd sizes, lots of small ones, and a
            // Vec grown by realloc across the threshold.
            let mut large: Vec<Vec<u8>> = (0..8)
                .map(|k| vec![i as u8 + 1; THRESHOLD + 4096 * k + 17 * i])
                .collect();
            let small: Vec<Box<[u8; 48]>> = (0..5000).map(|_| Box::new([7u8; 48])).collect();
            let mut grown: Vec<u64> = Vec::new();
            for x in 0..(40_000 + 1000 * i as u64) {
                grown.push(x);
            }
            let expect: u64 = large.iter().map(|b| b.len() as u64).sum::<u64>() + size_if_tracked(grown.capacity() * 8);
            report.send((i, expect, 0)).unwrap();
            barrier.wait(); // phase 1 done
            barrier.wait(); // checked

            // Phase 2: shrink the Vec below the threshold (tracked -> small),
            // give half the large blocks to the next worker, free theirs here.
            grown.truncate(100);
            grown.shrink_to_fit();
            let expect = large.iter().map(|b| b.len() as u64).sum::<u64>() + size_if_tracked(grown.capacity() * 8);
            let given: Vec<Vec<u8>> = large.drain(..4).collect();
            let given_bytes: u64 = given.iter().map(|b| b.len() as u64).sum();
            for b in given {
                next.send(b).unwrap();
            }
            drop(next);
            let mut received = 0;
            while received < 4 {
                let b = rx.recv().unwrap();
                black_box(&b);
                drop(b); // freed here, charged to the allocating worker
                received += 1;
            }
            report.send((i, expect - given_bytes, given_bytes)).unwrap();
            barrier.wait(); // phase 2 done
            barrier.wait(); // checked

            // Phase 3: free everything.
            drop(black_box(large));
            drop(black_box(small));
            drop(black_box(grown));
            barrier.wait();
        }));
    }
    drop(report_tx);

    let collect = |rx: &mpsc::Receiver<(usize, u64, u64)>| {
        let mut v = vec![(0u64, 0u64); WORKERS];
        for _ in 0..WORKERS {
            let (i, e, g) = rx.recv().unwrap();
            v[i] = (e, g);
        }
        v
    };
    let tag_of = |i: usize| tag(i as u64 / u64::from(PARTS) + 1, i as u32 % PARTS);

    // Phase 1: each tag holds exactly what its worker allocated.
    let expected = collect(&report_rx);
    barrier.wait();
    let s = heaptag::snapshot();
    for (i, (e, _)) in expected.iter().enumerate() {
        assert_eq!(tracked_live(&s, &tag_of(i)), *e, "phase 1, worker {i} ({})", tag_of(i));
        let t = s.tag(&tag_of(i)).unwrap();
        assert!(
            t.alloc_count >= 5000 + 8,
            "every small block is counted: {}",
            t.alloc_count
        );
        assert!(t.tracked.peak_live_bytes >= *e);
    }
    barrier.wait();

    // Phase 2: blocks freed by the next worker left their allocator's tag,
    // and nothing was charged to the freeing worker's tag.
    let expected = collect(&report_rx);
    barrier.wait();
    let s = heaptag::snapshot();
    for (i, (e, given)) in expected.iter().enumerate() {
        let t = s.tag(&tag_of(i)).unwrap();
        assert_eq!(t.tracked.live_bytes, *e, "phase 2, worker {i}");
        assert!(t.tracked.free_bytes >= *given, "phase 2, worker {i} frees");
    }
    barrier.wait();

    // Phase 3: everything back to zero, frees balance allocations exactly.
    barrier.wait();
    for h in handles {
        h.join().unwrap();
    }
    let s = heaptag::snapshot();
    for i in 0..WORKERS {
        let t = s.tag(&tag_of(i)).unwrap();
        assert_eq!(t.tracked.live_bytes, 0, "phase 3, worker {i}");
        assert_eq!(t.tracked.live_count, 0, "phase 3, worker {i}");
        assert_eq!(t.tracked.alloc_bytes, t.tracked.free_bytes, "phase 3, worker {i}");
        assert_eq!(t.tracked.alloc_count, t.tracked.free_count, "phase 3, worker {i}");
    }
    assert_eq!(s.health.untracked_frees, 0);
    assert_eq!(s.health.stale_entries, 0);
}

#[test]
fn free_on_another_thread_is_charged_to_the_allocating_tag() {
    let p2 = Tag::new(Some(42), Some("xfree"), Some(2));
    let p5 = Tag::new(Some(42), Some("xfree"), Some(5));
    let block = p2.scope(|| vec![3u8; 1 << 20]);
    // Make partition 5 exist with a block of its own.
    let own = p5.scope(|| vec![5u8; 256 * 1024]);
    let before = heaptag::snapshot();
    assert_eq!(tracked_live(&before, &p2), 1 << 20);
    assert_eq!(tracked_live(&before, &p5), 256 * 1024);

    std::thread::spawn(move || {
        let _g = p5.enter();
        drop(black_box(block));
    })
    .join()
    .unwrap();

    let after = heaptag::snapshot();
    assert_eq!(tracked_live(&after, &p2), 0, "partition 2 went down");
    assert_eq!(tracked_live(&after, &p5), 256 * 1024, "partition 5 did not move");
    assert_eq!(after.tag(&p5).unwrap().tracked.free_bytes, 0);
    assert_eq!(after.tag(&p2).unwrap().tracked.free_bytes, 1 << 20);
    drop(own);
}

#[test]
fn realloc_charges_the_resizing_tag_in_place_and_when_moving() {
    let a = Tag::new(Some(43), Some("realloc"), Some(0));
    let b = Tag::new(Some(43), Some("realloc"), Some(1));
    let mut v: Vec<u8> = a.scope(|| Vec::with_capacity(128 * 1024));
    v.resize(128 * 1024, 1);
    // Grow under another tag: a realloc is a new block of `b` (the realloc
    // rule, docs/REPORTS.md), wherever it lands; `a` is released.
    b.scope(|| v.reserve_exact(3 << 20));
    let s = heaptag::snapshot();
    assert_eq!(tracked_live(&s, &a), 0);
    assert_eq!(tracked_live(&s, &b), v.capacity() as u64);
    assert_eq!(s.tag(&a).unwrap().tracked.free_bytes, 128 * 1024);
    // Shrink in place or by moving under `a`: back to `a`, with the new size.
    a.scope(|| v.shrink_to(100 * 1024));
    let s = heaptag::snapshot();
    assert_eq!(tracked_live(&s, &a), v.capacity() as u64);
    assert_eq!(tracked_live(&s, &b), 0);
    assert_eq!(s.tag(&a).unwrap().tracked.live_count, 1);
    drop(v);
    assert_eq!(tracked_live(&heaptag::snapshot(), &a), 0);
}

#[test]
fn guards_nest_and_restore() {
    assert_eq!(heaptag::current(), Tag::UNTAGGED);
    {
        let _j = heaptag::job(9);
        let _s = heaptag::stage("outer");
        assert_eq!(heaptag::current(), Tag::new(Some(9), Some("outer"), None));
        {
            let _p = heaptag::partition(4);
            let _s2 = heaptag::stage("inner");
            assert_eq!(heaptag::current(), Tag::new(Some(9), Some("inner"), Some(4)));
        }
        assert_eq!(heaptag::current(), Tag::new(Some(9), Some("outer"), None));
        let captured = heaptag::current();
        let seen = std::thread::spawn(move || {
            assert_eq!(heaptag::current(), Tag::UNTAGGED, "tags do not leak into new threads");
            captured.scope(heaptag::current)
        })
        .join()
        .unwrap();
        assert_eq!(seen, captured);
    }
    assert_eq!(heaptag::current(), Tag::UNTAGGED);
}

#[test]
fn scope_restores_on_unwind() {
    let t = Tag::new(Some(44), Some("unwind"), None);
    let r = std::panic::catch_unwind(|| t.scope(|| panic!("boom")));
    assert!(r.is_err());
    assert_eq!(heaptag::current(), Tag::UNTAGGED);
}

#[test]
fn snapshot_round_trips_through_serde() {
    let t = Tag::new(Some(45), Some("serde"), Some(1));
    let keep = t.scope(|| vec![1u8; 100_000]);
    let s = heaptag::snapshot();
    let json = serde_json::to_string(&s).unwrap();
    let back: Snapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back.tag(&t), s.tag(&t));
    assert_eq!(back.totals, s.totals);
    drop(keep);
}
