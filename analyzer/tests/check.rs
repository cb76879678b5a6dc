//! `heaptag check`: each rule kind passes and fails on crafted logs, exit
//! codes, baselines, policy errors with line numbers, JUnit output.

mod common;

use std::path::{Path, PathBuf};

use common::{LogBuilder, MIB, MS};
use heaptag_format::Record;

fn policy(name: &str, text: &str) -> PathBuf {
    let p = common::temp(name).with_extension("toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn prover() -> PathBuf {
    let p = common::temp("check-prover");
    if !p.exists() {
        common::prover_log(&p);
    }
    p
}

fn check(policy: &Path, logs: &[&Path], extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["check", "--policy", policy.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend(logs.iter().map(|l| l.to_str().unwrap()));
    common::heaptag(&args, &[])
}

/// (rule text, passes on the prover log)
const CASES: &[(&str, bool)] = &[
    ("stage = \"pce_load\"\nmax_copies = 1", true),
    ("stage = \"synthesize_*\"\nmax_copies = 1", false),
    ("stage = \"synthesize_*\"\nmax_copies = 2", true),
    ("stage = \"pce_load\"\nmax_peak = \"20 MiB\"", true),
    ("stage = \"pce_load\"\nmax_peak = \"10 MiB\"", false),
    ("stage = \"synthesize_partition\"\nmax_peak = \"10 MiB\"", true),
    (
        "stage = \"synthesize_partition\"\nmax_peak = \"10 MiB\"\nper = \"group\"",
        false,
    ),
    ("site = \"prover::pce::load*\"\nmax_peak = \"8 MiB\"", false),
    ("max_rss = \"200 MiB\"", true),
    ("max_rss = \"100 MiB\"", false),
    ("max_outside_jemalloc = \"60 MiB\"", true),
    ("max_outside_jemalloc = \"40 MiB\"", false),
    ("max_unattributed = \"1 MiB\"", true),
    ("max_dropped_events = 0", true),
];

#[test]
fn each_rule_kind_passes_and_fails() {
    let log = prover();
    for (i, (rule, passes)) in CASES.iter().enumerate() {
        let p = policy(&format!("case{i}"), &format!("[[rule]]\nname = \"case {i}\"\n{rule}\n"));
        let (code, stdout, stderr) = check(&p, &[&log], &[]);
        let want = if *passes { 0 } else { 1 };
        assert_eq!(code, want, "case {i}: {rule}\n{stdout}{stderr}");
        if !passes {
            assert!(
                stdout.contains(&format!("FAIL {}:1 case {i}", p.display())),
                "names the rule and its line: {stdout}"
            );
            let offender = stdout.lines().find(|l| l.starts_with("       ")).unwrap_or_default();
            assert!(!offender.trim().is_empty(), "says what broke it: {stdout}");
        }
    }
}

#[test]
fn a_broken_copies_rule_names_the_tags_and_site() {
    let p = policy(
        "copies",
        "[[rule]]\nname = \"tables shared\"\nstage = \"synthesize_partition\"\nmax_copies = 1\n",
    );
    let (code, stdout, _) = check(&p, &[&prover()], &[]);
    assert_eq!(code, 1);
    assert!(stdout.contains("2 copies of 000000000000cccc (4.0 MiB)"), "{stdout}");
    // Issue 14: the original and the copy are named apart.
    assert!(
        stdout.contains(
            "original job=1 stage=synthesize_partition partition=0 (allocated at prover::build_table (lib.rs:48))"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("copies made by synthesize_partition (job 1, partition 1) at prover::build_table (lib.rs:48)"),
        "{stdout}"
    );
}

fn untagged_and_dropped_log() -> PathBuf {
    let p = common::temp("check-untagged");
    let mut b = LogBuilder::new();
    b.tag(0, None, None, None)
        .alloc(10 * MS, 0, 0, 0x1000, 5 * MIB)
        .sample(20 * MS, 50 * MIB, 6 * MIB, 10 * MIB, 5 * MIB, 5 * MIB)
        .rec(Record::Dropped {
            time_ns: 25 * MS,
            events: 7,
        })
        .rec(Record::End {
            time_ns: 30 * MS,
            dropped: 7,
        });
    b.write(&p);
    p
}

#[test]
fn unattributed_and_dropped_events() {
    let log = untagged_and_dropped_log();
    let p = policy(
        "unattributed",
        "[[rule]]\nmax_unattributed = \"4 MiB\"\n\n[[rule]]\nmax_dropped_events = 0\n",
    );
    let (code, stdout, stderr) = check(&p, &[&log], &[]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("untagged blocks held 5.0 MiB at the RSS peak"),
        "{stdout}"
    );
    assert!(stdout.contains("7 events dropped by the writer"), "{stdout}");
    assert!(stdout.contains("2 of 2 checks failed"), "{stdout}");
}

#[test]
fn baseline_increase() {
    let base_log = prover();
    let baseline = common::temp("baseline").with_extension("json");
    let p = policy("increase", "[[rule]]\nname = \"no growth\"\nmax_increase = \"10%\"\n");
    // A missing --baseline is a usage error.
    let (code, _, stderr) = check(&p, &[&base_log], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--baseline"), "{stderr}");
    // Write a baseline with a policy that needs none.
    let anything = policy("anything", "[[rule]]\nmax_dropped_events = 0\n");
    let (code, _, stderr) = check(
        &anything,
        &[&base_log],
        &["--write-baseline", baseline.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{stderr}");
    // Same run: no increase.
    let (code, stdout, _) = check(&p, &[&base_log], &["--baseline", baseline.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}");
    // Issue 15: writing a baseline with the very policy that needs one
    // works (the CI.md job on the main branch), and says so.
    let (code, stdout, stderr) = check(&p, &[&base_log], &["--write-baseline", baseline.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("no baseline (this run writes one)"), "{stdout}");
    // A run whose PCE grew by 50%, under another job id (job ids differ
    // between runs; baselines are keyed by stage and partition): the rule
    // fails, naming the stage; a stage the baseline lacks is named too.
    let grown = common::temp("grown");
    let mut b = LogBuilder::new();
    b.tag(1, Some(7), Some("pce_load"), None)
        .tag(2, Some(7), Some("brand_new_stage"), Some(4))
        .alloc(11 * MS, 2, 0, 0x9000_0000, 2 * MIB)
        .alloc(10 * MS, 1, 0, 0x1000, 24 * MIB)
        .sample(20 * MS, 60 * MIB, 25 * MIB, 30 * MIB, 24 * MIB, 24 * MIB)
        .rec(Record::End {
            time_ns: 30 * MS,
            dropped: 0,
        });
    b.write(&grown);
    let (code, stdout, _) = check(&p, &[&grown], &["--baseline", baseline.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("stage=pce_load: peak 24.0 MiB vs 16.0 MiB in the baseline (+50.0%)"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("job=7 stage=pce_load:"),
        "keyed without the job: {stdout}"
    );
    assert!(
        stdout.contains("(no baseline for stage=brand_new_stage partition=4)"),
        "{stdout}"
    );
    // A baseline written by 0.1.0 (schema 1, keyed by whole tags) still
    // compares, by stage and partition.
    let old = common::temp("old-baseline").with_extension("json");
    std::fs::write(
        &old,
        r#"{"schema_version": 1, "peak_live_bytes": {"job=1 stage=pce_load": 16777216, "job=2 stage=pce_load": 8388608}, "peak_rss_bytes": 0}"#,
    )
    .unwrap();
    let (code, stdout, _) = check(&p, &[&grown], &["--baseline", old.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("stage=pce_load: peak 24.0 MiB vs 16.0 MiB in the baseline (+50.0%)"),
        "{stdout}"
    );
    // A baseline that is not one.
    let bad = common::temp("bad-baseline").with_extension("json");
    std::fs::write(&bad, "{\"oops\": ").unwrap();
    let (code, _, stderr) = check(&p, &[&base_log], &["--baseline", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a heaptag baseline"), "{stderr}");
}

#[test]
fn policy_errors_name_file_line_and_key() {
    let log = prover();
    let cases = [
        (
            "[[rule]]\nstage = \"x\"\nmax_peek = \"1 GiB\"\n",
            ":3: max_peek: unknown field",
        ),
        (
            "[[rule]]\n\n\nmax_peak = \"30 GB\"\n",
            ":4: max_peak: \"30 GB\" is not a size",
        ),
        ("[[rule]]\nstage = \"[x\"\nmax_copies = 1\n", ":2: stage: bad glob"),
        (
            "strict = true\n\n[[rule]]\nstage = \"nothing_like_this\"\nmax_copies = 1\n",
            ":3: rule \"rule at line 3 (max_copies)\" selects nothing",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = policy(&format!("bad{i}"), text);
        let (code, _, stderr) = check(&p, &[&log], &[]);
        assert_eq!(code, 2, "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(&format!("{}{want}", p.display())), "case {i}: {stderr}");
    }
    let (code, _, stderr) = check(Path::new("/nonexistent/heaptag.toml"), &[&log], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read the policy"), "{stderr}");
}

#[test]
fn junit_and_markdown_and_json_outputs() {
    let p = policy(
        "formats",
        "[[rule]]\nname = \"pce <shared> & once\"\nstage = \"pce_load\"\nmax_copies = 1\n\n[[rule]]\nmax_rss = \"100 MiB\"\n",
    );
    let log = prover();
    let (code, xml, _) = check(&p, &[&log], &["--format", "junit"]);
    assert_eq!(code, 1);
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("tests"), Some("2"));
    assert_eq!(root.attribute("failures"), Some("1"));
    let cases: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("testcase")).collect();
    assert!(cases[0].attribute("name").unwrap().starts_with("pce <shared> & once"));
    assert!(cases[1].children().any(|c| c.has_tag_name("failure")));

    let (_, md, _) = check(&p, &[&log], &["--format", "markdown"]);
    assert!(md.starts_with("## heaptag check: FAILED"), "{md}");
    assert!(md.contains("| **FAIL** |"), "{md}");

    let (_, json, _) = check(&p, &[&log], &["--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["failures"], 1);
    assert_eq!(v["outcomes"][1]["limit"], "max_rss");
    assert_eq!(v["outcomes"][1]["line"], 6);
}

/// Issue 13: limits of 2^63 bytes and more compare as the numbers they are
/// (a signed cast made `max_outside_jemalloc` fail every log).
#[test]
fn limits_of_two_to_the_63_and_more_pass() {
    let log = prover();
    for limit in [
        "\"9223372036854775808\"",
        "\"18446744073709551615\"",
        "\"16777215 TiB\"",
    ] {
        for key in ["max_outside_jemalloc", "max_rss", "max_unattributed", "max_peak"] {
            let p = policy("huge", &format!("[[rule]]\n{key} = {limit}\n"));
            let (code, out, err) = check(&p, &[&log], &[]);
            assert_eq!(code, 0, "{key} = {limit}: {out}{err}");
            assert!(out.contains("passed: 0 of 1 checks failed"), "{out}");
        }
    }
}

/// Issue 14: content meant to be identical can be allowed by site or stage.
#[test]
fn allow_identical_exempts_matching_contents_from_max_copies() {
    let log = prover();
    let rule = "[[rule]]\nstage = \"synthesize_partition\"\nmax_copies = 1\n";
    let (code, out, _) = check(&policy("no-allow", rule), &[&log], &[]);
    assert_eq!(code, 1, "{out}");
    for allow in [
        "[[allow_identical]]\nsite = \"prover::build_table*\"\nreason = \"per-partition lookup tables\"\n",
        "[[allow_identical]]\nstage = \"synthesize_*\"\n",
    ] {
        let (code, out, err) = check(&policy("allow", &format!("{allow}{rule}")), &[&log], &[]);
        assert_eq!(code, 0, "{allow}: {out}{err}");
    }
    // An entry that would allow nothing in particular is refused.
    let (code, _, err) = check(
        &policy("allow-bad", &format!("[[allow_identical]]\nreason = \"x\"\n{rule}")),
        &[&log],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("needs a stage or a site glob"), "{err}");
}

/// heaptag's own writer tag is in no baseline and never "missing" from one
/// (`diff` leaves it out too), whatever it held in either run.
#[test]
fn check_baseline_leaves_out_heaptags_own_writer() {
    let log = |name: &str, writer_bytes: u64| {
        let p = common::temp(name);
        LogBuilder::new()
            .tag(1, Some(1), Some("prove"), Some(0))
            .tag(2, None, Some(heaptag_format::WRITER_STAGE), Some(7))
            .alloc(10 * MS, 1, 0, 0x1000_0000, 4 * MIB)
            .alloc(20 * MS, 2, 0, 0x2000_0000, writer_bytes)
            .sample(50 * MS, 64 * MIB, 8 * MIB, 8 * MIB, 5 * MIB, 5 * MIB)
            .rec(Record::End {
                time_ns: 60 * MS,
                dropped: 0,
            })
            .write(&p);
        p
    };
    let (old, new) = (log("own-old", 64 * 1024), log("own-new", 2 * MIB));
    let pol = policy("own-baseline", "[[rule]]\nname = \"peak\"\nmax_increase = \"10%\"\n");
    let base = common::temp("own-baseline").with_extension("json");
    let (code, _, err) = check(&pol, &[&old], &["--write-baseline", base.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read_to_string(&base).unwrap();
    assert!(written.contains("prove"), "{written}");
    assert!(!written.contains(heaptag_format::WRITER_STAGE), "{written}");
    // The writer held 32x more in the new run: no failure, no missing key.
    let (code, out, err) = check(&pol, &[&new], &["--baseline", base.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("no baseline for"), "{out}");
}
