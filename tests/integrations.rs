//! Tags that follow the work: rayon (work stealing, nested joins), futures
//! moving between tokio workers, tracing spans, spawned threads.
//! (Needs `--features integrations`.)

use std::hint::black_box;
use std::sync::Once;

use heaptag::rayon::TagParallelIterator;
use heaptag::Tag;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn tracked_alloc(tag: &Tag) -> u64 {
    heaptag::snapshot().tag(tag).map_or(0, |t| t.tracked.alloc_bytes)
}

#[test]
fn rayon_work_stealing_keeps_the_spawners_partition() {
    const ITEMS: u64 = 3000;
    let per_item = 100_000 + 80_000 + 70_000;
    std::thread::scope(|s| {
        for p in 0..4u32 {
            s.spawn(move || {
                let _g = Tag::new(None, Some("rayon_test"), Some(p)).enter();
                (0..ITEMS).into_par_iter().with_current_tag().for_each(|i| {
                    let v = black_box(vec![i as u8; 100_000]);
                    // A nested join: its second half may be stolen.
                    let (a, b) = heaptag::rayon::join(|| black_box(vec![1u8; 80_000]), || black_box(vec![2u8; 70_000]));
                    drop((v, a, b));
                });
            });
        }
    });
    for p in 0..4u32 {
        let t = Tag::new(None, Some("rayon_test"), Some(p));
        assert_eq!(tracked_alloc(&t), ITEMS * per_item, "partition {p}");
    }
}

#[test]
fn rayon_scope_and_spawn_carry_the_tag() {
    let t = Tag::new(Some(21), Some("rayon_scope"), Some(1));
    t.scope(|| {
        heaptag::rayon::scope(|s| {
            for _ in 0..100 {
                s.spawn(|| drop(black_box(vec![3u8; 90_000])));
            }
        });
    });
    assert_eq!(tracked_alloc(&t), 100 * 90_000);
    let other = Tag::new(Some(21), Some("rayon_scope"), Some(2));
    let (tx, rx) = std::sync::mpsc::channel();
    other.scope(|| heaptag::rayon::spawn(move || tx.send(black_box(vec![4u8; 75_000]).len()).unwrap()));
    assert_eq!(rx.recv().unwrap(), 75_000);
    assert_eq!(tracked_alloc(&other), 75_000);
}

#[test]
fn futures_keep_their_tag_on_every_poll_across_tokio_workers() {
    use heaptag::future::TagFutureExt;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let a = Tag::new(Some(31), Some("async"), Some(1));
    let b = Tag::new(Some(31), Some("async"), Some(2));
    // Each task counts the polls on which its tag was not the current one.
    let task = |size: usize, tag: Tag| async move {
        let mut wrong = 0;
        for _ in 0..200 {
            wrong += usize::from(heaptag::current() != tag);
            drop(black_box(vec![5u8; size]));
            tokio::task::yield_now().await;
        }
        wrong
    };
    let (wa, wb) = rt.block_on(async {
        let ha = tokio::spawn(task(100_000, a).with_tag(a));
        let hb = tokio::spawn(task(120_000, b).with_tag(b));
        (ha.await.unwrap(), hb.await.unwrap())
    });
    assert_eq!((wa, wb), (0, 0), "every poll ran under its own task's tag");
    assert_eq!(tracked_alloc(&a), 200 * 100_000, "every poll of task a");
    assert_eq!(
        tracked_alloc(&b),
        200 * 120_000,
        "task b, on the same workers, is not mixed in"
    );

    // spawn_blocking with the caller's tag.
    let c = Tag::new(Some(31), Some("blocking"), None);
    let n = rt.block_on(async move {
        let _g = c.enter();
        let work = heaptag::thread::in_current_tag(|| black_box(vec![6u8; 200_000]).len());
        drop(_g);
        tokio::task::spawn_blocking(work).await.unwrap()
    });
    assert_eq!(n, 200_000);
    assert_eq!(tracked_alloc(&c), 200_000);
}

