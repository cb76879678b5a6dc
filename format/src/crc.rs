//! CRC-32 arithmetic for the resync scan: the checksum of any byte range
//! from two running checksums of the stream, so candidate frames are
//! verified without reading their bytes again (zlib's `crc32_combine`).

/// The reflected CRC-32 (IEEE) polynomial.
const POLY: u32 = 0xedb8_8320;

/// `a * b` modulo the polynomial (reflected bit order).
const fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `x^(2^k)` modulo the polynomial, for k in 0..32.
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut p = 1u32 << 30; // x^1
    t[0] = p;
    let mut i = 1;
    while i < 32 {
        p = multmodp(p, p);
        t[i] = p;
        i += 1;
    }
    t
};

/// `x^(n * 2^k)` modulo the polynomial.
fn x2nmodp(mut n: u64, mut k: usize) -> u32 {
    let mut p = 1u32 << 31; // x^0
    while n != 0 {
        if n & 1 != 0 {
            p = multmodp(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// The CRC of `A || B` from the CRC of `A` being `crc` once `len` bytes of
/// zeros-equivalent shift are applied: `shift(crc(A), |B|) ^ crc(B) =
/// crc(A || B)`. About 32 x log2(len) bit operations.
pub(crate) fn shift(crc: u32, len: u64) -> u32 {
    multmodp(x2nmodp(len, 3), crc)
}

/// The CRC of the bytes between two points of a stream, from the stream's
/// running CRC at each: `at_start` = crc(S), `at_end` = crc(S || B), `len`
/// = |B|; returns crc(B).
pub(crate) fn range(at_start: u32, at_end: u32, len: u64) -> u32 {
    at_end ^ shift(at_start, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_and_shift_agree_with_crc32fast() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for (a, b) in [(0, 0), (0, 1), (3, 4), (17, 4000), (100, 5000), (4999, 5000), (0, 5000)] {
            let s = crc32fast::hash(&data[..a]);
            let e = crc32fast::hash(&data[..b]);
            assert_eq!(range(s, e, (b - a) as u64), crc32fast::hash(&data[a..b]), "{a}..{b}");
            let ab = shift(crc32fast::hash(&data[..a]), (b - a) as u64) ^ crc32fast::hash(&data[a..b]);
            assert_eq!(ab, e);
        }
    }
}
