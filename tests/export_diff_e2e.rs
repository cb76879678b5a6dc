//! Issue 18's outputs on real logs of the prover-shaped example (format 2,
//! written by today's allocator): `heaptag diff` of `--pce shared` against
//! `--pce per-partition`, folded stacks and the Perfetto trace, each
//! against `heaptag report` / `heaptag dups` of the same logs.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/pce_pipeline.rs"]
mod pipeline;

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use heaptag_analyzer::diff::DiffOptions;
use heaptag_analyzer::export::{ExportCmd, WeightArg};
use heaptag_analyzer::{run, By, Command, Format};
use serde_json::Value;

/// In the child: run the example instead of the test.
fn child_runs_pipeline() -> bool {
    common::child_runs_example(pipeline::run)
}

/// Runs the example in a child (its own log) and returns the log.
fn pipeline_log(test: &str, mode: &str) -> PathBuf {
    let log = common::temp_log(&format!("e2e18-{mode}"));
    let args = format!(
        "--pce {mode} --jobs 2 --partitions 3 --pce-mib 8 --log {} --quiet --no-html",
        log.display()
    );
    let out = common::child(test, &[("PCE_ARGS", &args)]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    log
}

fn output(cmd: Command) -> (String, bool) {
    let mut out = Vec::new();
    let o = run(&cmd, &mut out).unwrap();
    (String::from_utf8(out).unwrap(), o.failed)
}

fn json(cmd: Command) -> (Value, bool) {
    let (s, failed) = output(cmd);
    (serde_json::from_str(&s).unwrap(), failed)
}

fn report(log: &Path) -> Value {
    json(Command::Report {
        logs: vec![log.to_path_buf()],
        format: Format::Json,
    })
    .0["sources"][0]
        .clone()
}

fn folded(log: &Path, weight: WeightArg) -> BTreeMap<String, u64> {
    let (text, _) = output(Command::Export(ExportCmd::Folded {
        log: log.to_path_buf(),
        weight,
        at: None,
        output: None,
        no_lines: false,
        allocator_frames: false,
    }));
    let mut per_tag = BTreeMap::new();
    for line in text.lines() {
        let (frames, w) = line.rsplit_once(' ').unwrap();
        let w: u64 = w.parse().unwrap();
        assert!(w > 0 && frames.split(';').all(|f| !f.is_empty()), "{line}");
        *per_tag
            .entry(frames.split(';').next().unwrap().to_string())
            .or_default() += w;
    }
    per_tag
}

#[test]
fn shared_against_per_partition() {
    if child_runs_pipeline() {
        return;
    }
    let shared = pipeline_log("shared_against_per_partition", "shared");
    let per = pipeline_log("shared_against_per_partition", "per-partition");

    // diff: the PCE's copies and waste are what `heaptag dups` says, keyed
    // by stage alone (the PCE is built with heaptag::shared: no job, no
    // partition), and the gate fails.
    let (d, failed) = json(Command::Diff {
        old: shared.clone(),
        new: per.clone(),
        format: Format::Json,
        options: DiffOptions {
            fail_above_pct: Some(10.0),
            ..DiffOptions::default()
        },
    });
    assert!(failed);
    let dups = json(Command::Dups {
        logs: vec![per.clone()],
        format: Format::Json,
    })
    .0["sources"][0]
        .clone();
    assert_eq!(d["run"]["wasted_bytes"]["after"], dups["worst"]["wasted_bytes"]);
    assert_eq!(d["run"]["wasted_bytes"]["before"], 0);
    let keys: Vec<&str> = d["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    assert!(keys.iter().all(|k| !k.contains("job=")), "{keys:?}");
    assert!(d["failures"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["figure"] == "copies" && f["key"].as_str().unwrap().contains("pce_load")));
    // The same run against itself passes a 0% gate.
    let (_, failed) = json(Command::Diff {
        old: shared.clone(),
        new: shared.clone(),
        format: Format::Json,
        options: DiffOptions {
            fail_above_pct: Some(0.0),
            fail_min_bytes: 0,
        },
    });
    assert!(!failed);

    for log in [&shared, &per] {
        // Folded: per tag, live at the peak sums to the peak attributed;
        // allocated equals the report's column.
        let r = report(log);
        let peak = folded(log, WeightArg::Live);
        assert_eq!(
            peak.values().sum::<u64>(),
            r["peak_attributed"]["bytes"].as_u64().unwrap()
        );
        let alloc = folded(log, WeightArg::Allocated);
        for t in r["tags"].as_array().unwrap() {
            let tag = t["tag"].as_str().unwrap();
            assert_eq!(
                alloc.get(tag).copied().unwrap_or(0),
                t["allocated_bytes"].as_u64().unwrap(),
                "{tag}"
            );
        }
        // Perfetto: a live counter per stage, the marks, the duplicate windows.
        let (trace, _) = output(Command::Export(ExportCmd::Perfetto {
            log: log.clone(),
            by: By::Stage,
            output: None,
        }));
        let trace: Value = serde_json::from_str(&trace).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        let count = |ph: &str| events.iter().filter(|e| e["ph"] == ph).count();
        assert_eq!(count("i"), r["marks"].as_array().unwrap().len());
        let d = json(Command::Dups {
            logs: vec![log.clone()],
            format: Format::Json,
        })
        .0;
        assert_eq!(count("X"), d["sources"][0]["duplicated"].as_array().unwrap().len());
        assert!(events.iter().any(|e| e["ph"] == "C" && e["name"] == "live pce_load"));
        assert!(events.iter().any(|e| e["ph"] == "C" && e["name"] == "VmHWM"));
    }
}
