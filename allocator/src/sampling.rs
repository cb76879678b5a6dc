//! Sampling of small blocks by bytes, decided from (address, size, salt) alone.
//!
//! A block of `s` bytes is sampled with probability `p(s) = 1 - exp(-s/R)`
//! (`R` = sample rate), the per-block form of Poisson sampling by bytes that
//! jemalloc, tcmalloc and Go use. The coin is a hash of the block's address
//! and a per-run salt, so `dealloc`, which knows the address and (from the
//! `Layout`) the size, recomputes the same decision without any lookup: only
//! sampled frees touch the shared table.
//!
//! The live bytes of a tag are estimated with the Horvitz-Thompson estimator
//! `sum(s / p(s))` over its sampled live blocks, which is unbiased; its variance
//! is estimated by `sum(s^2 (1 - p) / p^2)`. Blocks alive at one moment have
//! distinct addresses, so their coins are independent given the salt; an
//! address that jemalloc reuses in a hot loop keeps its coin, which raises the
//! cost of that loop (each round takes a table shard) but not the bias.

use std::sync::atomic::Ordering;

use crate::config::HOT;

/// The contribution of one sampled block to its tag's estimates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Weight {
    /// Estimated bytes this sample stands for: `round(s / p)`.
    pub(crate) bytes: u64,
    /// Variance term: `round(s^2 (1 - p) / p^2)`.
    pub(crate) var: u64,
    /// Estimated blocks this sample stands for, in 1/1024ths: `round(1024 / p)`.
    pub(crate) count_fx: u64,
}

/// Whether the small block at `addr` of `size` bytes is sampled.
#[inline(always)]
pub(crate) fn is_sampled(addr: usize, size: usize) -> bool {
    let h = coin(addr);
    // Fast reject: p(s) <= s/R, so h / 2^64 >= s/R means "not sampled".
    // Almost every call ends here with one multiply and a compare. With
    // sampling off the scale is 0 and every block is rejected.
    let bound = (size as u64).saturating_mul(HOT.scale.load(Ordering::Relaxed));
    if h >= bound {
        return false;
    }
    precise(h, size as u64, HOT.rate.load(Ordering::Relaxed))
}

/// The block's coin: uniform on u64 for a uniformly random salt, whatever
/// the address, since xor with the salt and multiplication by an odd
/// constant are both bijections; the multiply carries every address bit into
/// the top bits, which decide the comparison. One multiply: this runs on
/// every allocation and free.
#[inline(always)]
fn coin(addr: usize) -> u64 {
    (addr as u64 ^ HOT.salt.load(Ordering::Relaxed)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[cold]
fn precise(h: u64, size: u64, rate: u64) -> bool {
    let u = (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    u < probability(size, rate)
}

/// `p(s) = 1 - exp(-s/R)`.
fn probability(size: u64, rate: u64) -> f64 {
    -(-(size as f64) / rate as f64).exp_m1()
}

/// The estimator weights of a sampled block of `size` bytes.
pub(crate) fn weight(size: usize) -> Weight {
    let rate = HOT.rate.load(Ordering::Relaxed);
    weight_at(size as u64, rate)
}

fn weight_at(size: u64, rate: u64) -> Weight {
    if rate == 0 || size == 0 {
        return Weight {
            bytes: size,
            var: 0,
            count_fx: 1024,
        };
    }
    let p = probability(size, rate).max(f64::MIN_POSITIVE);
    let s = size as f64;
    let w = s / p;
    Weight {
        bytes: w.round() as u64,
        var: (w * w * (1.0 - p)).round() as u64,
        count_fx: (1024.0 / p).round() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_follow_the_probability() {
        let r = 512 * 1024;
        // Tiny blocks stand for about R bytes each.
        let w = weight_at(16, r);
        assert!((w.bytes as f64 - r as f64).abs() < 16.0, "{w:?}");
        // A block of exactly R bytes has p = 1 - 1/e.
        let w = weight_at(r, r);
        let p = 1.0 - (-1.0f64).exp();
        assert!((w.bytes as f64 - r as f64 / p).abs() < 1.0);
        // Rate 0 means no sampling; the weight is the size itself.
        assert_eq!(weight_at(100, 0).bytes, 100);
    }

    #[test]
    fn sampling_rate_matches_probability() {
        // Over many distinct aligned addresses, the sampled fraction of
        // 4 KiB blocks is p(4096) for R = 512 KiB: 0.0078.
        HOT.rate.store(512 * 1024, Ordering::Relaxed);
        HOT.scale.store(u64::MAX / (512 * 1024), Ordering::Relaxed);
        HOT.salt.store(12345, Ordering::Relaxed);
        let n = 2_000_000usize;
        let hits = (0..n).filter(|i| is_sampled(0x7f00_0000_0000 + i * 4096, 4096)).count();
        let p = probability(4096, 512 * 1024);
        let expect = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (hits as f64 - expect).abs() < 5.0 * sd,
            "hits {hits}, expected {expect:.0} +- {sd:.0}"
        );
    }
}
