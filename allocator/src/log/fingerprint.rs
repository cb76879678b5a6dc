//! Content fingerprints of tracked blocks: what decides "duplicated".
//!
//! The same call site legitimately allocates distinct per-partition data, so
//! site and size cannot tell a duplicate from a sibling; byte-identical
//! content can. A sampled fingerprint (the default) is XXH3-64, seeded with
//! the block's length, of 64 pieces of 64 bytes spread evenly over the block
//! (4 KiB read, whatever its size; the whole block when it is 4 KiB or
//! less). A full one (`HEAPTAG_FINGERPRINT_FULL=1`) is XXH3-64 (seed 0) of
//! every byte. XXH3 is a well-studied hash; neither allocates. The log's
//! header names both algorithms (`docs/FORMAT.md`). With AVX2 (detected at
//! run time) both run heaptag's own in-place XXH3 loop ([`avx2`]): XXH3's
//! 64-byte stripe is one piece, so a sampled fingerprint loads each stripe
//! from its piece's address; otherwise the `xxhash-rust` crate hashes copies
//! ([`full_copied`], [`sampled_copied`]). Each path gives the same value,
//! which the tests check against `xxhash-rust` and `twox-hash`.
//! Blocks whose every byte read is the same value (a fresh `vec![0; n]`) are
//! flagged as zero or constant filled, and are never reported as duplicates.

use heaptag_format::Fill;

/// Pieces a sampled fingerprint reads, and bytes per piece (one XXH3 stripe).
const PIECES: usize = 64;
const PIECE: usize = 64;
/// Bytes a sampled fingerprint hashes: the pieces' concatenation.
const SAMPLE: usize = PIECES * PIECE;

/// A fingerprint: hash and fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    pub(crate) hash: u64,
    pub(crate) fill: Fill,
}

/// Reads one 8-byte word of a live block.
///
/// The block may hold bytes the program never wrote (a `Vec` with spare
/// capacity), which Rust forbids reading as integers; an `asm` load is opaque
/// to the compiler and yields whatever the memory holds, which is all a hash
/// needs.
///
/// # Safety
/// `p..p+8` must be inside a live allocation.
#[inline]
unsafe fn load(p: *const u8) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let v: u64;
        // SAFETY: the caller guarantees 8 readable bytes at `p`; the
        // instruction reads them and touches nothing else.
        unsafe {
            std::arch::asm!("mov {v}, qword ptr [{p}]", p = in(reg) p, v = out(reg) v,
                options(nostack, preserves_flags, readonly))
        };
        v
    }
    #[cfg(target_arch = "aarch64")]
    {
        let v: u64;
        // SAFETY: as above; `ldr` tolerates unaligned addresses on aarch64 Linux.
        unsafe { std::arch::asm!("ldr {v}, [{p}]", p = in(reg) p, v = out(reg) v, options(nostack, readonly)) };
        v
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // SAFETY: the caller guarantees 8 readable bytes at `p`.
        // Native byte order, as the asm loads: the hashes read the words as
        // little-endian XXH3 input on little-endian targets.
        u64::from_ne_bytes(unsafe { std::ptr::read_volatile(p.cast::<[u8; 8]>()) })
    }
}

/// Reads one byte of a live block (as [`load`]: whatever the memory holds).
///
/// # Safety
/// `p` must be inside a live allocation.
#[inline]
#[cfg(not(target_arch = "x86_64"))]
unsafe fn load_u8(p: *const u8) -> u8 {
    #[cfg(target_arch = "aarch64")]
    {
        let v: u32;
        // SAFETY: the caller guarantees a readable byte at `p`.
        unsafe { std::arch::asm!("ldrb {v:w}, [{p}]", p = in(reg) p, v = out(reg) v, options(nostack, readonly)) };
        v as u8
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        // SAFETY: the caller guarantees a readable byte at `p`.
        unsafe { std::ptr::read_volatile(p) }
    }
}

/// Copies `dst.len()` bytes of a live block at `src` into `dst`, with loads
/// the compiler cannot see into (as [`load`]: bytes the program never wrote
/// are copied as whatever the memory holds), so `dst` is ordinary initialized
/// memory a safe hash function can read.
///
/// # Safety
/// `src..src+dst.len()` must be inside a live allocation.
#[inline]
unsafe fn copy_out(src: *const u8, dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the caller guarantees `dst.len()` readable bytes at `src`;
        // `dst` is that many writable bytes; `rep movsb` (fast strings on
        // every x86_64 since Ivy Bridge) copies exactly them, forward (the
        // direction flag is clear at every Rust function boundary).
        unsafe {
            std::arch::asm!("rep movsb",
                inout("rcx") dst.len() => _, inout("rsi") src => _, inout("rdi") dst.as_mut_ptr() => _,
                options(nostack, preserves_flags))
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let words = dst.len() / 8;
        for (i, w) in dst.chunks_exact_mut(8).enumerate() {
            // SAFETY: `i * 8 + 8 <= dst.len()`.
            w.copy_from_slice(&unsafe { load(src.add(i * 8)) }.to_ne_bytes());
        }
        for i in words * 8..dst.len() {
            // SAFETY: `i < dst.len()`.
            dst[i] = unsafe { load_u8(src.add(i)) };
        }
    }
}

/// Bytes copied and hashed at a time by [`full`]: a chunk on the stack stays
/// in L1 between the copy, the fill check and the hash. Measured on blocks
/// out of cache: 2 KiB keeps the copy within the memory's own read time;
/// 4 KiB and more are twice as slow (the copy's source and the stack buffer
/// alias in the L1's 4 KiB index), 512 bytes pays the per-call costs.
const FULL_CHUNK: usize = 2048;

/// XXH3-64 of every byte of the live block `p..p+size`, and its fill.
///
/// With AVX2 (detected at run time; the build targets baseline x86_64) and
/// more than 240 bytes, [`avx2::full`] hashes the block in place, one pass
/// over its memory. Otherwise [`full_copied`].
///
/// # Safety
/// `p..p+size` must be inside a live allocation.
unsafe fn full(p: *const u8, size: usize) -> Fingerprint {
    #[cfg(target_arch = "x86_64")]
    if size > avx2::MIN_LEN && has_avx2() {
        // SAFETY: the caller's guarantee; the CPU has AVX2.
        return unsafe { avx2::full(p, size) };
    }
    // SAFETY: the caller's guarantee.
    unsafe { full_copied(p, size) }
}

/// Whether this CPU has AVX2 (std caches the answer: one relaxed load).
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Runs the CPU feature detection once, when the log starts, so the first
/// full fingerprint (inside the allocator) only reads std's cache.
pub(crate) fn prime() {
    #[cfg(target_arch = "x86_64")]
    std::hint::black_box(has_avx2());
}

