//! The writer: drains the event ring, encodes frames, samples the process,
//! and writes with plain `write(2)` calls on a file it created itself; closes
//! the log at `finish()` (see `finish.rs`) and, with `HEAPTAG_LOG_MAX`, goes
//! on in a new segment when one is full (see `segment.rs`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use allocator_api2::vec::Vec as IVec;
use heaptag_format::codec::CHUNK;
use heaptag_format::{FrameEncoder, Header, LogSettings, RecordRef, Sink, TagCount, VERSION};

use super::finish::{self, ABANDONED, PENDING};
use crate::health::{SAMPLES, SAMPLE_NS, SAMPLE_TAGS_VISITED};

use super::ring::Event;
use super::segment::{self, Segments};
use super::{procfs, stacks, LogConfig, LogError, LogSummary};
use super::{CLOSING, ON, RING, SAMPLE_NOW, STARTING, STATE, WRITER};
use crate::clock;
use crate::health::{LOG_EVENTS_LOST, LOG_WRITE_ERRORS};
use crate::internal::Internal;
use crate::tag::{self, Tag};

/// A byte buffer on heaptag's internal heap (not tracked, counted as overhead).
///
/// When it cannot grow, bytes are dropped and the failure remembered, so
/// the frame encoder drops the whole record (and it is counted as lost)
/// instead of writing a garbled one.
pub(super) struct IBuf {
    v: IVec<u8, Internal>,
    failed: bool,
}

impl IBuf {
    fn new() -> IBuf {
        IBuf {
            v: IVec::new_in(Internal),
            failed: false,
        }
    }

    /// The bytes held.
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.v
    }
}

impl IBuf {
    /// Appends `bytes` when the buffer can grow to hold them (false, and
    /// nothing appended, when it cannot).
    ///
    /// One copy of the whole slice: allocator-api2's `extend_from_slice`
    /// clones element by element (it has no `Copy` specialisation on
    /// stable), a loop iteration per byte of every record and frame.
    #[inline]
    fn append(&mut self, bytes: &[u8]) -> bool {
        if self.v.try_reserve(bytes.len()).is_err() {
            return false;
        }
        let len = self.v.len();
        // SAFETY: `try_reserve` made room for `bytes.len()` more bytes after
        // `len`; the source is a distinct live slice (the buffer is borrowed
        // mutably, so `bytes` cannot point into it); `u8` needs no drop and
        // every byte up to the new length is written before `set_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.v.as_mut_ptr().add(len), bytes.len());
            self.v.set_len(len + bytes.len());
        }
        true
    }
}

impl Sink for IBuf {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        if !self.append(bytes) {
            self.failed = true;
        }
    }
    #[inline]
    fn put_chunk(&mut self, chunk: &[u8; CHUNK], len: usize) {
        let len = len.min(CHUNK);
        if self.v.try_reserve(CHUNK).is_err() {
            self.failed = true;
            return;
        }
        let at = self.v.len();
        // SAFETY: `try_reserve` made room for `CHUNK` bytes after `at`, so
        // the whole chunk (a fixed-size copy, cheaper than a variable one)
        // fits in the spare capacity; only its first `len <= CHUNK` bytes
        // are made part of the buffer. `chunk` is a distinct array; `u8`
        // needs no drop.
        unsafe {
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), self.v.as_mut_ptr().add(at), CHUNK);
            self.v.set_len(at + len);
        }
    }
    #[inline]
    fn len(&self) -> usize {
        self.v.len()
    }
    fn as_slice(&self) -> &[u8] {
        &self.v
    }
    fn set(&mut self, at: usize, byte: u8) {
        if let Some(b) = self.v.get_mut(at) {
            *b = byte;
        }
    }
    fn insert(&mut self, at: usize, bytes: &[u8]) {
        if at > self.v.len() || !self.append(bytes) {
            self.failed = true;
            return;
        }
        self.v[at..].rotate_right(bytes.len());
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        self.v.truncate(len);
        self.failed = false;
    }
    #[inline]
    fn failed(&self) -> bool {
        self.failed
    }
}

/// The tag the writer thread's own allocations are charged to.
pub(crate) fn writer_tag() -> Tag {
    Tag::new(None, Some(heaptag_format::WRITER_STAGE), None)
}

/// Makes the calling thread heaptag's own until the guard drops: its
/// allocations are counted under [`writer_tag`] but never recorded, sampled
/// or logged (the writer thread, and the thread running `finish()`).
pub(crate) fn enter_writer() -> WriterGuard {
    WriterGuard {
        internal: crate::thread::set_internal(true),
        _tag: writer_tag().enter(),
    }
}

/// See [`enter_writer`].
pub(crate) struct WriterGuard {
    internal: bool,
    _tag: crate::TagGuard,
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        crate::thread::set_internal(self.internal);
    }
}

/// Payload size of the reserve frame written right after the header, which
/// the writer overwrites in place with the count of lost events when the
/// file stops growing (disk full): the one place it can still say so.
const RESERVE: usize = 256;

/// Flush a frame when its payload reaches this size.
const FRAME_TARGET: usize = 1 << 20;
/// Events popped per batch before definitions are brought up to date.
const BATCH: usize = 4096;

