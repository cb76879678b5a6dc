//! Sets of tags in words, for `dups`' "held by" and "copies made by".

use std::collections::{BTreeMap, BTreeSet};

use crate::model::TagKey;

/// A set of tags in words: per stage, `pce_load (job 1)`, `6 partitions of
/// jobs 1-2 in synthesize_partition`, `jobs 3, 5 in srs_load`.
pub fn describe_tags(tags: &[TagKey]) -> String {
    let mut by_stage: BTreeMap<String, Vec<&TagKey>> = BTreeMap::new();
    for t in tags {
        by_stage
            .entry(t.stage.clone().unwrap_or_else(|| "untagged".into()))
            .or_default()
            .push(t);
    }
    let mut parts = Vec::new();
    for (stage, ts) in by_stage {
        let jobs: BTreeSet<u64> = ts.iter().filter_map(|t| t.job).collect();
        let parts_of: BTreeSet<(Option<u64>, u32)> =
            ts.iter().filter_map(|t| t.partition.map(|p| (t.job, p))).collect();
        let jobs_txt = match jobs.len() {
            0 => String::new(),
            1 => format!("job {}", ranges(jobs.iter().copied())),
            _ => format!("jobs {}", ranges(jobs.iter().copied())),
        };
        let copies = if ts.len() > 1 {
            format!(" ({} copies)", ts.len())
        } else {
            String::new()
        };
        let text = if ts.len() == 1 || (parts_of.len() <= 1 && jobs.len() <= 1) {
            let mut what = Vec::new();
            if !jobs_txt.is_empty() {
                what.push(jobs_txt);
            }
            if let Some((_, p)) = parts_of.iter().next() {
                what.push(format!("partition {p}"));
            }
            if what.is_empty() {
                format!("{stage}{copies}")
            } else {
                format!("{stage} ({}){copies}", what.join(", "))
            }
        } else if !parts_of.is_empty() {
            let of = if jobs_txt.is_empty() {
                String::new()
            } else {
                format!(" of {jobs_txt}")
            };
            format!("{} partitions{of} in {stage}", parts_of.len())
        } else {
            format!("{jobs_txt} in {stage}{copies}")
        };
        parts.push(text);
    }
    parts.join("; ")
}

/// `1-3, 5, 7-8`.
fn ranges(v: impl Iterator<Item = u64>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(u64, u64)> = None;
    for x in v {
        run = match run {
            Some((a, b)) if b.checked_add(1) == Some(x) => Some((a, x)),
            Some((a, b)) => {
                out.push(if a == b { a.to_string() } else { format!("{a}-{b}") });
                Some((x, x))
            }
            None => Some((x, x)),
        };
    }
    if let Some((a, b)) = run {
        out.push(if a == b { a.to_string() } else { format!("{a}-{b}") });
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TagKey;

    fn t(job: Option<u64>, stage: &str, partition: Option<u32>) -> TagKey {
        TagKey {
            job,
            stage: Some(stage.into()),
            partition,
            ..TagKey::default()
        }
    }

    #[test]
    fn tag_sets_read_as_words() {
        let six: Vec<TagKey> = (1..=2)
            .flat_map(|j| (0..3).map(move |p| t(Some(j), "synthesize_partition", Some(p))))
            .collect();
        assert_eq!(describe_tags(&six), "6 partitions of jobs 1-2 in synthesize_partition");
        assert_eq!(describe_tags(&[t(Some(1), "pce_load", None)]), "pce_load (job 1)");
        assert_eq!(
            describe_tags(&[t(Some(1), "pce_load", None), t(Some(2), "pce_load", None)]),
            "jobs 1-2 in pce_load (2 copies)"
        );
        assert_eq!(
            describe_tags(&[t(Some(1), "a", Some(0)), t(Some(1), "a", Some(0))]),
            "a (job 1, partition 0) (2 copies)"
        );
        assert_eq!(ranges([1, 2, 3, 5, 7, 8].into_iter()), "1-3, 5, 7-8");
    }
}
