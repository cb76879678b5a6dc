//! The writer: drains the event ring, encodes frames, samples the process,
//! and writes with plain `write(2)` calls on a file it created itself.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::Duration;

use allocator_api2::vec::Vec as IVec;
use heaptag_format::{encode_frame, Deltas, Header, LogSettings, Record, Sink, TagCount, VERSION};

use super::ring::{Event, Kind};
use super::{procfs, stacks, LogConfig, LogError, LogSummary};
use super::{RING, SAMPLE_NOW, SIDE, STATE, WRITER};
use crate::clock;
use crate::health::{LOG_EVENTS_LOST, LOG_WRITE_ERRORS};
use crate::internal::Internal;
use crate::tag::{self, Tag};

/// A byte buffer on heaptag's internal heap (not tracked, counted as overhead).
struct IBuf(IVec<u8, Internal>);

impl Sink for IBuf {
    fn put(&mut self, bytes: &[u8]) {
        // On allocation failure the bytes are dropped; the frame's checksum
        // still covers what was written, so the reader stays consistent.
        if self.0.try_reserve(bytes.len()).is_ok() {
            self.0.extend_from_slice(bytes);
        }
    }
}

/// The tag the writer thread's own allocations are charged to.
pub(crate) fn writer_tag() -> Tag {
    Tag::new(None, Some(heaptag_format::WRITER_STAGE), None)
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
    pub(crate) path: PathBuf,
    payload: IBuf,
    frame: IBuf,
    deltas: Deltas,
    batch: IVec<Event, Internal>,
    /// Events in `payload` (lost if its write fails).
    pending_events: u64,
    tags_sent: u32,
    stacks_sent: u32,
    interval_ns: u64,
    last_sample_ns: u64,
    last_dropped: u64,
    symbols: bool,
    events: u64,
    bytes: u64,
    /// File offset of the reserve frame.
    reserve_at: u64,
}

