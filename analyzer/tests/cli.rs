//! The `heaptag` binary's surface: usage errors and not-yet-available commands
//! get a clear line and their documented exit code.

use std::process::Command;

fn heaptag(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_heaptag")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_lists_the_commands() {
    let (code, stdout, _) = heaptag(&["--help"]);
    assert_eq!(code, 0);
    for cmd in ["report", "peak", "dups"] {
        assert!(stdout.contains(cmd), "{stdout}");
    }
}

#[test]
fn report_says_it_is_not_available_yet_with_exit_3() {
    let (code, _, stderr) = heaptag(&["report", "run.htlog"]);
    assert_eq!(code, 3);
    assert!(
        stderr.starts_with("heaptag: `heaptag report` needs the event log"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

#[test]
fn bad_usage_exits_2() {
    let (code, _, stderr) = heaptag(&["report"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, _) = heaptag(&["frobnicate"]);
    assert_eq!(code, 2);
}
