//! The event log: what the allocator writes for the analyzer.
//!
//! ```text
//! hot path (tracked / sampled events) --push--> ring --drain--> writer thread --write(2)--> file
//! mark(), external_alloc() --------------------> side queue ----^
//! writer thread, every interval: /proc/self/status, jemalloc stats, per-tag counters
//! ```
//!
//! The hot path never does I/O and never waits for the writer: a full ring
//! drops the event and counts it. The writer wakes every few milliseconds,
//! encodes what it drained into one frame (see `heaptag-format`) and writes
//! it with one `write(2)`, so after a crash or SIGKILL the file is readable up
//! to the last frame written. When a write fails (disk full, I/O error, a
//! file size limit) the frame's events are counted as dropped, the tag and
//! stack definitions it carried are sent again before the next record, and
//! the program goes on.
//!
//! Logging starts from `HEAPTAG_LOG=path` (read by start-up's constructor
//! before `main`, see `start.rs`) or from [`LogConfig::start`]. [`finish`] flushes, fingerprints the
//! blocks still alive, resolves the call stacks' symbols and writes the end
//! record; it also runs at normal process exit. A forked child stops logging
//! (it never writes into its parent's file).

mod fingerprint;
mod procfs;
pub(crate) mod ring;
pub(crate) mod stacks;
mod worker;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use heaptag_format::{FpMeta, FpWhen, Record};

use crate::config::{self, HOT, ON as TRACKING_ON};
use crate::log::ring::{Event, Ring};
use crate::table;

/// Pads a value to its own cache lines (contended indices of the ring).
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

const OFF: u8 = 0;
const STARTING: u8 = 1;
const ON: u8 = 2;
const FINISHED: u8 = 3;
const FORKED: u8 = 4;

/// The log's state. Relaxed loads on the event path: an event racing with
/// `finish()` is either written or counted as dropped, never lost silently.
static STATE: AtomicU8 = AtomicU8::new(OFF);
static RING: Ring = Ring::new();
/// Records that are not allocator events (marks, external memory).
static SIDE: Mutex<Vec<Record>> = Mutex::new(Vec::new());
/// The writer's state; held by the writer thread for one cycle at a time.
static WRITER: Mutex<Option<worker::Writer>> = Mutex::new(None);
/// Tracked blocks of at least this size are fingerprinted.
static FP_MIN: AtomicU64 = AtomicU64::new(u64::MAX);
static FP_FULL: AtomicBool = AtomicBool::new(false);
/// Set by `mark()`: the writer samples at its next cycle.
static SAMPLE_NOW: AtomicBool = AtomicBool::new(false);

/// True while events are being logged.
#[inline]
pub(crate) fn on() -> bool {
    STATE.load(Ordering::Relaxed) == ON
}

/// Queues an allocator event (dropped and counted when the ring is full).
#[inline]
pub(crate) fn emit(ev: Event) {
    if on() {
        RING.push(ev);
    }
}

/// Events dropped so far: ring full, or lost to write failures.
pub(crate) fn dropped() -> u64 {
    crate::health::dropped_events()
}

/// Whether a tracked block of `size` bytes is fingerprinted.
#[inline]
pub(crate) fn wants_fingerprint(size: u64) -> bool {
    on() && size >= FP_MIN.load(Ordering::Relaxed)
}

/// Fingerprints the live block at `addr` and queues the event.
///
/// # Safety
/// `addr..addr+size` must be a live allocation that is not freed during the
/// call (its table shard is held, or the caller is the one freeing it).
pub(crate) unsafe fn emit_fingerprint(addr: usize, size: u64, when: FpWhen) {
    let full = FP_FULL.load(Ordering::Relaxed);
    // SAFETY: the caller's guarantee.
    let fp = unsafe { fingerprint::fingerprint(addr as *const u8, size as usize, full) };
    emit(Event::Fingerprint {
        time_ns: crate::clock::now_ns(),
        addr: addr as u64,
        size,
        hash: fp.hash,
        meta: FpMeta {
            fill: fp.fill,
            full,
            when,
        },
    });
}

/// The sampled fingerprint of a live block (for `testing`).
///
/// # Safety
/// As [`emit_fingerprint`].
pub(crate) unsafe fn fingerprint_block(addr: usize, size: u64) -> fingerprint::Fingerprint {
    // SAFETY: the caller's guarantee.
    unsafe { fingerprint::fingerprint(addr as *const u8, size as usize, false) }
}