pub(crate) struct Writer {
    fd: libc::c_int,
    /// The log's path (its first segment's).
    pub(crate) path: PathBuf,
    /// The file being written (a later segment's, when rotating).
    file_path: PathBuf,
    /// The encoded header, the same at the top of every segment.
    head: IBuf,
    /// Bytes of the segments already closed.
    closed_bytes: u64,
    /// `fsync` each file as it is closed.
    fsync: bool,
    /// Rotation state, with `HEAPTAG_LOG_MAX`.
    seg: Option<Segments>,
    /// A rotation failed and was reported (reported once).
    rotate_failed: bool,
    /// Records of the frame being built.
    enc: FrameEncoder<IBuf>,
    /// The frame being written.
    frame: IBuf,
    batch: IVec<Event, Internal>,
    /// Events in `payload` (lost if its write fails).
    pending_events: u64,
    /// Stacks `1..=stacks_sent` are defined in the file or in the frame
    /// being built.
    stacks_sent: u32,
    /// The same, as of the last frame written: a failed write rolls the
    /// count above back to it, so its definitions are sent again.
    stacks_written: u32,
    /// Tag ids defined in frames not written yet: a failed write defines
    /// them again (`tag::redefine`).
    defs_unwritten: IVec<u32, Internal>,
    /// Scratch for `tag::take_definitions` and the sample (kept, so a
    /// sample allocates nothing once they have grown).
    defs: IVec<(u32, Tag), Internal>,
    overflowed: IVec<Tag, Internal>,
    changed: IVec<TagCount, Internal>,
    retired: IVec<TagCount, Internal>,
    /// Tags retired by a sample, with the ring's enqueue position then:
    /// their final counters and `tag_retire` go out once every event queued
    /// before is written, then their ids are released for reuse.
    pending: IVec<(u64, TagCount), Internal>,
    /// The next sample lists every tag in use (the first of this log).
    full_sample: bool,
    /// A write failed outside `send_definitions`: definitions go out again
    /// before the next record that may use them.
    resend: bool,
    /// `send_definitions` is running (it does not call itself).
    in_definitions: bool,
    /// Failed frame writes so far.
    failures: u64,
    interval_ns: u64,
    last_sample_ns: u64,
    /// A sample the next cycle takes whatever the time since the last one:
    /// the final one at `finish` (the file's last counters must be the
    /// process's final figures) and a new segment's first.
    sample_owed: bool,
    last_dropped: u64,
    symbols: bool,
    events: u64,
    /// Bytes of the file being written.
    bytes: u64,
    /// File offset of the reserve frame.
    reserve_at: u64,
}

/// Creates the file at `path` (0600, never through a symlink), or with
/// `overwrite` takes over an existing regular file of ours (see
/// [`take_over`]); returns its descriptor.
fn open_file(path: &Path, overwrite: bool) -> Result<libc::c_int, LogError> {
    let path = path.to_path_buf();
    if let Ok(m) = std::fs::symlink_metadata(&path) {
        if m.file_type().is_symlink() {
            return Err(LogError::Symlink(path));
        }
        if !overwrite {
            return Err(LogError::Exists(path));
        }
    }
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| LogError::Io(path.clone(), std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    // Overwriting opens without O_TRUNC and without blocking (a FIFO with
    // no reader would block forever; with one, gives ENXIO or a FIFO),
    // and checks what it opened before changing anything.
    let flags = libc::O_WRONLY
        | libc::O_CREAT
        | libc::O_CLOEXEC
        | libc::O_NOFOLLOW
        | if overwrite { libc::O_NONBLOCK } else { libc::O_EXCL };
    // SAFETY: `c` is a valid NUL-terminated path; the mode argument is
    // required with O_CREAT.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EEXIST) => LogError::Exists(path),
            Some(libc::ELOOP) => LogError::Symlink(path),
            // O_NONBLOCK on a FIFO with no reader.
            Some(libc::ENXIO) => LogError::NotRegular(path),
            _ => LogError::Io(path, e),
        });
    }
    if overwrite {
        if let Err(e) = take_over(fd, &path) {
            // SAFETY: `fd` is the descriptor opened above, closed once.
            unsafe { libc::close(fd) };
            return Err(e);
        }
    }
    Ok(fd)
}

impl Writer {
    /// Creates the file (see [`open_file`]) and writes the header and the
    /// reserve frame; with `HEAPTAG_LOG_MAX`, the first record is the
    /// segment record of segment 0. `ring` is the event buffer's capacity.
    pub(crate) fn open(cfg: &LogConfig, ring: usize) -> Result<Writer, LogError> {
        let path = cfg.resolved_path();
        let fd = open_file(&path, cfg.overwrite)?;
        let interval_ns = cfg.interval.as_nanos().min(u128::from(u64::MAX)) as u64;
        let settings = crate::settings();
        let now_mono = clock::now_ns();
        let header = Header {
            version: VERSION,
            pid: std::process::id(),
            start_wall_ns: clock::wall_ns().saturating_sub(now_mono),
            start_mono_ns: clock::start_mono_ns(),
            exe: procfs::exe(),
            cmdline: procfs::cmdline(),
            heaptag_version: env!("CARGO_PKG_VERSION").to_owned(),
            settings: LogSettings {
                threshold: settings.threshold as u64,
                sample_rate: settings.sample_rate,
                interval_ns,
                fingerprint_min: cfg.fingerprint_min,
                fingerprint_full: cfg.fingerprint_full,
                // What log/fingerprint.rs computes.
                full_hash: heaptag_format::FpHash::Xxh3,
                sampled_hash: heaptag_format::FpHash::Xxh3,
                stack_depth: cfg.stack_depth,
                buffer_events: ring as u64,
                unprefixed_jemalloc: cfg!(feature = "unprefixed_malloc"),
            },
            modules: procfs::modules(),
        };
        let mut head = IBuf::new();
        header.encode(&mut head);
        let seg = cfg.max.map(|rotate| {
            // SAFETY: getpid has no preconditions.
            let pid = unsafe { libc::getpid() } as u64;
            let salt = std::ptr::addr_of!(head) as u64;
            let run = crate::internal::mix64(clock::wall_ns() ^ (pid << 40) ^ salt.rotate_left(23));
            let mut seg = Segments::new(rotate, run, path.clone(), cfg.overwrite, now_mono);
            seg.keep = cfg.keep;
            seg
        });
        let mut w = Writer {
            fd,
            path: path.clone(),
            file_path: path,
            head,
            closed_bytes: 0,
            fsync: cfg.fsync,
            seg,
            rotate_failed: false,
            // Frame 0 is the reserve frame.
            enc: FrameEncoder::new(IBuf::new(), 1),
            frame: IBuf::new(),
            batch: IVec::new_in(Internal),
            pending_events: 0,
            stacks_sent: 0,
            stacks_written: 0,
            defs_unwritten: IVec::new_in(Internal),
            defs: IVec::new_in(Internal),
            overflowed: IVec::new_in(Internal),
            changed: IVec::new_in(Internal),
            retired: IVec::new_in(Internal),
            pending: IVec::new_in(Internal),
            full_sample: true,
            resend: false,
            in_definitions: false,
            failures: 0,
            interval_ns,
            last_sample_ns: 0,
            sample_owed: false,
            last_dropped: 0,
            symbols: cfg.symbols,
            events: 0,
            bytes: 0,
            reserve_at: 0,
        };
        match w.write_opening(fd) {
            Ok((bytes, reserve_at)) => {
                w.bytes = bytes;
                w.reserve_at = reserve_at;
            }
            Err(e) => {
                // SAFETY: `fd` is the descriptor opened above, closed once.
                unsafe { libc::close(fd) };
                return Err(LogError::Io(w.path.clone(), e));
            }
        }
        if let Some(seg) = &mut w.seg {
            seg.created(w.path.clone(), fd);
            seg.opening_bytes = w.bytes;
            let (run, time_ns) = (seg.run, now_mono);
            w.enc.push(RecordRef::Segment { time_ns, run, index: 0 });
        }
        // From here the writer retires tags and defines every tag in use.
        tag::set_writer(true);
        Ok(w)
    }

