//! Sampling of small blocks by bytes: a per-thread countdown at allocation,
//! a filter by address at free.
//!
//! A block of `s` bytes is sampled with probability `p(s) = 1 - exp(-s/R)`
//! (`R` = sample rate), the per-block form of Poisson sampling by bytes that
//! jemalloc, tcmalloc and Go use, and implemented as they do: each thread
//! counts down the bytes to its next sample point (gaps drawn from an
//! exponential of mean `R`, so the points form a Poisson process over the
//! thread's allocated bytes), and the block that crosses a point is sampled.
//! Disjoint stretches of a Poisson process are independent, so every block
//! is sampled independently with `p(s)`, whatever its address: a hot loop
//! that reuses one address gets a fresh coin each round (the address-keyed
//! coin this replaced gave such a loop one coin for all its rounds, which
//! made per-loop figures from the sample wild). The hot path pays one
//! subtraction and one sign test on a thread-local field.
//!
//! A free must then learn whether its block was sampled. Sampled blocks are
//! entered in the side table (`table.rs`), and, beside it, in [`FILTER`]: a
//! counter per 256-byte granule of address (modulo 1 GiB) of the sampled
//! blocks in the table. A small free whose counter reads 0 was not sampled
//! (one load, in a line the heap's own locality keeps warm: one byte per
//! 256 B of heap); a non-zero counter sends it to the table, which has the
//! last word (a granule shared with a live sample, or an address 1 GiB
//! away, costs that free a lookup and nothing else). The table picks a
//! block's shard from its granule ([`granule_index`]), so each counter is
//! only ever written under one shard lock: a plain load and store, not a
//! compare-and-swap loop.
//!
//! Threads without thread-local state (being torn down) fall back to the
//! address-keyed coin ([`is_sampled`]), also exact in probability.
//!
//! The live bytes of a tag are estimated with the Horvitz-Thompson estimator
//! `sum(s / p(s))` over its sampled live blocks, which is unbiased; its variance
//! is estimated by `sum(s^2 (1 - p) / p^2)`.

use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};

use crate::config::HOT;

/// Address bits below a granule of [`FILTER`].
const GRANULE_BITS: u32 = 8;
/// Granules in the filter: 4 Mi one-byte counters (4 MiB of zeroed static
/// memory, resident only where a sampled block was ever entered), covering
/// 1 GiB of address space before addresses alias.
const FILTER_LEN: usize = 1 << 22;

/// Counters of the sampled blocks in the side table per granule (see the
/// module docs). Saturates at 255 and then stays there (a granule that only
/// ever costs its frees a lookup); never undercounts.
#[repr(C, align(4096))]
struct Filter([AtomicU8; FILTER_LEN]);

static FILTER: Filter = Filter([const { AtomicU8::new(0) }; FILTER_LEN]);

/// The index of `addr`'s granule in [`FILTER`]: the table chooses shards by
/// it (`table.rs`), so all the blocks of one counter share one shard lock.
#[inline(always)]
pub(crate) fn granule_index(addr: usize) -> usize {
    (addr >> GRANULE_BITS) & (FILTER_LEN - 1)
}

#[inline(always)]
fn granule(addr: usize) -> &'static AtomicU8 {
    // The mask keeps the index in bounds, so the bounds check folds away.
    &FILTER.0[granule_index(addr)]
}

/// Whether a small block at `addr` may have been sampled (false: surely not).
#[inline(always)]
pub(crate) fn may_be_sampled(addr: usize) -> bool {
    // Relaxed: the increment in `filter_add` happened before the block was
    // returned, and the freeing thread learned of the block after that.
    granule(addr).load(Ordering::Relaxed) != 0
}