impl Writer {
    /// Creates the file (0600, never through a symlink) and writes the header.
    pub(crate) fn open(cfg: &LogConfig) -> Result<Writer, LogError> {
        let path = cfg.resolved_path();
        if let Ok(m) = std::fs::symlink_metadata(&path) {
            if m.file_type().is_symlink() {
                return Err(LogError::Symlink(path));
            }
            if !cfg.overwrite {
                return Err(LogError::Exists(path));
            }
        }
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| LogError::Io(path.clone(), std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
        let flags = libc::O_WRONLY
            | libc::O_CREAT
            | libc::O_CLOEXEC
            | libc::O_NOFOLLOW
            | if cfg.overwrite { libc::O_TRUNC } else { libc::O_EXCL };
        // SAFETY: `c` is a valid NUL-terminated path; the mode argument is
        // required with O_CREAT.
        let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EEXIST) => LogError::Exists(path),
                Some(libc::ELOOP) => LogError::Symlink(path),
                _ => LogError::Io(path, e),
            });
        }
        let mut w = Writer {
            fd,
            path,
            payload: IBuf(IVec::new_in(Internal)),
            frame: IBuf(IVec::new_in(Internal)),
            deltas: Deltas::default(),
            batch: IVec::new_in(Internal),
            pending_events: 0,
            tags_sent: 0,
            stacks_sent: 0,
            interval_ns: cfg.interval.as_nanos().min(u128::from(u64::MAX)) as u64,
            last_sample_ns: 0,
            last_dropped: 0,
            symbols: cfg.symbols,
            events: 0,
            bytes: 0,
            reserve_at: 0,
        };
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
                interval_ns: w.interval_ns,
                fingerprint_min: cfg.fingerprint_min,
                fingerprint_full: cfg.fingerprint_full,
                stack_depth: cfg.stack_depth,
                buffer_events: cfg.buffer_events.clamp(64, 1 << 24).next_power_of_two() as u64,
                unprefixed_jemalloc: cfg!(feature = "unprefixed_malloc"),
            },
            modules: procfs::modules(),
        };
        let mut head = IBuf(IVec::new_in(Internal));
        header.encode(&mut head);
        if let Err(e) = w.write_all(&head.0) {
            // SAFETY: `fd` is the descriptor opened above, closed once.
            unsafe { libc::close(w.fd) };
            return Err(LogError::Io(w.path, e));
        }
        w.bytes += head.0.len() as u64;
        w.reserve_at = w.bytes;
        let reserve = reserve_frame(&[]);
        if let Err(e) = w.write_all(&reserve.0) {
            // SAFETY: as above.
            unsafe { libc::close(w.fd) };
            return Err(LogError::Io(w.path, e));
        }
        w.bytes += reserve.0.len() as u64;
        Ok(w)
    }

    /// Rewrites the reserve frame with the current count of lost events.
    fn update_reserve(&self) {
        let rec = Record::Dropped {
            time_ns: clock::now_ns(),
            events: super::dropped(),
        };
        let frame = reserve_frame(&[rec]);
        // SAFETY: `frame` is valid for its length; `fd` is open; pwrite does
        // not move the file offset used by the appending writes.
        unsafe {
            libc::pwrite(
                self.fd,
                frame.0.as_ptr().cast(),
                frame.0.len(),
                self.reserve_at as libc::off_t,
            )
        };
    }

    fn write_all(&self, mut buf: &[u8]) -> std::io::Result<()> {
        while !buf.is_empty() {
            // SAFETY: `buf` is valid for `buf.len()` bytes; `fd` is open.
            let n = unsafe { libc::write(self.fd, buf.as_ptr().cast(), buf.len()) };
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

    fn put(&mut self, r: &Record) {
        r.encode(&mut self.deltas, &mut self.payload);
    }

    /// Writes the pending payload as one frame. On failure its events are
    /// counted as lost and the program goes on.
    fn flush(&mut self) {
        if self.payload.0.is_empty() {
            return;
        }
        self.frame.0.clear();
        encode_frame(&self.payload.0, &mut self.frame);
        match self.write_all(&self.frame.0) {
            Ok(()) => {
                self.bytes += self.frame.0.len() as u64;
                self.events += self.pending_events;
            }
            Err(_) => {
                LOG_EVENTS_LOST.fetch_add(self.pending_events, Ordering::Relaxed);
                LOG_WRITE_ERRORS.fetch_add(1, Ordering::Relaxed);
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
        self.payload.0.clear();
        self.deltas = Deltas::default();
        self.pending_events = 0;
    }

    /// Sends definitions of tags and stacks created since the last call.
    fn send_definitions(&mut self) {
        let tags = tag::count();
        for id in self.tags_sent..tags {
            let t = tag::tag_of(id);
            self.put(&Record::TagDef {
                id,
                job: t.job,
                stage: t.stage.map(str::to_owned),
                partition: t.partition,
            });
        }
        self.tags_sent = self.tags_sent.max(tags);
        let stacks = stacks::count();
        if stacks > self.stacks_sent {
            let mut defs = Vec::new();
            stacks::each(self.stacks_sent + 1, stacks, |id, frames| {
                defs.push(Record::StackDef {
                    id,
                    frames: frames.to_vec(),
                })
            });
            for d in &defs {
                self.put(d);
            }
            self.stacks_sent = stacks;
        }
    }

    fn event(&mut self, ev: &Event) {
        let r = match ev.kind {
            Kind::Alloc => Record::Alloc {
                time_ns: ev.time_ns,
                thread: ev.thread,
                tag: ev.tag,
                stack: ev.stack,
                addr: ev.addr,
                size: ev.size,
            },
            Kind::Free => Record::Free {
                time_ns: ev.time_ns,
                thread: ev.thread,
                addr: ev.addr,
                size: ev.size,
            },
            Kind::ReallocBegin => Record::ReallocBegin {
                time_ns: ev.time_ns,
                thread: ev.thread,
                addr: ev.addr,
            },
            Kind::Realloc => Record::Realloc {
                time_ns: ev.time_ns,
                thread: ev.thread,
                tag: ev.tag,
                old_addr: ev.a,
                old_size: ev.b,
                addr: ev.addr,
                size: ev.size,
            },
            Kind::SampleAlloc => Record::SampleAlloc {
                time_ns: ev.time_ns,
                thread: ev.thread,
                tag: ev.tag,
                stack: ev.stack,
                addr: ev.addr,
                size: ev.size,
                weight: ev.a,
            },
            Kind::SampleFree => Record::SampleFree {
                time_ns: ev.time_ns,
                thread: ev.thread,
                addr: ev.addr,
                size: ev.size,
            },
            Kind::Fingerprint => Record::Fingerprint {
                time_ns: ev.time_ns,
                addr: ev.addr,
                size: ev.size,
                hash: ev.a,
                full: ev.full,
                fill: ev.fill,
                when: ev.when,
            },
        };
        self.put(&r);
        if r.is_event() {
            self.pending_events += 1;
        }
    }

    /// RSS, jemalloc statistics and per-tag counters, now.
    fn sample(&mut self) {
        let t = clock::now_ns();
        self.last_sample_ns = t;
        if let Some(s) = procfs::status() {
            self.put(&Record::Rss {
                time_ns: t,
                vm_rss: s.vm_rss,
                vm_hwm: s.vm_hwm,
                rss_anon: s.rss_anon,
                rss_file: s.rss_file,
            });
        }
        if let Ok(j) = crate::jemalloc_stats() {
            self.put(&Record::Jemalloc {
                time_ns: t,
                allocated: j.allocated,
                active: j.active,
                resident: j.resident,
                mapped: j.mapped,
                retained: j.retained,
                metadata: j.metadata,
            });
        }
        let snap = crate::snapshot();
        let tags = snap
            .tags
            .iter()
            .enumerate()
            .filter(|(_, s)| s.alloc_count > 0 || s.external_bytes > 0)
            .map(|(id, s)| TagCount {
                tag: id as u32,
                alloc_bytes: s.alloc_bytes,
                alloc_count: s.alloc_count,
                tracked_live: s.tracked.live_bytes,
                small_live: s.small.live_bytes,
                peak: s.peak_live_bytes,
                external: s.external_bytes,
            })
            .collect();
        self.put(&Record::Counters { time_ns: t, tags });
        self.put(&Record::Totals {
            time_ns: t,
            live: snap.totals.live_bytes,
            tracked: snap.totals.tracked_live_bytes,
            overhead: snap.overhead_bytes,
        });
    }

    /// One pass: drain events, side records, a sample when due; write.
    pub(crate) fn cycle(&mut self) {
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
                if self.payload.0.len() >= FRAME_TARGET {
                    self.flush();
                }
            }
            let full = batch.len() == BATCH;
            self.batch = batch;
            if !full {
                break;
            }
        }
        let side = std::mem::take(&mut *SIDE.lock().unwrap_or_else(PoisonError::into_inner));
        if !side.is_empty() {
            self.send_definitions();
            for r in &side {
                self.put(r);
            }
        }
        let now = clock::now_ns();
        if SAMPLE_NOW.swap(false, Ordering::Relaxed) || now.saturating_sub(self.last_sample_ns) >= self.interval_ns {
            self.sample();
            self.send_definitions();
        }
        let dropped = super::dropped();
        if dropped != self.last_dropped {
            self.last_dropped = dropped;
            self.put(&Record::Dropped {
                time_ns: now,
                events: dropped,
            });
        }
        self.flush();
    }

    /// The last cycle, symbols, the end record; closes the file.
    pub(crate) fn finish(&mut self) -> LogSummary {
        SAMPLE_NOW.store(true, Ordering::Relaxed);
        self.cycle();
        if self.symbols {
            self.symbolize();
        }
        let dropped = super::dropped();
        self.put(&Record::End {
            time_ns: clock::now_ns(),
            dropped,
        });
        self.flush();
        if dropped > 0 {
            self.update_reserve();
        }
        // SAFETY: `fd` is open and closed only here (the writer was taken
        // out of WRITER, so no one else holds it).
        unsafe {
            libc::fsync(self.fd);
            libc::close(self.fd);
        }
        self.fd = -1;
        LogSummary {
            path: self.path.clone(),
            bytes: self.bytes,
            events: self.events,
            dropped,
        }
    }

    /// Resolves every frame address of the stacks to function, file, line.
    fn symbolize(&mut self) {
        for addr in stacks::all_frames() {
            let mut found: Option<(String, String, u32)> = None;
            // A return address points after the call; resolve the call itself.
            backtrace::resolve(addr.saturating_sub(1) as *mut std::ffi::c_void, |sym| {
                if found.is_none() {
                    found = Some((
                        sym.name().map(|n| format!("{n:#}")).unwrap_or_default(),
                        sym.filename().map(|f| f.display().to_string()).unwrap_or_default(),
                        sym.lineno().unwrap_or(0),
                    ));
                }
            });
            if let Some((function, file, line)) = found {
                self.put(&Record::Symbol {
                    addr,
                    function,
                    file,
                    line,
                });
                if self.payload.0.len() >= FRAME_TARGET {
                    self.flush();
                }
            }
        }
    }
}

/// A frame of exactly `RESERVE` payload bytes: `records`, then padding.
fn reserve_frame(records: &[Record]) -> IBuf {
    let mut payload = IBuf(IVec::new_in(Internal));
    let mut d = Deltas::default();
    for r in records {
        r.encode(&mut d, &mut payload);
    }
    let left = RESERVE.saturating_sub(payload.0.len());
    // A Pad record is 1 kind byte, a varint length, and that many zeros.
    let len = if left >= 131 { left - 3 } else { left.saturating_sub(2) };
    Record::Pad { len: len as u32 }.encode(&mut d, &mut payload);
    debug_assert_eq!(payload.0.len(), RESERVE);
    let mut frame = IBuf(IVec::new_in(Internal));
    encode_frame(&payload.0, &mut frame);
    frame
}

/// The writer thread: a cycle every `tick` until the log finishes.
pub(crate) fn run(tick: Duration) {
    let _tag = writer_tag().enter();
    loop {
        std::thread::sleep(tick);
        if STATE.load(Ordering::Acquire) != super::ON {
            return;
        }
        let mut guard = WRITER.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.as_mut() {
            Some(w) => w.cycle(),
            None => return,
        }
    }
}
