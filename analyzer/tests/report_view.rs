//! `heaptag report --by/--filter/--sort/--top`: grouping with exact group
//! peaks, glob filters, ordering, cuts, JSON, and clear errors.

mod common;

use common::{LogBuilder, MIB, MS};
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let (code, out, err) = common::heaptag(args, &[]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// Two partitions of one stage whose blocks never overlap in time: the
/// stage's peak is the larger block, not the sum of the tags' peaks.
fn disjoint_log() -> String {
    let path = common::temp("view-disjoint");
    let mut b = LogBuilder::new();
    b.tag(1, Some(3), Some("synthesize_partition"), Some(0))
        .tag(2, Some(3), Some("synthesize_partition"), Some(1))
        .tag(3, Some(3), Some("gpu_prove"), Some(0))
        .alloc(MS, 1, 1, 0x1000_0000, 4 * MIB)
        .free(2 * MS, 0x1000_0000, 4 * MIB)
        .alloc(3 * MS, 2, 1, 0x2000_0000, 3 * MIB)
        .alloc(3 * MS, 3, 1, 0x3000_0000, 2 * MIB)
        .free(4 * MS, 0x2000_0000, 3 * MIB)
        .rec(heaptag_format::Record::End {
            time_ns: 5 * MS,
            dropped: 0,
        });
    b.write(&path);
    path.display().to_string()
}

fn groups(r: &Value) -> Vec<(String, u64, u64, usize)> {
    r["sources"][0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["key"].as_str().unwrap().to_string(),
                g["peak_live"]["bytes"].as_u64().unwrap(),
                g["sum_of_tag_peaks_bytes"].as_u64().unwrap(),
                g["tags"].as_u64().unwrap() as usize,
            )
        })
        .collect()
}

#[test]
fn groups_have_exact_peaks() {
    let log = disjoint_log();
    let r = json(&["report", "--by", "stage", "--format", "json", &log]);
    assert_eq!(
        groups(&r),
        [
            ("gpu_prove".to_string(), 2 * MIB, 2 * MIB, 1),
            ("synthesize_partition".to_string(), 4 * MIB, 7 * MIB, 2),
        ]
    );
    let g = &r["sources"][0]["groups"][1];
    // The moment recorded in the log (its first alloc, written at 1 ms),
    // not a measured time.
    assert_eq!(g["peak_live"]["time_s"], 0.001);
    // Partition 0 holds 4 MiB (1-2 ms), then 2 MiB of gpu_prove (from 3 ms).
    let r = json(&["report", "--by", "partition", "--format", "json", &log]);
    assert_eq!(
        groups(&r),
        [
            ("partition 0".to_string(), 4 * MIB, 6 * MIB, 2),
            ("partition 1".to_string(), 3 * MIB, 3 * MIB, 1),
        ]
    );
    let r = json(&["report", "--by", "job", "--format", "json", &log]);
    // Job 3 at 3 ms: 3 + 2 MiB.
    assert_eq!(groups(&r), [("job 3".to_string(), 5 * MIB, 9 * MIB, 3)]);
}

#[test]
fn group_peaks_agree_with_the_timeline_and_the_tags_on_a_real_log() {
    let log = format!("{}/tests/fixtures/v1/per_partition.htlog", env!("CARGO_MANIFEST_DIR"));
    for by in ["stage", "partition", "job"] {
        let r = json(&["report", "--by", by, "--format", "json", &log]);
        let tl = json(&["timeline", "--by", by, "--format", "json", &log]);
        let series = tl["sources"][0]["series"].as_array().unwrap();
        for (key, peak, sum, _) in groups(&r) {
            // Exact: at least what the samples saw, at most the tags' peaks summed.
            let sampled = series
                .iter()
                .find(|s| s["key"] == key.as_str())
                .map_or(0, |s| s["peak_bytes"].as_u64().unwrap());
            assert!(
                sampled <= peak && peak <= sum,
                "{by} {key}: {sampled} <= {peak} <= {sum}"
            );
        }
    }
}

