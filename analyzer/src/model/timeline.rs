//! The timeline in a fixed budget: live bytes per series (a tag number, or
//! a group named at loading) at the RSS samples, in at most
//! [`TIMELINE_BUCKETS`] buckets. While the samples fit, a bucket is one
//! sample; when the budget is full, neighbouring buckets are merged in
//! pairs (each then covers twice as many samples), keeping every series'
//! **maximum** over the bucket, so no peak is lost however long the run.

use heaptag_format::hash::MixMap;

/// Most buckets a timeline holds (a day at 100 ms is 864,000 samples: 211
/// samples a bucket, about 21 s).
pub const TIMELINE_BUCKETS: usize = 4096;

/// One series' values over one bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// The series (tag number, or index into [`Timeline::names`]).
    pub series: u32,
    /// Its value before the bucket's first sample.
    pub before: u64,
    /// Its highest value at a sample of the bucket.
    pub max: u64,
    /// Its value at the bucket's last sample.
    pub end: u64,
}

/// Consecutive RSS samples merged: the series that changed in them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Time of its first sample, ns.
    pub t: u64,
    /// Time of its last sample, ns.
    pub t_last: u64,
    /// Samples it covers.
    pub samples: u32,
    /// Highest VmRSS among them.
    pub rss: u64,
    /// Series whose value changed in the bucket (a series not listed holds
    /// its previous value, 0 at the start, throughout).
    pub changes: Vec<Change>,
}

/// Live bytes per series at the RSS samples, downsampled (module docs).
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// The buckets, oldest first.
    pub buckets: Vec<Bucket>,
    /// Samples per full bucket now (1 until the budget first fills).
    pub width: u32,
    /// Names of the series when the timeline is grouped by a key
    /// (`LoadOptions::timeline_key`); `None`: series are tag numbers.
    pub names: Option<Vec<String>>,
    /// Samples seen.
    pub samples: u64,
    /// Index in the open (last) bucket's changes, by series.
    open: MixMap<u32, usize>,
}

impl Timeline {
    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True when no sample was seen.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Whether every bucket is one sample (nothing was merged).
    pub fn exact(&self) -> bool {
        self.width <= 1
    }

    /// Adds one sample at `t` with VmRSS `rss`; `changes` lists (series,
    /// value before, value now) for the series that changed since the
    /// previous sample.
    pub fn push(&mut self, t: u64, rss: u64, changes: &[(u32, u64, u64)]) {
        self.width = self.width.max(1);
        self.samples += 1;
        let open_full = self.buckets.last().is_none_or(|b| b.samples >= self.width);
        if open_full {
            if self.buckets.len() >= TIMELINE_BUCKETS {
                self.merge_pairs();
            }
            self.open.clear();
            self.buckets.push(Bucket { t, ..Bucket::default() });
        }
        let Some(b) = self.buckets.last_mut() else { return };
        let first = b.samples == 0;
        b.samples += 1;
        b.t_last = t;
        b.rss = b.rss.max(rss);
        for &(series, before, now) in changes {
            match self.open.get(&series) {
                Some(&i) => {
                    let c = &mut b.changes[i];
                    c.max = c.max.max(now);
                    c.end = now;
                }
                None => {
                    self.open.insert(series, b.changes.len());
                    // Held `before` at the bucket's earlier samples.
                    let max = if first { now } else { now.max(before) };
                    b.changes.push(Change {
                        series,
                        before,
                        max,
                        end: now,
                    });
                }
            }
        }
    }

    /// Renames series (`to` gives each one's new number; several may
    /// become one): in each bucket the changes of series that became one
    /// are summed (value before, highest, end), as [`KeyedSums`] sums the
    /// series of one key, so every sum over keys is unchanged.
    pub(crate) fn remap(&mut self, to: impl Fn(u32) -> Option<u32>) {
        for b in &mut self.buckets {
            if !b.changes.iter().any(|c| to(c.series).is_some()) {
                continue;
            }
            let mut at: MixMap<u32, usize> = MixMap::default();
            let old = std::mem::take(&mut b.changes);
            for mut c in old {
                c.series = to(c.series).unwrap_or(c.series);
                match at.get(&c.series) {
                    Some(&i) => {
                        let e = &mut b.changes[i];
                        e.before = e.before.saturating_add(c.before);
                        e.max = e.max.saturating_add(c.max);
                        e.end = e.end.saturating_add(c.end);
                    }
                    None => {
                        at.insert(c.series, b.changes.len());
                        b.changes.push(c);
                    }
                }
            }
        }
        self.open.clear();
        if let Some(b) = self.buckets.last() {
            for (i, c) in b.changes.iter().enumerate() {
                self.open.insert(c.series, i);
            }
        }
    }