/// Fingerprints every live tracked block big enough, holding each block's
/// table shard while reading it so no thread can free it meanwhile.
fn fingerprint_live(when: FpWhen) {
    let min = FP_MIN.load(Ordering::Relaxed);
    table::for_each_locked(|addr, e| {
        if e.tracked && e.size >= min {
            // SAFETY: the entry is in the table and its shard is locked, so
            // the block is live and its free waits for us (free removes the
            // entry before releasing the block).
            unsafe { emit_fingerprint(addr, e.size, when) };
        }
    });
}

/// Records a side record (not an allocator event) if logging.
pub(crate) fn side(rec: Record) {
    if on() {
        SIDE.lock().unwrap_or_else(PoisonError::into_inner).push(rec);
    }
}

/// Why a log could not be started.
#[derive(Debug)]
#[non_exhaustive]
pub enum LogError {
    /// A log is already being written (or was, and finished).
    AlreadyStarted,
    /// heaptag is not the global allocator, or `HEAPTAG=off`.
    NotTracking,
    /// The file exists and overwriting was not allowed.
    Exists(PathBuf),
    /// The path is a symbolic link, which heaptag never follows.
    Symlink(PathBuf),
    /// Overwriting was allowed but the path is not a regular file (a FIFO, a
    /// device, a socket): heaptag replaces only regular files, and never
    /// blocks opening one.
    NotRegular(PathBuf),
    /// Overwriting was allowed but the file belongs to another user:
    /// heaptag replaces only files owned by the effective user.
    NotOwned(PathBuf),
    /// The file could not be created or written.
    Io(PathBuf, std::io::Error),
    /// An environment variable has a value that does not parse.
    BadEnv {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// The event buffer could not be allocated.
    OutOfMemory,
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::AlreadyStarted => write!(f, "a heaptag log was already started in this process"),
            LogError::NotTracking => write!(
                f,
                "heaptag is not tracking: install heaptag::Alloc as the #[global_allocator] and do not set HEAPTAG=off"
            ),
            LogError::Exists(p) => write!(
                f,
                "{} exists: heaptag does not overwrite logs (remove it, use %p in the path, or set HEAPTAG_LOG_OVERWRITE=1)",
                p.display()
            ),
            LogError::Symlink(p) => write!(f, "{} is a symbolic link: heaptag never follows one", p.display()),
            LogError::NotRegular(p) => write!(
                f,
                "{} is not a regular file (a FIFO, device or socket?): heaptag overwrites only regular files",
                p.display()
            ),
            LogError::NotOwned(p) => write!(
                f,
                "{} belongs to another user: heaptag overwrites only files of the user it runs as",
                p.display()
            ),
            LogError::Io(p, e) => write!(f, "cannot write {}: {e}", p.display()),
            LogError::BadEnv { name, value, expected } => {
                write!(f, "{name}={value}: expected {expected}")
            }
            LogError::OutOfMemory => write!(f, "no memory for the event buffer"),
        }
    }
}

impl std::error::Error for LogError {}

/// How to write the event log. Start it with [`LogConfig::start`], or set
/// `HEAPTAG_LOG` and the variables below and let heaptag start it before
/// `main`.
///
/// | variable | setter | default |
/// | --- | --- | --- |
/// | `HEAPTAG_LOG` | [`LogConfig::new`] (`%p` becomes the pid) | none: no log |
/// | `HEAPTAG_LOG_OVERWRITE` | [`overwrite`](LogConfig::overwrite) | `0` |
/// | `HEAPTAG_INTERVAL` | [`interval`](LogConfig::interval) (`100ms`, `1s`) | `100ms` |
/// | `HEAPTAG_FINGERPRINT_MIN` | [`fingerprint_min`](LogConfig::fingerprint_min) | `1M` |
/// | `HEAPTAG_FINGERPRINT_FULL` | [`fingerprint_full`](LogConfig::fingerprint_full) | `0` |
/// | `HEAPTAG_STACK_DEPTH` | [`stack_depth`](LogConfig::stack_depth) (`0`: off) | `32` |
/// | `HEAPTAG_BUFFER` | [`buffer_events`](LogConfig::buffer_events) | `32768` |
/// | `HEAPTAG_SYMBOLS` | [`symbols`](LogConfig::symbols) | `1` |
#[derive(Clone, Debug)]
pub struct LogConfig {
    path: PathBuf,
    overwrite: bool,
    interval: Duration,
    fingerprint_min: u64,
    fingerprint_full: bool,
    stack_depth: u32,
    buffer_events: usize,
    symbols: bool,
}

impl LogConfig {
    /// A log at `path` (`%p` is replaced by the process id) with defaults.
    pub fn new(path: impl Into<PathBuf>) -> LogConfig {
        LogConfig {
            path: path.into(),
            overwrite: false,
            interval: Duration::from_millis(100),
            fingerprint_min: 1 << 20,
            fingerprint_full: false,
            stack_depth: 32,
            buffer_events: 32768,
            symbols: true,
        }
    }

