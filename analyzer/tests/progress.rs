//! Progress on long analyses: a bar on stderr when it is a terminal (run
//! here under a pseudo-terminal with util-linux `script`), nothing when
//! stderr is piped.

mod common;

use std::process::Command;

use common::LogBuilder;

/// A log of 300,000 allocation records: several progress ticks' worth.
fn long_log() -> std::path::PathBuf {
    let path = common::temp("progress-long");
    let mut b = LogBuilder::new();
    b.tag(1, Some(1), Some("synthesize_partition"), Some(0));
    for i in 0..150_000u64 {
        let addr = 0x1000_0000 + (i % 64) * 0x10_0000;
        b.alloc(i * 1000, 1, 0, addr, 65536);
        b.free(i * 1000 + 500, addr, 65536);
        if i % 4096 == 4095 {
            b.flush();
        }
    }
    b.rec(heaptag_format::Record::End {
        time_ns: 150_000_000,
        dropped: 0,
    });
    b.write(&path);
    path
}

#[test]
fn a_bar_on_a_terminal_nothing_when_piped() {
    let log = long_log();
    let log = log.to_str().unwrap();
    // Piped: stderr stays empty.
    for args in [
        vec!["report", log],
        vec!["export", "folded", log],
        vec!["report", "--by", "stage", log],
    ] {
        let (code, _, err) = common::heaptag(&args, &[]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(err, "", "{args:?}");
    }
    // On a terminal: the bar, with the log's name and its bytes.
    let cmd = format!("{} report {log}", env!("CARGO_BIN_EXE_heaptag"));
    let out = match Command::new("script").args(["-qec", &cmd, "/dev/null"]).output() {
        Ok(o) => o,
        Err(_) => {
            eprintln!("util-linux script is not installed: the terminal case is not run");
            return;
        }
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(tty.contains(&format!("reading {log} (replay)")), "{tty}");
    assert!(tty.contains("heaptag report"), "the report is still there: {tty}");
}