    /// Halves the buckets: each pair becomes one holding both's maxima.
    fn merge_pairs(&mut self) {
        let old = std::mem::take(&mut self.buckets);
        let mut it = old.into_iter();
        while let Some(a) = it.next() {
            match it.next() {
                Some(b) => self.buckets.push(merge(a, b)),
                None => self.buckets.push(a),
            }
        }
        self.width = self.width.saturating_mul(2);
        // The open bucket is now a merged one: rebuild its index.
        self.open.clear();
        if let Some(b) = self.buckets.last() {
            for (i, c) in b.changes.iter().enumerate() {
                self.open.insert(c.series, i);
            }
        }
    }

    /// Each bucket's values of every series not 0 in it: (bucket,
    /// [(series, highest value in the bucket)]), replayed from the changes.
    /// Costs buckets x series alive: for a few series, or tests; reports
    /// summing many series use [`KeyedSums`].
    pub fn replay(&self) -> impl Iterator<Item = (&Bucket, Vec<(u32, u64)>)> + '_ {
        let mut values: MixMap<u32, u64> = MixMap::default();
        self.buckets.iter().map(move |b| {
            let mut out: Vec<(u32, u64)> = Vec::new();
            let mut listed: MixMap<u32, ()> = MixMap::default();
            for c in &b.changes {
                listed.insert(c.series, ());
                if c.max > 0 {
                    out.push((c.series, c.max));
                }
            }
            for (&s, &v) in &values {
                if v > 0 && !listed.contains_key(&s) {
                    out.push((s, v));
                }
            }
            for c in &b.changes {
                if c.end == 0 {
                    values.remove(&c.series);
                } else {
                    values.insert(c.series, c.end);
                }
            }
            out.sort_unstable();
            (b, out)
        })
    }
}

/// Sums of series per key, bucket after bucket, at the cost of the
/// changes: a key's value in a bucket is the sum of its series' highest
/// values in the bucket (their values when unchanged). Exact when each key
/// is one series or each bucket one sample; otherwise an upper bound of
/// the key's highest sum (its series may peak at different samples).
#[derive(Debug, Default)]
pub struct KeyedSums {
    /// Per key: the sum of its series' values at the previous bucket's end.
    cur: Vec<i128>,
    /// Per key touched in this bucket: its value in the bucket.
    val: Vec<i128>,
    touched: Vec<usize>,
    is_touched: Vec<bool>,
    total_cur: i128,
    total_val: i128,
}

impl KeyedSums {
    /// Moves to bucket `b`, `key` giving each series' key (`None`: left
    /// out). Returns the keys whose value in this bucket differs from
    /// their value before.
    pub fn bucket(&mut self, b: &Bucket, key: &mut impl FnMut(u32) -> Option<usize>) -> &[usize] {
        for &k in &self.touched {
            self.is_touched[k] = false;
        }
        self.touched.clear();
        self.total_val = self.total_cur;
        let mut ends: Vec<(usize, i128)> = Vec::with_capacity(b.changes.len());
        for c in &b.changes {
            let Some(k) = key(c.series) else { continue };
            if k >= self.cur.len() {
                self.cur.resize(k + 1, 0);
                self.val.resize(k + 1, 0);
                self.is_touched.resize(k + 1, false);
            }
            if !self.is_touched[k] {
                self.is_touched[k] = true;
                self.touched.push(k);
                self.val[k] = self.cur[k];
            }
            let d = i128::from(c.max) - i128::from(c.before);
            self.val[k] += d;
            self.total_val += d;
            ends.push((k, i128::from(c.end) - i128::from(c.before)));
        }
        for (k, d) in ends {
            self.cur[k] += d;
            self.total_cur += d;
        }
        &self.touched
    }

