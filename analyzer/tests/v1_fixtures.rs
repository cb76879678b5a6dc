//! Logs in format version 1, written by heaptag 0.1.0, read by today's
//! analyzer: every report must be byte for byte what `expected/` holds —
//! what that release printed, except where a later issue changed a report
//! on purpose (issue 15: the peak RSS is VmHWM, the decomposition says how
//! each part is known); each such change is a diff of `expected/` in the
//! commit that made it (tests/fixtures/v1/README.md).
//! `dups` changed what it reports on purpose (issue 14: originals and
//! copies, content observed over time, waste at one moment): its outputs on
//! the same logs are insta snapshots here instead, so a change shows as a
//! diff. So are `sites`' (issue 15 item 6: "peak live" labelled a lower
//! bound, with what each site held at the RSS peak and how many stacks it
//! merges); its call-site names must still be what 0.1.0 printed.

use std::path::PathBuf;
use std::process::Command;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1")
}

/// Runs `heaptag ARGS` in the fixtures folder (outputs name logs relatively).
fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_heaptag"))
        .args(args)
        .current_dir(fixtures())
        .output()
        .unwrap();
    let mut s = String::from_utf8(out.stdout).unwrap();
    s.push_str(&String::from_utf8(out.stderr).unwrap());
    s
}

#[test]
fn every_v1_fixture_reports_as_heaptag_0_1_0_did() {
    let mut checked = 0;
    let mut differ = Vec::new();
    for entry in std::fs::read_dir(fixtures().join("expected")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        // NAME.COMMAND.EXT: shared.report.json, cloned.timeline.csv, ...
        let mut parts = name.splitn(3, '.');
        let (log, cmd, ext) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        let log = format!("{log}.htlog");
        if cmd == "sites" {
            // Checked by name below, and snapshot.
            continue;
        }
        let args: Vec<&str> = match (cmd, ext) {
            ("timeline", "csv") => vec!["timeline", "--csv", "--by", "partition", &log],
            (cmd, "json") => vec![cmd, "--format", "json", &log],
            (cmd, _) => vec![cmd, &log],
        };
        let want = std::fs::read_to_string(&path).unwrap();
        let got = run(&args);
        checked += 1;
        if got != want {
            differ.push(format!("heaptag {}\n--- want\n{want}\n--- got\n{got}", args.join(" ")));
        }
    }
    assert!(checked >= 25, "only {checked} fixtures found");
    assert!(
        differ.is_empty(),
        "{} of {checked} outputs changed:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

#[test]
fn v1_fixtures_are_version_1_logs() {
    for log in ["shared", "cloned", "run_sleep", "truncated", "corrupt"] {
        let out = run(&["dump", &format!("{log}.htlog")]);
        assert!(out.contains("format:     version 1, written by heaptag 0.1.0"), "{out}");
    }
}

#[test]
fn v1_fixtures_dups() {
    for log in ["shared", "per_partition", "cloned", "race_baseline", "corrupt"] {
        let file = format!("{log}.htlog");
        insta::assert_snapshot!(format!("v1_{log}_dups_txt"), run(&["dups", &file]));
        insta::assert_snapshot!(format!("v1_{log}_dups_json"), run(&["dups", "--format", "json", &file]));
    }
}

/// The first column of the table rows of a `sites` text output.
fn site_column(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.contains(" MiB ") || l.contains(" KiB ") || l.contains(" B "))
        .filter(|l| !l.starts_with("call site") && !l.starts_with('('))
        .map(|l| l.split("  ").next().unwrap_or("").trim().to_string())
        .collect()
}

#[test]
fn v1_fixtures_sites_name_what_0_1_0_named() {
    let mut checked = 0;
    for entry in std::fs::read_dir(fixtures().join("expected")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let Some(log) = name.strip_suffix(".sites.txt") else {
            continue;
        };
        let got = run(&["sites", &format!("{log}.htlog")]);
        let want = std::fs::read_to_string(&path).unwrap();
        assert_eq!(site_column(&got), site_column(&want), "{name}:\n{got}");
        insta::assert_snapshot!(format!("v1_{log}_sites_txt"), got);
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} sites fixtures found");
}
