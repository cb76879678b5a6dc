//! Golden tests: each subcommand's output on a deterministic log (written by
//! `common::prover_log`) is compared with its `insta` snapshot in
//! `tests/snapshots/golden__*.snap`, with the log's temporary path redacted.
//!
//! A changed output fails the test. Under CI (`CI` set, and `.ci/run`
//! exports `INSTA_UPDATE=no`) nothing is written; on a developer's machine
//! insta writes the new output beside the snapshot as `.snap.new`. After an
//! intended change, review and accept with `cargo insta review` (or rerun
//! with `INSTA_UPDATE=always` and read the diff in git).

mod common;

use std::path::{Path, PathBuf};

use heaptag_analyzer::{run, By, Command, Format};

/// Runs `cmd`; the temp path becomes `<LOG>` and heading underlines (whose
/// length follows the path) a fixed `---`.
fn render(cmd: Command, log: &Path) -> String {
    let mut out = Vec::new();
    run(&cmd, &mut out).unwrap();
    let text = String::from_utf8(out)
        .unwrap()
        .replace(&log.display().to_string(), "<LOG>");
    text.lines()
        .map(|l| {
            if !l.is_empty() && l.chars().all(|c| c == '-') {
                "---"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Compares `got` with the snapshot `name`.
fn golden(name: &str, got: &str) {
    insta::with_settings!({ snapshot_path => "snapshots", prepend_module_to_snapshot => true }, {
        insta::assert_snapshot!(name, got);
    });
}

fn log(name: &str) -> PathBuf {
    let p = common::temp(name);
    common::prover_log(&p);
    p
}

#[test]
fn report_text_markdown_json() {
    let p = log("report");
    let logs = vec![p.clone()];
    golden(
        "report.txt",
        &render(
            Command::Report {
                logs: logs.clone(),
                format: Format::Text,
            },
            &p,
        ),
    );
    golden(
        "report.md",
        &render(
            Command::Report {
                logs: logs.clone(),
                format: Format::Markdown,
            },
            &p,
        ),
    );
    golden(
        "report.json",
        &render(
            Command::Report {
                logs,
                format: Format::Json,
            },
            &p,
        ),
    );
}

#[test]
fn peak_text() {
    let p = log("peak");
    golden(
        "peak.txt",
        &render(
            Command::Peak {
                logs: vec![p.clone()],
                format: Format::Text,
                top: 5,
            },
            &p,
        ),
    );
}

#[test]
fn dups_text_and_json() {
    let p = log("dups");
    golden(
        "dups.txt",
        &render(
            Command::Dups {
                logs: vec![p.clone()],
                format: Format::Text,
            },
            &p,
        ),
    );
    golden(
        "dups.json",
        &render(
            Command::Dups {
                logs: vec![p.clone()],
                format: Format::Json,
            },
            &p,
        ),
    );
}

#[test]
fn sites_text() {
    let p = log("sites");
    golden(
        "sites.txt",
        &render(
            Command::Sites {
                logs: vec![p.clone()],
                format: Format::Text,
                top: 5,
                options: Default::default(),
            },
            &p,
        ),
    );
}

#[test]
fn timeline_chart_and_csv() {
    let p = log("timeline");
    let logs = vec![p.clone()];
    golden(
        "timeline.txt",
        &render(
            Command::Timeline {
                logs: logs.clone(),
                format: Format::Text,
                by: By::Stage,
                csv: false,
            },
            &p,
        ),
    );
    golden(
        "timeline_partition.csv",
        &render(
            Command::Timeline {
                logs,
                format: Format::Text,
                by: By::Partition,
                csv: true,
            },
            &p,
        ),
    );
}

#[test]
fn two_logs_get_a_section_each_and_a_combined_table() {
    let a = log("multi-a");
    let b = log("multi-b");
    let mut out = Vec::new();
    run(
        &Command::Report {
            logs: vec![a, b],
            format: Format::Json,
        },
        &mut out,
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["sources"].as_array().unwrap().len(), 2);
    let combined = v["combined"].as_array().unwrap();
    let pce = combined.iter().find(|r| r["stage"] == "pce_load").unwrap();
    assert_eq!(pce["live_end_bytes"], 2 * 16 * common::MIB, "summed over both logs");
    assert_eq!(
        pce["peak_by_source"],
        serde_json::json!([16 * common::MIB, 16 * common::MIB]),
        "a column per log"
    );
    let mut text = Vec::new();
    run(
        &Command::Report {
            logs: vec![common::temp("multi-a"), common::temp("multi-b")],
            format: Format::Text,
        },
        &mut text,
    )
    .unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("peak in pid 4242"), "{text}");
}
