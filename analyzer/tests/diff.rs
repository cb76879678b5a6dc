//! `heaptag diff`: two logs that differ in known ways, keyed like `heaptag
//! check --baseline`, and the `--fail-above` gate.

mod common;

use std::path::{Path, PathBuf};

use common::{LogBuilder, MIB, MS};
use heaptag_format::{Fill, FpHash, FpWhen, LogSettings, Record, TagCount};
use serde_json::Value;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/v1")
        .join(name)
        .display()
        .to_string()
}

fn diff_json(old: &str, new: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["diff", "--format", "json", old, new];
    args.extend_from_slice(extra);
    let (code, out, err) = common::heaptag(&args, &[]);
    assert!(code == 0 || code == 1, "{err}");
    (code, serde_json::from_str(&out).unwrap())
}

fn tag<'a>(d: &'a Value, key: &str) -> &'a Value {
    d["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {d}"))
}

/// A small run: job `job`, a 16 MiB PCE, partition 0 and 1 each with a
/// table (partition 0's of `table0` bytes, partition 1's of 3 MiB: never
/// the same size, or one site's two blocks of one size would be a
/// suspected duplicate) that is freed at the end, counters for every tag.
fn run_log(path: &Path, job: u64, table0: u64) {
    let mut b = LogBuilder::new();
    b.tag(1, Some(job), Some("pce_load"), None)
        .tag(2, Some(job), Some("synthesize_partition"), Some(0))
        .tag(3, Some(job), Some("synthesize_partition"), Some(1))
        .rec(Record::StackDef {
            id: 1,
            frames: vec![0x5500_1000],
        })
        .rec(Record::StackDef {
            id: 2,
            frames: vec![0x5500_2000],
        })
        .alloc(MS, 1, 1, 0x1000_0000, 16 * MIB)
        .alloc(2 * MS, 2, 2, 0x2000_0000, table0)
        .alloc(3 * MS, 3, 2, 0x3000_0000, 3 * MIB)
        .free(4 * MS, 0x2000_0000, table0)
        .free(5 * MS, 0x3000_0000, 3 * MIB)
        .rec(Record::Counters {
            time_ns: 6 * MS,
            tags: [(1, 16 * MIB), (2, table0), (3, 3 * MIB)]
                .iter()
                .map(|&(tag, alloc_bytes)| TagCount {
                    tag,
                    alloc_bytes,
                    alloc_count: 1,
                    ..TagCount::default()
                })
                .collect(),
        })
        .rec(Record::Rss {
            time_ns: 6 * MS,
            vm_rss: 40 * MIB,
            vm_hwm: 40 * MIB,
            rss_anon: 36 * MIB,
            rss_file: 4 * MIB,
        });
    for (addr, f) in [
        (0x5500_1000u64, "prover::load_pce"),
        (0x5500_2000, "prover::build_table"),
    ] {
        b.rec(Record::Symbol {
            addr,
            function: f.into(),
            file: "/src/prover/src/lib.rs".into(),
            line: 10,
        });
    }
    b.rec(Record::End {
        time_ns: 7 * MS,
        dropped: 0,
    });
    b.write(path);
}

