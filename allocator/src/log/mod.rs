//! The event log: what the allocator writes for the analyzer.
//!
//! ```text
//! hot path (tracked / sampled events) --push--> ring --drain--> writer thread --write(2)--> file
//! mark(), external_alloc() --------------------> side queue ----^
//! writer thread, every interval: /proc/self/status, jemalloc stats, per-tag counters
//! ```
//!
//! The hot path never does I/O and never waits for the writer: a full ring
//! drops the event and counts it. The writer wakes every 10 ms (or each
//! sampling interval, if shorter), and sooner while events come fast (down
//! to a 64th of that): back before the ring, at the rate its last cycle
//! saw, is a quarter full (`worker::next_wait`). It encodes what it drained into one frame (see `heaptag-format`) and writes
//! it with one `write(2)`, so after a crash or SIGKILL the file is readable up
//! to the last frame written. When a write fails (disk full, I/O error, a
//! file size limit) the frame's events are counted as dropped, the tag and
//! stack definitions it carried are sent again before the next record, and
//! the program goes on.
//!
//! Logging starts from `HEAPTAG_LOG=path` (read by start-up's constructor
//! before `main`, see `start.rs`) or from [`LogConfig::start`]. [`finish`]
//! has the writer thread fingerprint the blocks still alive, drain the queue
//! and write the end record (symbols and `fsync` only when asked for), and
//! waits for it until a deadline (`finish.rs`); it also runs at normal
//! process exit. After it, [`LogConfig::start`] may open a new log. With
//! `HEAPTAG_LOG_MAX` the log is written in segments (`segment.rs`). A forked
//! child stops logging (it never writes into its parent's file).

mod fingerprint;
mod finish;
pub(crate) mod procfs;
pub(crate) mod ring;
mod segment;
pub(crate) mod stacks;
mod worker;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use allocator_api2::vec::Vec as IVec;
use heaptag_format::{FpMeta, FpWhen, RecordRef};

use crate::config::{self, HOT, ON as TRACKING_ON};
use crate::internal::Internal;
use crate::log::ring::{Event, Ring};
use crate::table;

/// Pads a value to its own cache lines (contended indices of the ring).
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// No log was ever started.
const OFF: u8 = 0;
/// `LogConfig::start` is opening one.
const STARTING: u8 = 1;
/// Events are logged.
const ON: u8 = 2;
/// `finish()` ran: no new events; the writer is still closing the file (or
/// stuck in a write after `finish()` gave up). No new log can start yet.
const CLOSING: u8 = 3;
/// The last log is closed; a new one may start.
const FINISHED: u8 = 4;
/// A forked child: never logs.
const FORKED: u8 = 5;

/// The log's state. Relaxed loads on the event path: an event racing with
/// `finish()` is either written or counted as dropped, never lost silently.
static STATE: AtomicU8 = AtomicU8::new(OFF);
static RING: Ring = Ring::new();
/// Records that are not allocator events (marks, external memory): at most
/// [`SIDE_MAX`] of them and [`SIDE_MAX_BYTES`] of their labels wait for the
/// writer; more are dropped and counted (`Health::side_dropped`).
///
/// The queue and its labels live in the internal heap, like every other
/// structure of heaptag's: the thread that queues a record is the program's,
/// under the program's tag, and memory taken there through the global
/// allocator would be charged to that tag (and, freed later by the writer,
/// be alive in it meanwhile).
static SIDE: Mutex<SideQueue> = Mutex::new(SideQueue {
    recs: IVec::new_in(Internal),
    labels: IVec::new_in(Internal),
});
/// Most side records waiting for the writer.
const SIDE_MAX: usize = 16_384;
/// Most bytes of mark labels waiting for the writer.
const SIDE_MAX_BYTES: usize = 4 << 20;

/// The side records waiting, and the bytes of their labels.
pub(crate) struct SideQueue {
    recs: IVec<Side, Internal>,
    labels: IVec<u8, Internal>,
}

/// One side record as queued: a label is a range of [`SideQueue::labels`].
#[derive(Clone, Copy)]
enum Side {
    Mark {
        time_ns: u64,
        start: usize,
        len: usize,
    },
    External {
        time_ns: u64,
        tag: u32,
        what: &'static str,
        bytes: i64,
    },
}

