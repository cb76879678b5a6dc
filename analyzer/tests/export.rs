//! `heaptag export folded` and `heaptag export perfetto`, checked against
//! their formats' specs, a real consumer (inferno renders the folded
//! stacks), hand-computed figures and `heaptag report`'s.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/v1")
        .join(name)
        .display()
        .to_string()
}

fn run_ok(args: &[&str]) -> String {
    let (code, out, err) = common::heaptag(args, &[]);
    assert_eq!(code, 0, "heaptag {args:?}: {err}");
    out
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&run_ok(args)).unwrap()
}

/// A folded line checked against the format (Brendan Gregg's
/// stackcollapse output, as inferno and flamegraph.pl read it): frames
/// separated by `;`, none empty, a space, then a positive integer.
fn parse_line(line: &str) -> (Vec<String>, u64) {
    let (frames, weight) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no weight: {line:?}"));
    assert!(
        !weight.is_empty() && weight.bytes().all(|b| b.is_ascii_digit()),
        "weight not an integer: {line:?}"
    );
    let weight: u64 = weight.parse().unwrap();
    assert!(weight > 0, "zero weight: {line:?}");
    assert!(!frames.is_empty(), "{line:?}");
    let frames: Vec<String> = frames.split(';').map(str::to_owned).collect();
    for f in &frames {
        assert!(!f.is_empty(), "empty frame in {line:?}");
        assert_eq!(f.trim(), f, "blank-padded frame in {line:?}");
        assert!(!f.contains('\n'), "{line:?}");
    }
    (frames, weight)
}

fn folded(args: &[&str]) -> Vec<(Vec<String>, u64)> {
    let out = run_ok(args);
    assert!(out.ends_with('\n') || out.is_empty());
    out.lines().map(parse_line).collect()
}

/// Per root frame (tag): the sum of its lines.
fn per_tag(lines: &[(Vec<String>, u64)]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (f, w) in lines {
        *m.entry(f[0].clone()).or_default() += w;
    }
    m
}

#[test]
fn folded_at_the_peak_is_the_hand_computed_live_set() {
    let log = common::temp("export-folded-synthetic");
    common::prover_log(&log);
    let log = log.to_str().unwrap();
    let lines = folded(&["export", "folded", log]);
    let got: Vec<String> = lines.iter().map(|(f, w)| format!("{} {w}", f.join(";"))).collect();
    // By hand from common::prover_log: at 126 ms (the last allocation, before
    // any free) the PCE (2 x 8 MiB), two 4 MiB tables, two 2 MiB witnesses,
    // a 3 MiB buffer, and one sampled small block of weight 524 320 (tag 2,
    // stack 3). heaptag's own recording frame (0x5500_0100) is left out;
    // frames run from the outermost (run_partition) to the allocating one.
    let mib = 1u64 << 20;
    let root = "prover::run_partition (lib.rs:16)";
    let want = vec![
        format!(
            "job=1 stage=gpu_prove partition=0;{root};prover::witness (lib.rs:64) {}",
            3 * mib
        ),
        format!("job=1 stage=pce_load;{root};prover::pce::load (lib.rs:32) {}", 16 * mib),
        format!(
            "job=1 stage=synthesize_partition partition=0;{root};prover::build_table (lib.rs:48) {}",
            4 * mib
        ),
        format!(
            "job=1 stage=synthesize_partition partition=0;{root};prover::witness (lib.rs:64) {}",
            2 * mib + 524_320
        ),
        format!(
            "job=1 stage=synthesize_partition partition=1;{root};prover::build_table (lib.rs:48) {}",
            4 * mib
        ),
        format!(
            "job=1 stage=synthesize_partition partition=1;{root};prover::witness (lib.rs:64) {}",
            2 * mib
        ),
    ];
    assert_eq!(got, want);
    let total: u64 = lines.iter().map(|l| l.1).sum();
    let report = json(&["report", "--format", "json", log]);
    assert_eq!(
        total,
        report["sources"][0]["peak_attributed"]["bytes"].as_u64().unwrap()
    );
    assert_eq!(total, 31 * mib + 524_320);

    // The allocator frames on request; functions alone without lines.
    let with = folded(&["export", "folded", "--allocator-frames", "--no-lines", log]);
    assert!(with
        .iter()
        .all(|(f, _)| f.last().map(String::as_str) == Some("heaptag_alloc::global::record")));
    assert!(with.iter().all(|(f, _)| f[1] == "prover::run_partition"));

    // At a time: 215 ms is after partition 1's table was freed (210 ms) and
    // before its witness was (220 ms).
    let at = per_tag(&folded(&["export", "folded", "--at", "215ms", log]));
    assert_eq!(at["job=1 stage=synthesize_partition partition=1"], 2 * mib);
    assert_eq!(at, per_tag(&folded(&["export", "folded", "--at", "0.215", log])));
    // At the end only the PCE is left.
    let end = folded(&["export", "folded", "--at", "end", log]);
    assert_eq!(end.len(), 1);
    assert_eq!(end[0].1, 16 * mib);

    // Allocated: tag 1's counters say 100 MiB (all sizes); its 16 MiB of
    // tracked blocks are placed, the other 84 MiB were never sampled.
    let alloc = folded(&["export", "folded", "--weight", "allocated", log]);
    let unsampled: Vec<&(Vec<String>, u64)> = alloc
        .iter()
        .filter(|(f, _)| f.last().unwrap() == "[small blocks, none sampled]")
        .collect();
    assert_eq!(unsampled.len(), 1);
    assert_eq!(unsampled[0].0[0], "job=1 stage=pce_load");
    assert_eq!(unsampled[0].1, 84 * mib);
    let sums = per_tag(&alloc);
    for t in report["sources"][0]["tags"].as_array().unwrap() {
        let name = t["tag"].as_str().unwrap();
        assert_eq!(
            sums.get(name).copied().unwrap_or(0),
            t["allocated_bytes"].as_u64().unwrap(),
            "{name}"
        );
    }
}

