//! Issue 13, item 2: a log that reaches `RLIMIT_FSIZE` (`ulimit -f`) never
//! kills the program with SIGXFSZ: the writes fail with EFBIG, the events
//! are counted as dropped, and the program's signal mask and pending signals
//! are what they would be without heaptag. The program is this test binary
//! re-run as a child with the limit set before exec.

mod common;

use std::hint::black_box;
use std::os::unix::process::{CommandExt, ExitStatusExt};

use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// The file size limit of the child, in bytes.
const LIMIT: u64 = 128 << 10;

/// Whether `sig` is in the calling thread's mask, and whether it is pending.
fn blocked_and_pending(sig: libc::c_int) -> (bool, bool) {
    // SAFETY: plain data, filled in by the calls below.
    let (mut mask, mut pending): (libc::sigset_t, libc::sigset_t) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: valid pointers; a null new mask only reads the current one.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask);
        libc::sigpending(&mut pending);
        (
            libc::sigismember(&mask, sig) == 1,
            libc::sigismember(&pending, sig) == 1,
        )
    }
}

#[test]
fn a_log_past_the_file_size_limit_drops_events_instead_of_killing_the_program() {
    if common::in_child() {
        // The program's own disposition: the default (terminate).
        // SAFETY: reads the disposition without changing it.
        let disposition = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGXFSZ, std::ptr::null(), &mut old);
            old.sa_sigaction
        };
        assert_eq!(disposition, libc::SIG_DFL);
        // Tracked blocks from this thread, so the writer thread hits the
        // limit during the run; finish() then writes the end from this one.
        for i in 0..40_000usize {
            drop(black_box(vec![i as u8; 70_000 + i % 512]));
        }
        let summary = heaptag::finish().expect("the log was on");
        println!("DROPPED {}", summary.dropped);
        assert!(summary.dropped > 0);
        assert!(heaptag::snapshot().health.log_write_errors > 0);
        assert_eq!(
            blocked_and_pending(libc::SIGXFSZ),
            (false, false),
            "mask or pending changed"
        );
        return;
    }
    let log = common::temp_log("fsize");
    let mut cmd = common::child(
        "a_log_past_the_file_size_limit_drops_events_instead_of_killing_the_program",
        &[("HEAPTAG_LOG", log.to_str().unwrap()), ("HEAPTAG_SYMBOLS", "0")],
    );
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the
    // forked child before exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: LIMIT as libc::rlim_t,
                rlim_max: LIMIT as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?} (signal {:?})\n{stdout}\n{}",
        out.status,
        out.status.signal(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("DROPPED "), "{stdout}");
    let len = std::fs::metadata(&log).unwrap().len();
    assert!(len <= LIMIT, "{len} bytes");
    let (recs, r) = common::read_all(&log);
    // Readable up to the limit: whole frames only, and events in them.
    assert!(r.problems().is_empty(), "{:?}", r.problems());
    assert!(recs.iter().any(|r| matches!(r, Record::Alloc { .. })));
    // The log says events were lost (the reserve frame, rewritten in place).
    assert!(
        recs.iter()
            .any(|r| matches!(r, Record::Dropped { events, .. } if *events > 0)),
        "no Dropped record"
    );
}
