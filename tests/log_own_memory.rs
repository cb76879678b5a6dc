//! heaptag's own memory is never charged to the program's tags. The side
//! records a thread queues for the log writer (its marks, its changes of
//! external memory) are kept in heaptag's internal heap: a thread that only
//! calls `external_alloc` and `mark` under a tag has allocated nothing there,
//! and the log holds no block of that tag.
//!
//! Before, the queue's vector and each record's strings came from the global
//! allocator on the calling thread, so they were blocks of the caller's tag,
//! freed later by the writer thread: in a daemon's sampled figures a queue
//! of 256 bytes stood for ~16 KiB of the tag's memory until the writer's next
//! cycle (seen as a sampled block alive in the process's counters but freed
//! in the log, `log_segments.rs`).

use std::collections::HashSet;

use heaptag::Tag;
use heaptag_format::{LogReader, Record};

mod common;

// Every block tracked exactly: any allocation under the tag shows.
#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new().threshold(0);

const ROUNDS: usize = 300;

#[test]
fn marks_and_external_memory_allocate_nothing_under_the_callers_tag() {
    let log = common::temp_log("own-memory");
    heaptag::LogConfig::new(&log).start().unwrap();

    // A thread whose only calls under its tag are heaptag's. The guard it
    // returns keeps the tag alive (not retired) for the snapshot below.
    let keep = std::thread::spawn(|| {
        let label = "a label long enough to need memory of its own, were it copied";
        let _t = Tag::new(Some(7), Some("own_memory"), Some(3)).enter();
        for _ in 0..ROUNDS {
            let g = heaptag::external_alloc(1 << 20, "pinned_host");
            heaptag::mark(label);
            drop(g);
        }
        heaptag::external_alloc(4096, "kept")
    })
    .join()
    .unwrap();

    let snap = heaptag::snapshot();
    let summary = heaptag::finish().unwrap();
    let t = snap
        .tags
        .iter()
        .find(|t| t.tag.stage == Some("own_memory"))
        .expect("the tag is listed while the guard holds it");
    assert_eq!(t.external_bytes, 4096);
    assert_eq!(
        (t.alloc_count, t.alloc_bytes, t.live_bytes, t.peak_live_bytes),
        (0, 0, 0, 0),
        "nothing allocated under the caller's tag: {t:?}"
    );
    assert!(summary.ended);
    assert_eq!(snap.health.side_dropped, 0, "every side record queued");
    drop(keep);

    // The log: every mark and change written, and no block of the tag.
    let recs: Vec<Record> = LogReader::open(&log).unwrap().collect();
    let defs = common::tag_defs(&recs);
    let ids: HashSet<u32> = defs
        .iter()
        .filter(|(_, d)| d.1.as_deref() == Some("own_memory"))
        .map(|(&id, _)| id)
        .collect();
    assert!(!ids.is_empty());
    let marks = recs
        .iter()
        .filter(|r| matches!(r, Record::Mark { label, .. } if label.starts_with("a label long")))
        .count();
    let changes = recs
        .iter()
        .filter(|r| matches!(r, Record::External { tag, what, .. } if ids.contains(tag) && what == "pinned_host"))
        .count();
    assert_eq!((marks, changes), (ROUNDS, 2 * ROUNDS));
    let blocks: Vec<&Record> = recs
        .iter()
        .filter(|r| match r {
            Record::Alloc { tag, .. } | Record::SampleAlloc { tag, .. } | Record::Realloc { tag, .. } => {
                ids.contains(tag)
            }
            _ => false,
        })
        .collect();
    assert!(blocks.is_empty(), "blocks of the tag in the log: {blocks:?}");
}