#[test]
fn folded_sums_equal_the_report_on_a_real_log() {
    for name in ["shared.htlog", "per_partition.htlog", "cloned.htlog"] {
        let log = fixture(name);
        let report = json(&["report", "--format", "json", &log]);
        let s = &report["sources"][0];
        let peak = folded(&["export", "folded", &log]);
        assert_eq!(
            peak.iter().map(|l| l.1).sum::<u64>(),
            s["peak_attributed"]["bytes"].as_u64().unwrap(),
            "{name}"
        );
        let end = per_tag(&folded(&["export", "folded", "--at", "end", &log]));
        let alloc = per_tag(&folded(&["export", "folded", "--weight", "allocated", &log]));
        for t in s["tags"].as_array().unwrap() {
            let tag = t["tag"].as_str().unwrap();
            assert_eq!(
                end.get(tag).copied().unwrap_or(0),
                t["live_end_bytes"].as_u64().unwrap(),
                "{name} {tag} live at end"
            );
            assert_eq!(
                alloc.get(tag).copied().unwrap_or(0),
                t["allocated_bytes"].as_u64().unwrap(),
                "{name} {tag} allocated"
            );
        }
        // Symbolized from the log's own symbols: the program's functions
        // are there, and no frame is heaptag's.
        assert!(peak
            .iter()
            .any(|(f, _)| f.iter().any(|x| x.starts_with("pce_pipeline::"))));
        assert!(peak
            .iter()
            .all(|(f, _)| f.iter().all(|x| !x.starts_with("heaptag_alloc::"))));
    }
}

