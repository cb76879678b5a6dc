//! Issue 13, item 9: a write that fails once (here: the file size limit is
//! lowered to the log's current size, then raised again by the program)
//! loses that frame's events, but never the tag and stack definitions it
//! carried: every later event still names a defined tag and stack. (Its own
//! file: the limit applies to the whole process.)

mod common;

use std::collections::HashSet;
use std::hint::black_box;
use std::time::Duration;

use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// Waits (polling) until `done`; a hang detector, not a timing assertion:
/// it gives up after a generous number of polls.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..12_000 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("never happened: {what}");
}

fn set_fsize(soft: libc::rlim_t) {
    // SAFETY: plain data, filled in by getrlimit.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; the soft limit stays within the hard one.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim), 0);
        lim.rlim_cur = soft.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
}

/// Tracked blocks from a call site of their own (a stack first seen here).
#[inline(never)]
fn allocate_during_failure(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| black_box(vec![i as u8; 80_000])).collect()
}

#[inline(never)]
fn allocate_after_failure(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| black_box(vec![i as u8; 90_000])).collect()
}

#[test]
fn definitions_lost_to_a_failed_write_are_sent_again() {
    let path = common::temp_log("transient");
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(5))
        .symbols(false)
        .start()
        .unwrap();
    let before = {
        let _g = heaptag::stage("before_failure");
        black_box(vec![1u8; 70_000])
    };
    wait_for("the first tag written", || {
        let (recs, _) = common::read_all(&path);
        common::tag_defs(&recs)
            .values()
            .any(|d| d.1.as_deref() == Some("before_failure"))
    });

    // From here the file cannot grow: the next frame's write fails (EFBIG).
    let len = std::fs::metadata(&path).unwrap().len();
    set_fsize(len as libc::rlim_t);
    let dropped = heaptag::snapshot().health.dropped_events;
    let during = {
        // A new tag and a new stack, defined in the frame that fails.
        let _g = heaptag::job(13);
        let _s = heaptag::stage("during_failure");
        allocate_during_failure(8)
    };
    // Their frame (with the definitions) failed: its 8 allocations are lost.
    wait_for("a failed write", || {
        heaptag::snapshot().health.dropped_events >= dropped + 8
    });
    assert!(heaptag::snapshot().health.log_write_errors > 0);
    set_fsize(libc::RLIM_INFINITY);

    // The same tag and stack again, and a new one, after the failure.
    let after = {
        let _g = heaptag::job(13);
        let _s = heaptag::stage("during_failure");
        let mut v = allocate_during_failure(8);
        let _p = heaptag::partition(2);
        v.extend(allocate_after_failure(8));
        v
    };
    let summary = heaptag::finish().unwrap();
    assert!(summary.dropped > 0, "the failed frame's events are counted as lost");

    let (recs, r) = common::read_all(&path);
    assert!(r.problems().is_empty(), "{:?}", r.problems());
    assert!(r.ended());
    let tags = common::tag_defs(&recs);
    let tag_records = recs.iter().filter(|r| matches!(r, Record::TagDef { .. })).count();
    assert_eq!(tag_records, tags.len(), "a tag defined twice");
    let stacks: HashSet<u32> = recs
        .iter()
        .filter_map(|r| match r {
            Record::StackDef { id, .. } => Some(*id),
            _ => None,
        })
        .collect();
    let mut undefined = Vec::new();
    let mut stages_after = Vec::new();
    for rec in &recs {
        if let Record::Alloc { tag, stack, size, .. } = rec {
            match tags.get(tag) {
                Some(def) if *size == 80_000 || *size == 90_000 => stages_after.push((def.clone(), *size)),
                Some(_) => {}
                None => undefined.push(format!("tag {tag} (block of {size} B)")),
            }
            if *stack != 0 && !stacks.contains(stack) {
                undefined.push(format!("stack {stack} (block of {size} B)"));
            }
        }
    }
    assert!(undefined.is_empty(), "used but never defined: {undefined:?}");
    // The blocks allocated after the failure are charged to their real tags.
    let during_tag = (Some(13), Some("during_failure".to_owned()), None);
    let after_tag = (Some(13), Some("during_failure".to_owned()), Some(2));
    assert_eq!(
        stages_after
            .iter()
            .filter(|(d, s)| *d == during_tag && *s == 80_000)
            .count(),
        8,
        "only the allocations after the failure are in the log, under their tag: {stages_after:?}"
    );
    assert_eq!(
        stages_after
            .iter()
            .filter(|(d, s)| *d == after_tag && *s == 90_000)
            .count(),
        8,
        "{stages_after:?}"
    );
    drop((before, during, after));
}
