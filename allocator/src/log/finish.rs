//! A bounded `finish()`: the writer thread does the final work (fingerprints
//! of the live blocks, the last drain, symbols when asked for, the end
//! record, `fsync` when asked for) and the caller waits for it with a
//! timeout, holding no lock any other thread of the program needs.
//!
//! ```text
//! finish()  --request(deadline)--> CONTROL --WAKE--> writer thread: final work, close
//!    ^                                                    |
//!    '------------- DONE (or the deadline passes) --------'
//! ```
//!
//! When the deadline passes first (a `write(2)` stuck in the kernel on a
//! network filesystem, a FIFO nobody drains, a slow disk), `finish()` counts
//! every event not yet written as lost, says so on stderr, writes the count
//! into the file's reserve frame from a helper thread that opens the file
//! anew (waited for until the deadline, never longer: the same filesystem may
//! be the stuck one), and returns. The writer thread is left behind: it writes
//! nothing more (a stuck write that completes later is the last), closes the
//! file and ends; at process exit it simply dies with the process.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use heaptag_format::RecordRef;

use super::{LogSummary, CLOSING, FINISHED, ON, RING, STATE};
use crate::clock;
use crate::health::LOG_EVENTS_LOST;

/// Between `finish()` and the writer thread.
struct Control {
    /// Set by the first `finish()`: the writer's final work should be done
    /// by this instant.
    requested: Option<Instant>,
    /// Set by the writer once the file is closed.
    done: Option<LogSummary>,
    /// A `finish()` gave up waiting.
    abandoned: bool,
}

static CONTROL: Mutex<Control> = Mutex::new(Control {
    requested: None,
    done: None,
    abandoned: false,
});
/// Wakes the writer thread (a finish request).
static WAKE: Condvar = Condvar::new();
/// Wakes `finish()` (the writer is done).
static DONE: Condvar = Condvar::new();

/// Set when a `finish()` gave up: the writer writes nothing more. Relaxed:
/// the writer polls it; the events it then does not write were counted by
/// the `finish()` that set it.
pub(super) static ABANDONED: AtomicBool = AtomicBool::new(false);
/// Events the writer took from the ring and has not written yet (its frame
/// being built or being written). Relaxed: a figure for the loss count.
pub(super) static PENDING: AtomicU64 = AtomicU64::new(0);
/// Bytes and events written so far (all segments), for a summary when the
/// writer cannot be asked. Relaxed: independent figures.
pub(super) static BYTES: AtomicU64 = AtomicU64::new(0);
pub(super) static EVENTS: AtomicU64 = AtomicU64::new(0);
pub(super) static SEGMENTS: AtomicU64 = AtomicU64::new(0);
/// The finish deadline of the log being written, in ns. Relaxed: set
/// before the log is published (`STATE` Release).
pub(super) static TIMEOUT_NS: AtomicU64 = AtomicU64::new(3_000_000_000);

/// The file being written, as the helper that records a loss finds it again.
#[derive(Clone)]
pub(super) struct FileInfo {
    pub(super) first: PathBuf,
    pub(super) path: PathBuf,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) reserve_at: u64,
}

static FILE: Mutex<Option<FileInfo>> = Mutex::new(None);

fn control() -> MutexGuard<'static, Control> {
    CONTROL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A new log starts (the previous one, if any, is closed): forget its
/// request and result.
pub(super) fn reset(timeout: Duration) {
    let mut c = control();
    c.requested = None;
    c.done = None;
    c.abandoned = false;
    ABANDONED.store(false, Ordering::Relaxed);
    PENDING.store(0, Ordering::Relaxed);
    BYTES.store(0, Ordering::Relaxed);
    EVENTS.store(0, Ordering::Relaxed);
    SEGMENTS.store(1, Ordering::Relaxed);
    let ns = timeout.as_nanos().min(u128::from(u64::MAX)) as u64;
    TIMEOUT_NS.store(ns, Ordering::Relaxed);
}

/// The writer publishes the file it writes (at open and at each rotation),
/// with its device and inode, so the loss can be recorded in it later by
/// path without touching the writer's descriptor.
pub(super) fn publish_file(first: PathBuf, path: PathBuf, fd: libc::c_int, reserve_at: u64) {
    // SAFETY: plain data, filled in by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is the writer's open descriptor; `st` a valid buffer.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    let info = ok.then_some(FileInfo {
        first,
        path,
        dev: st.st_dev,
        ino: st.st_ino,
        reserve_at,
    });
    *FILE.lock().unwrap_or_else(PoisonError::into_inner) = info;
}

/// The first file of the log last published.
pub(super) fn first_path() -> Option<PathBuf> {
    FILE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(|f| f.first.clone())
}

