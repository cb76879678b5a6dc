//! Issue 13, items 4-8: crafted hostile logs (analyzer/examples/hostile)
//! run through every command in a child with a memory limit and a kill
//! timeout (a hang detector, never a timing assertion); damaged frame
//! lengths resync; deleted, repeated and moved frames are damage in every
//! output; wrapping values saturate and say so; offline symbolization
//! reads only regular files.

#[path = "../examples/hostile/gen.rs"]
mod gen;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use heaptag_format::{LogReader, Module, ProblemKind, Record};

/// Memory a child may map: generous, but far below what the crafted logs
/// made the analyzer take before (gigabytes).
const CHILD_AS: u64 = 2 << 30;
/// Hang detector: a child still running after this is killed and fails the
/// test (the commands take well under a second here).
const KILL_AFTER: Duration = Duration::from_secs(120);

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("heaptag-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `heaptag ARGS` with an address-space limit; kills it after
/// `KILL_AFTER`. Returns (exit code, stdout, stderr).
fn heaptag(args: &[&str]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_heaptag"));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child
    // between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: CHILD_AS,
                rlim_max: CHILD_AS,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = Vec::new();
        out.read_to_end(&mut s).ok();
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = Vec::new();
        err.read_to_end(&mut s).ok();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > KILL_AFTER {
            child.kill().ok();
            child.wait().ok();
            panic!("heaptag {} hung (killed after {KILL_AFTER:?})", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = String::from_utf8_lossy(&o.join().unwrap()).into_owned();
    let err = String::from_utf8_lossy(&e.join().unwrap()).into_owned();
    (status.code().unwrap_or(-1), out, err)
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir().join(format!("{name}.htlog"));
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Every command on `log`: each must finish, within the memory limit,
/// without a panic.
fn every_command(log: &Path) -> Vec<String> {
    // One policy file per log: tests run in parallel, and a file rewritten
    // while another test's `check` reads it would be read half written.
    let stem = log
        .file_stem()
        .map_or_else(|| "log".into(), |s| s.to_string_lossy().into_owned());
    let policy = dir().join(format!("policy-{stem}.toml"));
    std::fs::write(
        &policy,
        "[[rule]]\nname = \"all\"\nmax_peak = \"1 GiB\"\nmax_copies = 1\nmax_rss = \"64 GiB\"\n",
    )
    .unwrap();
    let log = log.to_str().unwrap();
    let policy = policy.to_str().unwrap();
    let runs: Vec<Vec<&str>> = vec![
        vec!["report", log],
        vec!["report", "--format", "json", log],
        vec!["report", "--format", "markdown", log],
        vec!["peak", log],
        vec!["dups", log],
        vec!["dups", "--format", "json", log],
        vec!["sites", log],
        vec!["timeline", log],
        vec!["timeline", "--csv", "--by", "tag", log],
        vec!["check", "--policy", policy, log],
        vec!["dump", log],
        // Issue 18: exports and report for big runs (`diff` is `report`,
        // `sites` and `dups` of two logs, each run here already).
        vec!["export", "folded", log],
        vec!["export", "folded", "--weight", "allocated", log],
        vec!["export", "perfetto", log],
        vec![
            "report",
            "--by",
            "partition",
            "--filter",
            "stage=*",
            "--sort",
            "peak",
            "--top",
            "5",
            log,
        ],
    ];
    let mut outs = Vec::new();
    for args in runs {
        let (code, out, err) = heaptag(&args);
        assert!(
            code == 0 || (code == 1 && args[0] == "check"),
            "heaptag {} exited {code}:\n{err}",
            args.join(" ")
        );
        assert!(!err.contains("panicked"), "heaptag {}: {err}", args.join(" "));
        outs.push(out + &err);
    }
    outs
}

#[test]
fn issue_13_every_command_finishes_on_every_crafted_log_in_bounded_memory() {
    for (name, bytes) in gen::all() {
        let p = write(name, &bytes);
        every_command(&p);
    }
}

#[test]
fn issue_13_resync_over_nested_fake_sync_markers_is_linear() {
    for n in [1_000usize, 100_000] {
        let bytes = gen::nested_sync(n);
        let mut r = LogReader::new(&bytes[..]).unwrap();
        let got: Vec<Record> = r.by_ref().collect();
        assert_eq!(got.len(), 2, "the real frame after the fakes is read");
        assert!(r.ended());
        assert_eq!(r.problems().len(), 1, "{:?}", r.problems());
        assert_eq!(r.problems()[0].kind, ProblemKind::CorruptFrame);
        // Linear: every byte looked at a small constant number of times.
        let len = bytes.len() as u64;
        assert!(
            r.bytes_examined() <= 3 * len,
            "{} bytes examined for a {len}-byte file",
            r.bytes_examined()
        );
    }
}

/// A log of `frames` frames, each allocating and freeing under its own tag.
fn multi_frame(frames: u32) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut out = gen::header(Vec::new());
    let mut enc = heaptag_format::FrameEncoder::new(Vec::new(), 0);
    let mut spans = Vec::new();
    for f in 0..frames {
        let t = u64::from(f) * 1_000_000;
        let recs = [
            Record::TagDef {
                id: f + 1,
                job: Some(u64::from(f)),
                stage: Some("stage".into()),
                partition: Some(f),
            },
            Record::Alloc {
                time_ns: t,
                thread: 1,
                tag: f + 1,
                stack: 0,
                addr: 0x1000_0000 + u64::from(f) * 0x100_0000,
                size: (u64::from(f) + 1) << 20,
            },
            Record::Rss {
                time_ns: t + 10,
                vm_rss: 100 << 20,
                vm_hwm: 100 << 20,
                rss_anon: 0,
                rss_file: 0,
            },
        ];
        for r in &recs {
            enc.push(r.borrowed());
        }
        if f + 1 == frames {
            enc.push(
                Record::End {
                    time_ns: t + 20,
                    dropped: 0,
                }
                .borrowed(),
            );
        }
        let start = out.len();
        enc.finish(&mut out);
        spans.push((start, out.len()));
    }
    (out, spans)
}

fn without_warnings(s: &str) -> String {
    s.lines()
        .filter(|l| !l.contains("WARNING") && !l.contains("warning:") && !l.contains("htlog"))
        .filter(|l| !l.chars().all(|c| c == '-') || l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn issue_13_a_damaged_frame_length_skips_only_that_frame() {
    let (good, spans) = multi_frame(8);
    let (s, e) = spans[3];
    let mut removed = good[..s].to_vec();
    removed.extend_from_slice(&good[e..]);
    let removed = write("removed", &removed);
    for bit in [0u8, 7, 20, 30] {
        let mut bad = good.clone();
        bad[s + 4 + usize::from(bit / 8)] ^= 1 << (bit % 8);
        let mut r = LogReader::new(&bad[..]).unwrap();
        let n = r.by_ref().count();
        assert_eq!(n, 7 * 3 + 1, "bit {bit}: every later frame is read");
        assert_eq!(r.problems().len(), 1, "{:?}", r.problems());
        assert_eq!(r.problems()[0].kind, ProblemKind::CorruptFrame, "not a truncation");
        assert_eq!(r.problems()[0].offset, s as u64);
        let bad = write(&format!("badlen{bit}"), &bad);
        for cmd in ["report", "dups", "timeline"] {
            let (_, a, _) = heaptag(&[cmd, bad.to_str().unwrap()]);
            let (_, b, _) = heaptag(&[cmd, removed.to_str().unwrap()]);
            assert_eq!(without_warnings(&a), without_warnings(&b), "{cmd}, bit {bit}");
        }
    }
}

#[test]
fn issue_13_a_length_past_the_end_with_nothing_after_is_a_truncation() {
    let (mut good, spans) = multi_frame(3);
    let (s, _) = spans[2];
    good[s + 7] = 0x00; // length now huge but <= 16 MiB? make it just past EOF
    good[s + 4..s + 8].copy_from_slice(&(1u32 << 20).to_le_bytes());
    let mut r = LogReader::new(&good[..]).unwrap();
    assert_eq!(r.by_ref().count(), 6);
    assert_eq!(r.problems().len(), 1);
    assert_eq!(r.problems()[0].kind, ProblemKind::Truncated);
}

#[test]
fn issue_13_deleted_repeated_and_moved_frames_are_damage_in_every_output() {
    let (good, spans) = multi_frame(6);
    let frame = |i: usize| &good[spans[i].0..spans[i].1];
    let head = &good[..spans[0].0];
    let mut deleted = head.to_vec();
    let mut repeated = head.to_vec();
    let mut swapped = head.to_vec();
    for i in 0..6 {
        if i != 2 {
            deleted.extend_from_slice(frame(i));
        }
        repeated.extend_from_slice(frame(i));
        if i == 2 {
            repeated.extend_from_slice(frame(i));
        }
    }
    for i in [0, 1, 3, 2, 4, 5] {
        swapped.extend_from_slice(frame(i));
    }
    let deleted_at = spans[3].0 - (spans[2].1 - spans[2].0);
    let cases = [
        (
            "deleted",
            deleted,
            format!("frame 2 is missing before byte {deleted_at}"),
        ),
        (
            "repeated",
            repeated,
            format!(
                "frame 2 at byte {} was already passed (the reader is at frame 2)",
                spans[3].0
            ),
        ),
        (
            "swapped",
            swapped,
            "was already passed (the reader is at frame 3): a repeated or moved frame".to_string(),
        ),
    ];
    for (name, bytes, want) in cases {
        let p = write(name, &bytes);
        let outs = every_command(&p);
        // report (text, json, markdown), peak, dups (text, json), sites,
        // timeline, check, dump: every one shows the damage with its offset.
        for (i, o) in outs.iter().enumerate() {
            assert!(o.contains(&want), "{name}, output {i}: want {want:?} in\n{o}");
        }
    }
}

#[test]
fn issue_13_wrapping_values_saturate_and_undefined_ids_are_named() {
    let p = write("overflow", &gen::overflow());
    let (code, out, err) = heaptag(&["report", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("values overflowed from the record at byte"), "{out}");
    assert!(out.contains("figures saturated"), "{out}");
    assert!(out.contains("tag 4194305 (undefined)"), "{out}");
    assert!(!out.contains("-2 B"), "{out}");
    assert!(out.contains("come after the end record"), "{out}");
    // The record after End (1 GiB) is not counted.
    assert!(!out.contains("1.0 GiB") && !out.contains("1 GiB"), "{out}");
    let (_, json, _) = heaptag(&["report", "--format", "json", p.to_str().unwrap()]);
    assert!(
        json.contains(&u64::MAX.to_string()),
        "live at end saturated, not wrapped:\n{json}"
    );
    assert!(json.contains(&i64::MAX.to_string()), "external saturated:\n{json}");
}

#[test]
fn issue_13_offline_symbols_come_only_from_regular_files() {
    let fifo = dir().join("fifo");
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let modules = vec![
        Module {
            start: 0x1000,
            end: 0x2000,
            file_offset: 0,
            path: "/dev/zero".into(),
            build_id: Vec::new(),
        },
        Module {
            start: 0x3000,
            end: 0x4000,
            file_offset: 0,
            path: fifo.to_str().unwrap().into(),
            build_id: Vec::new(),
        },
    ];
    let recs = vec![
        Record::StackDef {
            id: 1,
            frames: vec![0x1100, 0x3100],
        },
        Record::Alloc {
            time_ns: 1,
            thread: 1,
            tag: 0,
            stack: 1,
            addr: 0x10_0000,
            size: 1 << 20,
        },
    ];
    let p = write("devzero", &gen::log_with(gen::header(modules), recs));
    for cmd in ["sites", "peak", "dups"] {
        let (code, out, err) = heaptag(&[cmd, p.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("0x1100") || out.contains("(no stack)") || !out.is_empty());
    }
    // The reason each is skipped (kept in the model's symbol notes).
    let why = |p: &str| heaptag_analyzer::symbolize::read_object(p).unwrap_err();
    assert!(why("/dev/zero").contains("not a regular file"));
    assert!(why(fifo.to_str().unwrap()).contains("not a regular file"));
    assert!(why("/nonexistent/x").contains("not readable"));
    let mut m = heaptag_analyzer::Model::load(&p, false, false).unwrap();
    heaptag_analyzer::symbolize::symbolize(&mut m);
    assert_eq!(m.symbol_notes.len(), 2, "{:?}", m.symbol_notes);
    assert!(
        m.symbol_notes.iter().all(|n| n.contains("not a regular file")),
        "{:?}",
        m.symbol_notes
    );
}
