//! Content fingerprints of tracked blocks: what decides "duplicated".
//!
//! The same call site legitimately allocates distinct per-partition data, so
//! site and size cannot tell a duplicate from a sibling; byte-identical
//! content can. A fingerprint is the length plus a 64-bit hash of 64 blocks
//! of 64 bytes spread evenly over the buffer (4 KiB read, whatever its size),
//! or of every byte when full hashing is on. Blocks whose every byte read is
//! the same value (a fresh `vec![0; n]`) are flagged as zero or constant
//! filled, and are never reported as duplicates.

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

/// Four independent lanes, so the multiplies of consecutive words overlap
/// (about 4x the throughput of one chain; it matters for full hashing).
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
    let mut h = Hasher::new(size);
    if size < 8 {
        return h.finish();
    }
    if full || size <= BLOCKS * BLOCK {
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
    fn zero_and_constant_fills_are_flagged() {
        assert_eq!(fp(&vec![0u8; 1 << 20], false).fill, Fill::Zero);
        assert_eq!(fp(&vec![7u8; 1 << 20], false).fill, Fill::Constant(7));
        assert_eq!(fp(&vec![7u8; 1 << 20], true).fill, Fill::Constant(7));
        let mut v = vec![0u8; 1 << 20];
        v[(1 << 20) - 1] = 1;
        assert_eq!(fp(&v, false).fill, Fill::Mixed, "the last block is always read");
    }
}