    /// Writes the header and the reserve frame to a new file `fd`; returns
    /// the file's length and the reserve frame's offset.
    fn write_opening(&self, fd: libc::c_int) -> std::io::Result<(u64, u64)> {
        quietly(|| write_all_fd(fd, &self.head.v))?;
        let reserve = reserve_frame(None);
        quietly(|| write_all_fd(fd, &reserve.v))?;
        let at = self.head.v.len() as u64;
        Ok((at + reserve.v.len() as u64, at))
    }

    /// Makes the file being written known to `finish()`, which records a
    /// loss in it by path when the writer is stuck.
    pub(crate) fn publish(&self) {
        finish::publish_file(self.path.clone(), self.file_path.clone(), self.fd, self.reserve_at);
    }

    /// The log could not start after all (no writer thread): closes and
    /// removes the file, which holds nothing but its header.
    pub(crate) fn discard(self) {
        // SAFETY: `fd` is open and closed only here.
        unsafe { libc::close(self.fd) };
        let _ = std::fs::remove_file(&self.file_path);
    }

    /// Rewrites the reserve frame with the current count of lost events.
    fn update_reserve(&self) {
        let frame = reserve_frame(Some(RecordRef::Dropped {
            time_ns: clock::now_ns(),
            events: super::dropped(),
        }));
        quietly(|| {
            // SAFETY: `frame` is valid for its length; `fd` is open; pwrite
            // does not move the file offset used by the appending writes.
            unsafe {
                libc::pwrite(
                    self.fd,
                    frame.v.as_ptr().cast(),
                    frame.v.len(),
                    self.reserve_at as libc::off_t,
                )
            }
        });
    }

    /// Writes all of `buf` at the file's offset (SIGXFSZ and SIGPIPE held
    /// off: a file size limit gives EFBIG, see [`quietly`]).
    fn write_all(&self, buf: &[u8]) -> std::io::Result<()> {
        quietly(|| write_all_fd(self.fd, buf))
    }

    /// Adds a record to the frame being built; one that does not fit in
    /// memory is dropped whole and counted as lost (false). After a failed
    /// write, the definitions it lost go first.
    fn put(&mut self, r: RecordRef<'_>) -> bool {
        self.add(|enc| enc.push(r))
    }

    /// What [`put`](Writer::put) does around `push`, the encoding of one
    /// record or event into the frame being built.
    #[inline(always)]
    fn add(&mut self, push: impl FnOnce(&mut FrameEncoder<IBuf>) -> bool) -> bool {
        if self.resend && !self.in_definitions {
            self.send_definitions();
        }
        let pushed = push(&mut self.enc);
        if !pushed {
            LOG_EVENTS_LOST.fetch_add(1, Ordering::Relaxed);
        }
        if self.enc.len() >= FRAME_TARGET {
            self.flush();
        }
        pushed
    }

    /// Writes the pending records as one frame. On failure its events are
    /// counted as lost and the program goes on.
    fn flush(&mut self) {
        if self.enc.is_empty() {
            return;
        }
        self.frame.truncate(0);
        if ABANDONED.load(Ordering::Relaxed) {
            // `finish()` gave up and counted these events as lost: nothing
            // more is written.
            self.enc.finish(&mut self.frame);
            self.pending_events = 0;
            return;
        }
        PENDING.store(self.pending_events, Ordering::Relaxed);
        let written = self.enc.finish(&mut self.frame) && {
            let ok = self.write_all(&self.frame.v).is_ok();
            if !ok {
                // Cut off below: the next frame takes this one's number.
                self.enc.retract();
                LOG_WRITE_ERRORS.fetch_add(1, Ordering::Relaxed);
            }
            ok
        };
        match written {
            true => {
                self.bytes += self.frame.v.len() as u64;
                self.events += self.pending_events;
                self.defs_unwritten.clear();
                self.stacks_written = self.stacks_sent;
                // Relaxed: figures for a summary `finish()` makes alone.
                finish::BYTES.store(self.closed_bytes + self.bytes, Ordering::Relaxed);
                finish::EVENTS.store(self.events, Ordering::Relaxed);
            }
            false => {
                LOG_EVENTS_LOST.fetch_add(self.pending_events, Ordering::Relaxed);
                // The definitions in the lost frame never reached the file:
                // send them again (before the next record, or by the next
                // `send_definitions` when this one is the one that failed).
                for id in self.defs_unwritten.drain(..) {
                    tag::redefine(id);
                }
                self.stacks_sent = self.stacks_written;
                self.failures += 1;
                self.resend = !self.in_definitions;
                // Cut a partly written frame off the end, so the file stays a
                // clean sequence of whole frames, and say what was lost.
                // SAFETY: `fd` is open; both calls only change this file.
                unsafe {
                    libc::ftruncate(self.fd, self.bytes as libc::off_t);
                    libc::lseek(self.fd, self.bytes as libc::off_t, libc::SEEK_SET);
                }
                self.update_reserve();
            }
        }
        self.pending_events = 0;
        PENDING.store(0, Ordering::Relaxed);
    }