#[test]
fn folded_output_renders_with_inferno() {
    let log = fixture("per_partition.htlog");
    let text = run_ok(&["export", "folded", "--weight", "allocated", &log]);
    let lines: Vec<(Vec<String>, u64)> = text.lines().map(parse_line).collect();
    let mut opts = inferno::flamegraph::Options::default();
    opts.count_name = "bytes".into();
    // Every box drawn, however narrow (by default inferno elides thin ones).
    opts.min_width = 0.0;
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, text.lines(), &mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    let doc = roxmltree::Document::parse_with_options(
        &svg,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap();
    let titles: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text())
        .collect();
    let total: u64 = lines.iter().map(|l| l.1).sum();
    let with_commas = |v: u64| {
        let s = v.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    assert!(
        titles.contains(&format!("all ({} bytes, 100%)", with_commas(total)).as_str()),
        "{titles:?}"
    );
    // Every tag is a box of its own width (its bytes) under `all`.
    for (tag, bytes) in per_tag(&lines) {
        let prefix = format!("{tag} ({} bytes, ", with_commas(bytes));
        assert!(titles.iter().any(|t| t.starts_with(&prefix)), "{prefix} in {titles:?}");
    }
}

#[test]
fn folded_writes_a_file_and_rejects_bad_options() {
    let log = fixture("shared.htlog");
    let out = common::temp("export-folded-out").with_extension("folded");
    let said = run_ok(&["export", "folded", "-o", out.to_str().unwrap(), &log]);
    assert!(said.starts_with("heaptag: 6 folded stacks"), "{said}");
    let file = std::fs::read_to_string(&out).unwrap();
    assert_eq!(file, run_ok(&["export", "folded", &log]));

    let (code, _, err) = common::heaptag(&["export", "folded", "--at", "soon", &log], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("expected peak, end or a time"), "{err}");
    let (code, _, err) = common::heaptag(&["export", "folded", "--weight", "allocated", "--at", "end", &log], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("--at picks a moment for --weight live"), "{err}");
    let (code, _, err) = common::heaptag(&["export", "folded", "-o", "/nonexistent/dir/x.folded", &log], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/nonexistent/dir/x.folded: cannot write the export"),
        "{err}"
    );
    let (code, _, err) = common::heaptag(&["export", "folded", "/nonexistent.htlog"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read the log"), "{err}");
}

/// Checks a trace against the Trace Event Format: required fields per
/// phase, known phases, timestamps never going back on any track.
fn check_trace(t: &Value) -> &Vec<Value> {
    let events = t["traceEvents"].as_array().expect("traceEvents array");
    assert_eq!(t["displayTimeUnit"], "ms");
    let mut last_ts: BTreeMap<(String, u64, String), f64> = BTreeMap::new();
    let mut seen_data = false;
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["name"].is_string(), "{e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
        let ts = e["ts"].as_f64().expect("ts");
        assert!(ts >= 0.0, "{e}");
        match ph {
            "M" => {
                assert!(!seen_data, "metadata after data: {e}");
                assert!(["process_name", "thread_name"].contains(&e["name"].as_str().unwrap()));
                assert!(e["args"]["name"].is_string(), "{e}");
            }
            "C" => {
                let args = e["args"].as_object().expect("counter args");
                assert_eq!(args.len(), 1, "{e}");
                assert!(args["bytes"].is_u64(), "{e}");
            }
            "i" => assert_eq!(e["s"], "p", "{e}"),
            "X" => assert!(e["dur"].as_f64().expect("dur") >= 0.0, "{e}"),
            other => panic!("phase {other} not expected: {e}"),
        }
        if ph != "M" {
            seen_data = true;
            // A counter's track is its name; a slice's its thread.
            let track = match ph {
                "C" => (ph.to_string(), 0, e["name"].as_str().unwrap().to_string()),
                _ => (ph.to_string(), e["tid"].as_u64().unwrap(), String::new()),
            };
            let prev = last_ts.insert(track.clone(), ts);
            assert!(prev.is_none_or(|p| p <= ts), "{track:?} goes back in time at {e}");
        }
    }
    events
}

#[test]
fn perfetto_trace_follows_the_format_and_the_log() {
    for name in ["per_partition.htlog", "shared.htlog"] {
        let log = fixture(name);
        let t = json(&["export", "perfetto", &log]);
        let events = check_trace(&t);
        let report = json(&["report", "--format", "json", &log]);
        let s = &report["sources"][0];
        let dups = json(&["dups", "--format", "json", &log]);
        let groups = dups["sources"][0]["duplicated"].as_array().unwrap();

        // One counter track per stage that held memory, plus VmRSS and VmHWM.
        let stages: BTreeSet<String> = s["tags"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["peak_live"]["bytes"].as_u64().unwrap() > 0)
            .map(|t| t["stage"].as_str().unwrap_or("(no stage)").to_string())
            .collect();
        let counters: BTreeSet<&str> = events
            .iter()
            .filter(|e| e["ph"] == "C")
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        let want: BTreeSet<String> = stages
            .iter()
            .map(|s| format!("live {s}"))
            .chain(["VmRSS".to_string(), "VmHWM".to_string()])
            .collect();
        assert_eq!(counters, want.iter().map(String::as_str).collect(), "{name}");

        // Marks as instants, duplicate windows as slices, as many as the log has.
        let instants: Vec<(&str, f64)> = events
            .iter()
            .filter(|e| e["ph"] == "i")
            .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_f64().unwrap()))
            .collect();
        let marks = s["marks"].as_array().unwrap();
        assert_eq!(instants.len(), marks.len(), "{name}");
        for (m, (label, ts)) in marks.iter().zip(&instants) {
            assert_eq!(m[1].as_str().unwrap(), *label);
            assert!(
                (m[0].as_f64().unwrap() * 1e6 - ts).abs() <= 500.0,
                "mark time {m} vs {ts}"
            );
        }
        let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), groups.len(), "{name}");
        for g in groups {
            let from_us = g["from_s"].as_f64().unwrap() * 1e6;
            assert!(
                slices.iter().any(|x| x["args"]["hash"] == g["hash"]
                    && x["args"]["copies"] == g["copies"]
                    && (x["ts"].as_f64().unwrap() - from_us).abs() < 1.0),
                "{name}: no slice for {g}"
            );
        }
        if name == "per_partition.htlog" {
            assert!(!groups.is_empty(), "the per-partition PCE is duplicated");
        }

        // The counters' figures: VmHWM's highest is the report's peak RSS,
        // and each stage's highest live bytes is `heaptag timeline`'s.
        let max_of = |n: &str| {
            events
                .iter()
                .filter(|e| e["ph"] == "C" && e["name"] == n)
                .map(|e| e["args"]["bytes"].as_u64().unwrap())
                .max()
                .unwrap()
        };
        assert_eq!(max_of("VmHWM"), s["peak_rss"]["bytes"].as_u64().unwrap(), "{name}");
        let tl = json(&["timeline", "--format", "json", &log]);
        for series in tl["sources"][0]["series"].as_array().unwrap() {
            let key = series["key"].as_str().unwrap();
            // Exact here, at the samples there: never lower.
            assert!(max_of(&format!("live {key}")) >= series["peak_bytes"].as_u64().unwrap());
        }
    }
}

