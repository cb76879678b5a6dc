//! The `heaptag` binary: exit codes and one-line errors for bad input;
//! warnings (with byte offsets) for damaged logs that can still be read.

mod common;

use std::process::Command;

#[test]
fn help_lists_the_commands_with_examples() {
    let (code, stdout, _) = common::heaptag(&["--help"], &[]);
    assert_eq!(code, 0);
    for cmd in ["report", "peak", "dups", "sites", "timeline", "dump"] {
        assert!(stdout.contains(cmd), "{stdout}");
    }
    let (code, stdout, _) = common::heaptag(&["dups", "--help"], &[]);
    assert_eq!(code, 0);
    assert!(stdout.contains("Example: heaptag dups"), "{stdout}");
}

#[test]
fn bad_usage_exits_2() {
    assert_eq!(common::heaptag(&["report"], &[]).0, 2);
    assert_eq!(common::heaptag(&["frobnicate"], &[]).0, 2);
    assert_eq!(common::heaptag(&["report", "--format", "yaml", "x"], &[]).0, 2);
}

#[test]
fn unreadable_logs_get_one_line_and_exit_2() {
    let (code, _, stderr) = common::heaptag(&["report", "/nonexistent/run.htlog"], &[]);
    assert_eq!(code, 2);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("heaptag: /nonexistent/run.htlog: cannot read the log"),
        "{stderr}"
    );

    let not_log = common::temp("not-a-log");
    std::fs::write(&not_log, b"this is a text file, not a log\n").unwrap();
    let (code, _, stderr) = common::heaptag(&["dups", not_log.to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a heaptag log"), "{stderr}");

    let newer = common::temp("newer");
    let mut b = common::LogBuilder::new().bytes();
    b[8] = 3;
    b[10] = 3; // a version 3 writer that version 2 readers cannot read
    std::fs::write(&newer, b).unwrap();
    let (code, _, stderr) = common::heaptag(&["peak", newer.to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("version 3 is newer") && stderr.contains("upgrade heaptag"),
        "{stderr}"
    );
}

#[test]
fn truncated_and_corrupt_logs_are_read_with_warnings() {
    let full = common::temp("full");
    common::prover_log(&full);
    let bytes = std::fs::read(&full).unwrap();

    let cut = common::temp("cut");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    let (code, stdout, stderr) = common::heaptag(&["report", cut.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("truncated at byte"),
        "{stderr}"
    );
    assert!(stdout.contains("WARNING: log truncated at byte"), "{stdout}");
    assert!(stdout.contains("no end record"), "{stdout}");

    // Flip a byte inside the third frame's payload.
    let mut bad = bytes.clone();
    let frames: Vec<usize> = bad
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"HTFR")
        .map(|(i, _)| i)
        .collect();
    bad[frames[3] + 20] ^= 0x55;
    let corrupt = common::temp("corrupt");
    std::fs::write(&corrupt, &bad).unwrap();
    let (code, stdout, stderr) = common::heaptag(&["report", corrupt.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!("corrupt frame at byte {}", frames[3])),
        "the warning names the offset: {stderr}"
    );
    assert!(stdout.contains("peak RSS"), "the rest is still reported: {stdout}");
}

#[test]
fn closed_stdout_is_not_an_error() {
    let full = common::temp("pipe");
    common::prover_log(&full);
    let mut child = Command::new(env!("CARGO_BIN_EXE_heaptag"))
        .args(["dump", "--records", full.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away at once
    assert!(child.wait().unwrap().success());
}

/// A stdout whose reader is already gone: every write fails with EPIPE.
fn closed_pipe() -> std::process::Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just created and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    std::process::Stdio::from(write)
}

/// A reader that stops early (`| head`) is not an error, whatever the
/// output format: exit 0 and nothing on stderr (issue 13: the JSON renderer
/// lost the broken pipe's kind and printed an error).
#[test]
fn a_closed_pipe_is_success_in_every_format() {
    let log = common::temp("pipe");
    common::prover_log(&log);
    for args in [
        vec!["report", "--format", "json"],
        vec!["report"],
        vec!["dups", "--format", "markdown"],
        vec!["timeline", "--csv"],
        vec!["dump"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_heaptag"))
            .args(&args)
            .arg(&log)
            .stdout(closed_pipe())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
}

/// `--csv` is its own format: asking for another one too is a usage error,
/// not silently ignored.
#[test]
fn timeline_csv_and_format_conflict() {
    let log = common::temp("csv-format");
    common::prover_log(&log);
    let (code, stdout, stderr) =
        common::heaptag(&["timeline", "--csv", "--format", "json", log.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{stdout}");
    assert!(stderr.contains("'--csv' cannot be used with '--format"), "{stderr}");
}

/// A newer writer's record kinds are skipped by their length, and every
/// report says so (their content is missing from the figures).
#[test]
fn records_of_unknown_kinds_are_reported() {
    let log = common::temp("unknown-kind");
    let mut bytes = common::LogBuilder::new().bytes();
    // A frame holding one record of kind 200 (5 bytes), then End.
    let mut payload = vec![200u8, 5, 1, 2, 3, 4, 5];
    heaptag_format::Record::End { time_ns: 1, dropped: 0 }.encode(&mut heaptag_format::Deltas::default(), &mut payload);
    heaptag_format::write_frame(1, &payload, &mut bytes);
    std::fs::write(&log, bytes).unwrap();
    let (code, out, err) = common::heaptag(&["report", log.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1 records of kinds this heaptag does not know were skipped"),
        "{out}"
    );
    assert!(err.contains("upgrade heaptag"), "{err}");
}
