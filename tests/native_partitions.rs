//! Issue 19 (`native` feature): C++ `std::vector`s and C buffers allocated
//! under different partitions on several threads, grown, and freed on other
//! threads, are charged to the allocating partition, exactly for tracked
//! blocks, and go back to zero after the frees; the bytes are really in
//! jemalloc (its own `stats.allocated`, the independent reference); a C
//! constructor that allocates before `main` works; glibc's edge cases of the
//! malloc family hold. The C and C++ are `tests/native/`, compiled by
//! build.rs with the `cc` crate.
#![cfg(feature = "native")]

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use heaptag::{Tag, TagStats};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

extern "C" {
    fn ht_buf_new(n: usize, seed: u64) -> *mut u8;
    fn ht_buf_resize(p: *mut u8, n: usize) -> *mut u8;
    fn ht_buf_free(p: *mut u8);
    fn ht_vec_new(n: usize, seed: u64) -> *mut c_void;
    fn ht_vec_double(v: *mut c_void);
    fn ht_vec_bytes(v: *mut c_void) -> usize;
    fn ht_vec_free(v: *mut c_void);
    fn ht_early_take(usable: *mut usize) -> *mut u8;
    fn ht_edge_cases() -> c_int;
}

/// The tests of this binary one at a time: jemalloc's process-wide
/// statistics are compared before and after.
static SERIAL: Mutex<()> = Mutex::new(());

const JOB: u64 = 19_001;
const PARTS: u32 = 4;

fn stats_of(tag: Tag) -> TagStats {
    heaptag::snapshot()
        .tags
        .into_iter()
        .find(|t| t.tag == tag)
        .unwrap_or_else(|| panic!("{tag} not in the snapshot"))
}

/// Words of partition `p`'s vector before it doubles.
fn words(p: u32) -> usize {
    32_768 * (p as usize + 1)
}

/// Bytes of partition `p`'s C buffer before it is resized to twice that.
fn buf_bytes(p: u32) -> usize {
    300_000 + 1_000 * p as usize
}

fn je_allocated() -> u64 {
    heaptag::jemalloc_stats().expect("jemalloc statistics").allocated
}

