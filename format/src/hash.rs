//! The one hasher for integer keys (addresses, ids, tag keys) used by both
//! sides: the allocator's internal tables and the analyzer's replay maps.
//! std's SipHash made the analyzer's map lookups a third of its replay time;
//! this is a multiply per word and half of splitmix64's finaliser to finish
//! (the whole one, [`mix64`], is there for callers that hash once).

use std::collections::HashMap;

/// A small, fast, non-allocating hasher for addresses and tag keys.
///
/// Addresses are 16-byte aligned and clustered, so the finaliser must spread
/// low-entropy input over all 64 bits (hashbrown uses the top 7 bits as a tag
/// and the low bits as the bucket index). Not for keys an adversary chooses
/// to collide: it is not keyed.
#[derive(Default, Clone, Copy, Debug)]
pub struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // Half of splitmix64's finaliser: xor-shift, one multiply,
        // xor-shift. It spreads clustered, aligned keys over the low bits
        // (hashbrown's bucket index) as well as the whole finaliser does
        // (tested below), at one multiply instead of two: lookups are most
        // of the analyzer's replay.
        let z = (self.0 ^ (self.0 >> 32)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z ^ (z >> 32)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
}

/// `BuildHasher` for [`MixHasher`], constructible in a `const` context.
pub type MixBuild = std::hash::BuildHasherDefault<MixHasher>;

/// A std `HashMap` with [`MixHasher`].
pub type MixMap<K, V> = HashMap<K, V, MixBuild>;

/// splitmix64's finaliser: a bijection on `u64` with full avalanche.
#[inline]
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, Hasher};

    use super::*;

    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        let b = MixBuild::default();
        let low: std::collections::BTreeSet<u64> = (0..64u64).map(|i| b.hash_one(0x5500_0000 + i * 16) & 63).collect();
        assert!(low.len() > 32, "{low:?}");
    }

    #[test]
    fn bytes_and_words_agree() {
        let (mut a, mut b) = (MixHasher::default(), MixHasher::default());
        a.write(&7u64.to_le_bytes());
        b.write_u64(7);
        assert_eq!(a.finish(), b.finish());
    }
}