impl SideQueue {
    /// The records queued, in order, as the log's records.
    pub(crate) fn records(&self) -> impl Iterator<Item = RecordRef<'_>> {
        self.recs.iter().map(|r| match *r {
            Side::Mark { time_ns, start, len } => RecordRef::Mark {
                time_ns,
                // Labels are copied in whole from a `&str`, so every range
                // is a whole string; a bad one (impossible) becomes "".
                label: std::str::from_utf8(self.labels.get(start..start + len).unwrap_or_default()).unwrap_or_default(),
            },
            Side::External {
                time_ns,
                tag,
                what,
                bytes,
            } => RecordRef::External {
                time_ns,
                tag,
                what,
                bytes,
            },
        })
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }
}

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

/// Queues the event that starts a record's life (Alloc or SampleAlloc), at
/// time `now` (the caller's clock read, not a second one).
pub(crate) fn emit_enter(addr: usize, e: &table::Entry, now: u64) {
    let (time_ns, thread, tag, stack, addr, size) = (now, e.thread, e.tag, e.stack, addr as u64, e.size);
    emit(if e.tracked {
        Event::Alloc {
            time_ns,
            thread,
            tag,
            stack,
            addr,
            size,
        }
    } else {
        Event::SampleAlloc {
            time_ns,
            thread,
            tag,
            stack,
            addr,
            size,
            weight: crate::sampling::weight(e.size as usize).bytes,
        }
    });
}