    /// Sends definitions of tags and stacks created (or lost to a failed
    /// write) since the last call. Stops at the first record that cannot be
    /// encoded or whose frame fails to write: the rest go out next time, so
    /// every definition reaches the file once, in order, and a disk that keeps
    /// failing costs one attempt per call.
    fn send_definitions(&mut self) {
        self.resend = false;
        self.in_definitions = true;
        let failures = self.failures;
        self.defs.clear();
        self.overflowed.clear();
        tag::take_definitions(&mut self.defs, &mut self.overflowed);
        let defs = std::mem::replace(&mut self.defs, IVec::new_in(Internal));
        for (i, &(id, t)) in defs.iter().enumerate() {
            // Listed before the push: a frame flushed by it holds it.
            if self.defs_unwritten.try_reserve(1).is_ok() {
                self.defs_unwritten.push(id);
            }
            let pushed = self.put(RecordRef::TagDef {
                id,
                job: t.job,
                partition: t.partition,
                stage: t.stage,
            });
            if self.failures != failures || !pushed {
                // A failed write defines again what its frame held; a
                // record that did not fit was never in a frame. The rest go
                // out next time.
                if self.failures == failures {
                    tag::redefine(id);
                }
                for &(rest, _) in &defs[i + 1..] {
                    tag::redefine(rest);
                }
                self.defs = defs;
                self.in_definitions = false;
                return;
            }
        }
        self.defs = defs;
        let overflowed = std::mem::replace(&mut self.overflowed, IVec::new_in(Internal));
        for t in overflowed.iter() {
            self.put(RecordRef::TagOverflow {
                time_ns: clock::now_ns(),
                job: t.job,
                partition: t.partition,
                stage: t.stage,
            });
        }
        self.overflowed = overflowed;
        let stacks = stacks::count();
        if stacks > self.stacks_sent {
            let mut stop = false;
            stacks::each(self.stacks_sent + 1, stacks, |id, frames| {
                // Ids come in order; stop at the first one not sent.
                if stop || id != self.stacks_sent + 1 {
                    stop = true;
                    return;
                }
                // As for tags above.
                self.stacks_sent = id;
                let pushed = self.put(RecordRef::StackDef { id, frames });
                if self.failures != failures || !pushed {
                    if self.failures == failures {
                        self.stacks_sent = id - 1;
                    }
                    stop = true;
                }
            });
        }
        self.in_definitions = false;
    }

    /// Adds one event of the ring to the frame being built (as [`put`]
    /// does a record, by the encoder's fast path for events).
    ///
    /// [`put`]: Writer::put
    #[inline]
    fn event(&mut self, ev: &Event) {
        let _ = self.add(|enc| enc.push_event(ev));
        if let Some(seg) = &mut self.seg {
            seg.live.apply(ev);
        }
        if ev.kind().is_event() {
            self.pending_events += 1;
            PENDING.store(self.pending_events, Ordering::Relaxed);
        }
    }

    /// RSS, jemalloc statistics and per-tag counters, now.
    fn sample(&mut self) {
        let t = clock::now_ns();
        self.last_sample_ns = t;
        if let Some(s) = procfs::status() {
            self.put(RecordRef::Rss {
                time_ns: t,
                vm_rss: s.vm_rss,
                vm_hwm: s.vm_hwm,
                rss_anon: s.rss_anon,
                rss_file: s.rss_file,
            });
        }
        if let Ok(j) = crate::jemalloc_stats() {
            self.put(RecordRef::Jemalloc {
                time_ns: t,
                allocated: j.allocated,
                active: j.active,
                resident: j.resident,
                mapped: j.mapped,
                retained: j.retained,
                metadata: j.metadata,
            });
        }
        // Only the tags that changed since the last sample (every tag in
        // use at the first): O(changed), and nothing allocated through the
        // global allocator.
        self.changed.clear();
        self.retired.clear();
        let (visited, totals) = tag::writer_sample(self.full_sample, &mut self.changed, &mut self.retired);
        self.full_sample = false;
        // Tags interned since the last definitions are defined before the
        // counters name them: a reader never meets an id it does not know.
        self.send_definitions();
        // Every event of a retired tag was queued before this position.
        let pos = RING.enqueued();
        for c in self.retired.iter() {
            if self.pending.try_reserve(1).is_ok() {
                self.pending.push((pos, *c));
            } else {
                // No memory to wait with it: release it now (a reader then
                // sees its id defined again without a retire record).
                tag::release_retired([c.tag]);
            }
        }
        let changed = std::mem::replace(&mut self.changed, IVec::new_in(Internal));
        self.put(RecordRef::Counters {
            time_ns: t,
            tags: &changed,
        });
        self.changed = changed;
        let live = totals
            .alloc_bytes
            .wrapping_sub(totals.tracked_free_bytes)
            .wrapping_sub(crate::thread::small_free_bytes());
        self.put(RecordRef::Totals {
            time_ns: t,
            live,
            tracked: totals.tracked_live,
            overhead: crate::internal::OVERHEAD_BYTES.load(Ordering::Relaxed),
        });
        SAMPLES.fetch_add(1, Ordering::Relaxed);
        SAMPLE_TAGS_VISITED.fetch_add(visited, Ordering::Relaxed);
        SAMPLE_NS.fetch_add(clock::now_ns().saturating_sub(t), Ordering::Relaxed);
    }