    /// The configuration from `HEAPTAG_LOG` and friends; `None` when
    /// `HEAPTAG_LOG` is unset or empty.
    pub fn from_env() -> Option<Result<LogConfig, LogError>> {
        let path = env("HEAPTAG_LOG").filter(|p| !p.is_empty())?;
        Some((|| {
            let mut c = LogConfig::new(path);
            if let Some(yes) = env_value("HEAPTAG_LOG_OVERWRITE", FLAG, flag)? {
                c.overwrite = yes;
            }
            let duration = "a duration such as 100ms or 1s";
            if let Some(every) = env_value("HEAPTAG_INTERVAL", duration, heaptag_format::parse_duration)? {
                c.interval = every;
            }
            let size = |v: &str| config::parse_size(v.as_bytes());
            if let Some(bytes) = env_value("HEAPTAG_FINGERPRINT_MIN", "a size such as 1M", size)? {
                c.fingerprint_min = bytes;
            }
            if let Some(yes) = env_value("HEAPTAG_FINGERPRINT_FULL", FLAG, flag)? {
                c.fingerprint_full = yes;
            }
            let depth = |v: &str| v.trim().parse().ok().filter(|&d: &u32| d as usize <= stacks::MAX_DEPTH);
            if let Some(frames) = env_value("HEAPTAG_STACK_DEPTH", "a number of frames from 0 to 128", depth)? {
                c.stack_depth = frames;
            }
            let buffer = |v: &str| v.trim().parse().ok().filter(|&n: &usize| n >= 64);
            if let Some(events) = env_value("HEAPTAG_BUFFER", "a number of events, at least 64", buffer)? {
                c.buffer_events = events;
            }
            if let Some(yes) = env_value("HEAPTAG_SYMBOLS", FLAG, flag)? {
                c.symbols = yes;
            }
            Ok(c)
        })())
    }

    /// Replace an existing file at the path: only a regular file owned by
    /// the effective user, opened without blocking, its mode reset to 0600;
    /// never a symlink (a FIFO, a device or another user's file is refused
    /// with [`LogError::NotRegular`] or [`LogError::NotOwned`]). Symbolic
    /// links in the path's parent directories are followed: choosing them is
    /// the user's business.
    pub fn overwrite(mut self, yes: bool) -> Self {
        self.overwrite = yes;
        self
    }

    /// How often RSS, jemalloc stats and per-tag counters are sampled, and
    /// the longest time between two writes to the file.
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every.max(Duration::from_millis(1));
        self
    }

    /// Tracked blocks of at least this size are fingerprinted.
    pub fn fingerprint_min(mut self, bytes: u64) -> Self {
        self.fingerprint_min = bytes;
        self
    }

    /// Hash whole blocks instead of 64 sampled 64-byte pieces: exact, and
    /// slow for GiB buffers (about 0.17 s per GiB on the reference machine,
    /// at each free and each mark; see docs/PERFORMANCE.md).
    pub fn fingerprint_full(mut self, yes: bool) -> Self {
        self.fingerprint_full = yes;
        self
    }

    /// Frames per call stack (0 turns stacks off).
    pub fn stack_depth(mut self, frames: u32) -> Self {
        self.stack_depth = frames.min(stacks::MAX_DEPTH as u32);
        self
    }

    /// Capacity of the event buffer between the allocator and the writer.
    pub fn buffer_events(mut self, events: usize) -> Self {
        self.buffer_events = events.max(64);
        self
    }

    /// Resolve stack symbols at `finish()` (function, file, line).
    pub fn symbols(mut self, yes: bool) -> Self {
        self.symbols = yes;
        self
    }

    /// The path with `%p` expanded.
    pub fn resolved_path(&self) -> PathBuf {
        expand(&self.path)
    }

    /// Starts writing the log; returns its path.
    pub fn start(self) -> Result<PathBuf, LogError> {
        // Acquire: the tracking settings are published with the mode.
        if HOT.mode.load(Ordering::Acquire) != TRACKING_ON {
            return Err(LogError::NotTracking);
        }
        if STATE
            .compare_exchange(OFF, STARTING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(LogError::AlreadyStarted);
        }
        match worker::Writer::open(&self) {
            Ok(w) => {
                let path = w.path.clone();
                if !RING.init(self.buffer_events) {
                    STATE.store(OFF, Ordering::Release);
                    return Err(LogError::OutOfMemory);
                }
                stacks::DEPTH.store(self.stack_depth, Ordering::Relaxed);
                FP_MIN.store(self.fingerprint_min, Ordering::Relaxed);
                FP_FULL.store(self.fingerprint_full, Ordering::Relaxed);
                *WRITER.lock().unwrap_or_else(PoisonError::into_inner) = Some(w);
                install_hooks();
                STATE.store(ON, Ordering::Release);
                let tick = self.interval.min(Duration::from_millis(10));
                let spawned = std::thread::Builder::new()
                    .name("heaptag-writer".into())
                    .spawn(move || worker::run(tick));
                if let Err(e) = spawned {
                    // Without a thread, finish() still writes everything.
                    eprintln!("heaptag: no writer thread ({e}); the log is written at finish()");
                }
                Ok(path)
            }
            Err(e) => {
                STATE.store(OFF, Ordering::Release);
                Err(e)
            }
        }
    }
}

