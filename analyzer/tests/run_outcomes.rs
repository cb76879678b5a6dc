//! Issue 13, `heaptag run` / `heaptag watch`: a command never starts when
//! its log cannot be written; `watch` records an exit code it cannot know
//! as -1 and records no exit at all when it is stopped while the process
//! still runs. Ordered by what the log says, never by elapsed time (the
//! bounded waits only turn a hang into a failure).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use heaptag_format::{LogReader, Record};

/// Waits for `child` to exit; kills it and fails after a generous bound.
fn wait_bounded(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("{what} did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn records(log: &Path) -> Vec<Record> {
    LogReader::open(log).map(|r| r.collect()).unwrap_or_default()
}

/// Polls the log until it holds a memory sample of `pid`.
fn wait_for_sample(log: &Path, pid: u32) {
    // A hang detector (a bounded number of polls), not a timing assertion.
    for _ in 0..3000 {
        if records(log)
            .iter()
            .any(|r| matches!(r, Record::ProcRss { pid: p, .. } if *p == pid))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no sample of {pid} in {}", log.display());
}

#[test]
fn run_does_not_start_the_command_when_the_log_cannot_be_written() {
    let dir = common::temp("run-nolog").with_extension("d");
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("the-command-ran");
    let existing = dir.join("taken.htlog");
    std::fs::write(&existing, b"someone else's file").unwrap();
    for log in [dir.join("no/such/dir/x.htlog"), existing.clone()] {
        let (code, _, stderr) = common::heaptag(
            &[
                "run",
                "--log",
                log.to_str().unwrap(),
                "--",
                "touch",
                marker.to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("cannot write the log"), "{stderr}");
        assert!(
            !marker.exists(),
            "the command ran although its log could not be written"
        );
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"someone else's file");
}

/// A `sleep 600` and a `heaptag watch` of it into a fresh log named `name`.
fn watch_a_sleeper(name: &str) -> (std::path::PathBuf, Child, u32, Child) {
    let log = common::temp(name);
    let _ = std::fs::remove_file(&log);
    let target = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = target.id();
    let watch = Command::new(env!("CARGO_BIN_EXE_heaptag"))
        .args([
            "watch",
            "--interval",
            "10ms",
            "--log",
            log.to_str().unwrap(),
            &pid.to_string(),
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (log, target, pid, watch)
}

#[test]
fn watch_records_an_unknown_exit_code_as_minus_one() {
    let (log, mut target, pid, mut watch) = watch_a_sleeper("watch-killed");
    wait_for_sample(&log, pid);
    target.kill().unwrap(); // SIGKILL: only its parent (this test) learns how it ended
    target.wait().unwrap();
    let status = wait_bounded(&mut watch, "heaptag watch");
    assert_eq!(status.code(), Some(0));
    let recs = records(&log);
    let exits: Vec<i32> = recs
        .iter()
        .filter_map(|r| match r {
            Record::ProcExit { pid: p, code, .. } if *p == pid => Some(*code),
            _ => None,
        })
        .collect();
    assert_eq!(exits, [-1], "{recs:?}");
    assert!(matches!(recs.last(), Some(Record::End { .. })));
}

#[test]
fn watch_stopped_by_sigint_records_no_exit_for_a_process_that_still_runs() {
    let (log, mut target, pid, mut watch) = watch_a_sleeper("watch-stopped");
    wait_for_sample(&log, pid);
    // SAFETY: kill(2) on our own child process.
    assert_eq!(unsafe { libc::kill(watch.id() as libc::pid_t, libc::SIGINT) }, 0);
    let status = wait_bounded(&mut watch, "heaptag watch after SIGINT");
    assert_eq!(status.code(), Some(0));
    assert!(
        target.try_wait().unwrap().is_none(),
        "the watched process was not touched"
    );
    target.kill().unwrap();
    target.wait().unwrap();
    let recs = records(&log);
    assert!(
        !recs
            .iter()
            .any(|r| matches!(r, Record::ProcExit { pid: p, .. } if *p == pid)),
        "{recs:?}"
    );
    assert!(matches!(recs.last(), Some(Record::End { .. })), "{recs:?}");
}
