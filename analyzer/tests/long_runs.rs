//! Issue 16: the analyzer's budgets on long runs change no figure. Block
//! lifetimes that can be part of no duplicate are left out past a budget
//! (lowered here so a small log crosses it many times): the duplicate
//! findings must be those of the log analyzed whole.

mod common;

use common::{LogBuilder, MIB, MS};
use heaptag_analyzer::dups;
use heaptag_analyzer::model::{LoadOptions, Model};
use heaptag_format::{Fill, FpWhen, Record};

/// 3,000 one-after-another 1 MiB blocks of distinct contents, a 3 MiB block
/// alive throughout, and in the middle two overlapping copies of one
/// content (stages `a` and `b`) and two overlapping blocks of one site and
/// size that are never fingerprinted (a suspected pair, stage `c`).
fn long_log(path: &std::path::Path) {
    let mut b = LogBuilder::new();
    b.tag(1, Some(1), Some("a"), None)
        .tag(2, Some(1), Some("b"), None)
        .tag(3, Some(1), Some("c"), None)
        .alloc(0, 1, 0, 0x9000_0000, 3 * MIB)
        .flush();
    let mut t = MS;
    for i in 0..3000u64 {
        let addr = 0x1000_0000 + (i % 7) * 0x100_0000;
        b.alloc(t, 1 + (i % 2) as u32, 0, addr, MIB);
        t += MS;
        b.fp(t, addr, MIB, 0x1_0000 + i, Fill::Mixed, FpWhen::Free)
            .free(t, addr, MIB);
        t += MS;
        if i == 1500 {
            b.alloc(t, 1, 5, 0x5000_0000, 2 * MIB)
                .alloc(t + 1, 2, 6, 0x5100_0000, 2 * MIB)
                .alloc(t + 2, 3, 7, 0x5200_0000, 4 * MIB)
                .alloc(t + 3, 3, 7, 0x5300_0000, 4 * MIB);
            t += 10 * MS;
            b.fp(t, 0x5000_0000, 2 * MIB, 0xD0B, Fill::Mixed, FpWhen::Free)
                .free(t, 0x5000_0000, 2 * MIB)
                .fp(t + 1, 0x5100_0000, 2 * MIB, 0xD0B, Fill::Mixed, FpWhen::Free)
                .free(t + 1, 0x5100_0000, 2 * MIB)
                .free(t + 2, 0x5200_0000, 4 * MIB)
                .free(t + 3, 0x5300_0000, 4 * MIB);
            t += MS;
        }
        if i % 100 == 0 {
            b.flush();
        }
    }
    b.rec(Record::End { time_ns: t, dropped: 0 });
    b.write(path);
}

fn analyzed(path: &std::path::Path, kept: Option<usize>) -> (Model, serde_json::Value) {
    let opts = LoadOptions {
        intervals: true,
        intervals_kept: kept,
        ..LoadOptions::default()
    };
    let m = Model::load_set(&[path.to_path_buf()], &opts).unwrap().remove(0);
    let mut v = serde_json::to_value(dups::analyze(&m)).unwrap();
    v.as_object_mut().unwrap().remove("lifetimes_left_out");
    (m, v)
}

