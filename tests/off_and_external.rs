//! `HEAPTAG=off` at start makes the wrapper a pass-through; external
//! (annotated) memory; purge.

use std::hint::black_box;

use heaptag::Tag;

mod common;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

#[test]
fn off_at_start_counts_nothing() {
    if std::env::var_os("HEAPTAG_CHILD").is_some() {
        // In the child: HEAPTAG=off was set before the first allocation.
        let _g = Tag::new(Some(1), Some("off"), None).enter();
        let v = black_box(vec![1u8; 1 << 20]);
        let s = heaptag::snapshot();
        assert!(!s.enabled);
        assert!(s.tags.iter().all(|t| t.alloc_count == 0), "{:?}", s.tags);
        assert_eq!(s.totals.alloc_bytes, 0);
        assert_eq!(heaptag::current().stage, Some("off"), "guards still work");
        drop(v);
        return;
    }
    let out = common::child("off_at_start_counts_nothing", &[("HEAPTAG", "off")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn bad_environment_values_are_reported_and_ignored() {
    if std::env::var_os("HEAPTAG_CHILD").is_some() {
        let s = heaptag::snapshot();
        assert!(s.enabled);
        assert_eq!(s.threshold, 64 * 1024, "bad value ignored");
        assert_eq!(s.sample_rate, 128 * 1024, "good value taken");
        assert_eq!(s.health.config_errors, 1);
        return;
    }
    let out = common::child(
        "bad_environment_values_are_reported_and_ignored",
        &[("HEAPTAG_THRESHOLD", "lots"), ("HEAPTAG_SAMPLE_RATE", "128K")],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}{stderr}", String::from_utf8_lossy(&out.stdout));
    assert!(
        stderr.contains("heaptag: ignoring HEAPTAG_THRESHOLD=lots: expected a size"),
        "{stderr}"
    );
}

#[test]
fn external_memory_is_shown_under_its_tag_until_released() {
    let tag = Tag::new(Some(8), Some("srs_load"), None);
    let guard = tag.scope(|| heaptag::external_alloc(3 << 30, "srs_mmap"));
    let pinned = tag.scope(|| heaptag::external_alloc(1 << 30, "pinned_host"));
    assert_eq!(guard.tag(), tag);
    let s = heaptag::snapshot();
    assert_eq!(s.tag(&tag).unwrap().external_bytes, 4 << 30);
    assert_eq!(s.tag(&tag).unwrap().live_bytes, 0, "external is not heap");
    let srs = s.external.iter().find(|e| e.what == "srs_mmap").unwrap();
    assert_eq!((srs.tag, srs.bytes), (tag, 3 << 30));
    assert!(s.totals.external_bytes >= 4 << 30);
    // The guard may travel with its buffer.
    std::thread::spawn(move || drop(guard)).join().unwrap();
    let s = heaptag::snapshot();
    assert_eq!(s.tag(&tag).unwrap().external_bytes, 1 << 30);
    assert!(s.external.iter().all(|e| e.what != "srs_mmap"));
    drop(pinned);
    assert_eq!(heaptag::snapshot().tag(&tag).unwrap().external_bytes, 0);
}

#[test]
fn purge_returns_freed_pages() {
    let v = black_box(vec![1u8; 64 << 20]);
    drop(v);
    heaptag::purge().expect("purge all arenas");
}

#[test]
fn freeing_a_large_block_heaptag_never_saw_is_counted_not_fatal() {
    use std::alloc::{GlobalAlloc, Layout};
    let layout = Layout::from_size_align(1 << 20, 8).unwrap();
    let before = heaptag::snapshot().health.untracked_frees;
    // SAFETY: a block from jemalloc directly (heaptag never sees it), freed
    // through the global allocator, which forwards to the same jemalloc.
    unsafe {
        let p = tikv_jemallocator::Jemalloc.alloc(layout);
        assert!(!p.is_null());
        std::alloc::dealloc(p, layout);
    }
    let after = heaptag::snapshot().health.untracked_frees;
    assert_eq!(after, before + 1);
}
