//! Issue 13, item 3: `HEAPTAG_LOG_OVERWRITE=1` replaces only a regular file
//! the user owns, opened without blocking, mode reset to 0600; a FIFO or
//! another user's file is refused and the program runs on without a log.
//! Each program is this test binary re-run as a child, waited for with a
//! bounded wait (a blocked child is killed and the test fails).

mod common;

use std::hint::black_box;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// Far more than a child needs; reaching it means the child blocked.
const LIMIT: Duration = Duration::from_secs(60);

/// What every child does: enough tracked blocks for a log bigger than a
/// pipe's buffer, then a line saying `main` ran, then a normal exit (where
/// the log is finished).
fn child_body() {
    for i in 0..20_000usize {
        drop(black_box(vec![i as u8; 70_000]));
    }
    println!("CHILD RAN");
}

/// Runs `test` as a child logging to `log` with overwrite on; `None` when it
/// had to be killed after `LIMIT`.
fn run_child(test: &str, log: &Path) -> Option<Output> {
    let mut child = common::child(
        test,
        &[
            ("HEAPTAG_LOG", log.to_str().unwrap()),
            ("HEAPTAG_LOG_OVERWRITE", "1"),
            ("HEAPTAG_SYMBOLS", "0"),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        if started.elapsed() > LIMIT {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asserts the child ran to a normal end and said why it had no log.
fn assert_refused(out: Option<Output>, what: &str, why: &str) {
    let out = out.unwrap_or_else(|| panic!("{what}: the program blocked"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {}\n{stderr}", out.status);
    assert!(stdout.contains("CHILD RAN"), "{what}: {stdout}");
    assert!(
        stderr.contains("heaptag: not logging") && stderr.contains(why),
        "{what}: {stderr}"
    );
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    if common::in_child() {
        return child_body();
    }
    let fifo = common::temp_log("fifo");
    // No reader: a blocking open would wait forever, before main.
    mkfifo(&fifo);
    assert_refused(
        run_child("a_fifo_is_refused_without_blocking", &fifo),
        "FIFO without a reader",
        "not a regular file",
    );
    // A reader that never reads: the writes would fill the pipe and block.
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid path; the descriptor is closed below.
    let reader = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK) };
    assert!(reader >= 0);
    let out = run_child("a_fifo_is_refused_without_blocking", &fifo);
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(reader) };
    assert_refused(out, "FIFO with a stalled reader", "not a regular file");
}

#[test]
fn another_users_file_is_refused() {
    if common::in_child() {
        return child_body();
    }
    let path = common::temp_log("not-mine");
    std::fs::write(&path, b"someone else's data").unwrap();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if me != 0 {
        eprintln!("not root: cannot give a file to another user; skipped");
        return;
    }
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid path; 65534 is `nobody`.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
    assert_refused(
        run_child("another_users_file_is_refused", &path),
        "another user's file",
        "belongs to another user",
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"someone else's data");
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), 65534);
}

#[test]
fn an_overwritten_file_comes_back_0600() {
    if common::in_child() {
        return child_body();
    }
    let path = common::temp_log("mode");
    std::fs::write(&path, vec![0xAB; 100_000]).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run_child("an_overwritten_file_comes_back_0600", &path).expect("the program blocked");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("not logging"));
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o600);
    let (recs, r) = common::read_all(&path);
    assert!(r.problems().is_empty(), "{:?}", r.problems());
    assert!(r.ended());
    assert!(recs
        .iter()
        .any(|r| matches!(r, heaptag_format::Record::Alloc { size: 70_000, .. })));
}