#[test]
fn cxx_vectors_and_c_buffers_are_charged_to_their_partitions() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let je_before = je_allocated();
    // Allocate and grow under partition p, each on its own thread.
    let blocks: Vec<(u32, usize, usize, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..PARTS)
            .map(|p| {
                s.spawn(move || {
                    let _job = heaptag::job(JOB);
                    let _part = heaptag::partition(p);
                    // SAFETY: the C/C++ functions of tests/native/ with valid arguments.
                    unsafe {
                        let v = ht_vec_new(words(p), u64::from(p));
                        ht_vec_double(v);
                        let b = ht_buf_new(buf_bytes(p), u64::from(p));
                        let b = ht_buf_resize(b, 2 * buf_bytes(p));
                        assert!(!v.is_null() && !b.is_null());
                        (p, v as usize, b as usize, ht_vec_bytes(v))
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut expected_total = 0u64;
    for &(p, _, _, vec_bytes) in &blocks {
        // The C++ side's own figure of its storage, and the hand computation.
        assert_eq!(vec_bytes, 2 * 8 * words(p), "libstdc++ doubled the vector exactly");
        let want = (vec_bytes + 2 * buf_bytes(p)) as u64;
        expected_total += want;
        let st = stats_of(Tag::new(Some(JOB), None, Some(p)));
        assert_eq!(st.native.tracked_live_bytes, want, "partition {p}: {st:?}");
        assert_eq!(
            st.native.tracked_live_count, 2,
            "partition {p}: a vector and a buffer: {st:?}"
        );
        // Nothing else of that tag is tracked: its tracked blocks are these.
        assert_eq!(st.tracked.live_bytes, want, "partition {p}: {st:?}");
        // The grown blocks replaced the first ones: allocated counts both.
        let first = (8 * words(p) + buf_bytes(p)) as u64;
        assert_eq!(st.tracked.alloc_bytes, want + first, "partition {p}: {st:?}");
        assert_eq!(st.tracked.free_bytes, first, "partition {p}: {st:?}");
    }
    // Independent reference: jemalloc holds them (glibc would not move it).
    let je_alive = je_allocated();
    assert!(
        je_alive >= je_before + expected_total,
        "jemalloc's allocated rose by {} for {expected_total} bytes of C/C++ blocks",
        je_alive.saturating_sub(je_before)
    );
    // Freed on other threads, under another tag: charged back to the owners.
    std::thread::scope(|s| {
        for &(_, v, b, _) in &blocks {
            s.spawn(move || {
                let _freer = Tag::new(Some(JOB), Some("freer"), None).enter();
                // SAFETY: blocks made above, freed once.
                unsafe {
                    ht_vec_free(v as *mut c_void);
                    ht_buf_free(b as *mut u8);
                }
            });
        }
    });
    for p in 0..PARTS {
        let st = stats_of(Tag::new(Some(JOB), None, Some(p)));
        assert_eq!(st.native, heaptag::NativeStats::default(), "partition {p}: {st:?}");
        assert_eq!(st.tracked.live_bytes, 0, "partition {p}: {st:?}");
        assert_eq!(st.tracked.live_count, 0, "partition {p}: {st:?}");
    }
    if let Some(freer) = heaptag::snapshot()
        .tags
        .into_iter()
        .find(|t| t.tag == Tag::new(Some(JOB), Some("freer"), None))
    {
        assert_eq!(freer.tracked.free_bytes, 0, "frees are charged to the owner: {freer:?}");
        assert_eq!(freer.native.tracked_live_bytes, 0);
    }
    let je_after = je_allocated();
    assert!(
        je_after + expected_total <= je_alive + (1 << 20),
        "jemalloc's allocated fell by {} after freeing {expected_total} bytes",
        je_alive.saturating_sub(je_after)
    );
}

#[test]
fn small_native_blocks_are_counted_and_sampled_not_tracked() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tag = Tag::new(Some(JOB), Some("small"), None);
    let before = heaptag::snapshot().health.untracked_frees;
    let blocks: Vec<usize> = tag.scope(|| {
        // SAFETY: valid sizes; freed below.
        (0..2_000)
            .map(|i| unsafe { ht_buf_new(100 + i % 300, i as u64) } as usize)
            .collect()
    });
    let st = stats_of(tag);
    assert_eq!(st.native.tracked_live_count, 0, "{st:?}");
    assert!(st.alloc_count >= 2_000, "every native allocation is counted: {st:?}");
    for b in blocks {
        // SAFETY: made above, freed once.
        unsafe { ht_buf_free(b as *mut u8) };
    }
    let st = stats_of(tag);
    assert_eq!(st.native.small_live_bytes, 0, "sampled native blocks all freed: {st:?}");
    assert_eq!(heaptag::snapshot().health.untracked_frees, before);
}

#[test]
fn a_c_constructor_allocates_before_main() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut usable = 0usize;
    // SAFETY: the constructor's block, taken once.
    let p = unsafe { ht_early_take(&mut usable) };
    assert!(!p.is_null(), "the constructor's malloc failed");
    // A jemalloc size class of 100,000 bytes (whole pages), not glibc's
    // 100,008: the constructor ran before heaptag started and was served
    // by jemalloc.
    assert!(usable >= 100_000 && usable.is_multiple_of(4096), "usable size {usable}");
    // SAFETY: a live block of 100,000 bytes.
    let bytes = unsafe { std::slice::from_raw_parts(p, 100_000) };
    assert!(bytes.iter().all(|&b| b == 0x5a));
    let before = heaptag::snapshot().health.untracked_frees;
    // SAFETY: freed once.
    unsafe { ht_buf_free(p) };
    assert_eq!(
        heaptag::snapshot().health.untracked_frees,
        before,
        "a block from before start-up is no untracked-free warning"
    );
}

#[test]
fn glibc_edge_cases_of_the_malloc_family_hold() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a self-contained C function.
    let failed = unsafe { ht_edge_cases() };
    assert_eq!(failed, 0, "the number is the failing check in tests/native/buffers.c");
}

#[test]
fn fork_while_threads_call_malloc_leaves_a_working_child() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let stop = &stop;
            s.spawn(move || {
                let _p = heaptag::partition(100 + t as u32);
                // Bounded: at most this many rounds even if never stopped.
                for i in 0..200_000u64 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    // SAFETY: allocated and freed here, big enough to be
                    // tracked every 8th round.
                    unsafe { ht_buf_free(ht_buf_new(if i % 8 == 0 { 70_000 } else { 64 }, i)) };
                }
            });
        }
        for _ in 0..20 {
            // SAFETY: the child only allocates, frees and exits.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                // SAFETY: C and Rust allocation in the child, then _exit.
                unsafe {
                    let b = ht_buf_new(200_000, 1);
                    let v = ht_vec_new(40_000, 2);
                    ht_vec_double(v);
                    ht_vec_free(v);
                    ht_buf_free(b);
                    let r = vec![1u8; 300_000];
                    libc::_exit(if r[299_999] == 1 && !b.is_null() { 0 } else { 3 });
                }
            }
            let mut status = 0;
            // SAFETY: waiting for our own child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "child status {status:#x}"
            );
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

struct AllocatesOnDrop;

impl Drop for AllocatesOnDrop {
    fn drop(&mut self) {
        // A thread-local destructor calling C's malloc (tracked size) and
        // Rust's allocator while the thread exits.
        // SAFETY: allocated and freed here.
        unsafe { ht_buf_free(ht_buf_new(100_000, 3)) };
        drop(std::hint::black_box(vec![0u8; 1000]));
    }
}

thread_local! {
    static ON_EXIT: AllocatesOnDrop = const { AllocatesOnDrop };
}

#[test]
fn thread_local_destructors_may_call_malloc() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tag = Tag::new(Some(JOB), Some("tls_exit"), None);
    for _ in 0..8 {
        std::thread::spawn(move || {
            let _t = tag.enter();
            ON_EXIT.with(|_| {});
            // SAFETY: a block kept across the thread's exit, freed below.
            unsafe { ht_buf_new(80_000, 4) as usize }
        })
        .join()
        .map(|p| {
            // SAFETY: made by the thread above, freed once.
            unsafe { ht_buf_free(p as *mut u8) }
        })
        .unwrap();
    }
    let st = stats_of(tag);
    assert_eq!(st.native.tracked_live_bytes, 0, "{st:?}");
    assert_eq!(st.tracked.live_count, 0, "{st:?}");
}