/// The writer thread between cycles: waits up to `tick` (or until a
/// `finish()` asks) and returns the finish deadline once one was asked for.
pub(super) fn wait(tick: Duration) -> Option<Instant> {
    let c = control();
    if let Some(d) = c.requested {
        return Some(d);
    }
    let (c, _) = WAKE.wait_timeout(c, tick).unwrap_or_else(PoisonError::into_inner);
    c.requested
}

/// The writer closed the log: its result for `finish()`, and a new log may
/// start.
pub(super) fn done(summary: LogSummary) {
    let mut c = control();
    c.done = Some(summary);
    // Release: a `start` that sees FINISHED sees the writer's work done
    // (its thread touches the ring, the file and the tag table's writer
    // state no more: the writer was dropped before this call).
    STATE.store(FINISHED, Ordering::Release);
    DONE.notify_all();
}

/// Asks the writer to finish the log and waits for it until the deadline
/// (`HEAPTAG_FINISH_TIMEOUT`); see the module docs for what happens then.
pub(super) fn finish() -> Option<LogSummary> {
    let state = STATE.load(Ordering::Acquire);
    if state != ON && state != CLOSING {
        return None;
    }
    let timeout = Duration::from_nanos(TIMEOUT_NS.load(Ordering::Relaxed));
    let started = Instant::now();
    // The writer gets nine tenths; the rest is for recording a loss.
    let give_up = started + timeout * 9 / 10;
    let mut c = control();
    if c.abandoned {
        return None;
    }
    let until = *c.requested.get_or_insert(give_up);
    WAKE.notify_all();
    loop {
        if let Some(s) = &c.done {
            return Some(s.clone());
        }
        let now = Instant::now();
        if now >= until {
            break;
        }
        c = DONE
            .wait_timeout(c, until - now)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    // The deadline passed: from here the writer writes nothing more.
    c.abandoned = true;
    ABANDONED.store(true, Ordering::Relaxed);
    drop(c);
    // AcqRel: no new events from here on (the writer may not have got as
    // far as stopping them).
    let _ = STATE.compare_exchange(ON, CLOSING, Ordering::AcqRel, Ordering::Acquire);
    let lost = RING.len() as u64 + PENDING.swap(0, Ordering::Relaxed);
    LOG_EVENTS_LOST.fetch_add(lost, Ordering::Relaxed);
    let file = FILE.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let shown = file
        .as_ref()
        .map_or_else(String::new, |f| format!("{}: ", f.path.display()));
    eprintln!(
        "heaptag: {shown}the log was not finished within {timeout:?} (is a write to it stuck?): \
         {lost} queued events not written ({} dropped in all), and no end record",
        super::dropped()
    );
    let mut recorded = false;
    if let Some(f) = &file {
        recorded = record_loss(f, started + timeout);
    }
    if !recorded {
        eprintln!("heaptag: the count of lost events could not be written into the log either");
    }
    Some(LogSummary {
        path: file.map_or_else(PathBuf::new, |f| f.first),
        bytes: BYTES.load(Ordering::Relaxed),
        events: EVENTS.load(Ordering::Relaxed),
        dropped: super::dropped(),
        ended: false,
        segments: SEGMENTS.load(Ordering::Relaxed) as u32,
    })
}

/// Writes the count of lost events into the reserve frame of `f`, on a
/// helper thread waited for until `until`: the file is opened anew by path
/// (never through a symlink, without blocking on a FIFO) and written only if
/// it is still the regular file the writer opened.
fn record_loss(f: &FileInfo, until: Instant) -> bool {
    let f = f.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("heaptag-finish".into())
        .spawn(move || {
            let _ = tx.send(write_reserve(&f));
        });
    if spawned.is_err() {
        return false;
    }
    let left = until.saturating_duration_since(Instant::now());
    rx.recv_timeout(left).unwrap_or(false)
}

fn write_reserve(f: &FileInfo) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(f.path.as_os_str().as_bytes()) else {
        return false;
    };
    let flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: `c` is a valid NUL-terminated path; no O_CREAT, so no mode.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return false;
    }
    // SAFETY: plain data, filled in by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` was just opened; `st` is a valid buffer.
    let same = unsafe { libc::fstat(fd, &mut st) } == 0
        && st.st_mode & libc::S_IFMT == libc::S_IFREG
        && st.st_dev == f.dev
        && st.st_ino == f.ino;
    let mut ok = false;
    if same {
        let frame = super::worker::reserve_frame(Some(RecordRef::Dropped {
            time_ns: clock::now_ns(),
            events: super::dropped(),
        }));
        let bytes = frame.as_bytes();
        let n = super::worker::quietly(|| {
            // SAFETY: `bytes` is valid for its length; `fd` is open.
            unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), f.reserve_at as libc::off_t) }
        });
        ok = n == bytes.len() as isize;
    }
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    ok
}
