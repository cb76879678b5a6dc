//! The per-tag live estimate of small (sampled) blocks is unbiased and within
//! the standard error it states; freeing returns it to exactly zero.

use std::hint::black_box;

use heaptag::Tag;

// A fixed salt makes the run reproducible; the check below does not depend on it.
#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new().seed(0x5eed);

/// Deterministic sizes between 16 and 2 KiB.
fn sizes(seed: u64, n: usize) -> impl Iterator<Item = usize> {
    let mut x = seed | 1;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        16 + (x % 2033) as usize
    })
}

#[test]
fn small_live_estimate_is_within_its_stated_error() {
    const TAGS: u32 = 24;
    const PER_TAG: usize = 12_000; // ~12 MiB per tag, ~24 samples at 512 KiB
    let mut held: Vec<Vec<Box<[u8]>>> = Vec::new();
    let mut truth = Vec::new();
    for t in 0..TAGS {
        let tag = Tag::new(Some(1), Some("small"), Some(t));
        let blocks: Vec<Box<[u8]>> = tag.scope(|| {
            sizes(u64::from(t) + 1, PER_TAG)
                .map(|n| vec![1u8; n].into_boxed_slice())
                .collect()
        });
        truth.push(blocks.iter().map(|b| b.len() as u64).sum::<u64>());
        held.push(blocks);
    }
    let s = heaptag::snapshot();
    assert_eq!(s.sample_rate, 512 * 1024);
    let mut z_sum = 0.0;
    let mut within_2se = 0;
    for t in 0..TAGS {
        let tag = Tag::new(Some(1), Some("small"), Some(t));
        let st = s.tag(&tag).unwrap();
        let small = st.small;
        assert!(!small.exact);
        assert!(small.sampled_live > 0, "some blocks were sampled");
        // The estimate is about the blocks kept, plus the one Vec of Boxes
        // (PER_TAG * 16 bytes, tracked since it is >= 64 KiB).
        let truth = truth[t as usize];
        let se = small.live_bytes_stderr;
        // The stated error is the right size: sqrt(R * truth) for tiny blocks.
        let expected_se = ((512.0 * 1024.0) * truth as f64).sqrt();
        assert!(
            se > 0.5 * expected_se && se < 2.0 * expected_se,
            "tag {t}: se {se:.0} vs {expected_se:.0}"
        );
        let z = (small.live_bytes as f64 - truth as f64) / expected_se;
        assert!(
            z.abs() < 5.0,
            "tag {t}: estimate {} truth {truth} se {se:.0}",
            small.live_bytes
        );
        if z.abs() < 2.0 {
            within_2se += 1;
        }
        z_sum += z;
    }
    // Unbiased: the mean z over independent tags is near 0 (its sd is 1/sqrt(24)).
    let mean_z = z_sum / f64::from(TAGS);
    assert!(mean_z.abs() < 1.0, "mean z {mean_z:.2}: estimator looks biased");
    // About 95% should fall within 2 standard errors; allow for chance.
    assert!(within_2se >= 18, "only {within_2se}/24 within 2 se");
    // Totals are exact whatever the estimate: all small bytes are accounted.
    assert!(s.totals.small_live_bytes >= truth.iter().sum::<u64>());

    drop(black_box(held));
    let s = heaptag::snapshot();
    for t in 0..TAGS {
        let st = s.tag(&Tag::new(Some(1), Some("small"), Some(t))).unwrap();
        assert_eq!(st.small.live_bytes, 0, "tag {t}: estimate returns to zero");
        assert_eq!(st.small.sampled_live, 0);
        assert_eq!(st.tracked.live_bytes, 0);
    }
}
