//! The prover-shaped example, end to end: each mode runs (small) in a child
//! process writing its own log, and the analyzer's JSON gives the verdicts.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/pce_pipeline.rs"]
mod pipeline;

mod common;

use std::path::{Path, PathBuf};

use heaptag_analyzer::{run, By, Command, Format};
use serde_json::Value;

const JOBS: u64 = 2;
const PARTITIONS: u64 = 3;
const PCE_MIB: usize = 8;

/// Runs the example with `args` in a child (one log per process) and
/// returns its log.
fn pipeline_log(test: &str, mode: &str, extra: &str) -> PathBuf {
    let log = common::temp_log(&format!("pce-{mode}{}", extra.replace(' ', "")));
    let args = format!(
        "--pce {mode} --jobs {JOBS} --partitions {PARTITIONS} --pce-mib {PCE_MIB} --log {} --no-html --quiet {extra}",
        log.display()
    );
    let out = common::child(test, &[("PCE_ARGS", &args)]).output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    log
}

/// In the child: run the example instead of the test.
fn child_runs_pipeline() -> bool {
    common::child_runs_example(pipeline::run)
}

fn dups(log: &Path) -> Value {
    common::json(&Command::Dups {
        logs: vec![log.to_path_buf()],
        format: Format::Json,
    })["sources"][0]
        .clone()
}

/// `heaptag check` with `max_copies = 1` on the PCE stage: did it fail?
fn check_fails(log: &Path) -> bool {
    let policy = log.with_extension("toml");
    std::fs::write(
        &policy,
        "strict = true\n[[rule]]\nname = \"PCE once\"\nstage = \"pce_load\"\nmax_copies = 1\n",
    )
    .unwrap();
    let mut out = Vec::new();
    let outcome = run(
        &Command::Check {
            logs: vec![log.to_path_buf()],
            policy,
            baseline: None,
            write_baseline: None,
            format: Format::Text,
            junit: false,
        },
        &mut out,
    )
    .unwrap();
    outcome.failed
}

/// Witness, a/b/c and GPU buffers: distinct data, never duplicates.
fn per_partition_data_is_never_flagged(d: &Value) {
    for stage in ["synthesize_partition", "gpu_prove"] {
        assert_eq!(common::verdict(d, stage)["verdict"], "SHARED ONCE", "{stage}: {d}");
    }
}

fn pce_bytes() -> u64 {
    pipeline::pce_bytes(PCE_MIB)
}