/// Queues the event that ends a record's life (Free or SampleFree), at
/// time `at` if the caller read the clock already (the free's Fingerprint),
/// else now.
pub(crate) fn emit_leave(addr: usize, e: &table::Entry, at: Option<u64>) {
    let time_ns = at.unwrap_or_else(crate::clock::now_ns);
    let (thread, addr, size) = (crate::thread::number(), addr as u64, e.size);
    emit(if e.tracked {
        Event::Free {
            time_ns,
            thread,
            addr,
            size,
        }
    } else {
        Event::SampleFree {
            time_ns,
            thread,
            addr,
            size,
        }
    });
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

/// Fingerprints the live block at `addr` and queues the event, stamped
/// with the clock read once here and returned: a free passes it on to its
/// Free event ([`emit_leave`]), so the pair costs one clock read, not two.
///
/// # Safety
/// `addr..addr+size` must be a live allocation that is not freed during the
/// call (its table shard is held, or the caller is the one freeing it).
pub(crate) unsafe fn emit_fingerprint(addr: usize, size: u64, when: FpWhen) -> u64 {
    let full = FP_FULL.load(Ordering::Relaxed);
    // SAFETY: the caller's guarantee.
    let fp = unsafe { fingerprint::fingerprint(addr as *const u8, size as usize, full) };
    // Read after the hash: a full one of a GiB block takes ~50 ms, and the
    // Free that reuses this time must not be dated before it.
    let time_ns = crate::clock::now_ns();
    emit(Event::Fingerprint {
        time_ns,
        addr: addr as u64,
        size,
        hash: fp.hash,
        meta: FpMeta {
            fill: fp.fill,
            full,
            when,
        },
    });
    time_ns
}

/// The free of tracked block `e` at `addr`, which [`wants_fingerprint`]:
/// fingerprints it and queues the event, unless it is freed before it could
/// have been filled ([`heaptag_format::freed_unfilled`]: it holds no copy of
/// anything, and readers count it so). Returns the time for its Free: the
/// Fingerprint's, or the clock read that found the block too young.
///
/// Only a block freed by the thread that allocated it, not made by a
/// realloc (which may hand over the old bytes in place), and timed by a
/// clock reading that was not held back ([`crate::clock::now_ns_held`]) may
/// be skipped: its birth (the Alloc's time) and this reading then come from
/// one thread's clock, so the lifetime measured is not shorter than the
/// true one. A block that lived past its window by the thread's last reading
/// costs no extra clock read.
///
/// # Safety
/// As [`emit_fingerprint`].
pub(crate) unsafe fn fingerprint_at_free(addr: usize, e: &table::Entry) -> u64 {
    let may_skip = !e.resized
        && e.thread != 0
        && e.thread == crate::thread::number()
        && heaptag_format::freed_unfilled(e.size, crate::clock::last_ns().saturating_sub(e.time_ns));
    if may_skip {
        let (now, held) = crate::clock::now_ns_held();
        if !held && heaptag_format::freed_unfilled(e.size, now.saturating_sub(e.time_ns)) {
            return now;
        }
    }
    // SAFETY: the caller's guarantee.
    unsafe { emit_fingerprint(addr, e.size, FpWhen::Free) }
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
/// table shard while reading it so no thread can free it meanwhile; past
/// `deadline` the remaining blocks are left out.
fn fingerprint_live(when: FpWhen, deadline: Option<Instant>) {
    let min = FP_MIN.load(Ordering::Relaxed);
    table::for_each_locked(|addr, e| {
        if e.tracked && e.size >= min && deadline.is_none_or(|d| Instant::now() < d) {
            // SAFETY: the entry is in the table and its shard is locked, so
            // the block is live and its free waits for us (free removes the
            // entry before releasing the block).
            unsafe { emit_fingerprint(addr, e.size, when) };
        }
    });
}

/// Queues a mark for the writer, if logging; when the side queue is full
/// (the writer is behind or stuck) it is dropped and counted.
fn side_mark(time_ns: u64, label: &str) {
    side_push(label.len(), |q| {
        let start = q.labels.len();
        q.labels.extend_from_slice(label.as_bytes());
        Side::Mark {
            time_ns,
            start,
            len: label.len(),
        }
    });
}

/// Queues a change of external memory for the writer, as [`side_mark`].
pub(crate) fn side_external(time_ns: u64, tag: u32, what: &'static str, bytes: i64) {
    side_push(0, |_| Side::External {
        time_ns,
        tag,
        what,
        bytes,
    });
}

/// Queues the record `make` returns (it may append `label_len` bytes of
/// label, room for which is reserved first) if logging and it fits.
fn side_push(label_len: usize, make: impl FnOnce(&mut SideQueue) -> Side) {
    if !on() {
        return;
    }
    let mut q = SIDE.lock().unwrap_or_else(PoisonError::into_inner);
    let fits = q.recs.len() < SIDE_MAX
        && q.labels.len() + label_len <= SIDE_MAX_BYTES
        && q.recs.try_reserve(1).is_ok()
        && q.labels.try_reserve(label_len).is_ok();
    if fits {
        let rec = make(&mut q);
        q.recs.push(rec);
    } else {
        drop(q);
        crate::health::SIDE_DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// The side records waiting (for the writer), leaving the queue empty
/// (without memory: the writer frees the taken one, in the internal heap).
fn take_side() -> SideQueue {
    let mut q = SIDE.lock().unwrap_or_else(PoisonError::into_inner);
    SideQueue {
        recs: std::mem::replace(&mut q.recs, IVec::new_in(Internal)),
        labels: std::mem::replace(&mut q.labels, IVec::new_in(Internal)),
    }
}

/// Why a log could not be started.
#[derive(Debug)]
#[non_exhaustive]
pub enum LogError {
    /// A log is already being written.
    AlreadyStarted,
    /// The previous log is still being closed: its `finish()` gave up at
    /// the deadline and the writer thread is still in a write.
    Finishing,
    /// The writer thread could not be started.
    NoThread(std::io::Error),
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
            LogError::AlreadyStarted => write!(f, "a heaptag log is already being written in this process"),
            LogError::Finishing => write!(
                f,
                "the previous heaptag log is still being closed (its finish() gave up: is a write to it stuck?)"
            ),
            LogError::NoThread(e) => write!(f, "cannot start the log writer thread: {e}"),
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
/// | `HEAPTAG_SYMBOLS` | [`symbols`](LogConfig::symbols) | `0` |
/// | `HEAPTAG_FINISH_TIMEOUT` | [`finish_timeout`](LogConfig::finish_timeout) (`3s`) | `3s` |
/// | `HEAPTAG_FSYNC` | [`fsync`](LogConfig::fsync) | `0` |
/// | `HEAPTAG_LOG_MAX` | [`max_bytes`](LogConfig::max_bytes) (`256MiB`) or [`max_age`](LogConfig::max_age) (`1h`) | none: one file |
/// | `HEAPTAG_LOG_KEEP` | [`keep_segments`](LogConfig::keep_segments) | `0`: keep all |
///
/// `HEAPTAG_LOG` is removed from the environment once read, so programs the
/// process starts do not log into (or over) its log; `HEAPTAG_LOG_INHERIT=1`
/// keeps it (then give the path a `%p`).
///
/// A log can be started and finished more than once in a process, around one
/// benchmark of a long-lived program:
///
/// ```no_run
/// let log = heaptag_alloc::LogConfig::new("/tmp/bench-%p.htlog").start()?;
/// // ... the benchmark ...
/// let summary = heaptag_alloc::finish().expect("a log was being written");
/// assert!(summary.ended);
/// # Ok::<(), heaptag_alloc::LogError>(())
/// ```
///
/// (`examples/log_window.rs` does this for real; `tests/log_start_stop.rs`
/// runs it.)
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
    finish_timeout: Duration,
    fsync: bool,
    max: Option<segment::Rotate>,
    keep: u32,
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
            symbols: false,
            finish_timeout: Duration::from_secs(3),
            fsync: false,
            max: None,
            keep: 0,
        }
    }

    /// The configuration from `HEAPTAG_LOG` and friends; `None` when
    /// `HEAPTAG_LOG` is unset or empty (start-up removes it from the
    /// environment once read, unless `HEAPTAG_LOG_INHERIT=1`).
    pub fn from_env() -> Option<Result<LogConfig, LogError>> {
        let path = env("HEAPTAG_LOG").filter(|p| !p.is_empty())?;
        Some((|| {
            let mut c = LogConfig::new(path);
            if let Some(yes) = env_value("HEAPTAG_LOG_OVERWRITE", FLAG, flag)? {
                c.overwrite = yes;
            }
            let duration = "a duration such as 100ms or 1s";
            if let Some(every) = env_value("HEAPTAG_INTERVAL", duration, heaptag_format::parse_duration)? {
                // Through the setter: at least 1 ms, as from code (a 1 us
                // interval would have the writer sample at every cycle).
                c = c.interval(every);
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
            if let Some(d) = env_value("HEAPTAG_FINISH_TIMEOUT", duration, heaptag_format::parse_duration)? {
                c.finish_timeout = d;
            }
            if let Some(yes) = env_value("HEAPTAG_FSYNC", FLAG, flag)? {
                c.fsync = yes;
            }
            let max = "a size such as 256MiB or a duration such as 1h";
            if let Some(m) = env_value("HEAPTAG_LOG_MAX", max, segment::parse_max)? {
                c.max = Some(m);
            }
            let keep = |v: &str| v.trim().parse().ok().filter(|&n: &u32| n > 0);
            if let Some(n) = env_value("HEAPTAG_LOG_KEEP", "a number of segments, at least 1", keep)? {
                c.keep = n;
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
    /// costly for GiB buffers (about 0.04 s of CPU per GiB with AVX2 on the
    /// reference machine, at each free and each mark; see docs/PERFORMANCE.md).
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

    /// Resolve stack symbols at `finish()` (function, file, line), in the
    /// process. Off by default: loading the debug info of a large binary
    /// takes seconds at exit, and the analyzer resolves the frames offline
    /// from the header's module map and build ids. Symbols not resolved by
    /// the finish deadline are left out.
    pub fn symbols(mut self, yes: bool) -> Self {
        self.symbols = yes;
        self
    }

    /// The longest [`finish`] (and the exit of the process) waits for the
    /// log to be closed; past it, what was not written is counted as
    /// dropped, said on stderr and in the file's reserve frame, and the log
    /// has no end record. Default 3 s; at least 1 ms.
    pub fn finish_timeout(mut self, d: Duration) -> Self {
        self.finish_timeout = d.max(Duration::from_millis(1));
        self
    }

    /// `fsync` each file when it is closed (at finish and at each segment
    /// rotation). Off by default: a crash of the machine may then lose the
    /// last writes, and a filesystem that stalls cannot hold up the exit.
    pub fn fsync(mut self, yes: bool) -> Self {
        self.fsync = yes;
        self
    }

    /// Write the log in segments of about `bytes` bytes each: a segment
    /// ends at the first writer cycle that finds `bytes` written into it
    /// after its opening (header, definitions, carried blocks). See
    /// "segments" in the README for the file names. 0 means one file.
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max = (bytes > 0).then_some(segment::Rotate::Bytes(bytes));
        self
    }

    /// With segments, keep only the last `n` on disk: once a new segment is
    /// open, the one `n` back is deleted (only if its path still names the
    /// file heaptag created). 0, the default, keeps every segment.
    pub fn keep_segments(mut self, n: u32) -> Self {
        self.keep = n;
        self
    }

    /// Write the log in segments of `every` each (at least 1 ms).
    pub fn max_age(mut self, every: Duration) -> Self {
        let ns = every.max(Duration::from_millis(1)).as_nanos().min(u128::from(u64::MAX)) as u64;
        self.max = Some(segment::Rotate::Age(ns));
        self
    }

    /// The path with `%p` expanded.
    pub fn resolved_path(&self) -> PathBuf {
        expand(&self.path)
    }

    /// Starts writing the log; returns its path (the first segment's).
    ///
    /// Also after [`finish`]: each start opens a new log (give each its own
    /// path, or use `%p` and a counter). The event buffer keeps the size the
    /// first log gave it.
    pub fn start(self) -> Result<PathBuf, LogError> {
        // Acquire: the tracking settings are published with the mode.
        if HOT.mode.load(Ordering::Acquire) != TRACKING_ON {
            return Err(LogError::NotTracking);
        }
        let prev = STATE.load(Ordering::Acquire);
        let free = prev == OFF || prev == FINISHED;
        if !free
            || STATE
                .compare_exchange(prev, STARTING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return Err(if prev == CLOSING {
                LogError::Finishing
            } else {
                LogError::AlreadyStarted
            });
        }
        let fail = |e| {
            STATE.store(prev, Ordering::Release);
            Err(e)
        };
        if !RING.init(self.buffer_events) {
            return fail(LogError::OutOfMemory);
        }
        // What an earlier log left: events queued after it stopped taking
        // them, side records. No writer thread runs (the state was OFF or
        // FINISHED), so this thread may consume the ring.
        while RING.pop().is_some() {}
        drop(take_side());
        let w = match worker::Writer::open(&self, RING.capacity()) {
            Ok(w) => w,
            Err(e) => return fail(e),
        };
        let path = w.path.clone();
        finish::reset(self.finish_timeout);
        w.publish();
        stacks::DEPTH.store(self.stack_depth, Ordering::Relaxed);
        FP_MIN.store(self.fingerprint_min, Ordering::Relaxed);
        fingerprint::prime();
        FP_FULL.store(self.fingerprint_full, Ordering::Relaxed);
        SAMPLE_NOW.store(false, Ordering::Relaxed);
        *WRITER.lock().unwrap_or_else(PoisonError::into_inner) = Some(w);
        install_hooks();
        let tick = self.interval.min(Duration::from_millis(10));
        let spawned = std::thread::Builder::new()
            .name("heaptag-writer".into())
            .spawn(move || worker::run(tick));
        if let Err(e) = spawned {
            if let Some(w) = WRITER.lock().unwrap_or_else(PoisonError::into_inner).take() {
                w.discard();
            }
            return fail(LogError::NoThread(e));
        }
        // Release: the writer's state and settings above are published
        // with it.
        STATE.store(ON, Ordering::Release);
        Ok(path)
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
    /// The log file (its first segment, when written in segments).
    pub path: PathBuf,
    /// Bytes written (all segments).
    pub bytes: u64,
    /// Allocator events written (allocations, frees, reallocs, samples).
    pub events: u64,
    /// Events dropped (buffer full, lost to write failures, or not written
    /// by the finish deadline).
    pub dropped: u64,
    /// The end record was written by the deadline
    /// ([`LogConfig::finish_timeout`]); false when `finish` gave up.
    pub ended: bool,
    /// Files written: 1, or the number of segments.
    pub segments: u32,
}

/// Finishes the event log: the writer thread fingerprints the blocks still
/// alive, takes a last sample, drains the queue, writes the end record
/// (symbols and `fsync` only when configured) and closes the file. Later
/// events are not logged, until [`LogConfig::start`] opens a new log. Runs by
/// itself at normal process exit.
///
/// Never waits longer than the finish timeout (`HEAPTAG_FINISH_TIMEOUT`,
/// [`LogConfig::finish_timeout`], 3 s by default), holding no lock the
/// program's threads need: when a write is stuck, what was not written is
/// counted in `dropped`, said on stderr and in the file's reserve frame, and
/// the summary has `ended: false`.
///
/// Returns `None` when no log was being written.
pub fn finish() -> Option<LogSummary> {
    finish::finish()
}

/// The first file of the log being written (or being closed), if any: for
/// code that must know whether `HEAPTAG_LOG` started one (the variable itself
/// is removed from the environment once read).
pub fn log_path() -> Option<PathBuf> {
    let state = STATE.load(Ordering::Acquire);
    if state != ON && state != CLOSING {
        return None;
    }
    finish::first_path()
}

/// Records a named point in the run: a mark record, a fingerprint of every
/// live tracked block (so duplicates alive at this moment are seen even if
/// the program never frees them), and a memory sample at the writer's next
/// cycle (within 10 ms or the sampling interval, whichever is shorter, of
/// the previous sample: marks in a tight loop do not make a sample each).
/// Does nothing when no log is being written.
pub fn mark(label: &str) {
    if !on() {
        return;
    }
    side_mark(crate::clock::now_ns(), label);
    fingerprint_live(FpWhen::Mark, None);
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