#[test]
fn known_differences_are_found_and_keyed_without_job_ids() {
    let (old, new) = (common::temp("diff-old"), common::temp("diff-new"));
    // Different job ids (never a key), partition 0's table 4 -> 6 MiB.
    run_log(&old, 1, 4 * MIB);
    run_log(&new, 7, 6 * MIB);
    let (old, new) = (old.to_str().unwrap(), new.to_str().unwrap());
    let (code, d) = diff_json(old, new, &[]);
    assert_eq!(code, 0, "no gate, no failure");
    assert_eq!(d["schema_version"], 1);
    let keys: Vec<&str> = d["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["key"].as_str().unwrap())
        .collect();
    // Largest change first; no job in any key; nothing "new" or "gone".
    assert_eq!(
        keys,
        [
            "stage=synthesize_partition partition=0",
            "stage=pce_load",
            "stage=synthesize_partition partition=1"
        ]
    );
    let p0 = tag(&d, "stage=synthesize_partition partition=0");
    assert_eq!(p0["peak_live_bytes"]["before"].as_u64().unwrap(), 4 * MIB);
    assert_eq!(p0["peak_live_bytes"]["after"].as_u64().unwrap(), 6 * MIB);
    assert_eq!(p0["allocated_bytes"]["after"].as_u64().unwrap(), 6 * MIB);
    assert!(p0["in_old"].as_bool().unwrap() && p0["in_new"].as_bool().unwrap());
    let pce = tag(&d, "stage=pce_load");
    assert_eq!(pce["peak_live_bytes"]["before"], pce["peak_live_bytes"]["after"]);
    // Peak attributed by hand: 16 + 4 + 3 (old), 16 + 6 + 3 (new).
    assert_eq!(d["run"]["peak_attributed_bytes"]["before"].as_u64().unwrap(), 23 * MIB);
    assert_eq!(d["run"]["peak_attributed_bytes"]["after"].as_u64().unwrap(), 25 * MIB);
    assert_eq!(d["sites"][0]["site"], "prover::build_table (lib.rs:10)");
    assert_eq!(d["sites"][0]["allocated_bytes"]["after"].as_u64().unwrap(), 9 * MIB);

    // The gate: partition 0 grew 50% (peak and allocated); the run's peak
    // and allocated 8.7%; nothing else moved.
    let (code, d) = diff_json(old, new, &["--fail-above", "10%"]);
    assert_eq!(code, 1);
    let failed: Vec<(String, String)> = d["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["key"].as_str().unwrap().into(), f["figure"].as_str().unwrap().into()))
        .collect();
    assert_eq!(
        failed,
        [
            (
                "stage=synthesize_partition partition=0".to_string(),
                "peak_live_bytes".to_string()
            ),
            (
                "stage=synthesize_partition partition=0".to_string(),
                "allocated_bytes".to_string()
            ),
        ]
    );
    assert_eq!(
        diff_json(old, new, &["--fail-above", "50"]).0,
        0,
        "50% is not more than 50%"
    );
    assert_eq!(diff_json(old, new, &["--fail-above", "49.9%"]).0, 1);
    assert_eq!(
        diff_json(old, new, &["--fail-above", "5%"]).1["failures"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // Growth under the byte floor never fails.
    assert_eq!(
        diff_json(old, new, &["--fail-above", "10%", "--fail-min-bytes", "3MiB"]).0,
        0
    );
    // Shrinking never fails.
    assert_eq!(diff_json(new, old, &["--fail-above", "0%"]).0, 0);

    // Text and Markdown say the same.
    let (code, text, _) = common::heaptag(&["diff", "--fail-above", "10%", old, new], &[]);
    assert_eq!(code, 1);
    assert!(
        text.contains("FAILED: stage=synthesize_partition partition=0 peak_live_bytes: 4.0 MiB -> 6.0 MiB (+50.0%)"),
        "{text}"
    );
    let (_, md, _) = common::heaptag(&["diff", "--format", "markdown", old, new], &[]);
    assert!(
        md.contains("| stage=synthesize_partition partition=0 | 4.0 MiB | 6.0 MiB | +2.0 MiB (+50.0%) |"),
        "{md}"
    );
}

#[test]
fn shared_against_per_partition_pce() {
    let (old, new) = (fixture("shared.htlog"), fixture("per_partition.htlog"));
    let (code, d) = diff_json(&old, &new, &["--fail-above", "10%"]);
    assert_eq!(code, 1);
    // The waste and copies are `heaptag dups`'s for each log.
    let (_, dups, _) = common::heaptag(&["dups", "--format", "json", &new], &[]);
    let dups: Value = serde_json::from_str(&dups).unwrap();
    let worst = &dups["sources"][0]["worst"];
    assert_eq!(d["run"]["wasted_bytes"]["after"], worst["wasted_bytes"]);
    assert_eq!(d["run"]["wasted_bytes"]["before"], 0);
    assert_eq!(d["run"]["extra_copies"]["after"], worst["extra_copies"]);
    let groups = dups["sources"][0]["duplicated"].as_array().unwrap();
    assert_eq!(d["contents"].as_array().unwrap().len(), groups.len());
    for g in groups {
        let c = d["contents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["content"] == g["hash"])
            .unwrap();
        assert_eq!(c["copies"]["after"], g["copies"]);
        assert_eq!(c["copies"]["before"], 0);
        assert_eq!(c["wasted_bytes"]["after"], g["wasted_bytes"]);
    }
    // Per stage/partition waste adds up to the run's.
    let per_key: u64 = d["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["wasted_bytes"]["after"].as_u64().unwrap())
        .sum();
    assert_eq!(per_key, worst["wasted_bytes"].as_u64().unwrap());
    assert_eq!(tag(&d, "stage=pce_load partition=0")["copies"]["after"], 6);
    // The peak RSS is the reports'.
    for (side, log) in [("before", &old), ("after", &new)] {
        let (_, r, _) = common::heaptag(&["report", "--format", "json", log], &[]);
        let r: Value = serde_json::from_str(&r).unwrap();
        assert_eq!(d["run"]["peak_rss_bytes"][side], r["sources"][0]["peak_rss"]["bytes"]);
    }
}

#[test]
fn diff_and_check_baseline_agree_on_tags_and_peaks() {
    let dir = common::temp("diff-baseline").with_extension("d");
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("heaptag.toml");
    std::fs::write(&policy, "[[rule]]\nname = \"peak\"\nmax_increase = \"1000%\"\n").unwrap();
    for (old, new) in [
        ("shared.htlog", "per_partition.htlog"),
        ("per_partition.htlog", "cloned.htlog"),
    ] {
        let (old, new) = (fixture(old), fixture(new));
        let baseline = dir.join("base.json");
        let (code, _, err) = common::heaptag(
            &[
                "check",
                "--policy",
                policy.to_str().unwrap(),
                "--write-baseline",
                baseline.to_str().unwrap(),
                &old,
            ],
            &[],
        );
        assert_eq!(code, 0, "{err}");
        let b: Value = serde_json::from_str(&std::fs::read_to_string(&baseline).unwrap()).unwrap();
        let (_, d) = diff_json(&old, &new, &[]);
        // Every key the baseline has (with a peak) is a diff key with that
        // peak before, and the other way round.
        let base = b["peak_live_bytes"].as_object().unwrap();
        for (k, v) in base {
            if v.as_u64().unwrap() > 0 {
                assert_eq!(tag(&d, k)["peak_live_bytes"]["before"], *v, "{k}");
            }
        }
        for t in d["tags"].as_array().unwrap() {
            if t["in_old"].as_bool().unwrap() {
                let k = t["key"].as_str().unwrap();
                assert_eq!(
                    base.get(k).cloned().unwrap_or(Value::from(0)),
                    t["peak_live_bytes"]["before"],
                    "{k}"
                );
            }
        }
        assert_eq!(b["peak_rss_bytes"], d["run"]["peak_rss_bytes"]["before"]);
    }
}

#[test]
fn a_log_against_itself_changes_nothing() {
    let log = fixture("per_partition.htlog");
    let (code, d) = diff_json(&log, &log, &["--fail-above", "0%", "--fail-min-bytes", "0"]);
    assert_eq!(code, 0, "{d}");
    for t in d["tags"].as_array().unwrap() {
        for f in ["peak_live_bytes", "allocated_bytes", "copies", "wasted_bytes"] {
            assert_eq!(t[f]["before"], t[f]["after"], "{t}");
        }
    }
}

#[test]
fn bad_diff_arguments_are_refused() {
    let log = fixture("shared.htlog");
    let (code, _, err) = common::heaptag(&["diff", "--fail-above", "ten", &log, &log], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("expected a percentage such as 10%"), "{err}");
    let (code, _, err) = common::heaptag(&["diff", "--fail-min-bytes", "lots", &log, &log], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("expected a size"), "{err}");
    let (code, _, err) = common::heaptag(&["diff", &log, "/nonexistent.htlog"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent.htlog: cannot read the log"), "{err}");
    assert_eq!(common::heaptag(&["diff", &log], &[]).0, 2);
}

/// A run with one content held twice (two 2 MiB blocks with the same
/// fingerprint, both alive at once), its header's fingerprint settings set
/// by `settings`.
fn twin_log(path: &Path, settings: impl FnOnce(&mut LogSettings)) {
    let mut b = LogBuilder::with_settings(settings);
    b.tag(1, Some(1), Some("load"), None)
        .rec(Record::StackDef {
            id: 1,
            frames: vec![0x5500_1000],
        })
        .alloc(MS, 1, 1, 0x1000_0000, 2 * MIB)
        .alloc(2 * MS, 1, 1, 0x2000_0000, 2 * MIB)
        .fp(3 * MS, 0x1000_0000, 2 * MIB, 0xfeed_f00d, Fill::Mixed, FpWhen::Free)
        .free(3 * MS, 0x1000_0000, 2 * MIB)
        .fp(4 * MS, 0x2000_0000, 2 * MIB, 0xfeed_f00d, Fill::Mixed, FpWhen::Free)
        .free(4 * MS, 0x2000_0000, 2 * MIB)
        .rec(Record::End {
            time_ns: 5 * MS,
            dropped: 0,
        });
    b.write(path);
}

/// A log's label, path and the settings its header gets.
type HeaderCase = (&'static str, PathBuf, fn(&mut LogSettings));

#[test]
fn content_hashes_match_only_under_the_same_fingerprint_hash() {
    let logs: Vec<HeaderCase> = vec![
        // heaptag 0.2.0's header: no sampled-hash field (four-lane).
        ("sampled, four-lane", common::temp("diff-fp-old"), |s| {
            s.sampled_hash = FpHash::FourLane
        }),
        ("sampled, XXH3-64", common::temp("diff-fp-new"), |s| {
            s.sampled_hash = FpHash::Xxh3
        }),
        ("sampled, XXH3-64", common::temp("diff-fp-new2"), |s| {
            s.sampled_hash = FpHash::Xxh3
        }),
        ("full, XXH3-64", common::temp("diff-fp-full"), |s| {
            s.fingerprint_full = true;
            s.full_hash = FpHash::Xxh3
        }),
        ("full, four-lane", common::temp("diff-fp-full1"), |s| {
            s.fingerprint_full = true;
            s.full_hash = FpHash::FourLane
        }),
    ];
    for (_, path, f) in &logs {
        twin_log(path, f);
    }
    let s = |p: &PathBuf| p.display().to_string();
    for (ka, a, _) in &logs {
        for (kb, b, _) in &logs {
            let (_, d) = diff_json(&s(a), &s(b), &[]);
            let hashes = &d["content_hashes"];
            assert_eq!(hashes["old"], *ka);
            assert_eq!(hashes["new"], *kb);
            let contents = d["contents"].as_array().unwrap();
            if ka == kb {
                // The same content, in both runs: one row.
                assert_eq!(hashes["comparable"], true, "{ka} against {kb}");
                assert_eq!(contents.len(), 1, "{d}");
                assert_eq!(contents[0]["content"], format!("{:016x}", 0xfeed_f00du64));
                assert_eq!(contents[0]["copies"]["before"], 2);
                assert_eq!(contents[0]["copies"]["after"], 2);
            } else {
                // The same 64-bit value under two hash functions is not the
                // same content: two rows, each in one run only.
                assert_eq!(hashes["comparable"], false, "{ka} against {kb}");
                assert_eq!(contents.len(), 2, "{d}");
                for c in contents {
                    let old = c["copies"]["before"].as_u64().unwrap();
                    let new = c["copies"]["after"].as_u64().unwrap();
                    let kind = if old > 0 { ka } else { kb };
                    assert_eq!((old.min(new), old.max(new)), (0, 2), "{c}");
                    assert_eq!(c["content"], format!("{:016x} ({kind})", 0xfeed_f00du64));
                }
                let (_, text, _) = common::heaptag(&["diff", &s(a), &s(b)], &[]);
                assert!(
                    text.contains(&format!(
                        "Content hashes do not compare: OLD's fingerprints are ({ka}), NEW's ({kb}); no content is \
                         matched across the runs."
                    )),
                    "{text}"
                );
            }
        }
    }
    // `dump` names the hash each log's header says.
    for (k, p, _) in &logs {
        let (_, text, _) = common::heaptag(&["dump", &s(p)], &[]);
        assert!(text.contains(&format!("fingerprints from 1048576 B ({k})")), "{text}");
    }
    for (_, p, _) in &logs {
        let _ = std::fs::remove_file(p);
    }
}