/// XXH3-64 of the block through the `xxhash-rust` crate, which reads only
/// Rust slices: the block is copied 2 KiB at a time into a stack buffer with
/// [`copy_out`] (as [`load`]: whatever the memory holds), checked for a
/// uniform fill and fed to the crate's streaming hasher (no allocation). The
/// path for CPUs without AVX2, other architectures and blocks of 240 bytes or
/// less (XXH3's short-input cases).
///
/// # Safety
/// `p..p+size` must be inside a live allocation.
unsafe fn full_copied(p: *const u8, size: usize) -> Fingerprint {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    let mut buf = [0u8; FULL_CHUNK];
    // The first byte, and whether every byte so far equals it.
    let mut first: Option<u8> = None;
    let mut uniform = true;
    let mut off = 0;
    while off < size {
        let n = (size - off).min(FULL_CHUNK);
        let chunk = &mut buf[..n];
        // SAFETY: `off + n <= size`: inside the block.
        unsafe { copy_out(p.add(off), chunk) };
        if uniform {
            let b = *first.get_or_insert(chunk.first().copied().unwrap_or(0));
            // Most blocks differ in the first chunk.
            uniform = all_equal(chunk, b);
        }
        h.update(chunk);
        off += n;
    }
    let fill = match (uniform, first) {
        (true, None) | (true, Some(0)) => Fill::Zero,
        (true, Some(b)) => Fill::Constant(b),
        _ => Fill::Mixed,
    };
    Fingerprint { hash: h.digest(), fill }
}