#[test]
fn shared() {
    if child_runs_pipeline() {
        return;
    }
    let log = pipeline_log("shared", "shared", "");
    let d = dups(&log);
    let v = common::verdict(&d, "pce_load");
    assert_eq!(
        (v["verdict"].as_str(), v["copies"].as_u64()),
        (Some("SHARED ONCE"), Some(1)),
        "{v}"
    );
    per_partition_data_is_never_flagged(&d);
    assert!(!check_fails(&log), "max_copies = 1 holds");

    // Cross-thread frees (aux on the dealloc thread, a/b/c on rayon
    // workers): every partition is back to 0 tracked bytes at the end.
    let r = common::json(&Command::Report {
        logs: vec![log.clone()],
        format: Format::Json,
    });
    let tags = r["sources"][0]["tags"].as_array().unwrap();
    let partitions: Vec<&Value> = tags
        .iter()
        .filter(|t| !t["partition"].is_null() && t["stage"] != "pce_load")
        .collect();
    assert!(partitions.len() >= (JOBS * PARTITIONS) as usize, "{r}");
    for t in partitions {
        assert_eq!(t["live_end_tracked_bytes"], 0, "{t}");
    }
    let dealloc = tags.iter().find(|t| t["stage"] == "dealloc");
    assert!(
        dealloc.is_none_or(|t| t["peak_tracked_bytes"] == 0),
        "frees are not charged to the freeing thread"
    );

    // The cache is built with `heaptag::shared` (issue 15 item 7): charged
    // to no job and no partition, so partition 0 (whose setup builds it) is
    // not the heavy one and the PCE shows as shared by partition and by job.
    let pce = tags.iter().find(|t| t["stage"] == "pce_load").expect("pce_load tag");
    assert!(pce["job"].is_null() && pce["partition"].is_null(), "{pce}");
    let peaks = |by| -> Vec<(String, u64)> {
        let t = common::json(&Command::Timeline {
            logs: vec![log.clone()],
            format: Format::Json,
            by,
            csv: false,
        });
        t["sources"][0]["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["key"].as_str().unwrap().to_string(),
                    s["peak_bytes"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let by_partition = peaks(By::Partition);
    let peak_of = |series: &[(String, u64)], key: &str| series.iter().find(|s| s.0 == key).map(|s| s.1);
    let shared = peak_of(&by_partition, "shared (no partition)").expect("a shared series");
    assert!(shared >= pce_bytes(), "the PCE is shared: {by_partition:?}");
    assert_eq!(by_partition[0].0, "shared (no partition)", "{by_partition:?}");
    // (A partition's short-lived data may fall between samples: no series.)
    let p0 = peak_of(&by_partition, "partition 0").unwrap_or(0);
    assert!(p0 < pce_bytes(), "partition 0 does not hold the PCE: {by_partition:?}");
    let by_job = peaks(By::Job);
    assert!(
        peak_of(&by_job, "shared (no job)").is_some_and(|b| b >= pce_bytes()),
        "{by_job:?}"
    );
}

#[test]
fn per_partition() {
    if child_runs_pipeline() {
        return;
    }
    let log = pipeline_log("per_partition", "per-partition", "");
    let d = dups(&log);
    let v = common::verdict(&d, "pce_load");
    let n = JOBS * PARTITIONS;
    assert_eq!(v["verdict"], "DUPLICATED", "{v}");
    assert_eq!(v["copies"], n, "one copy per partition of every job: {v}");
    assert_eq!(v["wasted_bytes"], (n - 1) * pce_bytes(), "{v}");
    per_partition_data_is_never_flagged(&d);
    assert!(check_fails(&log));
}

#[test]
fn cloned() {
    if child_runs_pipeline() {
        return;
    }
    let log = pipeline_log("cloned", "cloned", "");
    let d = dups(&log);
    let v = common::verdict(&d, "pce_load");
    let n = JOBS * PARTITIONS;
    assert_eq!(v["verdict"], "DUPLICATED", "{v}");
    assert_eq!(
        v["copies"],
        n + 1,
        "the cached original and one clone per partition: {v}"
    );
    assert_eq!(v["wasted_bytes"], n * pce_bytes(), "{v}");
    per_partition_data_is_never_flagged(&d);
    assert!(check_fails(&log));
}

#[test]
fn race() {
    if child_runs_pipeline() {
        return;
    }
    let log = pipeline_log("race", "race", "");
    let d = dups(&log);
    let v = common::verdict(&d, "pce_load");
    assert_eq!(
        (v["verdict"].as_str(), v["copies"].as_u64()),
        (Some("DUPLICATED"), Some(2)),
        "{v}"
    );
    assert_eq!(v["wasted_bytes"], pce_bytes(), "{v}");
    for g in d["duplicated"].as_array().unwrap() {
        assert_eq!(g["copies"], 2);
        assert_eq!(g["transient"], true, "one copy was dropped: {g}");
        let window = g["until_s"].as_f64().unwrap() - g["from_s"].as_f64().unwrap();
        assert!(window > 0.0, "{g}");
        // One job's extraction is the original, the other's the copy.
        let mut holders: Vec<&str> = g["extra_copies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["tag"].as_str().unwrap())
            .collect();
        holders.push(g["original"]["tag"].as_str().unwrap());
        holders.sort_unstable();
        assert_eq!(holders, vec!["job=1 stage=pce_load", "job=2 stage=pce_load"]);
    }
    per_partition_data_is_never_flagged(&d);
    assert!(check_fails(&log));
}

#[test]
fn hold_baseline_names_the_extra_holder_at_the_peak() {
    if child_runs_pipeline() {
        return;
    }
    let log = pipeline_log(
        "hold_baseline_names_the_extra_holder_at_the_peak",
        "shared",
        "--hold-baseline",
    );
    let p = common::json(&Command::Peak {
        logs: vec![log],
        format: Format::Json,
        top: 5,
    });
    let moments = p["sources"][0]["moments"].as_array().unwrap();
    assert_eq!(moments.len(), 2, "{p}");
    // The baseline is alive from before the jobs until just after the
    // "jobs done" mark. The attributed peak (exact, from the replay) is
    // during the jobs; the highest RSS *sample* may come after the
    // baseline was freed (jemalloc keeps freed pages a while), and then
    // there is nothing to name: order, not timing, decides what to assert.
    let r = common::json(&Command::Report {
        logs: vec![p["sources"][0]["source"]["log"].as_str().unwrap().into()],
        format: Format::Json,
    });
    let done = r["sources"][0]["marks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m[1] == "jobs done")
        .map(|m| m[0].as_f64().unwrap())
        .expect("the example marks the end of the jobs");
    for m in moments {
        if m["kind"] == "rss" && m["time_s"].as_f64().unwrap() > done {
            continue;
        }
        let by_tag = m["by_tag"].as_array().unwrap();
        let baseline = by_tag
            .iter()
            .find(|h| h["tag"] == "stage=baseline_results")
            .unwrap_or_else(|| panic!("baseline_results holds memory at the {} peak: {m}", m["kind"]));
        assert_eq!(baseline["tracked_bytes"], (PCE_MIB as u64) << 20);
    }
}
