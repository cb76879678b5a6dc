//! Issue 13, item 10: text read from a log (stage names, mark labels, symbol
//! names, the executable, process command lines) may carry control
//! characters and terminal escapes. No command may pass them to the
//! terminal, forge a line, or make `--format junit` invalid XML.

mod common;

use common::{LogBuilder, MIB, MS};
use heaptag_format::{Fill, FpWhen, Record};

const EVIL_STAGE: &str = "pce\x1b[2J\x1b[31m\nWARNING: all good\r\u{202e}load";

fn hostile_log() -> std::path::PathBuf {
    let path = common::temp("hostile-text");
    let mut b = LogBuilder::new();
    b.tag(0, None, None, None)
        .tag(1, Some(1), Some(EVIL_STAGE), Some(0))
        .tag(2, Some(1), Some(EVIL_STAGE), Some(1))
        .rec(Record::StackDef {
            id: 1,
            frames: vec![0x5500_0100, 0x5500_2000],
        })
        .rec(Record::Symbol {
            addr: 0x5500_1fff,
            function: "evil\x1b]0;pwned\x07::fn".into(),
            file: "src/\x1b[1mmain.rs".into(),
            line: 3,
        })
        .rec(Record::Symbol {
            addr: 0x5500_00ff,
            function: "heaptag_alloc::global::record".into(),
            file: String::new(),
            line: 0,
        })
        .rec(Record::ProcStart {
            time_ns: 0,
            pid: 42,
            ppid: 1,
            cmdline: "prover\x1b[8m --hide".into(),
        })
        .sample(0, 40 * MIB, 2 * MIB, 8 * MIB, 2 * MIB, 0)
        .flush();
    b.alloc(10 * MS, 1, 1, 0x1000_0000, 8 * MIB)
        .alloc(11 * MS, 2, 1, 0x2000_0000, 8 * MIB)
        .fp(20 * MS, 0x1000_0000, 8 * MIB, 0xabc, Fill::Mixed, FpWhen::Mark)
        .fp(20 * MS, 0x2000_0000, 8 * MIB, 0xabc, Fill::Mixed, FpWhen::Mark)
        .rec(Record::Mark {
            time_ns: 20 * MS,
            label: "phase\x1b[A\x1b[2K\u{7f}2".into(),
        })
        .sample(100 * MS, 60 * MIB, 18 * MIB, 30 * MIB, 16 * MIB, 16 * MIB)
        .free(200 * MS, 0x1000_0000, 8 * MIB)
        .free(200 * MS, 0x2000_0000, 8 * MIB)
        .rec(Record::End {
            time_ns: 300 * MS,
            dropped: 0,
        })
        .flush();
    b.write(&path);
    path
}

/// Control characters other than newline (and none inside a line that
/// came from the log), bidi controls.
fn assert_clean(what: &str, out: &str) {
    for (i, c) in out.char_indices() {
        let bad = (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c);
        assert!(!bad, "{what}: raw {c:?} at byte {i} in:\n{out}");
    }
    assert!(
        !out.lines().any(|l| l.starts_with("WARNING: all good")),
        "{what}: a stage name forged a line:\n{out}"
    );
}

#[test]
fn no_command_passes_log_text_through_raw() {
    let log = hostile_log();
    let log = log.to_str().unwrap();
    let mut ran = 0;
    for cmd in ["report", "peak", "dups", "sites", "timeline", "dump"] {
        for format in ["text", "markdown", "json"] {
            if cmd == "dump" && format != "text" {
                continue;
            }
            let args: Vec<&str> = if cmd == "dump" {
                vec![cmd, log]
            } else {
                vec![cmd, "--format", format, log]
            };
            let (code, stdout, stderr) = common::heaptag(&args, &[]);
            assert_eq!(code, 0, "heaptag {args:?}: {stderr}");
            assert_clean(&format!("heaptag {args:?} stdout"), &stdout);
            assert_clean(&format!("heaptag {args:?} stderr"), &stderr);
            ran += 1;
        }
    }
    assert_eq!(ran, 16);
    // The names are still there, escaped, so the reader can see what was sent.
    let (_, out, _) = common::heaptag(&["report", log], &[]);
    assert!(out.contains("pce\\u{1b}[2J"), "{out}");
    let (_, out, _) = common::heaptag(&["timeline", "--csv", log], &[]);
    assert_clean("timeline --csv", &out);
}

#[test]
fn junit_stays_valid_xml_with_hostile_names() {
    let log = hostile_log();
    let policy = common::temp("hostile-policy").with_extension("toml");
    std::fs::write(
        &policy,
        "[[rule]]\nname = \"no copies\"\nstage = \"pce*\"\nmax_copies = 1\n\n[[rule]]\nname = \"bell\\u0007\"\nmax_rss = \"1 MiB\"\n",
    )
    .unwrap();
    let (code, xml, stderr) = common::heaptag(
        &[
            "check",
            "--policy",
            policy.to_str().unwrap(),
            "--format",
            "junit",
            log.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 1, "{stderr}\n{xml}");
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let failures: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("failure")).collect();
    assert_eq!(failures.len(), 2, "{xml}");
    assert_clean("check --format junit", &xml);
}
