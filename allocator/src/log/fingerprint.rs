//! Content fingerprints of tracked blocks: what decides "duplicated".
//!
//! The same call site legitimately allocates distinct per-partition data, so
//! site and size cannot tell a duplicate from a sibling; byte-identical
//! content can. A sampled fingerprint is the length plus a 64-bit hash of 64
//! blocks of 64 bytes spread evenly over the buffer (4 KiB read, whatever its
//! size). A full one (`HEAPTAG_FINGERPRINT_FULL=1`) is XXH3-64 of every byte
//! (the `xxhash-rust` crate: a well-studied hash, SIMD on x86_64, no
//! allocation), the algorithm the log's header names (`docs/FORMAT.md`).
//! Blocks whose every byte read is the same value (a fresh `vec![0; n]`) are
//! flagged as zero or constant filled, and are never reported as duplicates.

use heaptag_format::Fill;

const BLOCKS: usize = 64;
const BLOCK: usize = 64;
const K: u64 = 0x9e37_79b9_7f4a_7c15;

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
        unsafe { std::ptr::read_volatile(p.cast::<[u8; 8]>()) }
            .into_iter()
            .fold(0u64, |a, b| a << 8 | u64::from(b))
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
/// # Safety
/// `p..p+size` must be inside a live allocation.
unsafe fn full(p: *const u8, size: usize) -> Fingerprint {
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
            // Word-wide compare (vectorized); most blocks differ in the first.
            let pat = u64::from_ne_bytes([b; 8]);
            let mut words = chunk.chunks_exact(8);
            let diff = words.by_ref().fold(0u64, |acc, w| {
                acc | (u64::from_ne_bytes(w.try_into().unwrap_or([b; 8])) ^ pat)
            });
            uniform = diff == 0 && words.remainder().iter().all(|&x| x == b);
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
        if len % 8 != 0 {
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
pub(crate) unsafe fn fingerprint(p: *const u8, size: usize, full: bool) -> Fingerprint {
    if full {
        // SAFETY: the caller's guarantee.
        return unsafe { self::full(p, size) };
    }
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

    #[test]
    fn full_fingerprints_are_xxh3_of_every_byte() {
        // Against the crate's one-shot function on the same bytes, across
        // chunk boundaries and odd lengths.
        for len in [0usize, 1, 7, 8, 9, 4095, 8191, 8192, 8193, 3 * 8192 + 5, 1 << 20] {
            let v: Vec<u8> = (0..len as u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
                .collect();
            assert_eq!(fp(&v, true).hash, xxhash_rust::xxh3::xxh3_64(&v), "len {len}");
        }
        let a: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut b = a.clone();
        b[99_999] ^= 1;
        assert_ne!(fp(&a, true).hash, fp(&b, true).hash, "the last byte counts");
        assert_eq!(fp(&a, true).fill, Fill::Mixed);
    }

    #[test]
    fn full_fill_sees_one_different_byte_anywhere() {
        for at in [0usize, 1, 8191, 8192, 20_000, (1 << 20) - 1] {
            let mut v = vec![0u8; 1 << 20];
            v[at] = 3;
            assert_eq!(fp(&v, true).fill, Fill::Mixed, "at {at}");
        }
        let mut odd = vec![9u8; 8192 * 2 + 3];
        assert_eq!(fp(&odd, true).fill, Fill::Constant(9));
        *odd.last_mut().unwrap() = 8;
        assert_eq!(fp(&odd, true).fill, Fill::Mixed, "the tail after the last word");
        assert_eq!(fp(&[], true).fill, Fill::Zero);
    }

    /// CPU seconds per GiB of full fingerprints, the earlier algorithm (the
    /// four-lane multiply hash over every word, what full hashing was before
    /// XXH3) against XXH3, interleaved, over one 256 MiB buffer (out of
    /// cache, as a large block at its free) and a 256 KiB one hashed 1,024
    /// times (in cache: the hash's own cost), with the floor of merely
    /// reading the bytes (a sum of their words). Prints, asserts nothing on
    /// time: `cargo test --release -p heaptag-alloc --lib -- --ignored
    /// --nocapture full_fingerprint_speed`.
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
            let v: Vec<u8> = (0..len)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(13) as u8)
                .collect();
            let gib = (len * reps) as f64 / f64::from(1u32 << 30);
            let (mut old, mut new, mut read) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..5 {
                let t = cpu();
                for _ in 0..reps {
                    let mut h = Hasher::new(len);
                    // SAFETY: `v` is live for the call.
                    unsafe { h.range(v.as_ptr(), len) };
                    std::hint::black_box(h.finish());
                }
                old.push((cpu() - t) / gib);
                let t = cpu();
                for _ in 0..reps {
                    std::hint::black_box(fp(&v, true));
                }
                new.push((cpu() - t) / gib);
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
                "full fingerprints, CPU s/GiB (median of 5, {} KiB x {reps}): four-lane multiply {:.4}, xxh3 {:.4} \
                 (old / new {:.2}x), reading alone {:.4}",
                len >> 10,
                old[2],
                new[2],
                old[2] / new[2],
                read[2]
            );
        }
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