fn tracing_layer() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        use tracing_subscriber::prelude::*;
        tracing_subscriber::registry()
            .with(heaptag::tracing::HeaptagLayer::new().stage_spans([
                "synthesize_partition",
                "gpu_prove",
                "shared_span",
            ]))
            .init();
    });
}

#[test]
fn tracing_spans_set_job_stage_partition_and_restore_on_exit() {
    tracing_layer();
    let outer = tracing::info_span!("synthesize_partition", job_id = 7u64, partition = 3u32);
    let inner_tag = Tag::new(Some(7), Some("gpu_prove"), Some(3));
    let outer_tag = Tag::new(Some(7), Some("synthesize_partition"), Some(3));
    outer.in_scope(|| {
        assert_eq!(heaptag::current(), outer_tag);
        drop(black_box(vec![1u8; 100_000]));
        tracing::info_span!("gpu_prove").in_scope(|| {
            assert_eq!(
                heaptag::current(),
                inner_tag,
                "nested span: stage changes, job and partition inherited"
            );
            drop(black_box(vec![1u8; 110_000]));
        });
        assert_eq!(heaptag::current(), outer_tag, "restored on exit");
    });
    assert_eq!(heaptag::current(), Tag::UNTAGGED);
    assert_eq!(tracked_alloc(&outer_tag), 100_000);
    assert_eq!(tracked_alloc(&inner_tag), 110_000);

    // A `stage` field wins over the span name.
    tracing::info_span!("work", stage = "pce_load", job_id = 9u64).in_scope(|| {
        assert_eq!(heaptag::current(), Tag::new(Some(9), Some("pce_load"), None));
    });
}

#[test]
fn unlisted_span_names_are_not_stages() {
    tracing_layer();
    let outer = Tag::new(Some(12), Some("synthesize_partition"), Some(5));
    tracing::info_span!("synthesize_partition", job_id = 12u64, partition = 5u32).in_scope(|| {
        assert_eq!(heaptag::current(), outer);
        // Library spans (not listed, no stage field) keep the tag as is and
        // make no new tag, however many distinct names they have.
        for name in 0..3 {
            let span = match name {
                0 => tracing::info_span!("http_request"),
                1 => tracing::info_span!("db_query"),
                _ => tracing::info_span!("serialize"),
            };
            span.in_scope(|| {
                assert_eq!(heaptag::current(), outer, "span {name} is no stage");
                drop(black_box(vec![3u8; 70_000]));
            });
        }
        // A library span with a partition field still sets the partition.
        tracing::info_span!("chunk", partition = 6u32).in_scope(|| {
            assert_eq!(
                heaptag::current(),
                Tag::new(Some(12), Some("synthesize_partition"), Some(6))
            );
        });
    });
    assert_eq!(tracked_alloc(&outer), 3 * 70_000);
    let snap = heaptag::snapshot();
    let library: Vec<_> = snap
        .tags_where(|t| matches!(t.stage, Some("http_request" | "db_query" | "serialize" | "chunk")))
        .collect();
    assert!(library.is_empty(), "span names not listed made tags: {library:?}");
}

#[test]
fn one_span_entered_on_several_threads() {
    tracing_layer();
    let span = tracing::info_span!("shared_span", job_id = 8u64, partition = 1u32);
    let tag = Tag::new(Some(8), Some("shared_span"), Some(1));
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let span = span.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    span.in_scope(|| drop(black_box(vec![2u8; 66_000])));
                }
                heaptag::current()
            })
        })
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), Tag::UNTAGGED, "each thread restored");
    }
    assert_eq!(tracked_alloc(&tag), 4 * 50 * 66_000);
}

#[test]
fn spawned_threads_carry_the_tag() {
    let t = Tag::new(Some(41), Some("thread"), Some(0));
    let h = t.scope(|| heaptag::thread::spawn(|| black_box(vec![7u8; 70_000]).len()));
    assert_eq!(h.join().unwrap(), 70_000);
    assert_eq!(tracked_alloc(&t), 70_000);
}
