//! The short daemon soak (the long one is `examples/daemon_soak.rs`): a few
//! hundred proofs with fresh job ids, 35 tags each, partitions on rayon,
//! frees on a dealloc thread, the log on. Tags in use stay bounded, heaptag's
//! own memory stays flat, the last proofs' tags are exact, the log retires
//! tags (counted in it) and drops nothing.

mod common;

use std::time::Duration;

use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

#[test]
fn a_daemon_keeps_tags_and_memory_bounded() {
    let path = common::temp_log("daemon_soak");
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(10))
        .buffer_events(1 << 20)
        .start()
        .expect("log starts");
    let cfg = common_soak::Config {
        proofs: 400,
        pipelines: 4,
        partitions: 10,
        duration: Duration::from_secs(3600),
        checked: 8,
    };
    let o = common_soak::run(&cfg);
    assert_eq!(o.proofs, 400);
    assert!(o.mismatches.is_empty(), "{:#?}", o.mismatches);
    assert_eq!(o.tags_checked, 8 * 34);
    // 400 proofs x 35 tags = 14,000 tags made; in use stays near TAGS_KEPT
    // (the writer retires at each sample, and at its next cycle once they
    // pass TAGS_KEPT by an eighth; how far past depends on how soon a loaded
    // machine runs the writer, so the bound is loose: without retirement
    // they would reach 14,000).
    assert!(
        o.max_tags_in_use <= heaptag::TAGS_KEPT as u64 * 3 / 2,
        "tags in use bounded: {}",
        o.max_tags_in_use
    );
    assert_eq!(o.last.to.tag_overflow, 0);
    // heaptag's own memory is flat: the last tenth of the run holds no more
    // than the first tenth plus a little (counter pages and entries are
    // reused; the table holds only live blocks).
    let (first, last) = (o.first.to.overhead_bytes, o.last.to.overhead_bytes);
    assert!(
        last <= first + first / 4 + (2 << 20),
        "overhead grew: {first} -> {last}"
    );
    let summary = heaptag::finish().expect("log on");
    assert_eq!(summary.dropped, 0, "no event dropped");

    let (recs, reader) = common::read_all(&path);
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    // Every id a record names is defined at that point (and not retired):
    // a reader never meets an id it does not know. An id's lifetime goes
    // tag_def, its records, its final counters, tag_retire; nothing names the
    // id from its tag_retire to its next tag_def.
    let mut defined = std::collections::HashSet::new();
    // Retired ids not defined again yet, with the record index of the retire.
    let mut retired = std::collections::HashMap::new();
    // Per defined id: the figures of the last counters entry naming it.
    let mut last_counts = std::collections::HashMap::new();
    let (mut between, mut named_retired) = (Vec::new(), 0u64);
    let (mut never, mut named_undefined) = (Vec::new(), 0u64);
    for (i, r) in recs.iter().enumerate() {
        let used: Vec<u32> = match r {
            Record::TagDef { id, .. } => {
                defined.insert(*id);
                retired.remove(id);
                last_counts.remove(id);
                Vec::new()
            }
            Record::TagRetire { id, .. } => {
                assert!(defined.remove(id), "record {i}: retire of undefined id {id}");
                // Its final counters came before: a retired tag is idle, so
                // they give no live bytes.
                let last: heaptag_format::TagCount = last_counts
                    .remove(id)
                    .unwrap_or_else(|| panic!("record {i}: tag_retire of id {id} without counters of it before"));
                assert!(
                    last.tracked_live == 0 && last.external == 0,
                    "record {i}: id {id} retired after counters with live bytes: {last:?}"
                );
                retired.insert(*id, i);
                Vec::new()
            }
            Record::Counters { tags, .. } => tags.iter().map(|c| c.tag).collect(),
            Record::Alloc { tag, .. } | Record::SampleAlloc { tag, .. } | Record::Realloc { tag, .. } => vec![*tag],
            Record::External { tag, .. } => vec![*tag],
            _ => Vec::new(),
        };
        for id in used {
            if let Some(at) = retired.get(&id) {
                if between.len() < 5 {
                    between.push(format!(
                        "record {i} ({:?}) names id {id}, retired at record {at}",
                        r.kind()
                    ));
                }
                named_retired += 1;
                continue;
            }
            if id != 0 && !defined.contains(&id) {
                if never.len() < 5 {
                    never.push(format!("record {i} ({:?}) names id {id}", r.kind()));
                }
                named_undefined += 1;
            }
        }
        if let Record::Counters { tags, .. } = r {
            for c in tags {
                last_counts.insert(c.tag, *c);
            }
        }
    }
    assert_eq!(
        (named_retired, named_undefined),
        (0, 0),
        "entries naming an id between its tag_retire and its next tag_def (e.g. {between:#?}), \
         and naming an id never defined (e.g. {never:#?})"
    );
    let retires = recs.iter().filter(|r| matches!(r, Record::TagRetire { .. })).count() as u64;
    let defs = recs.iter().filter(|r| matches!(r, Record::TagDef { .. })).count() as u64;
    assert!(defs >= 400 * 35, "every tag defined: {defs}");
    assert_eq!(
        retires,
        heaptag::snapshot().health.tags_retired,
        "every retirement logged"
    );
    assert!(
        retires >= 400 * 35 - heaptag::TAGS_KEPT as u64 * 3 / 2,
        "{retires} tags retired of {}",
        400 * 35
    );
    let _ = std::fs::remove_file(&path);
}

#[path = "common/soak.rs"]
mod common_soak;
