//! Helpers shared by the log tests.
#![allow(dead_code)]

use std::path::PathBuf;

use heaptag_format::{LogReader, Record};

/// A fresh path in the temp dir for this test (removed first if present).
pub fn temp_log(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("heaptag-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("{name}.htlog"));
    let _ = std::fs::remove_file(&p);
    p
}

/// The hash and meta of every fingerprint taken at the free of the block of
/// `size` bytes at `addr`, in `recs`.
pub fn free_fingerprints(recs: &[Record], addr: u64, size: u64) -> Vec<(u64, heaptag_format::FpMeta)> {
    recs.iter()
        .filter_map(|r| match r {
            Record::Fingerprint {
                addr: a,
                size: s,
                hash,
                meta,
                ..
            } if *a == addr && *s == size && meta.when == heaptag_format::FpWhen::Free => Some((*hash, *meta)),
            _ => None,
        })
        .collect()
}

/// Every record of the log at `path`, and the reader (for problems, end).
pub fn read_all(path: &std::path::Path) -> (Vec<Record>, LogReader<std::fs::File>) {
    let mut r = LogReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let recs: Vec<Record> = r.by_ref().collect();
    (recs, r)
}

/// A tag as the log defines it: (job, stage, partition).
pub type TagDef = (Option<u64>, Option<String>, Option<u32>);

/// Tag id -> definition, from the log's tag records.
pub fn tag_defs(recs: &[Record]) -> std::collections::HashMap<u32, TagDef> {
    recs.iter()
        .filter_map(|r| match r {
            Record::TagDef {
                id,
                job,
                stage,
                partition,
            } => Some((*id, (*job, stage.clone(), *partition))),
            _ => None,
        })
        .collect()
}

/// This test binary, re-run to execute only `test`, with `env` set and
/// `HEAPTAG_CHILD=1` (so the test knows it is the child).
pub fn child(test: &str, env: &[(&str, &str)]) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("HEAPTAG_CHILD", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// True in a child started by [`child`].
pub fn in_child() -> bool {
    std::env::var_os("HEAPTAG_CHILD").is_some()
}

/// In a child started by [`child`] with `PCE_ARGS`: runs the example's
/// `run` (e.g. `pce_pipeline::run`) on those arguments instead of the test,
/// and returns true; in the test itself, false.
pub fn child_runs_example(run: fn(&[String]) -> i32) -> bool {
    if !in_child() {
        return false;
    }
    let args: Vec<String> = std::env::var("PCE_ARGS")
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(run(&args), 0);
    true
}

/// Runs an analyzer command in this process: (its output, whether a
/// `check` failed).
pub fn analyze(cmd: &heaptag_analyzer::Command) -> (String, bool) {
    let mut out = Vec::new();
    let o = heaptag_analyzer::run(cmd, &mut out).unwrap();
    (String::from_utf8(out).unwrap(), o.failed)
}

/// `heaptag dups` of `log` in `format`.
pub fn dups(log: &std::path::Path, format: heaptag_analyzer::Format) -> String {
    analyze(&heaptag_analyzer::Command::Dups {
        logs: vec![log.to_path_buf()],
        format,
    })
    .0
}

/// `heaptag report --format json` of `log`.
pub fn report_json(log: &std::path::Path) -> serde_json::Value {
    let (out, _) = analyze(&heaptag_analyzer::Command::Report {
        logs: vec![log.to_path_buf()],
        format: heaptag_analyzer::Format::Json,
    });
    serde_json::from_str(&out).unwrap()
}

/// An analyzer command's JSON output (the command asks for `--format json`).
pub fn json(cmd: &heaptag_analyzer::Command) -> serde_json::Value {
    serde_json::from_str(&analyze(cmd).0).unwrap()
}

/// The duplicate verdict for `stage` in one source of `heaptag dups --format
/// json`.
pub fn verdict(d: &serde_json::Value, stage: &str) -> serde_json::Value {
    d["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["stage"] == stage)
        .cloned()
        .unwrap_or_else(|| panic!("no verdict for {stage}: {d}"))
}

/// `heaptag check` of `log` with `policy` (written beside the log as
/// `NAME.toml`): (failed, output).
pub fn check(log: &std::path::Path, name: &str, policy: &str) -> (bool, String) {
    let p = log.with_file_name(format!("{name}.toml"));
    std::fs::write(&p, policy).unwrap();
    let (out, failed) = analyze(&heaptag_analyzer::Command::Check {
        logs: vec![log.to_path_buf()],
        policy: p,
        baseline: None,
        write_baseline: None,
        format: heaptag_analyzer::Format::Text,
        junit: false,
    });
    (failed, out)
}

/// The stage of the log writer's own allocations.
pub const WRITER_STAGE: &str = heaptag_format::WRITER_STAGE;