/// XXH3-64 of long inputs with AVX2, reading the block in place: every byte
/// (full fingerprints, seed 0) or each 64-byte piece of a sampled one as one
/// stripe (seed = the block's length).
///
/// `xxhash-rust` picks its SIMD code at compile time (`cfg(target_feature)`),
/// so a baseline x86_64 build runs its SSE2 loop; and it, like every XXH3
/// crate, reads `&[u8]`, which a block holding bytes the program never wrote
/// may not be turned into (hence [`full_copied`]'s copy: with the SSE2 loop
/// 1.3-1.7x the CPU time of merely reading a block out of cache, where this
/// loop matches it; `full_fingerprint_speed`). This is XXH3's stripe loop for
/// inputs over 240 bytes, default secret (seed 0) or the secret derived from
/// a seed, as `xxh_x86dispatch.c` and `xxhash.h` (`XXH3_accumulate_512_avx2`,
/// `XXH3_scrambleAcc_avx2`, `XXH3_initCustomSecret`,
/// `XXH3_hashLong_64b_withSeed`) define it, with every load of the block an `asm`
/// `vmovdqu` (opaque, as [`load`]); the uniform-fill check rides on the same
/// loads. The tests check it against `xxhash-rust` and `twox-hash` on every
/// length class (block and stripe boundaries, odd tails).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::Fingerprint;
    use heaptag_format::Fill;
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_castsi256_si128, _mm256_loadu_si256, _mm256_mul_epu32, _mm256_or_si256,
        _mm256_set1_epi32, _mm256_set1_epi8, _mm256_set_epi64x, _mm256_setzero_si256, _mm256_shuffle_epi32,
        _mm256_slli_epi64, _mm256_srli_epi64, _mm256_storeu_si256, _mm256_testz_si256, _mm256_xor_si256,
        _mm_cvtsi128_si32,
    };

    /// Inputs up to this length take XXH3's short-input paths, not this one.
    pub(super) const MIN_LEN: usize = 240;

    /// XXH3's default secret (`XXH3_kSecret`).
    #[rustfmt::skip]
    const SECRET: [u8; 192] = [
        0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
        0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
        0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
        0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
        0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
        0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
        0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
        0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
        0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
        0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
        0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
        0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
    ];
    const PRIME32_1: u64 = 0x9E37_79B1;
    const PRIME32_2: u64 = 0x85EB_CA77;
    const PRIME32_3: u64 = 0xC2B2_AE3D;
    const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;
    const PRIME64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const PRIME64_3: u64 = 0x1656_67B1_9E37_79F9;
    const PRIME64_4: u64 = 0x85EB_CA77_C2B2_AE63;
    const PRIME64_5: u64 = 0x27D4_EB2F_1656_67C5;
    /// Stripes (64 bytes) per block: the secret advances 8 bytes a stripe.
    const STRIPES: usize = (SECRET.len() - 64) / 8;
    const BLOCK: usize = 64 * STRIPES;
    /// Where the scramble's and the last stripe's keys start in the secret.
    const SCRAMBLE_AT: usize = SECRET.len() - 64;
    const LAST_AT: usize = SECRET.len() - 64 - 7;
    const MERGE_AT: usize = 11;

    /// The accumulators and the fill check's state.
    struct State {
        acc: [__m256i; 2],
        /// OR of every 32 bytes read XOR the first byte repeated: zero while
        /// the block is uniform.
        diff: __m256i,
        pattern: __m256i,
    }

    /// Loads 32 bytes of the block (as [`super::load`]: whatever the memory
    /// holds).
    ///
    /// # Safety
    /// `p..p+32` must be inside a live allocation; the CPU has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load32(p: *const u8) -> __m256i {
        let v: __m256i;
        // SAFETY: the caller guarantees 32 readable bytes at `p` and AVX;
        // the instruction reads them and touches nothing else.
        unsafe {
            std::arch::asm!("vmovdqu {v}, ymmword ptr [{p}]", p = in(reg) p, v = out(ymm_reg) v,
                options(nostack, preserves_flags, readonly))
        };
        v
    }

    impl State {
        /// `XXH3_accumulate_512_avx2` on the stripe at `p` with the key at
        /// `secret[key..]`.
        ///
        /// # Safety
        /// `p..p+64` must be inside a live allocation; `key + 64 <=
        /// SECRET.len()`; the CPU has AVX2.
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn stripe(&mut self, p: *const u8, secret: &Secret, key: usize) {
            // SAFETY: the CPU has AVX2 (one block: Rust before 1.87 has
            // every intrinsic unsafe); `32 * i + 32 <= 64`, so the loads
            // stay inside the stripe and `key + 32 * i + 32 <= SECRET.len()`
            // inside the secret (unaligned loads).
            unsafe {
                for (i, acc) in self.acc.iter_mut().enumerate() {
                    let data = load32(p.add(32 * i));
                    self.diff = _mm256_or_si256(self.diff, _mm256_xor_si256(data, self.pattern));
                    let k = _mm256_loadu_si256(secret.as_ptr().add(key + 32 * i).cast());
                    let dk = _mm256_xor_si256(data, k);
                    // Each 64-bit lane: its low 32 bits times its high 32 bits.
                    let product = _mm256_mul_epu32(dk, _mm256_shuffle_epi32::<0b00_11_00_01>(dk));
                    // The data with its 64-bit lanes swapped in pairs.
                    let swapped = _mm256_shuffle_epi32::<0b01_00_11_10>(data);
                    *acc = _mm256_add_epi64(product, _mm256_add_epi64(*acc, swapped));
                }
            }
        }

        /// `XXH3_scrambleAcc_avx2`, after each block.
        ///
        /// # Safety
        /// The CPU has AVX2.
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn scramble(&mut self, secret: &Secret) {
            // SAFETY: the CPU has AVX2; `SCRAMBLE_AT + 32 * i + 32 <=
            // SECRET.len()` (unaligned loads).
            unsafe {
                let prime = _mm256_set1_epi32(PRIME32_1 as i32);
                for (i, acc) in self.acc.iter_mut().enumerate() {
                    let a = _mm256_xor_si256(*acc, _mm256_srli_epi64::<47>(*acc));
                    let k = _mm256_loadu_si256(secret.as_ptr().add(SCRAMBLE_AT + 32 * i).cast());
                    let dk = _mm256_xor_si256(a, k);
                    // dk * PRIME32_1 in each 64-bit lane, from 32x32 products.
                    let lo = _mm256_mul_epu32(dk, prime);
                    let hi = _mm256_mul_epu32(_mm256_shuffle_epi32::<0b00_11_00_01>(dk), prime);
                    *acc = _mm256_add_epi64(lo, _mm256_slli_epi64::<32>(hi));
                }
            }
        }
    }

    /// A secret: XXH3's default one, or one derived from a seed.
    type Secret = [u8; 192];

    fn secret64(secret: &Secret, at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&secret[at..at + 8]);
        u64::from_le_bytes(w)
    }

    fn mul128_fold64(a: u64, b: u64) -> u64 {
        let p = u128::from(a) * u128::from(b);
        (p as u64) ^ ((p >> 64) as u64)
    }

    /// XXH3-64 (default secret, seed 0) of the block `p..p+size`, and its fill.
    ///
    /// # Safety
    /// `p..p+size` must be inside a live allocation; `size > MIN_LEN`; the
    /// CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn full(p: *const u8, size: usize) -> Fingerprint {
        // SAFETY: the caller's guarantees; every stripe `at` is asked for
        // lies inside the block (`long`'s contract: `off + 64 <= size`).
        unsafe { long(size, &SECRET, |off| p.add(off)) }
    }

    /// The sampled fingerprint of the block `p..p+size`: XXH3-64 with seed
    /// `size` of its pieces' concatenation ([`super::piece_at`]), each
    /// stripe loaded from its piece in place, or of the whole block when it
    /// is [`super::SAMPLE`] bytes or less.
    ///
    /// # Safety
    /// `p..p+size` must be inside a live allocation; `size > MIN_LEN`; the
    /// CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sampled(p: *const u8, size: usize) -> Fingerprint {
        // SAFETY: the caller's guarantees.
        unsafe { sampled_ahead::<PREFETCH_AHEAD>(p, size) }
    }

    /// Pieces prefetched ahead of the one being hashed by [`sampled`]
    /// (`PIECES`: all of them, before the first stripe). The pieces of a
    /// block over 256 KiB lie on 64 different pages; their loads are
    /// independent, but the stripe loop reaches them in order, so out of
    /// cache the 64 misses (and page walks) would overlap only as far as the
    /// out-of-order window reaches. Prefetching 8 ahead keeps about that
    /// many misses in flight; all 64 at once is no faster than none (the
    /// line-fill buffers fill), docs/PERFORMANCE.md has the figures.
    const PREFETCH_AHEAD: usize = 8;

    /// Prefetches (to L1) both cache lines of the 64-byte piece at `p` (the
    /// same one when it is aligned).
    ///
    /// # Safety
    /// None needed by the instruction (a prefetch never faults); callers keep
    /// `p..p+64` inside the block anyway.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn prefetch_piece(p: *const u8) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint: it reads nothing into the program's
        // state and never faults, whatever the address; `p + 63` is the
        // piece's last byte (the caller's).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(p.add(super::PIECE - 1).cast::<i8>());
        }
    }

    /// [`sampled`], prefetching `AHEAD` pieces ahead (0: none, the code
    /// before the prefetch; [`super::PIECES`]: all before hashing); the
    /// value is the same whatever `AHEAD`.
    ///
    /// # Safety
    /// As [`sampled`].
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sampled_ahead<const AHEAD: usize>(p: *const u8, size: usize) -> Fingerprint {
        // SAFETY: the CPU has AVX2.
        let secret = unsafe { seeded_secret_avx2(size as u64) };
        if size <= super::SAMPLE {
            // SAFETY: as in `full`.
            return unsafe { long(size, &secret, |off| p.add(off)) };
        }
        let step = super::piece_step(size);
        for i in 0..AHEAD.min(super::PIECES) {
            // SAFETY: piece `i < PIECES` is inside the block (`piece_at`).
            unsafe { prefetch_piece(p.add(super::piece_at(size, step, i))) };
        }
        // SAFETY: the caller's guarantees. The input is the 4,096-byte
        // concatenation, so every stripe `long` asks for starts at a
        // multiple of 64 below 4,096 (the last one too: 4,096 - 64), which
        // is piece `off / 64` whole, inside the block (`piece_at`); so is
        // piece `off / 64 + AHEAD` when below `PIECES`.
        unsafe {
            long(super::SAMPLE, &secret, |off| {
                let i = off / super::PIECE;
                if AHEAD > 0 && AHEAD < super::PIECES && i + AHEAD < super::PIECES {
                    prefetch_piece(p.add(super::piece_at(size, step, i + AHEAD)));
                }
                p.add(super::piece_at(size, step, i))
            })
        }
    }

    /// `XXH3_initCustomSecret` (as its AVX2 version computes it): the secret
    /// XXH3-64 with `seed` hashes long inputs with, each 16 bytes of the
    /// default secret with the seed added to its first 8 and taken from its
    /// last 8 (little endian): six 32-byte adds of `(seed, -seed, seed,
    /// -seed)`.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn seeded_secret_avx2(seed: u64) -> Secret {
        let mut out = [0u8; 192];
        // SAFETY: the CPU has AVX2; `32 * i + 32 <= 192` for `i < 6`, inside
        // `SECRET` and `out` (unaligned loads and stores).
        unsafe {
            let s = _mm256_set_epi64x(
                seed.wrapping_neg() as i64,
                seed as i64,
                seed.wrapping_neg() as i64,
                seed as i64,
            );
            for i in 0..6 {
                let k = _mm256_loadu_si256(SECRET.as_ptr().add(32 * i).cast());
                _mm256_storeu_si256(out.as_mut_ptr().add(32 * i).cast(), _mm256_add_epi64(k, s));
            }
        }
        out
    }

    /// XXH3-64 with `secret` (the default one for seed 0, else
    /// [`seeded_secret_avx2`]) of a `len`-byte input whose 64 bytes at offset
    /// `off` are at `at(off)`, and its fill.
    ///
    /// # Safety
    /// `len > MIN_LEN`; the CPU has AVX2; for every `off` that is a multiple
    /// of 64 with `off + 64 <= len`, and for `off = len - 64`, `at(off)..+64`
    /// is inside a live allocation and holds the input's bytes
    /// `off..off + 64`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn long(len: usize, secret: &Secret, at: impl Fn(usize) -> *const u8) -> Fingerprint {
        // SAFETY: the CPU has AVX2, the caller's guarantee (one block: Rust
        // before 1.87 has every intrinsic unsafe). Every stripe read starts
        // at a multiple of 64 ending at most at `len - 1`, or is the last
        // stripe `len - 64..len` (`len > MIN_LEN > 64`), as is the first
        // load (offset 0). Keys: `st * 8 + 64 <= SECRET.len()` for `st <
        // STRIPES`, and `LAST_AT + 64 <= SECRET.len()`. `acc` is 64
        // writable bytes.
        let (acc, first, uniform) = unsafe {
            let first = _mm_cvtsi128_si32(_mm256_castsi256_si128(load32(at(0)))) as u8;
            let mut s = State {
                acc: [
                    _mm256_set_epi64x(PRIME64_3 as i64, PRIME64_2 as i64, PRIME64_1 as i64, PRIME32_3 as i64),
                    _mm256_set_epi64x(PRIME32_1 as i64, PRIME64_5 as i64, PRIME32_2 as i64, PRIME64_4 as i64),
                ],
                diff: _mm256_setzero_si256(),
                pattern: _mm256_set1_epi8(first as i8),
            };
            let blocks = (len - 1) / BLOCK;
            for b in 0..blocks {
                for st in 0..STRIPES {
                    s.stripe(at(b * BLOCK + st * 64), secret, st * 8);
                }
                s.scramble(secret);
            }
            // The last, partial block: whole stripes short of the last byte.
            let stripes = (len - 1 - blocks * BLOCK) / 64;
            for st in 0..stripes {
                s.stripe(at(blocks * BLOCK + st * 64), secret, st * 8);
            }
            // The last 64 bytes (overlapping the stripes before them).
            s.stripe(at(len - 64), secret, LAST_AT);
            let mut acc = [0u64; 8];
            _mm256_storeu_si256(acc.as_mut_ptr().cast(), s.acc[0]);
            _mm256_storeu_si256(acc.as_mut_ptr().add(4).cast(), s.acc[1]);
            (acc, first, _mm256_testz_si256(s.diff, s.diff) != 0)
        };
        let mut h = (len as u64).wrapping_mul(PRIME64_1);
        for i in 0..4 {
            let at = MERGE_AT + 16 * i;
            h = h.wrapping_add(mul128_fold64(
                acc[2 * i] ^ secret64(secret, at),
                acc[2 * i + 1] ^ secret64(secret, at + 8),
            ));
        }
        // XXH3_avalanche.
        h ^= h >> 37;
        h = h.wrapping_mul(0x1656_6791_9E37_79F9);
        h ^= h >> 32;
        let fill = match (uniform, first) {
            (true, 0) => Fill::Zero,
            (true, b) => Fill::Constant(b),
            (false, _) => Fill::Mixed,
        };
        Fingerprint { hash: h, fill }
    }
}

