//! Allocation before `main`, inside thread-local destructors, and from
//! thousands of short-lived threads.

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use heaptag::Tag;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

static BEFORE_MAIN: AtomicUsize = AtomicUsize::new(0);

/// Runs before `main` (an ELF constructor) and allocates a tracked block.
extern "C" fn before_main() {
    let v = vec![1u8; 200 * 1024];
    BEFORE_MAIN.store(v.len(), Ordering::Relaxed);
    std::mem::forget(v);
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = before_main;

#[test]
fn allocation_before_main_is_counted_untagged() {
    assert_eq!(BEFORE_MAIN.load(Ordering::Relaxed), 200 * 1024);
    let s = heaptag::snapshot();
    let untagged = s.tag(&Tag::UNTAGGED).expect("untagged tag exists");
    assert!(untagged.tracked.live_bytes >= 200 * 1024);
}

struct AllocatesOnDrop(RefCell<Vec<u8>>);

impl Drop for AllocatesOnDrop {
    fn drop(&mut self) {
        // Allocates while the thread's thread-locals are being destroyed,
        // possibly after heaptag gave the thread's slot back.
        let big = vec![2u8; 128 * 1024];
        let small = vec![3u8; 64];
        black_box((&big, &small));
    }
}

thread_local! {
    static TLS: AllocatesOnDrop = const { AllocatesOnDrop(RefCell::new(Vec::new())) };
}

#[test]
fn thousands_of_short_lived_threads_keep_counters_consistent() {
    const THREADS: u32 = 2000;
    let tag = Tag::new(Some(5), Some("short_lived"), None);
    let before = heaptag::snapshot();
    for batch in 0..(THREADS / 50) {
        let handles: Vec<_> = (0..50)
            .map(|i| {
                std::thread::spawn(move || {
                    TLS.with(|t| t.0.borrow_mut().push(1));
                    let _g = Tag::new(Some(5), Some("short_lived"), Some(batch * 50 + i)).enter();
                    let v = vec![0u8; 100 * 1024];
                    let w: Vec<u32> = (0..1000).collect();
                    black_box((&v, &w));
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }
    let s = heaptag::snapshot();
    let per_thread: Vec<_> = s.tags_where(|t| t.stage == tag.stage && t.job == tag.job).collect();
    assert_eq!(per_thread.len(), THREADS as usize);
    for t in &per_thread {
        assert_eq!(t.tracked.live_bytes, 0, "{}", t.tag);
        assert_eq!(t.tracked.alloc_bytes, 100 * 1024, "{}", t.tag);
        assert_eq!(t.tracked.free_bytes, 100 * 1024, "{}", t.tag);
        assert!(t.alloc_count >= 2, "{}", t.tag);
    }
    // Slots were given back and reused: no per-thread state leaked.
    assert!(
        s.health.thread_slots_in_use < 64,
        "slots in use after all threads exited: {}",
        s.health.thread_slots_in_use
    );
    assert!(s.health.threads_seen >= before.health.threads_seen + u64::from(THREADS));
    // The destructor's 128 KiB blocks were tracked and freed (untagged).
    assert_eq!(s.health.untracked_frees, 0);
    assert_eq!(s.health.stale_entries, 0);
    let untagged = s.tag(&Tag::UNTAGGED).unwrap();
    assert!(untagged.tracked.free_bytes >= u64::from(THREADS) * 128 * 1024);
    // Totals balance: the process is back to roughly where it started.
    assert!(s.totals.live_bytes < before.totals.live_bytes + (4 << 20));
}