    /// Key `k`'s value in the current bucket.
    pub fn value(&self, k: usize) -> u64 {
        let v = if self.is_touched.get(k).copied().unwrap_or(false) {
            self.val[k]
        } else {
            self.cur.get(k).copied().unwrap_or(0)
        };
        u64::try_from(v.max(0)).unwrap_or(u64::MAX)
    }

    /// Every key's value in the current bucket, summed.
    pub fn total(&self) -> u128 {
        u128::try_from(self.total_val.max(0)).unwrap_or(u128::MAX)
    }
}

/// Two consecutive buckets as one.
fn merge(a: Bucket, b: Bucket) -> Bucket {
    let mut at: MixMap<u32, usize> = MixMap::default();
    let mut changes = a.changes;
    for (i, c) in changes.iter().enumerate() {
        at.insert(c.series, i);
    }
    for c in b.changes {
        match at.get(&c.series) {
            Some(&i) => {
                let e = &mut changes[i];
                e.max = e.max.max(c.max);
                e.end = c.end;
            }
            // Not changed in `a`: it held `c.before` all through `a`.
            None => changes.push(Change {
                series: c.series,
                before: c.before,
                max: c.max.max(c.before),
                end: c.end,
            }),
        }
    }
    Bucket {
        t: a.t,
        t_last: b.t_last,
        samples: a.samples + b.samples,
        rss: a.rss.max(b.rss),
        changes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reference: the value of every series at every sample, by hand.
    fn dense(samples: &[Vec<u64>]) -> Timeline {
        let mut t = Timeline::default();
        let mut prev = vec![0u64; samples[0].len()];
        for (i, s) in samples.iter().enumerate() {
            let ch: Vec<(u32, u64, u64)> = s
                .iter()
                .enumerate()
                .filter(|(k, &v)| prev[*k] != v)
                .map(|(k, &v)| (k as u32, prev[k], v))
                .collect();
            t.push(i as u64, 100 + i as u64, &ch);
            prev.clone_from(s);
        }
        t
    }

    #[test]
    fn merged_buckets_keep_every_series_maximum() {
        // Two series over 3 x TIMELINE_BUCKETS samples: a one-sample spike
        // of series 0 and a slow ramp of series 1.
        let n = 3 * TIMELINE_BUCKETS;
        let samples: Vec<Vec<u64>> = (0..n)
            .map(|i| vec![if i == 5000 { 999 } else { (i % 7) as u64 }, (i / 100) as u64])
            .collect();
        let t = dense(&samples);
        assert!(t.len() <= TIMELINE_BUCKETS, "{}", t.len());
        assert_eq!(t.width, 4);
        assert_eq!(t.buckets.iter().map(|b| u64::from(b.samples)).sum::<u64>(), n as u64);
        // Each bucket's maximum per series equals the maximum over its samples.
        let mut at = 0usize;
        for (b, vals) in t.replay() {
            let span = &samples[at..at + b.samples as usize];
            for k in 0..2u32 {
                let want = span.iter().map(|s| s[k as usize]).max().unwrap();
                let got = vals.iter().find(|v| v.0 == k).map_or(0, |v| v.1);
                assert_eq!(got, want, "bucket at sample {at}, series {k}");
            }
            assert_eq!(b.rss, 100 + (at + b.samples as usize - 1) as u64);
            at += b.samples as usize;
        }
        let peak0 = t.replay().flat_map(|(_, v)| v).filter(|v| v.0 == 0).map(|v| v.1).max();
        assert_eq!(peak0, Some(999));
    }

    #[test]
    fn under_the_budget_each_bucket_is_one_sample() {
        let samples: Vec<Vec<u64>> = (0..100).map(|i| vec![i, 100 - i]).collect();
        let t = dense(&samples);
        assert!(t.exact());
        assert_eq!(t.len(), 100);
        let got: Vec<Vec<(u32, u64)>> = t.replay().map(|(_, v)| v).collect();
        assert_eq!(got[3], vec![(0, 3), (1, 97)]);
        assert_eq!(got[0], vec![(1, 100)]);
    }
}