/// Bytes between the starts of consecutive pieces of a block of `size >
/// SAMPLE` bytes (at least [`PIECE`]: the pieces do not overlap, but for
/// the last, which ends at the block's end).
#[inline]
fn piece_step(size: usize) -> usize {
    (size - PIECE) / (PIECES - 1)
}

/// Where piece `i` of a block of `size > SAMPLE` bytes starts: `i * step`,
/// the last at `size - PIECE` (so the first and last 64 bytes are always
/// read), `step` being [`piece_step`]. Every piece is inside the block:
/// `62 * step + PIECE <= size - PIECE + PIECE`.
#[inline]
fn piece_at(size: usize, step: usize, i: usize) -> usize {
    if i >= PIECES - 1 {
        size - PIECE
    } else {
        i * step
    }
}

/// Whether every byte of `bytes` is `b`: word-wide compares, 64 bytes at a
/// time, stopping at the first 64 that differ (most blocks differ in the
/// first).
fn all_equal(bytes: &[u8], b: u8) -> bool {
    let pat = u64::from_ne_bytes([b; 8]);
    let mut chunks = bytes.chunks_exact(64);
    let same = chunks.by_ref().all(|c| {
        c.chunks_exact(8).fold(0u64, |acc, w| {
            acc | (u64::from_ne_bytes(w.try_into().unwrap_or([b; 8])) ^ pat)
        }) == 0
    });
    same && chunks.remainder().iter().all(|&x| x == b)
}

/// The sampled fingerprint without AVX2 (other CPUs and architectures, and
/// blocks of 240 bytes or less): the pieces (or the whole block of at most
/// [`SAMPLE`] bytes) are copied with [`copy_out`] into a 4 KiB stack buffer,
/// checked for a uniform fill and hashed with `xxhash-rust`'s XXH3-64 with
/// seed `size` (no allocation, no panic).
///
/// # Safety
/// `p..p+size` must be inside a live allocation.
#[inline(never)]
unsafe fn sampled_copied(p: *const u8, size: usize) -> Fingerprint {
    // Not zeroed first (a 4 KiB memset per fingerprint): every byte hashed
    // is written before it is read.
    let mut buf = std::mem::MaybeUninit::<[u8; SAMPLE]>::uninit();
    let dst = buf.as_mut_ptr().cast::<u8>();
    let n = size.min(SAMPLE);
    if size <= SAMPLE {
        // SAFETY: `dst` is `SAMPLE >= size` writable bytes, zeroed so they
        // form a slice; the whole block, per the caller's guarantee.
        unsafe {
            std::ptr::write_bytes(dst, 0, size);
            copy_out(p, std::slice::from_raw_parts_mut(dst, size));
        }
    } else {
        let step = piece_step(size);
        // Eight word loads a piece (`rep movsb`'s start-up, paid 64 times,
        // would cost more than the copy).
        for i in 0..PIECES {
            let src = piece_at(size, step, i);
            for j in 0..PIECE / 8 {
                // SAFETY: `src + 8 * j + 8 <= piece_at(..) + PIECE <= size`:
                // inside the block; `i * PIECE + 8 * j + 8 <= SAMPLE`: inside
                // `buf` (unaligned store).
                unsafe {
                    let w = load(p.add(src + 8 * j));
                    dst.add(i * PIECE + 8 * j).cast::<u64>().write_unaligned(w);
                }
            }
        }
    }
    // SAFETY: `dst..dst+n` was written above (all `SAMPLE` bytes when
    // `size > SAMPLE`, else the `size` copied).
    let bytes = unsafe { std::slice::from_raw_parts(dst.cast_const(), n) };
    let first = bytes.first().copied().unwrap_or(0);
    let fill = match (all_equal(bytes, first), first) {
        (true, 0) => Fill::Zero,
        (true, b) => Fill::Constant(b),
        (false, _) => Fill::Mixed,
    };
    Fingerprint {
        hash: xxhash_rust::xxh3::xxh3_64_with_seed(bytes, size as u64),
        fill,
    }
}

