//! Issue 16: the exit of a process whose log writer is stuck in `write(2)`
//! returns by the finish deadline, and the log says events were lost.
//!
//! The stall: heaptag opens its log as a regular file (a FIFO or a device is
//! refused), so a real user's stall is a regular file whose writes block in
//! the kernel (a hard-mounted NFS server gone, a FUSE filesystem that stopped
//! answering). The child reproduces exactly that from heaptag's side: once
//! the log is open, it puts a pipe that nobody reads behind the log's
//! descriptor (`dup2`), so the writer's next `write(2)`s fill the pipe and
//! block for good, while the path still names the regular file (as on the
//! stuck filesystem, where the file exists but writes do not return). The
//! child then returns from `main`: the exit runs `finish()`, which must give
//! up at `HEAPTAG_FINISH_TIMEOUT` and record the loss in the file by path.

mod common;

use std::hint::black_box;
use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// The log's descriptor in this process: the one `/proc/self/fd` links to it.
fn log_fd(path: &std::path::Path) -> Option<i32> {
    for e in std::fs::read_dir("/proc/self/fd").ok()? {
        let e = e.ok()?;
        if std::fs::read_link(e.path()).ok().as_deref() == Some(path) {
            return e.file_name().to_str()?.parse().ok();
        }
    }
    None
}

/// The child: logging since before `main` (HEAPTAG_LOG); stalls the writer,
/// makes sure it is stuck (the event ring overflows), and exits normally
/// (with `STOP=1`, after calling `finish()` itself and trying a new log).
fn child() {
    let log = heaptag::log_path().expect("HEAPTAG_LOG started a log");
    assert!(std::env::var_os("HEAPTAG_LOG").is_none(), "removed once read");
    let fd = log_fd(&log).expect("the log's descriptor");
    let mut pipe = [0i32; 2];
    // SAFETY: `pipe` has room for the two descriptors; dup2 replaces the
    // log's descriptor with the pipe's write end (the read end stays open
    // and is never read, so writes block once the pipe is full).
    unsafe {
        assert_eq!(libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC), 0);
        assert!(libc::dup2(pipe[1], fd) >= 0);
    }
    // Tracked blocks until the ring overflows: the writer is stuck.
    let mut stuck = false;
    for i in 0..5_000_000usize {
        drop(black_box(vec![i as u8; 70_000]));
        if i % 1000 == 999 && heaptag::snapshot().health.dropped_events > 0 {
            stuck = true;
            break;
        }
    }
    println!("STUCK {stuck}");
    // Marks while stuck: the bounded side queue drops and counts them.
    for _ in 0..20_000 {
        heaptag::mark("while stuck");
    }
    let h = heaptag::snapshot().health;
    println!("SIDE_DROPPED {}", h.side_dropped);
    if std::env::var_os("STOP").is_some() {
        // Stopping the log at run time: bounded the same way.
        let s = heaptag::finish().expect("a log was being written");
        println!("ENDED {} DROPPED {}", s.ended, s.dropped);
        // The stuck writer still owns the old log: no new one yet.
        let next = log.with_extension("next.htlog");
        match heaptag::LogConfig::new(&next).start() {
            Err(heaptag::LogError::Finishing) => println!("RESTART REFUSED"),
            other => println!("RESTART {other:?}"),
        }
        assert!(heaptag::finish().is_none(), "nothing more to finish");
    }
    // Returning from main runs finish() at exit.
}

/// Runs `test` as a stalling child with `extra` environment and checks what
/// every stalled finish must give: a child that exited by itself, the notice
/// on stderr, the count of lost events in the log. Returns the child's stdout.
fn stalled_child(test: &str, name: &str, extra: &[(&str, &str)]) -> String {
    let log = common::temp_log(name);
    let mut env = vec![
        ("HEAPTAG_LOG", log.to_str().unwrap()),
        ("HEAPTAG_FINISH_TIMEOUT", "1s"),
        ("HEAPTAG_INTERVAL", "5ms"),
        ("HEAPTAG_BUFFER", "4096"),
    ];
    env.extend_from_slice(extra);
    let mut c = common::child(test, &env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A hang detector, not a timing assertion: a generous number of polls
    // (the child needs about its 1 s deadline); a child still running after
    // them is hung at exit.
    let mut status = None;
    for _ in 0..6_000 {
        if let Some(s) = c.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if status.is_none() {
        c.kill().unwrap();
        c.wait().unwrap();
        panic!("the child hung at exit with a stuck log write");
    }
    let (mut out, mut err) = (String::new(), String::new());
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.unwrap().success(), "{out}\n{err}");
    assert!(out.contains("STUCK true"), "the writer got stuck: {out}");
    let side: u64 = out
        .split("SIDE_DROPPED ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(side > 0, "marks beyond the side queue's bound were dropped and counted");
    assert!(err.contains("the log was not finished within 1s"), "{err}");
    assert!(err.contains("queued events not written ("), "{err}");
    assert!(err.contains("dropped in all), and no end record"), "{err}");
    assert!(!err.contains("could not be written into the log"), "{err}");

    // The file: what was written before the stall, and the reserve frame
    // rewritten by path with the count of events lost.
    let (recs, r) = common::read_all(&log);
    assert!(!r.ended(), "no end record: the writer never got that far");
    let lost = recs
        .iter()
        .filter_map(|r| match r {
            Record::Dropped { events, .. } => Some(*events),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    assert!(lost > 0, "the log says events were lost");
    assert!(lost >= side, "the count includes the dropped marks: {lost} < {side}");
    out
}

#[test]
fn exit_with_a_stuck_log_write_returns_and_says_what_was_lost() {
    if common::in_child() {
        child();
        return;
    }
    stalled_child(
        "exit_with_a_stuck_log_write_returns_and_says_what_was_lost",
        "stuck",
        &[],
    );
}

#[test]
fn stopping_a_stuck_log_at_run_time_returns_too() {
    if common::in_child() {
        child();
        return;
    }
    let out = stalled_child(
        "stopping_a_stuck_log_at_run_time_returns_too",
        "stuck-stop",
        &[("STOP", "1")],
    );
    let dropped: u64 = out
        .split("ENDED false DROPPED ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("finish() said the log ended, or nothing: {out}"));
    assert!(dropped > 0, "{out}");
    assert!(out.contains("RESTART REFUSED"), "{out}");
}