/// A sampled block at `addr` entered the side table.
///
/// Called with `addr`'s shard of the table locked (`table::insert`): every
/// writer of this granule's counter holds that lock, so a plain load and
/// store cannot lose an update (the filter's readers only load).
#[inline]
pub(crate) fn filter_add(addr: usize) {
    let c = granule(addr);
    // Relaxed: see `may_be_sampled`. At 255 the counter stays (saturated).
    let n = c.load(Ordering::Relaxed);
    if n != u8::MAX {
        c.store(n + 1, Ordering::Relaxed);
    }
}

/// A sampled block at `addr` left the side table. Called with `addr`'s
/// shard locked, as [`filter_add`] is.
#[inline]
pub(crate) fn filter_remove(addr: usize) {
    let c = granule(addr);
    // A saturated counter no longer knows how many it stands for: it stays.
    let n = c.load(Ordering::Relaxed);
    if n != 0 && n != u8::MAX {
        c.store(n - 1, Ordering::Relaxed);
    }
}

/// Number of granules whose counter is non-zero (tests and overhead reports).
#[cfg(test)]
fn filter_granules_set() -> usize {
    FILTER.0.iter().filter(|c| c.load(Ordering::Relaxed) != 0).count()
}

/// The next gap between two sample points of a thread, in bytes: an
/// exponential of mean `rate` drawn from the thread's generator `rng`
/// (never 0: the generator is seeded non-zero). `i64::MAX` when sampling is
/// off (`rate` 0).
pub(crate) fn next_gap(rng: &mut u64, rate: u64) -> i64 {
    if rate == 0 {
        return i64::MAX;
    }
    let u = ((splitmix64(rng) >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64); // (0, 1]
    let gap = -(u.ln()) * rate as f64;
    // Saturating float-to-int cast; at least 1 byte.
    (gap as i64).max(1)
}

/// The seed of a thread's sample-point generator: the run's salt
/// (`HEAPTAG_SEED`) and the thread's number, so a seeded run of a
/// deterministic program samples the same blocks again. Never 0.
pub(crate) fn thread_seed(thread: u32) -> u64 {
    let mut s = HOT.salt.load(Ordering::Relaxed) ^ (u64::from(thread)).wrapping_mul(0xd1b5_4a32_d192_ed03);
    splitmix64(&mut s) | 1
}

/// splitmix64 (Steele, Lea and Flood 2014): a full-period generator whose
/// outputs pass BigCrush; one step per sample point, off the hot path.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

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

/// Whether the small block at `addr` of `size` bytes is sampled, by the
/// address-keyed coin: for threads without thread-local state only (see the
/// module docs).
#[inline]
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
///
/// Every sampled allocation and its free compute this; a program's sampled
/// sizes repeat, so the results are memoised in [`MEMO`] (the allocation
/// and the free of a block get the same value either way: a memoised
/// weight is the computed one, bit for bit).
pub(crate) fn weight(size: usize) -> Weight {
    let rate = HOT.rate.load(Ordering::Relaxed);
    let size = size as u64;
    let slot = &MEMO[memo_slot(size)];
    if let Some(w) = slot.read(size, rate) {
        return w;
    }
    let w = weight_at(size, rate);
    slot.write(size, rate, &w);
    w
}

/// Slots of the weight memo: 512 x 64 bytes (32 KiB of static memory).
const MEMO_SLOTS: usize = 512;

/// One memoised weight, under a sequence lock: `seq` is odd while a writer
/// fills the slot. Readers never wait (a busy or torn slot is a miss, and
/// the caller computes the weight); a writer that finds the slot busy skips
/// the memo. Word-sized atomics throughout, so a torn read is only ever a
/// detected miss, never undefined behaviour.
#[repr(C, align(64))]
struct MemoSlot {
    seq: AtomicU64,
    size: AtomicU64,
    rate: AtomicU64,
    bytes: AtomicU64,
    var: AtomicU64,
    count_fx: AtomicU64,
}

static MEMO: [MemoSlot; MEMO_SLOTS] = [const {
    MemoSlot {
        seq: AtomicU64::new(0),
        // Size 0 is never memoised (`weight_at` answers it directly), so an
        // empty slot matches no lookup.
        size: AtomicU64::new(0),
        rate: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        var: AtomicU64::new(0),
        count_fx: AtomicU64::new(0),
    }
}; MEMO_SLOTS];

/// Fibonacci hashing of the size onto the memo's slots (the top 9 bits).
#[inline]
fn memo_slot(size: u64) -> usize {
    (size.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - MEMO_SLOTS.trailing_zeros())) as usize
}

