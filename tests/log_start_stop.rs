//! Issue 16: a log started and finished at run time, more than once in one
//! process (`examples/log_window.rs`, the documented way): each benchmark
//! gets a complete log of its own, and what runs between them is in none.
//! Forty windows back to back: one log's end and the next one's start race
//! (a writer that gave tag retirement back after the next log took it over
//! left that log without a single tag definition).

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/log_window.rs"]
mod window;

mod common;

use heaptag_format::Record;

#[test]
fn each_benchmark_window_gets_a_complete_log_of_its_own() {
    let dir = common::temp_log("windows").with_extension("d");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    assert!(heaptag::log_path().is_none());
    const ROUNDS: u64 = 40;
    let logs = window::run(&dir, ROUNDS).unwrap();
    assert!(heaptag::log_path().is_none(), "no log after the last finish");
    assert_eq!(logs.len(), ROUNDS as usize);
    for (i, l) in logs.iter().enumerate() {
        let round = i as u64 + 1;
        assert_eq!(l.path, dir.join(format!("bench-{round}.htlog")));
        assert!(l.ended && l.dropped == 0 && l.segments == 1, "{l:?}");
        let (recs, r) = common::read_all(&l.path);
        assert!(r.ended(), "{}: an end record", l.path.display());
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        assert_eq!(l.bytes, std::fs::metadata(&l.path).unwrap().len());
        let defs = common::tag_defs(&recs);
        // Tracked allocations per (job, stage) in this log.
        let mut allocs = std::collections::BTreeMap::new();
        for (at, rec) in recs.iter().enumerate() {
            if let Record::Alloc { tag, size, .. } = rec {
                let Some((job, stage, _)) = defs.get(tag).cloned() else {
                    let from = at.saturating_sub(20);
                    panic!(
                        "{}: record {at} allocates under tag {tag}, which no tag_def names; defs {defs:?}; records {from}..: {:?}",
                        l.path.display(),
                        &recs[from..(at + 5).min(recs.len())]
                    );
                };
                *allocs.entry((job, stage)).or_insert(0u64) += size;
            }
        }
        assert_eq!(
            allocs.get(&(Some(round), Some("bench".to_owned()))),
            Some(&(8u64 << 20)),
            "{}: its benchmark's 8 MiB: {allocs:?}",
            l.path.display()
        );
        for (job, stage) in allocs.keys() {
            assert!(
                *job == Some(round) || stage.as_deref() == Some(common::WRITER_STAGE),
                "{}: only its own benchmark's allocations, not {job:?} {stage:?}",
                l.path.display()
            );
        }
        let marks: Vec<_> = recs
            .iter()
            .filter_map(|r| match r {
                Record::Mark { label, .. } => Some(label.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(marks, ["bench peak"]);
    }

    // One log at a time.
    let a = dir.join("a.htlog");
    heaptag::LogConfig::new(&a).start().unwrap();
    assert_eq!(heaptag::log_path(), Some(a.clone()));
    let e = heaptag::LogConfig::new(dir.join("b.htlog")).start().unwrap_err();
    assert!(matches!(e, heaptag::LogError::AlreadyStarted), "{e}");
    assert!(heaptag::finish().unwrap().ended);
    assert!(heaptag::finish().is_none(), "finish twice is harmless");
    let _ = std::fs::remove_dir_all(&dir);
}
