//! The realloc rule (issue 15 item 1, docs/REPORTS.md "The realloc rule"): a
//! realloc is a new block of the resizing thread's tag, in every mode.
//!
//! One program, run twice as a child of this test: with `HEAPTAG_THRESHOLD=0`
//! (every block tracked) and with the default threshold (a small block's tag
//! is never stored). A block allocated small under tag A is grown under tag B
//! several times, crossing the threshold. Per-tag tracked live and peak, from
//! `heaptag::snapshot()` in the program and from the analyzer's report of its
//! log, must be the same in both runs and follow the rule: B holds the block,
//! A holds nothing. (Before the rule, exact mode left the block on A.)

mod common;

use std::hint::black_box;
use std::path::Path;

use heaptag::Tag;
use heaptag_analyzer::{run, Command, Format};
use serde_json::Value;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const A: Tag = Tag::new(Some(15), Some("realloc_a"), Some(0));
const B: Tag = Tag::new(Some(15), Some("realloc_b"), Some(1));
/// A large block A holds (and frees) before the small one: A's tracked peak,
/// in both modes, since the small block never lives beside it.
const A_PEAK: u64 = 1 << 20;
/// Capacities the Vec is grown to under B: the default threshold (64 KiB)
/// is crossed between the third and the fourth.
const GROWTH: [usize; 5] = [1 << 10, 16 << 10, 128 << 10, 1 << 20, 4 << 20];
const FINAL: u64 = 4 << 20;

/// Per-tag tracked figures: (A live, A peak, B live, B peak).
type Figures = (u64, u64, u64, u64);

/// The program: run in the child, prints its snapshot's figures.
fn program(log: &Path) -> Figures {
    heaptag::LogConfig::new(log).start().expect("log starts");
    A.scope(|| drop(black_box(vec![1u8; A_PEAK as usize])));
    let mut v: Vec<u8> = A.scope(|| Vec::with_capacity(64));
    v.push(1);
    for cap in GROWTH {
        B.scope(|| v.reserve_exact(cap - v.len()));
        assert_eq!(v.capacity(), cap);
    }
    let s = heaptag::snapshot();
    let f = |t: &Tag| {
        s.tag(t)
            .map_or((0, 0), |t| (t.tracked.live_bytes, t.tracked.peak_live_bytes))
    };
    let ((a_live, a_peak), (b_live, b_peak)) = (f(&A), f(&B));
    heaptag::finish().expect("a log was running");
    drop(black_box(v));
    (a_live, a_peak, b_live, b_peak)
}

#[test]
fn realloc_under_another_tag_is_charged_alike_in_exact_and_default_mode() {
    if common::in_child() {
        let log = std::env::var_os("REALLOC_LOG").unwrap();
        let threshold = heaptag::snapshot().threshold;
        let figures = program(Path::new(&log));
        println!("FIGURES {threshold} {figures:?}");
        return;
    }
    let test = "realloc_under_another_tag_is_charged_alike_in_exact_and_default_mode";
    let mut runs = Vec::new();
    for (mode, env) in [("exact", Some("0")), ("default", None)] {
        let log = common::temp_log(&format!("realloc-rule-{mode}"));
        let log_s = log.display().to_string();
        let mut vars = vec![("REALLOC_LOG", log_s.as_str())];
        if let Some(t) = env {
            vars.push(("HEAPTAG_THRESHOLD", t));
        }
        let mut cmd = common::child(test, &vars);
        cmd.env_remove("HEAPTAG_THRESHOLD").envs(vars.iter().copied());
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("FIGURES ").map(|(_, f)| f))
            .unwrap_or_else(|| panic!("no figures in {stdout}"));
        let threshold = if env.is_some() { "0 " } else { "65536 " };
        assert!(line.starts_with(threshold), "{mode}: {line}");
        let snapshot = line[threshold.len()..].to_string();
        runs.push((mode, snapshot, report_figures(&log)));
    }
    let expect = format!("{:?}", (0u64, A_PEAK, FINAL, FINAL));
    for (mode, snapshot, report) in &runs {
        assert_eq!(snapshot, &expect, "{mode}: snapshot (A live, A peak, B live, B peak)");
        assert_eq!(report, &expect, "{mode}: report JSON (A live, A peak, B live, B peak)");
    }
}

/// (A live, A peak, B live, B peak) tracked, from `heaptag report --format
/// json` of the log: live at its end (the snapshot was taken just before).
fn report_figures(log: &Path) -> String {
    let cmd = Command::Report {
        logs: vec![log.to_path_buf()],
        format: Format::Json,
    };
    let mut out = Vec::new();
    run(&cmd, &mut out).unwrap();
    let doc: Value = serde_json::from_slice(&out).unwrap();
    let tags = doc["sources"][0]["tags"].as_array().expect("tags").clone();
    let f = |stage: &str| {
        tags.iter().find(|t| t["stage"] == stage).map_or((0, 0), |t| {
            (
                t["live_end_tracked_bytes"].as_u64().unwrap(),
                t["peak_tracked_bytes"].as_u64().unwrap(),
            )
        })
    };
    let ((a_live, a_peak), (b_live, b_peak)) = (f("realloc_a"), f("realloc_b"));
    format!("{:?}", (a_live, a_peak, b_live, b_peak))
}
