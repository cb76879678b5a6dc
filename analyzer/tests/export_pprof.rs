//! `heaptag export pprof`: the profile read back by an independent reader
//! (`go tool pprof`, when the Go toolchain is here; required in CI) and
//! checked against `heaptag report --format json` of the same log.

mod common;

use std::path::Path;
use std::process::Command;

use common::{heaptag, prover_log, temp, MIB};

/// Whether `tool` runs here. A missing tool skips the check with a message,
/// or fails it when HEAPTAG_REQUIRE_TOOLS=1 (CI).
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("HEAPTAG_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "{tool} is required (HEAPTAG_REQUIRE_TOOLS=1) but does not run here"
        );
        eprintln!("skipped: {tool} not found (install golang-go to run this check)");
    }
    ok
}

/// `go tool pprof ARGS PROFILE`: its stdout.
fn pprof(args: &[&str], profile: &Path) -> String {
    let home = std::env::temp_dir().join("heaptag-go-home");
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        // pprof writes its cache and history under $HOME; never to the network.
        .env("HOME", &home)
        .env("GOFLAGS", "-mod=mod")
        .env("PPROF_TMPDIR", &home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What `go tool pprof -top -unit=B -nodefraction=0` shows (after its
/// filters): the `accounting for N` of its header (the `of M total` is the
/// whole profile's, before -tagfocus).
fn shown(top: &str) -> u64 {
    let line = top
        .lines()
        .find(|l| l.starts_with("Showing nodes accounting for"))
        .unwrap_or_else(|| panic!("no total in:\n{top}"));
    let n = line["Showing nodes accounting for".len()..].trim_start();
    let n = n.split(|c: char| c == ',' || c.is_whitespace()).next().unwrap();
    n.trim_end_matches('B').parse().unwrap_or_else(|_| panic!("{line}"))
}

/// `go tool pprof -top` of one sample type, every node shown, bytes exact.
fn top(profile: &Path, index: &str, focus: Option<&str>) -> String {
    let index = format!("-sample_index={index}");
    let mut args = vec![
        "-top",
        "-unit=B",
        "-nodefraction=0",
        "-nodecount=100000",
        index.as_str(),
    ];
    if let Some(f) = focus {
        args.extend(["-tagfocus", f]);
    }
    pprof(&args, profile)
}

fn report(log: &Path) -> serde_json::Value {
    let (code, out, err) = heaptag(&["report", "--format", "json", log.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn export(log: &Path, at: &str, name: &str) -> std::path::PathBuf {
    let out = log.with_file_name(name);
    common::export_pprof(log, at, &out);
    out
}

/// The values of `p`'s samples labelled `stage`, in the profile's order.
fn stage_values(p: &heaptag_pprof::proto::Profile, stage: &str) -> Vec<Vec<i64>> {
    let s = |i: i64| p.string_table[i as usize].as_str();
    p.sample
        .iter()
        .filter(|x| x.label.iter().any(|l| s(l.key) == "stage" && s(l.str) == stage))
        .map(|x| x.value.clone())
        .collect()
}

#[test]
fn the_profile_decodes_with_tag_labels_symbols_and_mappings() {
    let log = temp("pprof-decode");
    prover_log(&log);
    let p = heaptag_pprof::decode(&std::fs::read(export(&log, "end", "end.pb.gz")).unwrap()).unwrap();
    let s = |i: i64| p.string_table[i as usize].clone();
    let types: Vec<String> = p.sample_type.iter().map(|t| s(t.r#type)).collect();
    assert_eq!(types, ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]);
    // The PCE's two 8 MiB blocks, alive at the end, under stage=pce_load.
    let pce: Vec<_> = p
        .sample
        .iter()
        .filter(|x| x.label.iter().any(|l| s(l.key) == "stage" && s(l.str) == "pce_load"))
        .collect();
    // Two samples: the tracked blocks at their stack, and the 84 MiB of
    // small allocations the counters report (100 MiB less the tracked 16),
    // none of them sampled, under one named frame.
    assert_eq!(pce.len(), 2);
    let (pce, small): (Vec<_>, Vec<_>) = pce.into_iter().partition(|x| x.location_id.len() > 1);
    assert_eq!(pce[0].value, vec![2, 16 * MIB as i64, 2, 16 * MIB as i64]);
    assert_eq!(small[0].value, vec![1234 - 2, 84 * MIB as i64, 0, 0]);
    let job = pce[0].label.iter().find(|l| s(l.key) == "job").map(|l| s(l.str));
    assert_eq!(job.as_deref(), Some("1"));
    // Its leaf frame is heaptag's; the caller is prover::pce::load at its line.
    let loc = |id: u64| p.location.iter().find(|l| l.id == id).unwrap();
    let func = |id: u64| p.function.iter().find(|f| f.id == id).unwrap();
    let second = loc(pce[0].location_id[1]);
    assert_eq!(second.address, 0x5500_2000);
    assert_eq!(second.mapping_id, 1);
    assert_eq!(s(func(second.line[0].function_id).name), "prover::pce::load");
    assert_eq!(s(func(second.line[0].function_id).filename), "/src/prover/src/lib.rs");
    assert_eq!(second.line[0].line, 0x20);
    assert_eq!(s(p.mapping[0].filename), "/opt/prover/bin/prover");
    assert_eq!(s(p.mapping[0].build_id), "01020304");
    assert_eq!(p.time_nanos, 1_790_000_000_000_000_000 + 400_000_000);
}

#[test]
fn go_tool_pprof_agrees_with_heaptag_report() {
    if !have("go") {
        return;
    }
    let log = temp("pprof-go");
    prover_log(&log);
    let r = report(&log);
    let src = &r["sources"][0];
    let tags = src["tags"].as_array().unwrap();
    let sum = |stage: &str, field: &str| -> u64 {
        tags.iter()
            .filter(|t| t["stage"].as_str() == Some(stage))
            .map(|t| t[field].as_u64().unwrap())
            .sum()
    };
    let end = export(&log, "end", "end-go.pb.gz");
    for stage in ["pce_load", "synthesize_partition", "gpu_prove"] {
        let focus = format!("stage={stage}");
        let inuse = top(&end, "inuse_space", Some(&focus));
        assert_eq!(
            shown(&inuse),
            sum(stage, "live_end_bytes"),
            "{stage} in use at end:\n{inuse}"
        );
        let alloc = top(&end, "alloc_space", Some(&focus));
        assert_eq!(
            shown(&alloc),
            sum(stage, "allocated_bytes"),
            "{stage} allocated:\n{alloc}"
        );
        let count = top(&end, "alloc_objects", Some(&focus));
        assert_eq!(
            shown(&count),
            sum(stage, "allocations"),
            "{stage} allocations:\n{count}"
        );
    }
    // At the attributed peak, everything in use is the report's peak attributed.
    let peak = export(&log, "peak", "peak-go.pb.gz");
    let all = top(&peak, "inuse_space", None);
    assert_eq!(shown(&all), src["peak_attributed"]["bytes"].as_u64().unwrap(), "{all}");
    // Frames are named: the table builder holds the partitions' 4 MiB tables.
    assert!(all.contains("prover::build_table"), "{all}");
}

#[test]
fn bad_flags_and_logs_are_clear_errors() {
    let log = temp("pprof-bad");
    prover_log(&log);
    let l = log.to_str().unwrap();
    let (code, _, err) = heaptag(&["export", "pprof", "--at", "soon", "-o", "/dev/null", l], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("expected peak, end or a time"), "{err}");
    let missing = log.with_file_name("missing.htlog");
    let (code, _, err) = heaptag(&["export", "pprof", "-o", "/dev/null", missing.to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("missing.htlog"), "{err}");
    let bad_out = log.with_file_name("no-such-dir").join("x.pb.gz");
    let (code, _, err) = heaptag(&["export", "pprof", "-o", bad_out.to_str().unwrap(), l], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot write the output") && err.contains("x.pb.gz"),
        "{err}"
    );
    // A truncated log still exports what it holds, with the reader's warning.
    let bytes = std::fs::read(&log).unwrap();
    let cut = log.with_file_name("cut.htlog");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = log.with_file_name("cut.pb.gz");
    let (code, _, err) = heaptag(
        &[
            "export",
            "pprof",
            "--at",
            "end",
            "-o",
            out.to_str().unwrap(),
            cut.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(heaptag_pprof::decode(&std::fs::read(&out).unwrap()).is_ok());
}

#[test]
fn a_time_between_events_takes_the_state_then() {
    let log = temp("pprof-time");
    prover_log(&log);
    // At 0.2 s the PCE (16 MiB), both partitions' tables and witnesses
    // (12 MiB), the GPU buffer (3 MiB) and one sampled small block are alive.
    let p = heaptag_pprof::decode(&std::fs::read(export(&log, "0.2", "t.pb.gz")).unwrap()).unwrap();
    let inuse: i64 = p.sample.iter().map(|s| s.value[3]).sum();
    assert_eq!(inuse, (16 + 12 + 3) * MIB as i64 + 524_320);
    assert_eq!(p.duration_nanos, 200_000_000);
}

#[test]
fn without_output_file_the_profile_goes_to_a_piped_stdout() {
    let log = temp("pprof-stdout");
    prover_log(&log);
    let out = Command::new(env!("CARGO_BIN_EXE_heaptag"))
        .args(["export", "pprof", "--at", "end"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = heaptag_pprof::decode(&out.stdout).unwrap();
    let inuse: i64 = p.sample.iter().map(|s| s.value[3]).sum();
    assert_eq!(inuse, 16 * MIB as i64, "the PCE is what is left at the end");
}

#[test]
fn a_repeated_definition_is_the_same_tag_and_a_retired_id_another() {
    use heaptag_format::Record;
    let mut b = common::LogBuilder::new();
    b.tag(1, Some(1), Some("synthesize_partition"), Some(0))
        .alloc(10 * common::MS, 1, 0, 0x1000_0000, MIB)
        // The writer sends a definition again after a failed write.
        .tag(1, Some(1), Some("synthesize_partition"), Some(0))
        .alloc(20 * common::MS, 1, 0, 0x2000_0000, MIB)
        .free(30 * common::MS, 0x1000_0000, MIB)
        .free(31 * common::MS, 0x2000_0000, MIB)
        // Its counters: the two tracked blocks and 10 small ones (1000 B).
        .rec(Record::Counters {
            time_ns: 35 * common::MS,
            tags: vec![heaptag_format::TagCount {
                tag: 1,
                alloc_bytes: 2 * MIB + 1000,
                alloc_count: 12,
                tracked_live: 0,
                small_live: 0,
                peak: 0,
                external: 0,
            }],
        })
        .rec(Record::TagRetire {
            time_ns: 40 * common::MS,
            id: 1,
        })
        .tag(1, Some(2), Some("gpu_prove"), Some(0))
        .alloc(50 * common::MS, 1, 0, 0x3000_0000, 3 * MIB)
        .rec(Record::End {
            time_ns: 60 * common::MS,
            dropped: 0,
        })
        .flush();
    let log = temp("pprof-gens");
    b.write(&log);
    let p = heaptag_pprof::decode(&std::fs::read(export(&log, "end", "gens.pb.gz")).unwrap()).unwrap();
    let by_stage = |stage: &str| stage_values(&p, stage);
    // Tracked (no stack), then the small blocks no sample placed.
    assert_eq!(
        by_stage("synthesize_partition"),
        vec![vec![2, 2 * MIB as i64, 0, 0], vec![10, 1000, 0, 0]]
    );
    assert_eq!(by_stage("gpu_prove"), vec![vec![1, 3 * MIB as i64, 1, 3 * MIB as i64]]);
}

/// The tag-generation rule, as the model (and so `heaptag report`) has it:
/// an id defined again for the same value after a failed write goes on as
/// the same tag, and so do its counters; one defined for another value, or
/// after a `tag_retire`, is another tag. Checked against the report and
/// `export folded`, whose replay `export pprof` shares.
#[test]
fn a_definition_for_another_value_is_another_tag_and_a_repeat_is_not() {
    use heaptag_format::{Record, TagCount};
    let counters = |t: u64, bytes: u64, count: u64| Record::Counters {
        time_ns: t * common::MS,
        tags: vec![TagCount {
            tag: 1,
            alloc_bytes: bytes,
            alloc_count: count,
            ..TagCount::default()
        }],
    };
    let mut b = common::LogBuilder::new();
    b.tag(1, Some(1), Some("load"), None)
        .alloc(10 * common::MS, 1, 0, 0x1000_0000, MIB)
        .rec(counters(15, MIB + 100, 3))
        // Repeated after a failed write: the same tag, its counters go on.
        .tag(1, Some(1), Some("load"), None)
        .alloc(20 * common::MS, 1, 0, 0x2000_0000, MIB)
        .rec(counters(25, 2 * MIB + 300, 6))
        // Another value for id 1 without a retire: another tag from here.
        .tag(1, Some(1), Some("prove"), None)
        .alloc(30 * common::MS, 1, 0, 0x3000_0000, 4 * MIB)
        .rec(counters(35, 4 * MIB + 50, 2))
        .rec(Record::End {
            time_ns: 60 * common::MS,
            dropped: 0,
        })
        .flush();
    let log = temp("pprof-redefined");
    b.write(&log);
    let p = heaptag_pprof::decode(&std::fs::read(export(&log, "end", "redefined.pb.gz")).unwrap()).unwrap();
    let by_stage = |stage: &str| -> Vec<i64> {
        stage_values(&p, stage)
            .into_iter()
            .fold(vec![0; 4], |a, v| a.iter().zip(&v).map(|(x, y)| x + y).collect())
    };
    // By hand: load allocated 2 MiB + 300 B in 6 blocks (2 tracked, alive),
    // prove 4 MiB + 50 B in 2 (1 tracked, alive).
    let mib = MIB as i64;
    assert_eq!(by_stage("load"), vec![6, 2 * mib + 300, 2, 2 * mib]);
    assert_eq!(by_stage("prove"), vec![2, 4 * mib + 50, 1, 4 * mib]);
    // The report counts the same.
    let r = report(&log);
    for t in r["sources"][0]["tags"].as_array().unwrap() {
        let Some(stage) = t["stage"].as_str() else { continue };
        let v = by_stage(stage);
        assert_eq!(v[0], t["allocations"].as_i64().unwrap(), "{stage}");
        assert_eq!(v[1], t["allocated_bytes"].as_i64().unwrap(), "{stage}");
        assert_eq!(v[3], t["live_end_bytes"].as_i64().unwrap(), "{stage}");
    }
    // export folded: the same bytes per tag.
    let (code, folded, err) = common::heaptag(
        &["export", "folded", "--weight", "allocated", log.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(common::folded_sum(&folded, "job=1 stage=load"), 2 * MIB + 300);
    assert_eq!(common::folded_sum(&folded, "job=1 stage=prove"), 4 * MIB + 50);
}
