//! A program writes its log (started in-process) and the reader gets back
//! what happened: tags, tracked allocations and frees with stacks, a realloc
//! charged to the resizing thread's tag, a mark, fingerprints (zero-filled flagged, identical
//! copies equal), memory samples, external memory, symbols, the end record.

mod common;

use std::hint::black_box;
use std::time::Duration;

use heaptag::Tag;
use heaptag_format::{Fill, FpWhen, Record};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

#[test]
fn a_logged_run_reads_back_completely() {
    let path = common::temp_log("roundtrip");
    let started = heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(20))
        .symbols(true)
        // In-process symbols load this test binary's DWARF at finish, which takes
        // seconds on a loaded machine: a generous deadline, so the test checks the
        // content, not how fast the machine is (the deadline has its own test).
        .finish_timeout(Duration::from_secs(300))
        .start()
        .expect("log starts");
    assert_eq!(started, path);
    let second = heaptag::LogConfig::new(common::temp_log("second")).start();
    assert!(matches!(second, Err(heaptag::LogError::AlreadyStarted)), "{second:?}");

    let pce = Tag::new(Some(1), Some("pce_load"), None);
    let part = Tag::new(Some(1), Some("synthesize_partition"), Some(3));
    // Data with content (identical twice), and a zero-filled buffer.
    let data: Vec<u64> = pce.scope(|| (0..(1u64 << 18)).map(|i| i.wrapping_mul(0x9e37_79b9)).collect());
    let copy = part.scope(|| data.clone());
    let zeros = part.scope(|| vec![0u8; 3 << 20]);
    // A Vec grown under `part` past the threshold, then moved by realloc.
    let mut grown: Vec<u8> = part.scope(|| Vec::with_capacity(100_000));
    grown.resize(100_000, 1);
    pce.scope(|| grown.reserve_exact(5 << 20));
    let ext = part.scope(|| heaptag::external_alloc(1 << 30, "pinned_host"));
    std::thread::sleep(Duration::from_millis(60)); // a few samples
    heaptag::mark("all alive");
    let (data_addr, copy_addr, zeros_addr) = (data.as_ptr() as u64, copy.as_ptr() as u64, zeros.as_ptr() as u64);
    drop(black_box(copy));
    drop(black_box(zeros));
    drop(ext);
    let summary = heaptag::finish().expect("a log was running");
    assert!(heaptag::finish().is_none(), "finish twice is harmless");
    assert_eq!(summary.path, path);
    assert_eq!(summary.dropped, 0);

    let meta = std::fs::metadata(&path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "the log is private to its owner"
    );
    assert_eq!(meta.len(), summary.bytes);

    let (recs, reader) = common::read_all(&path);
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    assert!(reader.ended());
    let h = reader.header();
    assert_eq!(h.pid, std::process::id());
    assert!(h.exe.contains("log_roundtrip"), "{}", h.exe);
    assert!(
        h.modules.iter().any(|m| m.path == h.exe),
        "the executable is in the module map"
    );
    assert_eq!(h.settings.threshold, 64 * 1024);

    let tags = common::tag_defs(&recs);
    let id_of = |t: &Tag| {
        *tags
            .iter()
            .find(|(_, v)| v.0 == t.job && v.1.as_deref() == t.stage && v.2 == t.partition)
            .unwrap_or_else(|| panic!("no definition of {t}"))
            .0
    };
    let (pce_id, part_id) = (id_of(&pce), id_of(&part));

    // Tracked allocations carry tag and a defined stack.
    let stacks: std::collections::HashSet<u32> = recs
        .iter()
        .filter_map(|r| match r {
            Record::StackDef { id, frames } if !frames.is_empty() => Some(*id),
            _ => None,
        })
        .collect();
    let allocs: Vec<_> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Alloc {
                tag, stack, addr, size, ..
            } => Some((*tag, *stack, *addr, *size)),
            _ => None,
        })
        .collect();
    let find = |addr: u64| allocs.iter().rev().find(|a| a.2 == addr).copied();
    let d = find(data_addr).expect("data allocation logged");
    assert_eq!((d.0, d.3), (pce_id, 8 << 18));
    assert!(stacks.contains(&d.1), "stack {} defined", d.1);
    assert_eq!(find(copy_addr).unwrap().0, part_id);
    assert_eq!(find(zeros_addr).unwrap().0, part_id);

    // The grown Vec: allocated under `part` when it crossed the threshold
    // (100,000 bytes), then reallocated under `pce`'s guard: the realloc
    // rule charges the new block to `pce` (docs/REPORTS.md).
    let realloc = recs
        .iter()
        .find_map(|r| match r {
            Record::Realloc {
                tag, size, old_size, ..
            } if *old_size == 100_000 => Some((*tag, *size)),
            _ => None,
        })
        .expect("a realloc record");
    assert_eq!(realloc.0, pce_id, "a realloc is charged to the resizing thread's tag");
    assert_eq!(realloc.1, grown.capacity() as u64);

    // Frees of the dropped blocks.
    for addr in [copy_addr, zeros_addr] {
        assert!(
            recs.iter()
                .any(|r| matches!(r, Record::Free { addr: a, .. } if *a == addr)),
            "free of {addr:#x} logged"
        );
    }

    // Fingerprints: at the mark, data and its copy are identical and mixed;
    // the zero buffer is flagged; at free too.
    let fps: Vec<_> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Fingerprint { addr, hash, meta, .. } => Some((*addr, *hash, meta.fill, meta.when)),
            _ => None,
        })
        .collect();
    let at_mark = |addr| fps.iter().find(|f| f.0 == addr && f.3 == FpWhen::Mark).copied();
    let (fd, fc, fz) = (
        at_mark(data_addr).unwrap(),
        at_mark(copy_addr).unwrap(),
        at_mark(zeros_addr).unwrap(),
    );
    assert_eq!(fd.1, fc.1, "identical content, identical fingerprint");
    assert_eq!(fd.2, Fill::Mixed);
    assert_eq!(fz.2, Fill::Zero);
    assert!(fps.iter().any(|f| f.0 == copy_addr && f.3 == FpWhen::Free));
    assert!(
        fps.iter().any(|f| f.0 == data_addr && f.3 == FpWhen::Finish),
        "live at finish"
    );

    // Marks, samples, external memory, symbols, end.
    assert!(recs
        .iter()
        .any(|r| matches!(r, Record::Mark { label, .. } if label == "all alive")));
    let rss: Vec<u64> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Rss { vm_rss, .. } => Some(*vm_rss),
            _ => None,
        })
        .collect();
    assert!(rss.len() >= 3, "samples every 20 ms and at the mark: {}", rss.len());
    assert!(rss.iter().all(|&v| v > 1 << 20));
    assert!(recs
        .iter()
        .any(|r| matches!(r, Record::Jemalloc { allocated, resident, .. } if *allocated > 0 && resident >= allocated)));
    assert!(recs.iter().any(|r| matches!(r, Record::Counters { tags, .. }
        if tags.iter().any(|t| t.tag == pce_id && t.tracked_live >= 8 << 18))));
    let ext: Vec<i64> = recs
        .iter()
        .filter_map(|r| match r {
            Record::External { tag, what, bytes, .. } if what == "pinned_host" && *tag == part_id => Some(*bytes),
            _ => None,
        })
        .collect();
    assert_eq!(ext, vec![1 << 30, -(1 << 30)]);
    assert!(
        recs.iter()
            .any(|r| matches!(r, Record::Symbol { function, .. } if function.contains("a_logged_run_reads_back"))),
        "the test function appears among the resolved symbols"
    );
    assert!(matches!(recs.last(), Some(Record::End { dropped: 0, .. })));
    drop(data);
}