impl MemoSlot {
    /// The slot's weight if it holds `size` at `rate` and no writer is in it.
    #[inline]
    fn read(&self, size: u64, rate: u64) -> Option<Weight> {
        let s0 = self.seq.load(Ordering::Acquire);
        if s0 & 1 != 0 {
            return None;
        }
        let (sz, r) = (self.size.load(Ordering::Relaxed), self.rate.load(Ordering::Relaxed));
        let w = Weight {
            bytes: self.bytes.load(Ordering::Relaxed),
            var: self.var.load(Ordering::Relaxed),
            count_fx: self.count_fx.load(Ordering::Relaxed),
        };
        // Acquire fence: the loads above complete before `seq` is read again,
        // so an unchanged even `seq` means no writer touched the fields.
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s0 && sz == size && r == rate && size != 0).then_some(w)
    }

    /// Stores `w` as the weight of `size` at `rate`, unless another writer
    /// holds the slot.
    #[cold]
    fn write(&self, size: u64, rate: u64, w: &Weight) {
        let s0 = self.seq.load(Ordering::Relaxed);
        if s0 & 1 != 0
            || self
                .seq
                .compare_exchange(s0, s0.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // The odd `seq` is visible before the fields change: a Release
        // fence orders the CAS before the stores below for any reader that
        // sees one of them (and then sees an odd or changed `seq`).
        fence(Ordering::Release);
        self.size.store(size, Ordering::Relaxed);
        self.rate.store(rate, Ordering::Relaxed);
        self.bytes.store(w.bytes, Ordering::Relaxed);
        self.var.store(w.var, Ordering::Relaxed);
        self.count_fx.store(w.count_fx, Ordering::Relaxed);
        self.seq.store(s0.wrapping_add(2), Ordering::Release);
    }
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
    // One division; every sampled allocation and free computes this.
    let inv = 1.0 / p;
    let w = size as f64 * inv;
    Weight {
        bytes: round_non_negative(w),
        var: round_non_negative(w * w * (1.0 - p)),
        count_fx: round_non_negative(1024.0 * inv),
    }
}

