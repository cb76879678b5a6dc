//! With a log on, the writer retires tags at its samples: before an id is
//! reused the log has the tag's final counters and a `tag_retire`, no event
//! of the old tag follows, counters list only tags that changed, and the
//! writer's own allocations never appear as tracked or sampled events
//! (every block is tracked here: threshold 0).

mod common;

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::time::Duration;

use heaptag::{Tag, TAGS_KEPT};
use heaptag_format::{Record, WRITER_STAGE};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new().threshold(0);

#[test]
fn retired_ids_are_logged_before_reuse_and_the_writer_is_not_tracked() {
    let path = common::temp_log("tag_reuse");
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(2))
        .start()
        .expect("log starts");
    let n = 3 * TAGS_KEPT as u64;
    for j in 0..n {
        let t = Tag::new(Some(j), Some("prove"), Some((j % 10) as u32));
        t.scope(|| drop(black_box(vec![1u8; 300])));
        if j % 256 == 0 {
            // Let the writer keep up (samples retire; with no sample the
            // ids in use would only grow).
            std::thread::sleep(Duration::from_millis(3));
        }
    }
    // Quiet: samples now list (almost) nothing.
    std::thread::sleep(Duration::from_millis(50));
    let health = heaptag::snapshot().health;
    let summary = heaptag::finish().expect("log was on");
    assert_eq!(summary.dropped, 0);
    assert_eq!(health.tag_overflow, 0);

    let (recs, reader) = common::read_all(&path);
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    let mut defs: HashMap<u32, common::TagDef> = HashMap::new();
    let mut retired: HashSet<u32> = HashSet::new();
    let mut last_counters: HashSet<u32> = HashSet::new();
    let (mut retires, mut redefs, mut writer_events) = (0u64, 0u64, 0u64);
    let mut counters_sizes = Vec::new();
    let mut history: HashMap<u32, Vec<String>> = HashMap::new();
    let mut bad = None;
    for (i, r) in recs.iter().enumerate() {
        if let Record::Alloc { tag, .. } | Record::TagDef { id: tag, .. } | Record::TagRetire { id: tag, .. } = r {
            history.entry(*tag).or_default().push(format!("{i}: {r:?}"));
        }
        if let Record::Alloc { tag, .. } = r {
            if retired.contains(tag) && bad.is_none() {
                bad = Some(*tag);
            }
        }
        if bad.is_some() {
            continue;
        }
        match r {
            Record::TagDef {
                id,
                job,
                stage,
                partition,
            } => {
                if defs.contains_key(id) {
                    assert!(retired.remove(id), "id {id} defined again without a tag_retire first");
                    redefs += 1;
                }
                defs.insert(*id, (*job, stage.clone(), *partition));
            }
            Record::TagRetire { id, .. } => {
                assert!(defs.contains_key(id), "retire of an undefined id {id}");
                assert!(
                    last_counters.contains(id),
                    "final counters of {id} come right before its retire"
                );
                assert!(retired.insert(*id), "id {id} retired twice");
                retires += 1;
            }
            Record::Counters { tags, .. } => {
                last_counters = tags.iter().map(|c| c.tag).collect();
                counters_sizes.push(tags.len());
            }
            Record::Alloc { tag, .. } | Record::SampleAlloc { tag, .. } | Record::Realloc { tag, .. } => {
                assert!(defs.contains_key(tag), "event of an undefined tag id {tag}");
                assert!(
                    !retired.contains(tag),
                    "event of tag id {tag} after its retire, before a new def"
                );
                if defs[tag].1.as_deref() == Some(WRITER_STAGE) {
                    writer_events += 1;
                }
            }
            _ => {}
        }
    }
    if let Some(b) = bad {
        panic!("{}", history[&b].join("\n"));
    }
    assert_eq!(
        writer_events, 0,
        "the writer's allocations are never tracked or sampled"
    );
    assert!(
        retires >= n - 2 * TAGS_KEPT as u64,
        "{retires} tag_retire records for {n} tags"
    );
    assert!(redefs > 0, "ids were reused");
    assert_eq!(health.tags_retired, retires, "every retirement is in the log");
    // Work per sample is what changed: the samples of the quiet end list
    // few tags though thousands were defined.
    let tail = &counters_sizes[counters_sizes.len().saturating_sub(5)..];
    assert!(tail.iter().all(|&k| k < 16), "quiet samples list few tags: {tail:?}");
    assert!(health.samples > 0 && health.sample_tags_visited > 0);
    let _ = std::fs::remove_file(&path);
}