#[test]
fn filters_sort_and_top() {
    let log = common::temp("view-prover");
    common::prover_log(&log);
    let log = log.to_str().unwrap();
    let tags = |r: &Value| -> Vec<String> {
        r["sources"][0]["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["tag"].as_str().unwrap().to_string())
            .collect()
    };
    let r = json(&["report", "--filter", "stage=synth*", "--format", "json", log]);
    assert_eq!(
        tags(&r),
        [
            "job=1 stage=synthesize_partition partition=0",
            "job=1 stage=synthesize_partition partition=1"
        ]
    );
    assert_eq!(r["sources"][0]["selection"]["filters"][0], "stage=synth*");
    assert_eq!(r["sources"][0]["selection"]["filtered_out"], 2);
    // Filters AND.
    let r = json(&[
        "report",
        "--filter",
        "stage=synth*",
        "--filter",
        "partition=1",
        "--format",
        "json",
        log,
    ]);
    assert_eq!(tags(&r), ["job=1 stage=synthesize_partition partition=1"]);
    // No partition: the empty string, which `*` matches and `?` does not.
    let r = json(&["report", "--filter", "partition=?", "--format", "json", log]);
    assert!(tags(&r).iter().all(|t| t.contains("partition=")));
    let r = json(&["report", "--filter", "tag=*gpu*", "--format", "json", log]);
    assert_eq!(tags(&r), ["job=1 stage=gpu_prove partition=0"]);

    // Sorted by peak: pce_load 16 MiB, partition 0's 6.5 MiB, partition 1's 6 MiB, gpu 3 MiB.
    let r = json(&["report", "--sort", "peak", "--top", "2", "--format", "json", log]);
    assert_eq!(
        tags(&r),
        ["job=1 stage=pce_load", "job=1 stage=synthesize_partition partition=0"]
    );
    assert_eq!(r["sources"][0]["selection"]["omitted"], 2);
    // Allocated: pce_load's counters say 100 MiB.
    let r = json(&["report", "--sort", "allocated", "--top", "1", "--format", "json", log]);
    assert_eq!(tags(&r), ["job=1 stage=pce_load"]);
    let r = json(&["report", "--by", "stage", "--sort", "peak", "--format", "json", log]);
    let order: Vec<String> = groups(&r).into_iter().map(|g| g.0).collect();
    assert_eq!(order, ["pce_load", "synthesize_partition", "gpu_prove"]);

    // Text says what was left out.
    let (_, text, _) = common::heaptag(&["report", "--filter", "stage=synth*", "--top", "1", log], &[]);
    assert!(
        text.contains("filter stage=synth* (2 tags left out); 1 more rows past --top 1"),
        "{text}"
    );
    let (_, text, _) = common::heaptag(&["report", "--by", "stage", log], &[]);
    assert!(text.contains("Per stage\nstage "), "{text}");

    // A plain report is as it was (no selection in the JSON).
    let r = json(&["report", "--format", "json", log]);
    assert!(r["sources"][0].get("selection").is_none());
    assert!(r["sources"][0].get("groups").is_none());
}

#[test]
fn bad_values_get_clear_errors() {
    let log = common::temp("view-bad");
    common::prover_log(&log);
    let log = log.to_str().unwrap();
    for (args, want) in [
        (
            vec!["--filter", "stg=x"],
            "no dimension \"stg\"; expected stage, partition, job or tag",
        ),
        (vec!["--filter", "stage"], "expected DIMENSION=GLOB"),
        (vec!["--filter", "stage=[a"], "bad glob"),
        (vec!["--sort", "big"], "possible values: peak, live, allocated, name"),
        (vec!["--by", "thread"], "possible values: stage, partition, job, tag"),
        (vec!["--top", "many"], "invalid value 'many' for '--top <N>'"),
    ] {
        let mut a = vec!["report"];
        a.extend(args.iter().copied());
        a.push(log);
        let (code, _, err) = common::heaptag(&a, &[]);
        assert_eq!(code, 2, "{a:?}");
        assert!(err.contains(want), "{a:?}: {err}");
    }
}
