//! Who serves C's `malloc`: glibc without the `native` feature (exactly as
//! before it existed: jemalloc's statistics do not move), jemalloc with it.
//! CI runs this test both ways (`.ci/run`).

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

#[test]
fn c_malloc_is_glibc_without_the_feature_and_jemalloc_with_it() {
    const N: usize = 64 << 20;
    let before = heaptag::jemalloc_stats().unwrap().allocated;
    // SAFETY: C's malloc; the block is written, then freed once.
    let p = unsafe { libc::malloc(N) };
    assert!(!p.is_null());
    // SAFETY: N bytes were just allocated.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), 1, N) };
    let during = heaptag::jemalloc_stats().unwrap().allocated;
    // SAFETY: a block of 100,000 bytes, freed once.
    let usable = unsafe {
        let q = libc::malloc(100_000);
        let u = libc::malloc_usable_size(q);
        libc::free(q);
        u
    };
    // SAFETY: freed once.
    unsafe { libc::free(p) };
    let rose = during.saturating_sub(before);
    if cfg!(feature = "native") {
        assert!(rose >= N as u64, "jemalloc's allocated rose by {rose} only");
        // jemalloc's size classes of this size are whole pages (glibc's
        // would be 100,008).
        assert!(
            usable >= 100_000 && usable % 4096 == 0,
            "jemalloc's size class, not {usable}"
        );
    } else {
        assert!(
            rose < (N / 8) as u64,
            "jemalloc's allocated rose by {rose}: C went to jemalloc"
        );
        // glibc: the request rounded up to 16 bytes, less the 8-byte header.
        assert_eq!(usable, 100_008, "glibc's usable size");
    }
}