    /// Writes the final counters and `tag_retire` records of the retired
    /// tags whose events are all written (the ring was drained past the
    /// position at their retirement, or `all`), then releases their ids.
    fn release_retired(&mut self, all: bool) {
        let done = RING.dequeued();
        let n = self.pending.iter().take_while(|(pos, _)| all || *pos <= done).count();
        if n == 0 {
            return;
        }
        let now = clock::now_ns();
        let finals: IVec<TagCount, Internal> = {
            let mut v = IVec::new_in(Internal);
            if v.try_reserve(n).is_ok() {
                v.extend(self.pending[..n].iter().map(|(_, c)| *c));
            }
            v
        };
        self.put(RecordRef::Counters {
            time_ns: now,
            tags: &finals,
        });
        for i in 0..n {
            let id = self.pending[i].1.tag;
            self.put(RecordRef::TagRetire { time_ns: now, id });
        }
        tag::release_retired(self.pending[..n].iter().map(|(_, c)| c.tag));
        self.pending.drain(..n);
    }

    /// One pass: drain events, side records, a sample when due; write.
    pub(crate) fn cycle(&mut self) -> usize {
        clock::anchor();
        let mut drained = 0;
        loop {
            self.batch.clear();
            if self.batch.try_reserve(BATCH).is_err() {
                break;
            }
            while self.batch.len() < BATCH {
                match RING.pop() {
                    Some(ev) => self.batch.push(ev),
                    None => break,
                }
            }
            // Definitions after popping: every id in the batch was created
            // before its event was queued, so it is below these counts.
            self.send_definitions();
            let batch = std::mem::replace(&mut self.batch, IVec::new_in(Internal));
            for ev in batch.iter() {
                self.event(ev);
            }
            let full = batch.len() == BATCH;
            drained += batch.len();
            self.batch = batch;
            if !full {
                break;
            }
            // A long drain (the ring refilling as fast as it empties) must
            // not let the TSC conversion go stale (`clock.rs`).
            clock::anchor();
        }
        let side = super::take_side();
        if !side.is_empty() {
            self.send_definitions();
            for r in side.records() {
                self.put(r);
                if let (Some(seg), RecordRef::External { tag, bytes, .. }) = (&mut self.seg, r) {
                    seg.live.external(tag, bytes);
                }
            }
        }
        // Tags retired at an earlier sample whose events are now written.
        self.release_retired(false);
        let now = clock::now_ns();
        // A sample asked for (or a retirement wanted) at most once per
        // 10 ms (or interval), as when cycles came only that often: under
        // load the writer cycles every 0.16 ms (`next_wait`), and a sample
        // reads /proc and visits the dirty tags under the intern lock.
        // A sample owed (`finish`, a new segment) is taken at once.
        let since = now.saturating_sub(self.last_sample_ns);
        let due = std::mem::take(&mut self.sample_owed)
            || (since >= self.interval_ns.min(10_000_000)
                && (SAMPLE_NOW.swap(false, Ordering::Relaxed) || tag::retire_wanted()));
        if due || since >= self.interval_ns {
            self.sample();
            self.send_definitions();
        }
        let dropped = super::dropped();
        if dropped != self.last_dropped {
            self.last_dropped = dropped;
            self.put(RecordRef::Dropped {
                time_ns: now,
                events: dropped,
            });
        }
        self.flush();
        let rotate = self
            .seg
            .as_ref()
            .is_some_and(|seg| seg.due(self.bytes, clock::now_ns()));
        if rotate && STATE.load(Ordering::Relaxed) == ON {
            self.rotate();
        }
        drained
    }

    /// Writes the end record of the current file, the lost-event count in
    /// its reserve frame, `fsync`s it if asked to and closes it.
    fn close_file(&mut self) {
        let dropped = super::dropped();
        self.put(RecordRef::End {
            time_ns: clock::now_ns(),
            dropped,
        });
        self.flush();
        if dropped > 0 && !ABANDONED.load(Ordering::Relaxed) {
            self.update_reserve();
        }
        // SAFETY: `fd` is open and closed only here (the writer thread owns
        // it; nothing else writes to it).
        unsafe {
            if self.fsync {
                libc::fsync(self.fd);
            }
            libc::close(self.fd);
        }
        self.fd = -1;
    }

    /// Closes the segment being written and goes on in the next one, which
    /// reads alone (see `segment.rs`): header, `segment`, every definition,
    /// what is alive. When the next file cannot be created the current one
    /// goes on growing (said once on stderr) and the rotation is tried again
    /// a segment's worth later.
    fn rotate(&mut self) {
        let now = clock::now_ns();
        let Some(seg) = &mut self.seg else { return };
        let next = seg.index + 1;
        let path = segment::segment_path(&seg.base, next);
        let opened = open_file(&path, seg.overwrite).and_then(|fd| match self.write_opening(fd) {
            Ok(at) => Ok((fd, at)),
            Err(e) => {
                // SAFETY: `fd` was just opened and is closed once.
                unsafe { libc::close(fd) };
                let _ = std::fs::remove_file(&path);
                Err(LogError::Io(path.clone(), e))
            }
        });
        let (fd, (bytes, reserve_at)) = match opened {
            Ok(o) => o,
            Err(e) => {
                if !self.rotate_failed {
                    self.rotate_failed = true;
                    eprintln!("heaptag: cannot start the next log segment ({e}); going on in the current one");
                }
                if let Some(seg) = &mut self.seg {
                    seg.failed(self.bytes, now);
                }
                return;
            }
        };
        self.close_file();
        self.closed_bytes += self.bytes;
        self.fd = fd;
        self.bytes = bytes;
        self.reserve_at = reserve_at;
        self.file_path = path;
        self.enc = FrameEncoder::new(IBuf::new(), 1);
        self.publish();
        finish::SEGMENTS.store(u64::from(next) + 1, Ordering::Relaxed);
        let Some(seg) = &mut self.seg else { return };
        seg.index = next;
        seg.began_ns = now;
        seg.retry_at = 0;
        seg.created(self.file_path.clone(), fd);
        let run = seg.run;
        let live = std::mem::take(&mut seg.live);
        // The opening: the segment record first, then every definition
        // (sent again from the start), then what is alive.
        self.resend = false;
        self.put(RecordRef::Segment {
            time_ns: now,
            run,
            index: next,
        });
        // Every tag in use is defined again, and the first sample of the
        // segment lists every tag (a segment reads alone).
        tag::redefine_all();
        self.full_sample = true;
        self.stacks_sent = 0;
        self.stacks_written = 0;
        self.send_definitions();
        self.put_carried(&live);
        // After the carried records: a reader takes the first other record
        // as the end of them.
        let dropped = super::dropped();
        if dropped > 0 {
            self.put(RecordRef::Dropped {
                time_ns: now,
                events: dropped,
            });
        }
        if let Some(seg) = &mut self.seg {
            seg.live = live;
        }
        // Counters early in the segment (the next cycle), for a reader of
        // it alone.
        self.sample_owed = true;
        self.flush();
        let opening = self.bytes;
        if let Some(seg) = &mut self.seg {
            seg.opening_bytes = opening;
        }
    }