fn env(name: &'static str) -> Option<String> {
    let c = std::ffi::CString::new(name).ok()?;
    config::getenv(&c).map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The value of `name` converted by `parse`: `None` when unset, a
/// [`LogError::BadEnv`] naming `expected` when it does not convert.
fn env_value<T>(
    name: &'static str,
    expected: &'static str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, LogError> {
    let Some(value) = env(name) else { return Ok(None) };
    match parse(&value) {
        Some(t) => Ok(Some(t)),
        None => Err(LogError::BadEnv { name, value, expected }),
    }
}

/// What [`flag`] accepts, for its error message.
const FLAG: &str = "0 or 1";

/// An on/off variable's value.
fn flag(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// Replaces `%p` with the pid and `%%` with `%`.
fn expand(path: &Path) -> PathBuf {
    let s = path.to_string_lossy();
    if !s.contains('%') {
        return path.to_path_buf();
    }
    let pid = std::process::id().to_string();
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    PathBuf::from(out)
}

/// In a forked child (the atfork child handler in `start.rs`): the child
/// never writes into its parent's file, so a log that was on (or starting)
/// stops. Nothing in the child touches the writer's state (WRITER, SIDE)
/// again: their locks may be held by threads that do not exist in it, which
/// is why the prepare handler does not take them.
pub(crate) fn after_fork_in_child() {
    if STATE.load(Ordering::Relaxed) != OFF {
        STATE.store(FORKED, Ordering::Relaxed);
    }
}

/// Registers the exit flush, once.
fn install_hooks() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    extern "C" fn at_exit() {
        finish();
    }
    // SAFETY: a plain extern "C" function with no arguments, valid for the
    // life of the process.
    unsafe { libc::atexit(at_exit) };
}

/// What [`finish`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSummary {
    /// The log file.
    pub path: PathBuf,
    /// Bytes written.
    pub bytes: u64,
    /// Allocator events written (allocations, frees, reallocs, samples).
    pub events: u64,
    /// Events dropped (buffer full, or lost to write failures).
    pub dropped: u64,
}

/// Flushes the event log: fingerprints the blocks still alive, takes a last
/// sample, resolves stack symbols, writes the end record and closes the file.
/// Later events are not logged. Runs by itself at normal process exit.
///
/// Returns `None` when no log was being written.
pub fn finish() -> Option<LogSummary> {
    if !on() {
        return None;
    }
    let mut guard = WRITER.lock().unwrap_or_else(PoisonError::into_inner);
    let mut w = guard.take()?;
    let _tag = worker::enter_writer();
    fingerprint_live(FpWhen::Finish);
    // No new events from here on; everything queued before is drained below.
    STATE.store(FINISHED, Ordering::Release);
    Some(w.finish())
}

/// Records a named point in the run: a mark record, a fingerprint of every
/// live tracked block (so duplicates alive at this moment are seen even if
/// the program never frees them), and an immediate memory sample. Does
/// nothing when no log is being written.
pub fn mark(label: &str) {
    if !on() {
        return;
    }
    side(Record::Mark {
        time_ns: crate::clock::now_ns(),
        label: label.to_owned(),
    });
    fingerprint_live(FpWhen::Mark);
    SAMPLE_NOW.store(true, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_p_becomes_the_pid() {
        let pid = std::process::id();
        assert_eq!(
            expand(Path::new("/tmp/run-%p.htlog")),
            PathBuf::from(format!("/tmp/run-{pid}.htlog"))
        );
        assert_eq!(expand(Path::new("/tmp/100%%.htlog")), PathBuf::from("/tmp/100%.htlog"));
        assert_eq!(expand(Path::new("/tmp/plain")), PathBuf::from("/tmp/plain"));
    }
}