#[test]
fn leaving_out_lifetimes_that_overlap_no_same_content_changes_no_finding() {
    let path = common::temp("long-run-dups");
    long_log(&path);
    let (whole, want) = analyzed(&path, None);
    assert_eq!(whole.intervals_pruned, 0);
    let (pruned, got) = analyzed(&path, Some(64));
    // Pruned many times over, the 3 MiB block alive throughout (another
    // size) holding nothing back.
    assert!(pruned.intervals_pruned > 2900, "{}", pruned.intervals_pruned);
    assert!(pruned.intervals.len() < 200, "{}", pruned.intervals.len());
    assert_eq!(got, want);
    // And the findings are the ones built in: one duplicated content (a
    // and b), one suspected pair (c), 3,000 distinct contents besides.
    let d = &want["duplicated"];
    assert_eq!(d.as_array().unwrap().len(), 2, "{d}");
    let verdicts: Vec<(String, String, u64)> = want["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["stage"].as_str().unwrap().to_string(),
                v["verdict"].as_str().unwrap().to_string(),
                v["contents"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        verdicts.contains(&("b".into(), "DUPLICATED".into(), 1501)),
        "{verdicts:?}"
    );
    assert!(
        verdicts.contains(&("c".into(), "SUSPECTED DUPLICATE".into(), 1)),
        "{verdicts:?}"
    );
    std::fs::remove_file(&path).ok();
}

/// A daemon's log: `proofs` proofs one after another, each a fresh job id
/// with 7 tags (the job, and stages `synth` and `prove` on partitions
/// 0..3), two in flight at a time on two sets of ids that are retired
/// (final counters, then `tag_retire`) and defined again for the proof
/// after next. Every tag allocates one tracked block (64-320 KiB; `synth`'s
/// fingerprinted at its free, one content per block, but partitions 0 and 1
/// of proof 300 hold one content of 128 KiB) and one sampled small block. Proof 400's
/// `prove` partition 2 also holds 8 MiB: the run's attributed and RSS peak.
fn daemon_log(path: &std::path::Path, proofs: u64) {
    use heaptag_format::TagCount;
    let mut b = LogBuilder::new();
    let stages = ["synth", "prove"];
    // (id offset in the slot, stage, partition) of the 7 tags of a proof.
    let tags: Vec<(u32, Option<&str>, Option<u32>)> = std::iter::once((0, None, None))
        .chain(
            stages
                .iter()
                .enumerate()
                .flat_map(|(s, &st)| (0..3u32).map(move |p| (1 + s as u32 * 3 + p, Some(st), Some(p)))),
        )
        .collect();
    let size = |p: u64, k: u32| {
        64 * 1024
            * if p == 300 && k <= 2 {
                2
            } else {
                1 + (p * 7 + u64::from(k)) % 5
            }
    };
    let addr = |slot: u32, k: u32| 0x1000_0000 + u64::from(slot * 8 + k) * 0x100_0000;
    let saddr = |slot: u32, k: u32| 0x7000_0000 + u64::from(slot * 8 + k) * 0x1000;
    let counters = |p: u64, slot: u32| -> Vec<TagCount> {
        (0..7u32)
            .map(|k| TagCount {
                tag: 1 + slot * 8 + k,
                alloc_bytes: size(p, k) + 5000 + u64::from(k) + if p == 400 && k == 6 { 8 * MIB } else { 0 },
                alloc_count: 3 + u64::from(p == 400 && k == 6),
                tracked_live: 0,
                small_live: 0,
                peak: 0,
                external: 0,
            })
            .collect()
    };
    let mut t = MS;
    let mut live = 0u64;
    for p in 0..=proofs {
        let slot = (p % 2) as u32;
        if p < proofs {
            for &(k, stage, part) in &tags {
                b.tag(1 + slot * 8 + k, Some(1000 + p), stage, part);
            }
            for &(k, ..) in &tags {
                let id = 1 + slot * 8 + k;
                b.alloc(t, id, 1 + k, addr(slot, k), size(p, k));
                b.rec(Record::SampleAlloc {
                    time_ns: t,
                    thread: 1,
                    tag: id,
                    stack: 20 + k,
                    addr: saddr(slot, k),
                    size: 100,
                    weight: 4096,
                });
                live += size(p, k) + 4096;
            }
            if p == 400 {
                b.alloc(t, 1 + slot * 8 + 6, 30, 0x3000_0000, 8 * MIB);
                live += 8 * MIB;
            }
            t += MS;
            b.rec(Record::Rss {
                time_ns: t,
                vm_rss: 64 * MIB + live,
                vm_hwm: 64 * MIB + live,
                rss_anon: live,
                rss_file: 64 * MIB,
            })
            .rec(Record::Counters {
                time_ns: t,
                tags: counters(p, slot),
            })
            .rec(Record::Totals {
                time_ns: t,
                live,
                tracked: live,
                overhead: MIB,
            });
        }
        // The proof before ends: its blocks freed, final counters, retired.
        if p > 0 {
            let (q, qslot) = (p - 1, 1 - slot);
            for &(k, stage, _) in &tags {
                let hash = if q == 300 && k <= 2 {
                    0xD00D
                } else {
                    0x10_0000 + q * 8 + u64::from(k)
                };
                if stage == Some("synth") {
                    b.fp(t, addr(qslot, k), size(q, k), hash, Fill::Mixed, FpWhen::Free);
                }
                b.free(t, addr(qslot, k), size(q, k));
                b.rec(Record::SampleFree {
                    time_ns: t,
                    thread: 2,
                    addr: saddr(qslot, k),
                    size: 100,
                });
                live -= size(q, k) + 4096;
            }
            if q == 400 {
                b.free(t, 0x3000_0000, 8 * MIB);
                live -= 8 * MIB;
            }
            b.rec(Record::Counters {
                time_ns: t,
                tags: counters(q, qslot),
            });
            for &(k, ..) in &tags {
                b.rec(Record::TagRetire {
                    time_ns: t,
                    id: 1 + qslot * 8 + k,
                });
            }
        }
        t += MS;
        b.flush();
    }
    b.rec(Record::End { time_ns: t, dropped: 0 });
    b.write(path);
}

/// Per (stage, partition), job dropped (as baselines key tags): the rows'
/// allocated bytes and allocations summed, and their highest peak.
fn per_stage(r: &serde_json::Value) -> std::collections::BTreeMap<String, (u64, u64, u64)> {
    let mut out = std::collections::BTreeMap::new();
    for row in r["sources"][0]["tags"].as_array().unwrap() {
        let key = format!("{} {}", row["stage"], row["partition"]);
        let e = out.entry(key).or_insert((0u64, 0u64, 0u64));
        e.0 += row["allocated_bytes"].as_u64().unwrap();
        e.1 += row["allocations"].as_u64().unwrap();
        e.2 = e.2.max(row["peak_live"]["bytes"].as_u64().unwrap());
    }
    out
}

fn daemon_loaded(path: &std::path::Path, budget: usize) -> Model {
    let opts = LoadOptions {
        intervals: true,
        peak: true,
        tag_budget: Some(budget),
        ..LoadOptions::default()
    };
    Model::load_set(&[path.to_path_buf()], &opts).unwrap().remove(0)
}

#[test]
fn retired_tags_past_the_budget_fold_and_every_total_stays_exact() {
    use heaptag_analyzer::folded::{stack_weights, LiveAt, Weight};
    use heaptag_analyzer::report::{self, By};
    let path = common::temp("long-run-daemon");
    let proofs = 600;
    daemon_log(&path, proofs);
    let whole = daemon_loaded(&path, 1_000_000);
    let folded = daemon_loaded(&path, 16);
    // Unfolded: every one of the 4,200 tags kept (and untagged).
    assert_eq!(whole.tags_folded, 0);
    assert_eq!(whole.tags_kept(), (proofs as usize * 7 + 1, 0));
    // Folded: the kept tags stay within twice the budget plus the tags in
    // flight and the peaks' holders; one aggregate per stage and partition
    // (and one for the job tags).
    let (kept, aggregates) = folded.tags_kept();
    assert!(kept <= 2 * 16 + 3 * 7 + 1, "{kept} tags kept");
    assert_eq!(aggregates, 7);
    assert_eq!(folded.tags_folded as usize + kept, proofs as usize * 7 + 1);
    // Tag numbers are given out again: the per-tag tables stay as small.
    assert!(folded.tag_acc.len() <= 100, "{}", folded.tag_acc.len());
    let changes: usize = folded.timeline.buckets.iter().map(|b| b.changes.len()).sum();
    let whole_changes: usize = whole.timeline.buckets.iter().map(|b| b.changes.len()).sum();
    assert!(
        changes * 10 < whole_changes * 6,
        "{changes} timeline changes vs {whole_changes}"
    );

    // The report: per stage and partition, allocated and allocations sum
    // to the same, the highest peak is the same; the JSON says how many
    // tags were folded, and the "others" rows say how many each.
    let (rw, rf) = (
        serde_json::to_value(report::report(std::slice::from_ref(&whole))).unwrap(),
        serde_json::to_value(report::report(std::slice::from_ref(&folded))).unwrap(),
    );
    assert_eq!(per_stage(&rf), per_stage(&rw));
    assert_eq!(rf["sources"][0]["source"]["tags_folded"], folded.tags_folded);
    assert!(rw["sources"][0]["source"].get("tags_folded").is_none());
    let others: u64 = rf["sources"][0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.get("folded_tags").and_then(|v| v.as_u64()))
        .sum();
    assert_eq!(others, folded.tags_folded);
    // By hand: every tag allocated its block and 5,000 + k small bytes.
    let want: u64 = (0..proofs)
        .flat_map(|p| {
            (0..7u64).map(move |k| 64 * 1024 * if p == 300 && k <= 2 { 2 } else { 1 + (p * 7 + k) % 5 } + 5000 + k)
        })
        .sum::<u64>()
        + 8 * MIB;
    let got: u64 = per_stage(&rf).values().map(|e| e.0).sum();
    assert_eq!(got, want);
    // The kept rows include proof 400's, which held the peak.
    let names: Vec<&str> = rf["sources"][0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tag"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"job=1400 stage=prove partition=2"), "{names:?}");
    assert!(names.contains(&"others stage=synth partition=1"), "{names:?}");

    // `report --by stage` and `--by partition`: every group's figures
    // the same (its exact peak, its tags counted, its tags' peaks summed).
    for by in [By::Stage, By::Partition] {
        let groups = |m: &Model| {
            let mut r = report::report(std::slice::from_ref(m));
            let view = report::view::ReportView {
                by,
                ..Default::default()
            };
            report::view::apply(&mut r, std::slice::from_ref(m), &view).unwrap();
            serde_json::to_value(&r.sources[0].groups).unwrap()
        };
        let (gw, gf) = (groups(&whole), groups(&folded));
        assert_eq!(gf, gw, "{by:?}");
        assert!(gw.as_array().unwrap().len() >= 3, "{gw}");
    }

    // `check`: rules by stage answer the same; a rule that selects a job is
    // unverifiable once tags were folded (it cannot see a job's folded
    // tags, so "found 0 B" must not pass it: docs/REPORTS.md), whether the
    // job's tags were kept (proof 400's, which held the peak) or folded.
    let policy = heaptag_analyzer::policy::Policy::parse(
        std::path::Path::new("daemon.toml"),
        "[[rule]]\nname = \"prove\"\nstage = \"prove\"\nmax_peak = \"1 MiB\"\n\
         [[rule]]\nname = \"synth\"\nstage = \"synth\"\nmax_peak = \"1 MiB\"\n\
         [[rule]]\nname = \"peak job\"\njob = 1400\nmax_peak = \"1 MiB\"\n\
         [[rule]]\nname = \"old job\"\njob = 1100\nmax_peak = \"1 KiB\"\n",
    )
    .unwrap();
    let verdicts = |m: &Model| -> Vec<(String, bool, String)> {
        heaptag_analyzer::check::check(&policy, std::slice::from_ref(m), None, false)
            .unwrap()
            .outcomes
            .into_iter()
            .map(|o| (o.rule, o.passed, o.found))
            .collect()
    };
    let (cw, cf) = (verdicts(&whole), verdicts(&folded));
    assert_eq!(cf[..2], cw[..2]);
    assert_eq!(
        cw.iter().map(|v| v.1).collect::<Vec<_>>(),
        vec![false, true, false, false],
        "{cw:?}"
    );
    for v in &cf[2..] {
        assert!(!v.1 && v.2 == "unverifiable", "{cf:?}");
    }

    // What held memory at both peaks: the same, tag by tag.
    // (Holders of equal bytes are listed in the order of their tag
    // numbers, which folding gives out again: compared by name.)
    let peak = |m: &Model| {
        let mut v = serde_json::to_value(report::peak(std::slice::from_ref(m), 10)).unwrap();
        for mo in v["sources"][0]["moments"].as_array_mut().unwrap() {
            mo["by_tag"]
                .as_array_mut()
                .unwrap()
                .sort_by_key(|h| h["tag"].as_str().unwrap().to_string());
        }
        v
    };
    let (pw, pf) = (peak(&whole), peak(&folded));
    assert_eq!(pf["sources"][0]["moments"], pw["sources"][0]["moments"]);
    assert_eq!(pw["sources"][0]["moments"].as_array().unwrap().len(), 2);
    assert!(pw.to_string().contains("job=1400 stage=prove partition=2"));

    // Duplicates: the same verdicts, the same duplicated contents.
    let (dw, df) = (
        serde_json::to_value(heaptag_analyzer::dups::analyze(&whole)).unwrap(),
        serde_json::to_value(heaptag_analyzer::dups::analyze(&folded)).unwrap(),
    );
    assert_eq!(df["verdicts"], dw["verdicts"]);
    assert_eq!(df["duplicated"].as_array().unwrap().len(), 1, "{}", df["duplicated"]);
    assert_eq!(
        df["duplicated"][0]["wasted_bytes"], dw["duplicated"][0]["wasted_bytes"],
        "{}",
        df["duplicated"]
    );

    // The timeline by stage and by partition: the same at every point.
    for by in [By::Stage, By::Partition] {
        // (Each source says how many tags were folded: left out.)
        let tl = |m: &Model| {
            let mut v = serde_json::to_value(report::timeline(std::slice::from_ref(m), by)).unwrap();
            v["sources"][0].as_object_mut().unwrap().remove("source");
            v
        };
        assert_eq!(tl(&folded), tl(&whole), "{by:?}");
    }

    // Folded stacks: allocated and live at the peak, summed per stage,
    // the same; the folded run's lines have the "others" roots.
    for w in [Weight::Allocated, Weight::Live(LiveAt::Peak)] {
        let sum = |m: &Model| {
            let mut by: std::collections::BTreeMap<(Option<String>, Option<u32>), u64> = Default::default();
            let sw = stack_weights(m, w).unwrap();
            for e in &sw.entries {
                *by.entry((e.tag.stage.clone(), e.tag.partition)).or_default() += e.bytes;
            }
            (sw.total, by, sw.entries.iter().filter(|e| e.tag.folded).count())
        };
        let (a, b) = (sum(&whole), sum(&folded));
        assert_eq!((a.0, &a.1), (b.0, &b.1), "{w:?}");
        assert_eq!(a.2, 0);
        if w == Weight::Allocated {
            assert!(b.2 > 0);
            assert_eq!(a.0, want);
        }
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn the_tag_budget_is_set_from_the_environment_and_a_bad_value_is_named() {
    let path = common::temp("long-run-daemon-env");
    daemon_log(&path, 60);
    let p = path.to_str().unwrap();
    let (code, out, err) = common::heaptag(&["report", "--format", "json", p], &[("HEAPTAG_TAG_BUDGET", "4")]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let n = v["sources"][0]["source"]["tags_folded"].as_u64().unwrap();
    assert!(n > 300, "{n}");
    let (code, out, _) = common::heaptag(&["report", p], &[("HEAPTAG_TAG_BUDGET", "4")]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!("note: {n} retired tags past the tag budget were folded")),
        "{out}"
    );
    assert!(out.contains("others stage=prove partition=2"), "{out}");
    // Every command says so, on stderr (check and the exports print no
    // source lines).
    let (code, _, err) = common::heaptag(&["export", "folded", p], &[("HEAPTAG_TAG_BUDGET", "4")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("{n} retired tags past the tag budget were folded")),
        "{err}"
    );
    let page = path.with_extension("html");
    let (code, _, err) = common::heaptag(
        &["html", "-o", page.to_str().unwrap(), p],
        &[("HEAPTAG_TAG_BUDGET", "4")],
    );
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(&format!("{n} retired tags past the tag budget were folded")));
    assert!(html.contains("others stage=prove partition=2"));
    std::fs::remove_file(&page).ok();
    let (code, out, _) = common::heaptag(&["report", "--format", "json", p], &[]);
    assert_eq!(code, 0);
    assert!(!out.contains("tags_folded"), "{out}");
    let (code, _, err) = common::heaptag(&["report", p], &[("HEAPTAG_TAG_BUDGET", "lots")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("HEAPTAG_TAG_BUDGET=\"lots\""), "{err}");
    std::fs::remove_file(&path).ok();
}