    /// The carried records of what `live` holds.
    fn put_carried(&mut self, live: &segment::Live) {
        for (addr, b) in live.sorted_blocks().iter() {
            let (time_ns, thread, tag, stack, addr, size) = (b.time_ns, b.thread, b.tag, b.stack, *addr, b.size);
            self.put(if b.tracked {
                RecordRef::Carried {
                    time_ns,
                    thread,
                    tag,
                    stack,
                    addr,
                    size,
                }
            } else {
                RecordRef::CarriedSample {
                    time_ns,
                    thread,
                    tag,
                    stack,
                    addr,
                    size,
                    weight: b.weight,
                }
            });
        }
        // Blocks being resized (a `realloc_begin` written, its `realloc`
        // not yet): carried at their old address, and after every carried
        // record moved aside again as the first half of their resize did. A
        // block whose old address was reused meanwhile (by a block carried
        // above) cannot be said in this format and is left out: its
        // `realloc` will find nothing to move.
        let resizing = || {
            live.resizing
                .iter()
                .filter(|(&(_, addr), _)| !live.blocks.contains_key(&addr))
        };
        for (&(_, addr), b) in resizing() {
            self.put(RecordRef::Carried {
                time_ns: b.time_ns,
                thread: b.thread,
                tag: b.tag,
                stack: b.stack,
                addr,
                size: b.size,
            });
        }
        let now = clock::now_ns();
        for (&tag, &bytes) in live.external.iter() {
            self.put(RecordRef::CarriedExternal {
                time_ns: now,
                tag,
                bytes,
            });
        }
        for (&(thread, addr), _) in resizing() {
            self.put(RecordRef::ReallocBegin {
                time_ns: now,
                thread,
                addr,
            });
        }
        // After every carried record (a `native` ends them): which of the
        // carried blocks C/C++ allocated.
        for (&addr, b) in live.blocks.iter() {
            if b.native {
                self.put(RecordRef::Native { addr });
            }
        }
    }

    /// The final work, by `deadline` as far as it depends on the writer:
    /// fingerprints of the live blocks, the last cycle, symbols when asked
    /// for, the end record; closes the file.
    pub(crate) fn finish(&mut self, deadline: Instant) -> LogSummary {
        super::fingerprint_live(heaptag_format::FpWhen::Finish, Some(deadline));
        // No new events from here on; everything queued before is drained
        // below. AcqRel: as in `finish.rs`.
        let _ = STATE.compare_exchange(ON, CLOSING, Ordering::AcqRel, Ordering::Acquire);
        // The final sample, however recent the last one: the file's last
        // counters are the process's final figures.
        self.sample_owed = true;
        self.cycle();
        // A producer that won a cell before CLOSING may not have written it
        // yet (preempted between its CAS and its store): `pop` stops at that
        // cell, and every event queued behind it, other threads' finished
        // pushes included, would be left out of the log uncounted. Wait for
        // it until the deadline; what is still queued then is counted lost.
        while RING.len() > 0 && Instant::now() < deadline {
            std::thread::yield_now();
            self.cycle();
        }
        let left = RING.len() as u64;
        if left > 0 {
            LOG_EVENTS_LOST.fetch_add(left, Ordering::Relaxed);
        }
        // Everything queued is written: the tags retired are released.
        self.release_retired(true);
        tag::set_writer(false);
        if self.symbols && Instant::now() < deadline {
            self.symbolize(deadline);
        }
        self.close_file();
        let ended = !ABANDONED.load(Ordering::Relaxed);
        LogSummary {
            path: self.path.clone(),
            bytes: self.closed_bytes + self.bytes,
            events: self.events,
            dropped: super::dropped(),
            ended,
            segments: self.seg.as_ref().map_or(1, |s| s.index + 1),
        }
    }

    /// Resolves every frame address of the stacks to function, file, line:
    /// one Symbol record per frame inlined at the address, innermost first
    /// (the `backtrace` crate calls back once per inlined frame), so readers
    /// can name the `.clone()` inlined into its caller. Stops at `deadline`.
    fn symbolize(&mut self, deadline: Instant) {
        for addr in stacks::all_frames() {
            if Instant::now() >= deadline {
                break;
            }
            let mut found: Vec<(String, String, u32)> = Vec::new();
            // A return address points after the call; resolve the call itself.
            backtrace::resolve(addr.saturating_sub(1) as *mut std::ffi::c_void, |sym| {
                if found.len() < MAX_INLINED {
                    let mut function = sym.name().map(|n| format!("{n:#}")).unwrap_or_default();
                    let file = sym.filename().map(|f| f.display().to_string()).unwrap_or_default();
                    // Debug info of line tables only gives short names
                    // (`record`): heaptag's own frames keep their crate, so
                    // readers can tell them from the program's.
                    if file.starts_with(OWN_SOURCE) && !function.contains("heaptag_alloc::") {
                        function.insert_str(0, "heaptag_alloc::");
                    }
                    found.push((function, file, sym.lineno().unwrap_or(0)));
                }
            });
            for (function, file, line) in &found {
                self.put(RecordRef::Symbol {
                    addr,
                    function,
                    file,
                    line: *line,
                });
            }
        }
    }
}