#[test]
fn perfetto_by_tag_and_to_a_file() {
    let log = fixture("shared.htlog");
    let t = json(&["export", "perfetto", "--by", "tag", &log]);
    let events = check_trace(&t);
    let report = json(&["report", "--format", "json", &log]);
    let tags: BTreeSet<String> = report["sources"][0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["peak_live"]["bytes"].as_u64().unwrap() > 0)
        .map(|t| format!("live {}", t["tag"].as_str().unwrap()))
        .collect();
    let live: BTreeSet<String> = events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"].as_str().unwrap().starts_with("live "))
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(live, tags);

    let out = common::temp("export-trace").with_extension("json");
    let said = run_ok(&["export", "perfetto", "-o", out.to_str().unwrap(), &log]);
    assert!(said.contains("a Perfetto trace of"), "{said}");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    check_trace(&file);
}

#[test]
fn perfetto_counters_are_exact_between_samples() {
    let log = common::temp("export-trace-synthetic");
    common::prover_log(&log);
    let t = json(&["export", "perfetto", log.to_str().unwrap()]);
    let events = check_trace(&t);
    let mib = 1u64 << 20;
    let max_of = |n: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == n)
            .map(|e| e["args"]["bytes"].as_u64().unwrap())
            .max()
            .unwrap()
    };
    // By hand from common::prover_log: both partitions' tables and
    // witnesses and the sampled block are alive from 126 ms to 210 ms,
    // between the 100 ms and 200 ms samples.
    assert_eq!(max_of("live synthesize_partition"), 12 * mib + 524_320);
    assert_eq!(max_of("live pce_load"), 16 * mib);
    assert_eq!(max_of("live gpu_prove"), 3 * mib);
    assert_eq!(max_of("VmHWM"), 120 * mib);
    let at = |n: &str, ts: f64| {
        events
            .iter()
            .rfind(|e| e["ph"] == "C" && e["name"] == n && e["ts"].as_f64().unwrap() <= ts)
            .map(|e| e["args"]["bytes"].as_u64().unwrap())
    };
    assert_eq!(at("live synthesize_partition", 126_000.0), Some(12 * mib + 524_320));
    assert_eq!(at("live synthesize_partition", 215_000.0), Some(8 * mib + 524_320));
    assert_eq!(at("live synthesize_partition", 400_000.0), Some(0));
    let marks: Vec<&Value> = events.iter().filter(|e| e["ph"] == "i").collect();
    assert_eq!(marks.len(), 1);
    assert_eq!(marks[0]["name"], "partitions built");
    assert_eq!(marks[0]["ts"].as_f64().unwrap(), 150_000.0);
    // The two identical 4 MiB tables: from the second's allocation (115 ms)
    // to the mark (150 ms), the last moment the first one is known to hold
    // that content (it is freed at 310 ms without a fingerprint).
    let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), 1, "{slices:?}");
    assert_eq!(slices[0]["ts"].as_f64().unwrap(), 115_000.0);
    assert_eq!(slices[0]["dur"].as_f64().unwrap(), 35_000.0);
    assert_eq!(slices[0]["args"]["copies"], 2);
    assert_eq!(slices[0]["args"]["wasted_bytes"].as_u64().unwrap(), 4 * mib);
}