/// `x.round()` for `x >= 0`, as an add and a (saturating) conversion: on
/// x86-64 without SSE4.1 `f64::round` is a call into libm, three per weight
/// and twice per sampled block. Halves round up, as `round` does; the
/// allocation and the free of a block compute the same weight either way,
/// so the sums return to zero exactly.
#[inline]
fn round_non_negative(x: f64) -> u64 {
    (x + 0.5) as u64
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

    #[test]
    fn countdown_samples_each_block_with_its_probability_even_at_one_address() {
        // One address over and over, as a hot alloc/free loop gets from
        // jemalloc: the countdown gives each round its own coin, so the
        // sampled fraction is p(s), where the address-keyed coin gave all
        // rounds one coin (all sampled or none).
        let rate = HOT.rate.load(Ordering::Relaxed);
        assert_eq!(rate, 512 * 1024, "the default rate (no test changes it)");
        for size in [16u64, 4096, 60_000] {
            let n = 1_000_000usize;
            let hits =
                std::thread::spawn(move || (0..n).filter(|_| crate::thread::sample(0x7f00_0000_1000, size)).count())
                    .join()
                    .unwrap();
            let p = probability(size, rate);
            let expect = n as f64 * p;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (hits as f64 - expect).abs() < 5.0 * sd + 1.0,
                "size {size}: hits {hits}, expected {expect:.0} +- {sd:.0}"
            );
        }
    }

    #[test]
    fn gaps_are_exponential_with_the_rate_as_mean() {
        let mut rng = thread_seed(7);
        let n = 200_000;
        let rate = 1u64 << 19;
        let gaps: Vec<f64> = (0..n).map(|_| next_gap(&mut rng, rate) as f64).collect();
        let mean = gaps.iter().sum::<f64>() / n as f64;
        // The mean of n exponentials has sd rate / sqrt(n).
        let sd = rate as f64 / (n as f64).sqrt();
        assert!((mean - rate as f64).abs() < 5.0 * sd, "mean {mean}");
        // P(gap > rate) = 1/e.
        let above = gaps.iter().filter(|&&g| g > rate as f64).count() as f64 / n as f64;
        assert!((above - (-1.0f64).exp()).abs() < 0.01, "{above}");
        assert_eq!(next_gap(&mut rng, 0), i64::MAX, "rate 0: never");
    }

    #[test]
    fn memoised_weights_are_the_computed_ones() {
        // Sizes that collide in the memo's slots, and a second rate over
        // the same sizes: every lookup, hit or miss, is `weight_at` exactly.
        let mut sizes: Vec<u64> = (1..=4096).chain([1 << 20, 5 << 20, u32::MAX as u64]).collect();
        let slot0 = memo_slot(48);
        sizes.extend((1..200_000u64).filter(|&s| memo_slot(s) == slot0).take(8));
        let rate = HOT.rate.load(Ordering::Relaxed);
        for round in 0..3 {
            for &s in &sizes {
                for r in [rate, 4096, 0] {
                    let slot = &MEMO[memo_slot(s)];
                    let w = match slot.read(s, r) {
                        Some(w) => w,
                        None => {
                            let w = weight_at(s, r);
                            slot.write(s, r, &w);
                            w
                        }
                    };
                    assert_eq!(w, weight_at(s, r), "size {s}, rate {r}, round {round}");
                }
            }
        }
        assert_eq!(weight(48), weight_at(48, rate));
        assert_eq!(weight(0), weight_at(0, rate), "size 0 is never memoised");
        // A hit: the slot written just now answers without computing.
        let s = 777u64;
        let w = weight(s as usize);
        assert_eq!(MEMO[memo_slot(s)].read(s, rate), Some(w));
        // Threads racing on one slot still read only exact weights.
        let colliding: Vec<u64> = (1..400_000u64).filter(|&x| memo_slot(x) == slot0).take(4).collect();
        std::thread::scope(|sc| {
            for t in 0..4 {
                let colliding = &colliding;
                sc.spawn(move || {
                    for i in 0..20_000 {
                        let s = colliding[(i + t) % colliding.len()];
                        assert_eq!(weight(s as usize), weight_at(s, rate));
                    }
                });
            }
        });
    }

    #[test]
    fn the_filter_counts_per_granule_and_saturates_high() {
        // An address no other test enters (lib tests run on the system
        // allocator, so only direct calls touch the filter).
        let a = 0x5a5a_0000_0100usize;
        let before = filter_granules_set();
        assert!(!may_be_sampled(a));
        filter_add(a);
        filter_add(a + 16); // same granule
        assert!(may_be_sampled(a) && may_be_sampled(a + 255 - (a & 255)));
        filter_remove(a);
        assert!(may_be_sampled(a + 16), "one sampled block left in the granule");
        filter_remove(a + 16);
        assert!(!may_be_sampled(a));
        assert_eq!(filter_granules_set(), before);
        // Saturated: stays non-zero for good (a lookup per free, never a miss).
        for _ in 0..300 {
            filter_add(a);
        }
        for _ in 0..300 {
            filter_remove(a);
        }
        assert!(may_be_sampled(a));
    }
}