impl Drop for Writer {
    /// A writer that goes away without `finish` gives retirement back and
    /// releases the ids it kept waiting (idempotent after `finish`).
    fn drop(&mut self) {
        tag::release_retired(self.pending.drain(..).map(|(_, c)| c.tag));
        tag::set_writer(false);
    }
}

/// Most inlined frames written for one address.
const MAX_INLINED: usize = 64;

/// This crate's source directory, as the debug info names its files.
const OWN_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");

/// Makes the file opened (with O_NONBLOCK) for overwriting ours: only a
/// regular file owned by the effective user is taken; it is emptied, its
/// mode set to 0600 and its descriptor made blocking again.
fn take_over(fd: libc::c_int, path: &std::path::Path) -> Result<(), LogError> {
    let io = |e| Err(LogError::Io(path.to_path_buf(), e));
    // SAFETY: plain data, filled in by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open; `st` is a valid stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return io(std::io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(LogError::NotRegular(path.to_path_buf()));
    }
    // SAFETY: geteuid has no preconditions.
    if st.st_uid != unsafe { libc::geteuid() } {
        return Err(LogError::NotOwned(path.to_path_buf()));
    }
    // SAFETY: `fd` is an open regular file; these change only it.
    let ok = unsafe {
        libc::ftruncate(fd, 0) == 0 && libc::fchmod(fd, 0o600) == 0 && {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK) == 0
        }
    };
    if !ok {
        return io(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The signals a write to the log can raise: SIGXFSZ (past `RLIMIT_FSIZE`,
/// `ulimit -f`) and SIGPIPE. Both terminate the process by default.
const FAULT_SIGNALS: [libc::c_int; 2] = [libc::SIGXFSZ, libc::SIGPIPE];

/// A signal set of `signals`.
fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; the signals are valid numbers.
    unsafe {
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
    }
    set
}

/// Runs `write` (a write to the log file) with SIGXFSZ and SIGPIPE blocked
/// on the calling thread, whichever it is (the writer thread, or the thread
/// running `finish()` or starting the log): past a file size limit the write
/// fails with EFBIG instead of killing the host, and the events are counted
/// as dropped. A signal that became pending because of this write is
/// consumed before the thread's previous mask is restored, so the program
/// never sees it; one that was pending before is left alone. Signal
/// dispositions are never changed.
pub(super) fn quietly<T>(write: impl FnOnce() -> T) -> T {
    let block = sigset(&FAULT_SIGNALS);
    // SAFETY: plain data, filled in by the calls below before being read.
    let (mut old, mut before, mut after): (libc::sigset_t, libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: valid sigset_t pointers; only the calling thread's mask changes.
    let blocked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old) } == 0;
    // SAFETY: `before` is a valid sigset_t.
    let have_before = blocked && unsafe { libc::sigpending(&mut before) } == 0;
    let r = write();
    if !blocked {
        return r;
    }
    // SAFETY: `after` is a valid sigset_t.
    if have_before && unsafe { libc::sigpending(&mut after) } == 0 {
        for s in FAULT_SIGNALS {
            // SAFETY: valid sigset_t pointers and signal numbers.
            let raised = unsafe { libc::sigismember(&after, s) == 1 && libc::sigismember(&before, s) != 1 };
            if raised {
                let one = sigset(&[s]);
                let now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: valid pointers; a zero timeout only polls. The
                // signal is blocked, so it is taken off the pending set.
                unsafe { libc::sigtimedwait(&one, std::ptr::null_mut(), &now) };
            }
        }
    }
    // SAFETY: restores the mask saved above, on the same thread.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

/// Writes all of `buf` to `fd` at its offset, going on after EINTR.
fn write_all_fd(fd: libc::c_int, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for `buf.len()` bytes; `fd` is open.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "write returned 0"));
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// The reserve frame (number 0): `record`, padded to exactly `RESERVE`
/// payload bytes.
pub(super) fn reserve_frame(record: Option<RecordRef<'_>>) -> IBuf {
    let mut enc = FrameEncoder::new(IBuf::new(), 0);
    if let Some(r) = record {
        enc.push(r);
    }
    let padded = enc.pad_to(RESERVE);
    debug_assert!(padded, "a pad fills the reserve frame");
    let mut frame = IBuf::new();
    enc.finish(&mut frame);
    frame
}

/// The shortest wait between two cycles: `tick` / this.
const MAX_SPEEDUP: u32 = 64;

/// The writer's wait before its next cycle, after one that drained
/// `drained` events from a ring of `capacity` events, made during the wait
/// `prev` before it: the wait in which, at the rate just seen, the ring
/// fills to a quarter, within `tick / MAX_SPEEDUP..=tick`, and at most
/// twice `prev` (after a burst the wait grows back over a few cycles, so a
/// burst that pauses briefly finds the writer still quick). So a log of
/// steady, slow events is written every `tick`, and a burst that would
/// fill the ring within a `tick` is drained before it does, instead of
/// dropped. The hot path is unchanged (no wake-up call, no syscall).
pub(crate) fn next_wait(prev: Duration, tick: Duration, drained: usize, capacity: usize) -> Duration {
    let quarter = (capacity / 4).max(1);
    let shortest = tick / MAX_SPEEDUP;
    let prev = prev.clamp(shortest, tick);
    // (never panics: no product of a wait of at most `tick` and a finite
    // positive factor is out of range; if one were, the wait is `tick`)
    let scaled =
        Duration::try_from_secs_f64(prev.as_secs_f64() * quarter as f64 / drained.max(1) as f64).unwrap_or(tick);
    scaled.min(prev.saturating_mul(2)).clamp(shortest, tick)
}

/// The writer thread: a cycle every `tick` (sooner under load, see
/// [`next_wait`]) until `finish()` asks for the
/// final work (see `finish.rs`), which it does, then ends.
pub(crate) fn run(tick: Duration) {
    let _tag = enter_writer();
    // The writer thread never takes SIGXFSZ or SIGPIPE: its writes get EFBIG
    // or EPIPE. (Every write also goes through `quietly`, for the threads
    // that write the header and the end.)
    let block = sigset(&FAULT_SIGNALS);
    // SAFETY: a valid sigset_t; changes only this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &block, std::ptr::null_mut()) };
    let capacity = RING.capacity();
    let mut wait = tick;
    loop {
        let finish_by = finish::wait(wait);
        // Acquire: the log's state, published with ON by `start`.
        let state = STATE.load(Ordering::Acquire);
        if state == STARTING {
            continue;
        }
        if state != ON && state != CLOSING {
            // Forked (no thread of ours runs in a child), or no log.
            return;
        }
        let mut guard = WRITER.lock().unwrap_or_else(PoisonError::into_inner);
        match finish_by {
            None => match guard.as_mut() {
                Some(w) => wait = next_wait(wait, tick, w.cycle(), capacity),
                None => return,
            },
            Some(deadline) => {
                let Some(mut w) = guard.take() else { return };
                drop(guard);
                let summary = w.finish(deadline);
                // Dropped before `done`: its drop gives tag retirement back
                // (`tag::set_writer(false)`), and once `done` says FINISHED
                // the next log may start and take retirement over. A drop
                // after that start cleared the new log's definitions, and it
                // defined no tag at all (a race, seen in 1 of ~60 runs of
                // `log_start_stop` on a loaded machine).
                drop(w);
                finish::done(summary);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heaptag_format::Event;

    #[test]
    fn the_writer_waits_a_tick_while_a_cycle_fills_at_most_a_quarter_of_the_ring() {
        let tick = Duration::from_millis(10);
        for drained in [0, 1, 100, 8192] {
            assert_eq!(next_wait(tick, tick, drained, 32768), tick, "{drained}");
        }
    }

    #[test]
    fn a_burst_shortens_the_wait_in_proportion_down_to_a_floor() {
        let tick = Duration::from_millis(10);
        // A full ring per tick: the ring would fill to a quarter in a
        // quarter of the tick.
        assert_eq!(next_wait(tick, tick, 32768, 32768), tick / 4);
        // Twice as fast after a wait of a quarter tick: an eighth.
        assert_eq!(next_wait(tick / 4, tick, 16384, 32768), tick / 8);
        // Faster than the floor allows: the floor.
        assert_eq!(next_wait(tick, tick, 1 << 30, 32768), tick / MAX_SPEEDUP);
        // Never beyond the tick, whatever the wait was.
        assert_eq!(next_wait(tick * 5, tick, 0, 32768), tick);
        assert_eq!(next_wait(Duration::ZERO, tick, 1 << 30, 32768), tick / MAX_SPEEDUP);
    }

    #[test]
    fn after_a_burst_the_wait_grows_back_by_at_most_doubling() {
        let tick = Duration::from_millis(10);
        let mut wait = tick / MAX_SPEEDUP;
        let mut cycles = 0;
        while wait < tick {
            let next = next_wait(wait, tick, 0, 32768);
            assert!(next <= wait * 2 && next > wait, "{wait:?} -> {next:?}");
            wait = next;
            cycles += 1;
        }
        assert_eq!(cycles, MAX_SPEEDUP.ilog2());
    }

    /// Events of every ring kind with values of every width.
    fn events(n: u64) -> std::vec::Vec<Event> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x >> (x % 64)
        };
        (0..n)
            .map(|i| match i % 8 {
                0 => Event::Alloc {
                    time_ns: next(),
                    thread: next() as u32,
                    tag: next() as u32,
                    stack: next() as u32,
                    addr: next(),
                    size: next(),
                },
                1 => Event::Free {
                    time_ns: next(),
                    thread: next() as u32,
                    addr: next(),
                    size: next(),
                },
                2 => Event::ReallocBegin {
                    time_ns: next(),
                    thread: next() as u32,
                    addr: next(),
                },
                3 => Event::Realloc {
                    time_ns: next(),
                    thread: next() as u32,
                    tag: next() as u32,
                    old_addr: next(),
                    old_size: next(),
                    addr: next(),
                    size: next(),
                },
                4 => Event::SampleAlloc {
                    time_ns: next(),
                    thread: next() as u32,
                    tag: next() as u32,
                    stack: next() as u32,
                    addr: next(),
                    size: next(),
                    weight: next(),
                },
                5 => Event::SampleFree {
                    time_ns: next(),
                    thread: next() as u32,
                    addr: next(),
                    size: next(),
                },
                6 => Event::Native { addr: next() },
                _ => Event::Fingerprint {
                    time_ns: next(),
                    addr: next(),
                    size: next(),
                    hash: next(),
                    meta: heaptag_format::FpMeta {
                        fill: heaptag_format::Fill::Constant(next() as u8),
                        full: true,
                        when: heaptag_format::FpWhen::Mark,
                    },
                },
            })
            .collect()
    }

    #[test]
    fn the_writers_buffer_frames_events_as_a_vec_frames_their_records() {
        // The writer's path (IBuf, push_event, put_chunk, frame copy)
        // against the generic one (Vec<u8>, push of the borrowed record).
        let evs = events(100_000);
        let mut fast = FrameEncoder::new(IBuf::new(), 1);
        let mut plain = FrameEncoder::new(std::vec::Vec::new(), 1);
        let (mut a, mut b) = (IBuf::new(), std::vec::Vec::new());
        for (i, ev) in evs.iter().enumerate() {
            assert!(fast.push_event(ev));
            assert!(plain.push(ev.borrowed()));
            if i % 3000 == 2999 {
                assert!(fast.finish(&mut a));
                assert!(plain.finish(&mut b));
            }
        }
        assert!(fast.finish(&mut a));
        assert!(plain.finish(&mut b));
        assert_eq!(a.as_bytes(), &b[..]);
        // Inserting (the trait's rare path) keeps the bytes in order.
        let mut buf = IBuf::new();
        buf.put(b"abef");
        buf.insert(2, b"cd");
        assert_eq!(buf.as_bytes(), b"abcdef");
    }
}