/// Fingerprints the live block `p..p+size`: with `full`, XXH3-64 (seed 0)
/// of every byte; otherwise XXH3-64 with seed `size` of the 64 pieces'
/// concatenation ([`piece_at`]; the whole block when `size <= 4096`).
///
/// # Safety
/// `p..p+size` must be a live allocation that no one frees during the call
/// (the caller holds the block's table shard, or is freeing it itself).
pub(crate) unsafe fn fingerprint(p: *const u8, size: usize, full: bool) -> Fingerprint {
    if full {
        // SAFETY: the caller's guarantee.
        return unsafe { self::full(p, size) };
    }
    #[cfg(target_arch = "x86_64")]
    if size > avx2::MIN_LEN && has_avx2() {
        // SAFETY: the caller's guarantee; the CPU has AVX2.
        return unsafe { avx2::sampled(p, size) };
    }
    // SAFETY: the caller's guarantee.
    unsafe { sampled_copied(p, size) }
}

/// The sampled fingerprint heaptag 0.2 and earlier took (header: no sampled
/// algorithm field), kept to measure the new one against
/// (`sampled_fingerprint_speed`).
#[cfg(test)]
mod four_lane {
    use super::{load, Fill, Fingerprint};

    const BLOCKS: usize = 64;
    const BLOCK: usize = 64;
    const K: u64 = 0x9e37_79b9_7f4a_7c15;

    /// Four independent lanes, so the multiplies of consecutive words overlap
    /// (about 4x the throughput of one chain). Sampled fingerprints only; full
    /// ones were this hash over every word before XXH3.
    struct Hasher {
        lanes: [u64; 4],
        /// The first byte seen, repeated in every byte of a word.
        pattern: Option<u64>,
        uniform: bool,
    }

    impl Hasher {
        fn new(len: usize) -> Hasher {
            let l = (len as u64).wrapping_mul(K);
            Hasher {
                lanes: [l, l ^ 1, l ^ 2, l ^ 3],
                pattern: None,
                uniform: true,
            }
        }

        #[inline(always)]
        fn mix(h: u64, w: u64) -> u64 {
            (h ^ w).wrapping_mul(K).rotate_left(29)
        }

        #[inline(always)]
        fn uniform_check(&mut self, diff: u64) {
            if diff != 0 {
                self.uniform = false;
            }
        }

        fn pattern(&mut self, w: u64) -> u64 {
            *self.pattern.get_or_insert(u64::from(w as u8) * 0x0101_0101_0101_0101)
        }

        fn word(&mut self, w: u64) {
            let p = self.pattern(w);
            self.uniform_check(w ^ p);
            self.lanes[0] = Self::mix(self.lanes[0], w);
        }

        fn finish(self) -> Fingerprint {
            let fill = match (self.uniform, self.pattern) {
                (true, Some(0)) | (true, None) => Fill::Zero,
                (true, Some(p)) => Fill::Constant(p as u8),
                _ => Fill::Mixed,
            };
            let [a, b, c, d] = self.lanes;
            let h = Self::mix(Self::mix(Self::mix(a, b), c), d);
            Fingerprint {
                hash: crate::internal::mix64(h),
                fill,
            }
        }

        /// Hashes `len` bytes at `p` (whole words; a tail shorter than a word is
        /// read as the last full word of the block).
        ///
        /// # Safety
        /// `p..p+len` must be inside a live allocation and `len >= 8`.
        unsafe fn range(&mut self, p: *const u8, len: usize) {
            let words = len / 8;
            // SAFETY: `len >= 8`: the first word is inside the range.
            let pat = self.pattern(unsafe { load(p) });
            let quads = words / 4;
            for q in 0..quads {
                // SAFETY: `q * 32 + 32 <= words * 8 <= len`.
                let (w0, w1, w2, w3) = unsafe {
                    let b = p.add(q * 32);
                    (load(b), load(b.add(8)), load(b.add(16)), load(b.add(24)))
                };
                self.uniform_check((w0 ^ pat) | (w1 ^ pat) | (w2 ^ pat) | (w3 ^ pat));
                self.lanes[0] = Self::mix(self.lanes[0], w0);
                self.lanes[1] = Self::mix(self.lanes[1], w1);
                self.lanes[2] = Self::mix(self.lanes[2], w2);
                self.lanes[3] = Self::mix(self.lanes[3], w3);
            }
            for i in quads * 4..words {
                // SAFETY: `i * 8 + 8 <= len`.
                self.word(unsafe { load(p.add(i * 8)) });
            }
            if !len.is_multiple_of(8) {
                // SAFETY: `len >= 8`, so the last 8 bytes are inside the range.
                self.word(unsafe { load(p.add(len - 8)) });
            }
        }
    }

    /// Fingerprints the live block `p..p+size`.
    ///
    /// # Safety
    /// `p..p+size` must be a live allocation that no one frees during the call
    /// (the caller holds the block's table shard, or is freeing it itself).
    pub(super) unsafe fn fingerprint(p: *const u8, size: usize) -> Fingerprint {
        let mut h = Hasher::new(size);
        if size < 8 {
            return h.finish();
        }
        if size <= BLOCKS * BLOCK {
            // SAFETY: the whole block, per the caller's guarantee.
            unsafe { h.range(p, size) };
            return h.finish();
        }
        let step = (size - BLOCK) / (BLOCKS - 1);
        for i in 0..BLOCKS {
            // The last block ends exactly at `size`.
            let off = if i == BLOCKS - 1 { size - BLOCK } else { i * step };
            // SAFETY: `off + BLOCK <= size` for every i.
            unsafe { h.range(p.add(off), BLOCK) };
        }
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(v: &[u8], full: bool) -> Fingerprint {
        // SAFETY: `v` is a live slice for the duration of the call.
        unsafe { fingerprint(v.as_ptr(), v.len(), full) }
    }

    #[test]
    fn identical_content_same_fingerprint_distinct_content_differs() {
        let a: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let b = a.clone();
        let mut c = a.clone();
        c[0] ^= 1;
        assert_eq!(fp(&a, false), fp(&b, false));
        assert_ne!(fp(&a, false).hash, fp(&c, false).hash, "the first block is always read");
        assert_eq!(fp(&a, false).fill, Fill::Mixed);
        assert_ne!(fp(&a, true).hash, fp(&a[1..], true).hash, "length is hashed");
    }

    /// Lengths around every boundary of XXH3 and of both full paths: the
    /// short-input classes (<= 240), stripes (64), blocks (1,024), the copy's
    /// chunks (2,048) and odd tails.
    fn lengths() -> Vec<usize> {
        let mut v = vec![0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 255, 256, 257, 1000];
        for base in [1024usize, 2048, 4096, 8192, 3 * 8192, 1 << 20] {
            v.extend([
                base - 65,
                base - 64,
                base - 63,
                base - 1,
                base,
                base + 1,
                base + 63,
                base + 64,
                base + 65,
            ]);
        }
        v
    }

    fn bytes(len: usize) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect()
    }

    /// Both full paths: the one `fingerprint` takes here, and the copying one
    /// (what a CPU without AVX2 runs); with AVX2, the in-place one too.
    fn full_paths(v: &[u8]) -> Vec<(&'static str, Fingerprint)> {
        // SAFETY: `v` is a live slice for the duration of each call.
        let mut out = vec![
            ("fingerprint", fp(v, true)),
            ("copied", unsafe { full_copied(v.as_ptr(), v.len()) }),
        ];
        #[cfg(target_arch = "x86_64")]
        if v.len() > avx2::MIN_LEN && has_avx2() {
            // SAFETY: as above; the CPU has AVX2.
            out.push(("avx2", unsafe { avx2::full(v.as_ptr(), v.len()) }));
        }
        out
    }

    #[test]
    fn full_fingerprints_are_xxh3_of_every_byte() {
        // Against two independent implementations' one-shot functions on
        // the same bytes, on every length class, from aligned and unaligned
        // starts.
        let mut checked_avx2 = 0;
        for len in lengths() {
            let v = bytes(len + 3);
            for start in [0usize, 3] {
                let s = &v[start..start + len];
                let want = xxhash_rust::xxh3::xxh3_64(s);
                assert_eq!(
                    want,
                    twox_hash::XxHash3_64::oneshot(s),
                    "the references agree, len {len}"
                );
                for (path, got) in full_paths(s) {
                    assert_eq!(got.hash, want, "{path}, len {len}, start {start}");
                    checked_avx2 += usize::from(path == "avx2");
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            assert!(checked_avx2 > 50, "the AVX2 path ran ({checked_avx2} cases)");
        }
        let _ = checked_avx2;
        let a: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut b = a.clone();
        b[99_999] ^= 1;
        assert_ne!(fp(&a, true).hash, fp(&b, true).hash, "the last byte counts");
        assert_eq!(fp(&a, true).fill, Fill::Mixed);
    }

    #[test]
    fn full_fill_sees_one_different_byte_anywhere() {
        for len in lengths() {
            for b in [0u8, 9] {
                // An empty block reads as zero filled.
                let want = if b == 0 || len == 0 {
                    Fill::Zero
                } else {
                    Fill::Constant(b)
                };
                let mut v = vec![b; len];
                for (path, got) in full_paths(&v) {
                    assert_eq!(got.fill, want, "{path}, len {len}, fill {b}");
                    assert_eq!(got.hash, xxhash_rust::xxh3::xxh3_64(&v), "{path}, len {len}, fill {b}");
                }
                // One different byte: first, last, inside the last stripe
                // only, on a block boundary.
                for at in [0, len / 2, len.saturating_sub(1), len.saturating_sub(40), 1024, 2048] {
                    // (A one-byte block is uniform whatever its byte.)
                    if at >= len || len < 2 {
                        continue;
                    }
                    v[at] = b ^ 0x5a;
                    for (path, got) in full_paths(&v) {
                        assert_eq!(got.fill, Fill::Mixed, "{path}, len {len}, fill {b}, at {at}");
                    }
                    v[at] = b;
                }
            }
        }
        assert_eq!(fp(&[], true).fill, Fill::Zero);
    }

    /// CPU seconds per GiB of full fingerprints: the copying path (what
    /// every CPU ran before: 2 KiB copies fed to `xxhash-rust`'s SSE2 loop)
    /// against [`fingerprint`] (with AVX2 the in-place loop), interleaved, on
    /// one 256 MiB buffer (out of cache, as a large block at its free) and a
    /// 256 KiB one hashed 1,024 times (in cache: the hash's own cost), each
    /// mixed and constant filled (a constant block is checked for its fill
    /// to the end), with the floor of merely reading the bytes (a sum of
    /// their words). Prints, asserts nothing on time: `cargo test --release
    /// -p heaptag-alloc --lib -- --ignored --nocapture full_fingerprint_speed`.
    #[test]
    #[ignore]
    fn full_fingerprint_speed() {
        // This thread's CPU time (the shared machine's load does not count).
        let cpu = || {
            let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `t` is a valid timespec to write.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
        };
        for (len, reps) in [(256usize << 20, 1), (256 << 10, 1024)] {
            for constant in [false, true] {
                let mut v = vec![0u8; len];
                let gib = (len * reps) as f64 / f64::from(1u32 << 30);
                let (mut old, mut new, mut read) = (Vec::new(), Vec::new(), Vec::new());
                for round in 0..7u32 {
                    // Rewritten before each measurement, as a block is
                    // before its free.
                    let refill = |v: &mut Vec<u8>| {
                        for (i, b) in v.iter_mut().enumerate() {
                            *b = if constant {
                                round as u8 + 1
                            } else {
                                (i as u32 ^ round).wrapping_mul(2_654_435_761) as u8
                            };
                        }
                    };
                    refill(&mut v);
                    let t = cpu();
                    for _ in 0..reps {
                        // SAFETY: `v` is live for the call.
                        std::hint::black_box(unsafe { full_copied(v.as_ptr(), len) });
                    }
                    old.push((cpu() - t) / gib);
                    refill(&mut v);
                    let t = cpu();
                    for _ in 0..reps {
                        std::hint::black_box(fp(&v, true));
                    }
                    new.push((cpu() - t) / gib);
                    refill(&mut v);
                    let t = cpu();
                    for _ in 0..reps {
                        let sum = v.chunks_exact(8).fold(0u64, |a, w| {
                            a.wrapping_add(u64::from_ne_bytes(w.try_into().unwrap_or_default()))
                        });
                        std::hint::black_box(sum);
                    }
                    read.push((cpu() - t) / gib);
                }
                for m in [&mut old, &mut new, &mut read] {
                    m.sort_by(f64::total_cmp);
                }
                println!(
                    "full fingerprints, CPU s/GiB (median of 7, {} KiB x {reps}, {}): copied to xxhash-rust {:.4}, \
                     fingerprint() {:.4} (copied / fingerprint() {:.2}x), reading alone {:.4}",
                    len >> 10,
                    if constant { "constant" } else { "mixed" },
                    old[3],
                    new[3],
                    old[3] / new[3],
                    read[3]
                );
            }
        }
    }

    /// The bytes a sampled fingerprint hashes, as docs/FORMAT.md defines
    /// them: the whole block up to 4,096 bytes; else 64 pieces of 64 bytes,
    /// piece `i < 63` at `i * ((len - 64) / 63)`, the last at `len - 64`.
    fn pieces_of(v: &[u8]) -> Vec<u8> {
        if v.len() <= 4096 {
            return v.to_vec();
        }
        let step = (v.len() - 64) / 63;
        let mut out = Vec::new();
        for i in 0..64 {
            let at = if i == 63 { v.len() - 64 } else { i * step };
            out.extend_from_slice(&v[at..at + 64]);
        }
        assert_eq!(out.len(), 4096);
        out
    }

    /// Lengths around the sampled fingerprint's boundaries: XXH3's
    /// short-input classes, the 4 KiB sample, the pieces' step growing past
    /// 64, odd sizes, 1 MiB (the default minimum) and beyond.
    fn sampled_lengths() -> Vec<usize> {
        let mut v = lengths();
        v.extend([
            4096 + 1,
            4096 + 62,
            4096 + 63,
            2 * 4096 - 1,
            64 * 65,
            64 * 65 + 7,
            100_003,
            3 << 20,
        ]);
        v.extend([(1 << 20) + 4095, (1 << 20) - 4095, (7 << 20) + 13]);
        v
    }

    /// Every sampled path: the one `fingerprint` takes here, the copying one
    /// (what a CPU without AVX2 runs), and with AVX2 the in-place one.
    fn sampled_paths(v: &[u8]) -> Vec<(&'static str, Fingerprint)> {
        // SAFETY: `v` is a live slice for the duration of each call.
        let mut out = vec![
            ("fingerprint", fp(v, false)),
            ("copied", unsafe { sampled_copied(v.as_ptr(), v.len()) }),
        ];
        #[cfg(target_arch = "x86_64")]
        if v.len() > avx2::MIN_LEN && has_avx2() {
            // SAFETY: as above; the CPU has AVX2.
            out.push(("avx2", unsafe { avx2::sampled(v.as_ptr(), v.len()) }));
            // SAFETY: as above. The prefetch changes no value.
            out.push(("avx2, no prefetch", unsafe {
                avx2::sampled_ahead::<0>(v.as_ptr(), v.len())
            }));
        }
        out
    }

    #[test]
    fn sampled_fingerprints_are_xxh3_seeded_with_the_length_of_the_pieces() {
        // Against both reference crates' seeded one-shot functions on the
        // pieces' concatenation, cut out here by the documented formula,
        // from aligned and unaligned starts.
        let mut checked_avx2 = 0;
        for len in sampled_lengths() {
            let v = bytes(len + 5);
            for start in [0usize, 5] {
                let s = &v[start..start + len];
                let cat = pieces_of(s);
                let want = xxhash_rust::xxh3::xxh3_64_with_seed(&cat, len as u64);
                assert_eq!(
                    want,
                    twox_hash::XxHash3_64::oneshot_with_seed(len as u64, &cat),
                    "the references agree, len {len}"
                );
                for (path, got) in sampled_paths(s) {
                    assert_eq!(got.hash, want, "{path}, len {len}, start {start}");
                    assert_eq!(
                        got.fill,
                        if len < 2 { got.fill } else { Fill::Mixed },
                        "{path}, len {len}"
                    );
                    checked_avx2 += usize::from(path == "avx2");
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            assert!(checked_avx2 > 80, "the AVX2 path ran ({checked_avx2} cases)");
        }
        let _ = checked_avx2;
        // The length counts on its own: the same 4 KiB of pieces from two
        // lengths hash apart, as do a block and its first 4,096 bytes.
        let a = bytes(1 << 20);
        let whole = fp(&a[..4096], false).hash;
        assert_ne!(whole, xxhash_rust::xxh3::xxh3_64(&a[..4096]), "seeded, not seed 0");
        assert_ne!(fp(&a, false).hash, fp(&a[..(1 << 20) - 1], false).hash);
    }

    #[test]
    fn sampled_fill_sees_a_different_byte_in_any_piece_and_only_there() {
        for len in [241usize, 4096, 4097, 100_003, 1 << 20, (1 << 20) + 4095] {
            for b in [0u8, 9] {
                let want = if b == 0 { Fill::Zero } else { Fill::Constant(b) };
                let mut v = vec![b; len];
                for (path, got) in sampled_paths(&v) {
                    assert_eq!(got.fill, want, "{path}, len {len}, fill {b}");
                    assert_eq!(
                        got.hash,
                        xxhash_rust::xxh3::xxh3_64_with_seed(&pieces_of(&v), len as u64),
                        "{path}, len {len}"
                    );
                }
                let step = (len.max(4097) - 64) / 63;
                // A byte in the first, a middle, the last piece; inside the
                // last stripe only: the block is no longer uniform.
                for at in [
                    0,
                    63,
                    if len > 4096 { 31 * step + 17 } else { len / 2 },
                    len - 1,
                    len - 40,
                ] {
                    v[at] = b ^ 0x5a;
                    for (path, got) in sampled_paths(&v) {
                        assert_eq!(got.fill, Fill::Mixed, "{path}, len {len}, fill {b}, at {at}");
                    }
                    v[at] = b;
                }
                // A byte between two pieces is not read (it is a sample).
                if len > 2 * 4096 {
                    v[64 + (step - 64) / 2] = b ^ 0x5a;
                    for (path, got) in sampled_paths(&v) {
                        assert_eq!(got.fill, want, "{path}, len {len}: between pieces");
                    }
                    v[64 + (step - 64) / 2] = b;
                }
            }
        }
        // Short blocks: every byte is read.
        for len in [1usize, 2, 7, 8, 240] {
            let mut v = vec![4u8; len];
            assert_eq!(fp(&v, false).fill, Fill::Constant(4), "len {len}");
            if len > 1 {
                v[len - 1] = 5;
                assert_eq!(fp(&v, false).fill, Fill::Mixed, "len {len}");
            }
        }
        assert_eq!(fp(&[], false).fill, Fill::Zero);
        assert_eq!(fp(&[], false).hash, xxhash_rust::xxh3::xxh3_64_with_seed(&[], 0));
    }

    /// CPU ns per sampled fingerprint of a 1 MiB block: the four-lane hash
    /// (before), [`fingerprint`] (with AVX2 the in-place XXH3) and the
    /// copying path (CPUs without AVX2), interleaved, medians of 7 rounds,
    /// (a) one block in cache, fingerprinted 100,000 times, and (b) out of
    /// cache: 256 blocks of a 256 MiB buffer in turn, 4 passes. Prints,
    /// asserts nothing on time: `cargo test --release -p heaptag-alloc --lib
    /// -- --ignored --nocapture sampled_fingerprint_speed`.
    #[test]
    #[ignore]
    fn sampled_fingerprint_speed() {
        let cpu = || {
            let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `t` is a valid timespec to write.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
        };
        const MIB: usize = 1 << 20;
        type FpFn = dyn Fn(&[u8]) -> Fingerprint;
        for (blocks, reps) in [(1usize, 100_000usize), (256, 4)] {
            let v = bytes(blocks * MIB);
            let n = (blocks * reps) as f64;
            let mut m: [Vec<f64>; 3] = Default::default();
            for _ in 0..7 {
                let paths: [&FpFn; 3] = [
                    // SAFETY: each block is a live slice for the call.
                    &|b| unsafe { four_lane::fingerprint(b.as_ptr(), b.len()) },
                    &|b| fp(b, false),
                    // SAFETY: as above.
                    &|b| unsafe { sampled_copied(b.as_ptr(), b.len()) },
                ];
                for (f, out) in paths.iter().zip(m.iter_mut()) {
                    let t = cpu();
                    for _ in 0..reps {
                        for b in v.chunks_exact(MIB) {
                            std::hint::black_box(f(std::hint::black_box(b)));
                        }
                    }
                    out.push((cpu() - t) / n * 1e9);
                }
            }
            for x in &mut m {
                x.sort_by(f64::total_cmp);
            }
            println!(
                "sampled fingerprint of 1 MiB, CPU ns (median of 7, {}): four-lane {:.1}, fingerprint() {:.1} \
                 (four-lane / fingerprint() {:.2}x), copied to xxhash-rust {:.1}",
                if blocks == 1 {
                    "in cache"
                } else {
                    "256 blocks, out of cache"
                },
                m[0][3],
                m[1][3],
                m[0][3] / m[1][3],
                m[2][3]
            );
        }
    }

    /// Wall ns per sampled fingerprint of a 1 MiB block with 0, 4, 8, 16
    /// and all 64 pieces prefetched ahead (`avx2::sampled_ahead`; the value is
    /// the same), interleaved call by call, each variant on its own block of
    /// a 256 MiB buffer (4 KiB pages: a TLB miss per piece), each call timed
    /// alone (an `Instant` pair, some 20-40 ns, in every figure); medians and
    /// minima of 2,048 calls per variant, (a) the pieces' lines
    /// flushed before the call (`clflush`: read from memory), (b) not flushed
    /// (after the first pass they are in L3: 2 MiB of lines), (c) one block,
    /// in cache, 2,048 times. Prints, asserts nothing on time: `cargo test --release -p
    /// heaptag-alloc --lib -- --ignored --nocapture sampled_fingerprint_prefetch_speed`.
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore]
    fn sampled_fingerprint_prefetch_speed() {
        use std::arch::x86_64::{_mm_clflush, _mm_mfence};
        use std::time::Instant;
        if !has_avx2() {
            return;
        }
        const MIB: usize = 1 << 20;
        type FpFn = unsafe fn(*const u8, usize) -> Fingerprint;
        let paths: [(&str, FpFn); 5] = [
            ("ahead 0", avx2::sampled_ahead::<0>),
            ("ahead 4", avx2::sampled_ahead::<4>),
            ("ahead 8", avx2::sampled_ahead::<8>),
            ("ahead 16", avx2::sampled_ahead::<16>),
            ("ahead 64", avx2::sampled_ahead::<64>),
        ];
        let v = bytes(256 * MIB);
        let step = piece_step(MIB);
        let want = fp(&v[..MIB], false);
        for mode in ["flushed", "L3", "in cache"] {
            let mut t: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
            // In cache: one block 2,048 times; otherwise 8 passes over 256.
            let (passes, blocks) = if mode == "in cache" { (2048, 1) } else { (8, 256) };
            for _ in 0..passes {
                for k in 0..blocks {
                    for (j, (_, f)) in paths.iter().enumerate() {
                        // Each variant on a different block, 48 blocks
                        // (3,072 pages) apart: none finds the TLB entries
                        // or lines another one just loaded.
                        let at = if blocks == 1 { 0 } else { (k + 48 * j) % 256 };
                        let b = &v[at * MIB..(at + 1) * MIB];
                        if mode == "flushed" {
                            for i in 0..PIECES {
                                let at = piece_at(MIB, step, i);
                                // SAFETY: both lines are inside `b`; clflush and
                                // mfence have no other effect.
                                unsafe {
                                    _mm_clflush(b.as_ptr().add(at));
                                    _mm_clflush(b.as_ptr().add(at + PIECE - 1));
                                }
                            }
                            // SAFETY: as above.
                            unsafe { _mm_mfence() };
                        }
                        let s = Instant::now();
                        // SAFETY: `b` is a live slice for the call; the CPU has AVX2.
                        let got = unsafe { f(std::hint::black_box(b.as_ptr()), MIB) };
                        t[j].push(s.elapsed().as_nanos() as f64);
                        std::hint::black_box(got);
                    }
                }
            }
            for ((name, _), x) in paths.iter().zip(t.iter_mut()) {
                x.sort_by(f64::total_cmp);
                println!(
                    "{mode:>8}, {name:>8}: median {:.0} ns, min {:.0} ns ({} calls)",
                    x[x.len() / 2],
                    x[0],
                    x.len()
                );
            }
        }
        for (name, f) in paths {
            // SAFETY: as above.
            assert_eq!(unsafe { f(v.as_ptr(), MIB) }, want, "{name}");
        }
    }

    #[inline(never)]
    fn ir_four_lane(v: &[u8], n: usize) {
        for _ in 0..n {
            // SAFETY: `v` is a live slice for the call.
            std::hint::black_box(unsafe { four_lane::fingerprint(v.as_ptr(), v.len()) });
        }
    }

    #[inline(never)]
    fn ir_fingerprint(v: &[u8], n: usize) {
        for _ in 0..n {
            std::hint::black_box(fp(std::hint::black_box(v), false));
        }
    }

    #[inline(never)]
    fn ir_copied(v: &[u8], n: usize) {
        for _ in 0..n {
            // SAFETY: `v` is a live slice for the call.
            std::hint::black_box(unsafe { sampled_copied(v.as_ptr(), v.len()) });
        }
    }

    /// 1,000 sampled fingerprints of one 1 MiB block by each path, each in
    /// its own function, for callgrind's inclusive instruction counts
    /// (deterministic): `valgrind --tool=callgrind --callgrind-out-file=F
    /// target/release/deps/heaptag_alloc-HASH --ignored --exact
    /// log::fingerprint::tests::sampled_fingerprint_instructions`, then
    /// `callgrind_annotate --inclusive=yes F | grep ir_`, each figure / 1000.
    #[test]
    #[ignore]
    fn sampled_fingerprint_instructions() {
        let v = bytes(1 << 20);
        ir_four_lane(&v, 1000);
        ir_fingerprint(&v, 1000);
        ir_copied(&v, 1000);
    }

    #[test]
    fn zero_and_constant_fills_are_flagged() {
        assert_eq!(fp(&vec![0u8; 1 << 20], false).fill, Fill::Zero);
        assert_eq!(fp(&vec![7u8; 1 << 20], false).fill, Fill::Constant(7));
        assert_eq!(fp(&vec![7u8; 1 << 20], true).fill, Fill::Constant(7));
        let mut v = vec![0u8; 1 << 20];
        v[(1 << 20) - 1] = 1;
        assert_eq!(fp(&v, false).fill, Fill::Mixed, "the last block is always read");
    }
}
