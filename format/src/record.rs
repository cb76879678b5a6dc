//! The records of a heaptag log and their byte encoding (see docs/FORMAT.md).
//!
//! Each record is a kind byte followed by varint fields. Times and addresses
//! are deltas (zigzag) against the previous record of the same frame, so a
//! typical tracked allocation takes 10-16 bytes and a free 6-10. The delta
//! state restarts at every frame, so any frame decodes on its own.

use crate::codec::{put_opt, put_str, put_varint, zigzag, Cursor, Sink};
use crate::DecodeError;

/// How a fingerprinted block is filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fill {
    /// Distinct bytes were seen: the hash identifies the content.
    Mixed,
    /// Every byte read was zero (a fresh `vec![0; n]`): never a duplicate.
    Zero,
    /// Every byte read was this value: never a duplicate.
    Constant(u8),
}

/// When a fingerprint was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FpWhen {
    /// Just before the block was freed (or moved by realloc).
    Free,
    /// At a `heaptag::mark()`, for every live block.
    Mark,
    /// At `heaptag::finish()`, for every live block.
    Finish,
}

/// Counters of one tag in a [`Record::Counters`] snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TagCount {
    /// Tag id.
    pub tag: u32,
    /// Bytes allocated so far (all sizes).
    pub alloc_bytes: u64,
    /// Blocks allocated so far.
    pub alloc_count: u64,
    /// Tracked bytes alive (exact).
    pub tracked_live: u64,
    /// Small bytes alive (estimate).
    pub small_live: u64,
    /// Highest live bytes so far.
    pub peak: u64,
    /// External (annotated) bytes held.
    pub external: u64,
}

/// One record of a heaptag log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// Defines tag `id` (sent before its first use).
    TagDef {
        /// Tag id used by other records.
        id: u32,
        /// Job.
        job: Option<u64>,
        /// Stage name.
        stage: Option<String>,
        /// Partition.
        partition: Option<u32>,
    },
    /// Defines call stack `id`: return addresses, innermost first.
    StackDef {
        /// Stack id used by other records (0 means "no stack").
        id: u32,
        /// Instruction addresses, innermost first.
        frames: Vec<u64>,
    },
    /// A tracked (>= threshold) block was allocated.
    Alloc {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Allocating thread's number.
        thread: u32,
        /// Tag charged.
        tag: u32,
        /// Call stack (0: none).
        stack: u32,
        /// Address.
        addr: u64,
        /// Requested size.
        size: u64,
    },
    /// A tracked block was freed (charged to the tag of its `Alloc`).
    Free {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Freeing thread's number.
        thread: u32,
        /// Address.
        addr: u64,
        /// Requested size.
        size: u64,
    },
    /// Thread `thread` starts resizing the tracked block at `addr`: until that
    /// thread's `Realloc` from `addr`, the address may be reused by another
    /// block (the resize may move the block and free the old address before
    /// the `Realloc` record can be queued).
    ReallocBegin {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Thread's number.
        thread: u32,
        /// Address being resized.
        addr: u64,
    },
    /// A tracked block was resized (possibly moved), keeping its tag.
    Realloc {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Thread's number.
        thread: u32,
        /// Tag charged (the block's original tag).
        tag: u32,
        /// Old address.
        old_addr: u64,
        /// Old size.
        old_size: u64,
        /// New address.
        addr: u64,
        /// New size.
        size: u64,
    },
    /// A small block was sampled; it stands for `weight` bytes.
    SampleAlloc {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Thread's number.
        thread: u32,
        /// Tag charged.
        tag: u32,
        /// Call stack (0: none).
        stack: u32,
        /// Address.
        addr: u64,
        /// Requested size.
        size: u64,
        /// Estimated bytes this sample stands for (size / probability).
        weight: u64,
    },
    /// A sampled small block was freed.
    SampleFree {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Thread's number.
        thread: u32,
        /// Address.
        addr: u64,
        /// Requested size.
        size: u64,
    },
    /// A named point in the run.
    Mark {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// The label given to `heaptag::mark`.
        label: String,
    },
    /// Per-tag counters at one moment.
    Counters {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// One entry per tag.
        tags: Vec<TagCount>,
    },
    /// Process-wide exact totals from heaptag's counters, in bytes.
    Totals {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Requested bytes alive, all blocks (exact).
        live: u64,
        /// Of which in tracked blocks (exact).
        tracked: u64,
        /// heaptag's own memory (tables, buffers; not in any tag).
        overhead: u64,
    },
    /// A process `heaptag run` / `heaptag watch` samples (written when it is
    /// first seen).
    ProcStart {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Its pid.
        pid: u32,
        /// Its parent's pid.
        ppid: u32,
        /// Its command line.
        cmdline: String,
    },
    /// Memory of a sampled process, from `/proc/PID/status` and
    /// `smaps_rollup`, in bytes.
    ProcRss {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// The process.
        pid: u32,
        /// VmRSS.
        vm_rss: u64,
        /// VmHWM.
        vm_hwm: u64,
        /// RssAnon.
        rss_anon: u64,
        /// RssFile.
        rss_file: u64,
        /// RssShmem.
        rss_shmem: u64,
        /// Pss from smaps_rollup (0 when not readable).
        pss: u64,
    },
    /// A sampled process ended.
    ProcExit {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// The process.
        pid: u32,
        /// Exit code (0-255), or 128 + signal number when killed; -1 unknown.
        code: i32,
    },
    /// The process's memory from `/proc/self/status`, in bytes.
    Rss {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// VmRSS.
        vm_rss: u64,
        /// VmHWM (peak RSS so far).
        vm_hwm: u64,
        /// RssAnon.
        rss_anon: u64,
        /// RssFile.
        rss_file: u64,
    },
    /// jemalloc's `stats.*`, in bytes.
    Jemalloc {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// stats.allocated.
        allocated: u64,
        /// stats.active.
        active: u64,
        /// stats.resident.
        resident: u64,
        /// stats.mapped.
        mapped: u64,
        /// stats.retained.
        retained: u64,
        /// stats.metadata.
        metadata: u64,
    },
    /// External (annotated) memory recorded (+) or released (-).
    External {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Tag charged.
        tag: u32,
        /// What it is.
        what: String,
        /// Bytes added (positive) or released (negative).
        bytes: i64,
    },
    /// A content fingerprint of a tracked block.
    Fingerprint {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Address.
        addr: u64,
        /// Size.
        size: u64,
        /// 64-bit hash of the length and the bytes read.
        hash: u64,
        /// True when every byte was hashed (otherwise sampled blocks).
        full: bool,
        /// How the block is filled.
        fill: Fill,
        /// When it was taken.
        when: FpWhen,
    },
    /// Events dropped so far (cumulative), when the buffer was full or the
    /// file could not be written.
    Dropped {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Total events dropped since the start.
        events: u64,
    },
    /// A resolved instruction address (written at `finish()`).
    Symbol {
        /// Instruction address as found in `StackDef` frames.
        addr: u64,
        /// Demangled function name (empty if unknown).
        function: String,
        /// Source file (empty if unknown).
        file: String,
        /// Line (0 if unknown).
        line: u32,
    },
    /// Filler of `len` zero bytes: reserves room that the writer can later
    /// overwrite in place (see docs/FORMAT.md, "the reserve frame").
    Pad {
        /// Bytes of filler after the length.
        len: u32,
    },
    /// The log ended normally.
    End {
        /// Nanoseconds since the log's start.
        time_ns: u64,
        /// Total events dropped.
        dropped: u64,
    },
}

mod kind {
    pub const TAG_DEF: u8 = 1;
    pub const STACK_DEF: u8 = 2;
    pub const ALLOC: u8 = 3;
    pub const FREE: u8 = 4;
    pub const REALLOC: u8 = 5;
    pub const SAMPLE_ALLOC: u8 = 6;
    pub const SAMPLE_FREE: u8 = 7;
    pub const MARK: u8 = 8;
    pub const COUNTERS: u8 = 9;
    pub const RSS: u8 = 10;
    pub const JEMALLOC: u8 = 11;
    pub const EXTERNAL: u8 = 12;
    pub const FINGERPRINT: u8 = 13;
    pub const DROPPED: u8 = 14;
    pub const SYMBOL: u8 = 15;
    pub const END: u8 = 16;
    pub const PAD: u8 = 17;
    pub const REALLOC_BEGIN: u8 = 18;
    pub const TOTALS: u8 = 19;
    pub const PROC_START: u8 = 20;
    pub const PROC_RSS: u8 = 21;
    pub const PROC_EXIT: u8 = 22;
}

/// Delta state of one frame, shared by the encoder and the decoder.
#[derive(Clone, Copy, Debug, Default)]
pub struct Deltas {
    time: u64,
    addr: u64,
}

impl Deltas {
    fn time(&mut self, out: &mut impl Sink, t: u64) {
        put_varint(out, zigzag(t.wrapping_sub(self.time) as i64));
        self.time = t;
    }
    fn addr(&mut self, out: &mut impl Sink, a: u64) {
        put_varint(out, zigzag(a.wrapping_sub(self.addr) as i64));
        self.addr = a;
    }
    #[inline]
    fn read_time(&mut self, c: &mut Cursor<'_>) -> Result<u64, DecodeError> {
        self.time = self.time.wrapping_add(c.svarint()? as u64);
        Ok(self.time)
    }
    #[inline]
    fn read_addr(&mut self, c: &mut Cursor<'_>) -> Result<u64, DecodeError> {
        self.addr = self.addr.wrapping_add(c.svarint()? as u64);
        Ok(self.addr)
    }
}

fn put_fill(out: &mut impl Sink, fill: Fill, full: bool, when: FpWhen) {
    let when = match when {
        FpWhen::Free => 0u8,
        FpWhen::Mark => 1,
        FpWhen::Finish => 2,
    };
    let (f, byte) = match fill {
        Fill::Mixed => (0u8, 0u8),
        Fill::Zero => (1, 0),
        Fill::Constant(b) => (2, b),
    };
    out.put(&[f | (u8::from(full) << 2) | (when << 3), byte]);
}

impl Record {
    /// Appends this record to `out`, updating the frame's delta state.
    pub fn encode(&self, d: &mut Deltas, out: &mut impl Sink) {
        use kind::*;
        match self {
            Record::TagDef {
                id,
                job,
                stage,
                partition,
            } => {
                out.put(&[TAG_DEF]);
                put_varint(out, u64::from(*id));
                put_opt(out, *job);
                put_opt(out, partition.map(u64::from));
                match stage {
                    None => put_varint(out, 0),
                    Some(s) => {
                        put_varint(out, 1);
                        put_str(out, s);
                    }
                }
            }
            Record::StackDef { id, frames } => {
                out.put(&[STACK_DEF]);
                put_varint(out, u64::from(*id));
                put_varint(out, frames.len() as u64);
                let mut prev = 0u64;
                for &f in frames {
                    put_varint(out, zigzag(f.wrapping_sub(prev) as i64));
                    prev = f;
                }
            }
            Record::Alloc {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size,
            } => {
                out.put(&[ALLOC]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*thread));
                put_varint(out, u64::from(*tag));
                put_varint(out, u64::from(*stack));
                d.addr(out, *addr);
                put_varint(out, *size);
            }
            Record::Free {
                time_ns,
                thread,
                addr,
                size,
            } => {
                out.put(&[FREE]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*thread));
                d.addr(out, *addr);
                put_varint(out, *size);
            }
            Record::ReallocBegin { time_ns, thread, addr } => {
                out.put(&[REALLOC_BEGIN]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*thread));
                d.addr(out, *addr);
            }
            Record::Realloc {
                time_ns,
                thread,
                tag,
                old_addr,
                old_size,
                addr,
                size,
            } => {
                out.put(&[REALLOC]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*thread));
                put_varint(out, u64::from(*tag));
                d.addr(out, *old_addr);
                put_varint(out, *old_size);
                d.addr(out, *addr);
                put_varint(out, *size);
            }
            Record::SampleAlloc {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size,
                weight,
            } => {
                out.put(&[SAMPLE_ALLOC]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*thread));
                put_varint(out, u64::from(*tag));
                put_varint(out, u64::from(*stack));
                d.addr(out, *addr);
                put_varint(out, *size);
                put_varint(out, *weight);
            }
            Record::SampleFree {
                time_ns,
                thread,
                addr,
                size,
            } => {
                out.put(&[SAMPLE_FREE]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*thread));
                d.addr(out, *addr);
                put_varint(out, *size);
            }
            Record::Mark { time_ns, label } => {
                out.put(&[MARK]);
                d.time(out, *time_ns);
                put_str(out, label);
            }
            Record::Counters { time_ns, tags } => {
                out.put(&[COUNTERS]);
                d.time(out, *time_ns);
                put_varint(out, tags.len() as u64);
                for t in tags {
                    for v in [
                        u64::from(t.tag),
                        t.alloc_bytes,
                        t.alloc_count,
                        t.tracked_live,
                        t.small_live,
                        t.peak,
                        t.external,
                    ] {
                        put_varint(out, v);
                    }
                }
            }
            Record::Totals {
                time_ns,
                live,
                tracked,
                overhead,
            } => {
                out.put(&[TOTALS]);
                d.time(out, *time_ns);
                for v in [live, tracked, overhead] {
                    put_varint(out, *v);
                }
            }
            Record::ProcStart {
                time_ns,
                pid,
                ppid,
                cmdline,
            } => {
                out.put(&[PROC_START]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*pid));
                put_varint(out, u64::from(*ppid));
                put_str(out, cmdline);
            }
            Record::ProcRss {
                time_ns,
                pid,
                vm_rss,
                vm_hwm,
                rss_anon,
                rss_file,
                rss_shmem,
                pss,
            } => {
                out.put(&[PROC_RSS]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*pid));
                for v in [vm_rss, vm_hwm, rss_anon, rss_file, rss_shmem, pss] {
                    put_varint(out, *v);
                }
            }
            Record::ProcExit { time_ns, pid, code } => {
                out.put(&[PROC_EXIT]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*pid));
                put_varint(out, zigzag(i64::from(*code)));
            }
            Record::Rss {
                time_ns,
                vm_rss,
                vm_hwm,
                rss_anon,
                rss_file,
            } => {
                out.put(&[RSS]);
                d.time(out, *time_ns);
                for v in [vm_rss, vm_hwm, rss_anon, rss_file] {
                    put_varint(out, *v);
                }
            }
            Record::Jemalloc {
                time_ns,
                allocated,
                active,
                resident,
                mapped,
                retained,
                metadata,
            } => {
                out.put(&[JEMALLOC]);
                d.time(out, *time_ns);
                for v in [allocated, active, resident, mapped, retained, metadata] {
                    put_varint(out, *v);
                }
            }
            Record::External {
                time_ns,
                tag,
                what,
                bytes,
            } => {
                out.put(&[EXTERNAL]);
                d.time(out, *time_ns);
                put_varint(out, u64::from(*tag));
                put_str(out, what);
                put_varint(out, zigzag(*bytes));
            }
            Record::Fingerprint {
                time_ns,
                addr,
                size,
                hash,
                full,
                fill,
                when,
            } => {
                out.put(&[FINGERPRINT]);
                d.time(out, *time_ns);
                d.addr(out, *addr);
                put_varint(out, *size);
                out.put(&hash.to_le_bytes());
                put_fill(out, *fill, *full, *when);
            }
            Record::Dropped { time_ns, events } => {
                out.put(&[DROPPED]);
                d.time(out, *time_ns);
                put_varint(out, *events);
            }
            Record::Symbol {
                addr,
                function,
                file,
                line,
            } => {
                out.put(&[SYMBOL]);
                put_varint(out, *addr);
                put_str(out, function);
                put_str(out, file);
                put_varint(out, u64::from(*line));
            }
            Record::Pad { len } => {
                out.put(&[PAD]);
                put_varint(out, u64::from(*len));
                let zeros = [0u8; 64];
                let mut left = *len as usize;
                while left > 0 {
                    let n = left.min(zeros.len());
                    out.put(&zeros[..n]);
                    left -= n;
                }
            }
            Record::End { time_ns, dropped } => {
                out.put(&[END]);
                d.time(out, *time_ns);
                put_varint(out, *dropped);
            }
        }
    }

    /// Reads one record from `c`, updating the frame's delta state.
    #[inline]
    pub fn decode(d: &mut Deltas, c: &mut Cursor<'_>) -> Result<Record, DecodeError> {
        use kind::*;
        let at = c.offset();
        let k = c.u8()?;
        Ok(match k {
            TAG_DEF => {
                let id = c.varint32()?;
                let job = c.opt()?;
                let partition = match c.opt()? {
                    None => None,
                    Some(p) => Some(u32::try_from(p).map_err(|_| DecodeError {
                        offset: at,
                        what: "partition does not fit in 32 bits",
                    })?),
                };
                let stage = match c.varint()? {
                    0 => None,
                    1 => Some(c.string()?),
                    _ => {
                        return Err(DecodeError {
                            offset: at,
                            what: "bad stage marker in tag definition",
                        })
                    }
                };
                Record::TagDef {
                    id,
                    job,
                    stage,
                    partition,
                }
            }
            STACK_DEF => {
                let id = c.varint32()?;
                let n = c.varint()?;
                if n > 4096 {
                    return Err(DecodeError {
                        offset: at,
                        what: "stack deeper than 4096 frames",
                    });
                }
                let mut frames = Vec::with_capacity(n as usize);
                let mut prev = 0u64;
                for _ in 0..n {
                    prev = prev.wrapping_add(c.svarint()? as u64);
                    frames.push(prev);
                }
                Record::StackDef { id, frames }
            }
            ALLOC => Record::Alloc {
                time_ns: d.read_time(c)?,
                thread: c.varint32()?,
                tag: c.varint32()?,
                stack: c.varint32()?,
                addr: d.read_addr(c)?,
                size: c.varint()?,
            },
            FREE => Record::Free {
                time_ns: d.read_time(c)?,
                thread: c.varint32()?,
                addr: d.read_addr(c)?,
                size: c.varint()?,
            },
            REALLOC_BEGIN => Record::ReallocBegin {
                time_ns: d.read_time(c)?,
                thread: c.varint32()?,
                addr: d.read_addr(c)?,
            },
            REALLOC => Record::Realloc {
                time_ns: d.read_time(c)?,
                thread: c.varint32()?,
                tag: c.varint32()?,
                old_addr: d.read_addr(c)?,
                old_size: c.varint()?,
                addr: d.read_addr(c)?,
                size: c.varint()?,
            },
            SAMPLE_ALLOC => Record::SampleAlloc {
                time_ns: d.read_time(c)?,
                thread: c.varint32()?,
                tag: c.varint32()?,
                stack: c.varint32()?,
                addr: d.read_addr(c)?,
                size: c.varint()?,
                weight: c.varint()?,
            },
            SAMPLE_FREE => Record::SampleFree {
                time_ns: d.read_time(c)?,
                thread: c.varint32()?,
                addr: d.read_addr(c)?,
                size: c.varint()?,
            },
            MARK => Record::Mark {
                time_ns: d.read_time(c)?,
                label: c.string()?,
            },
            COUNTERS => {
                let time_ns = d.read_time(c)?;
                let n = c.varint()?;
                if n > (1 << 24) {
                    return Err(DecodeError {
                        offset: at,
                        what: "counter snapshot with more than 2^24 tags",
                    });
                }
                let mut tags = Vec::with_capacity(n.min(4096) as usize);
                for _ in 0..n {
                    tags.push(TagCount {
                        tag: c.varint32()?,
                        alloc_bytes: c.varint()?,
                        alloc_count: c.varint()?,
                        tracked_live: c.varint()?,
                        small_live: c.varint()?,
                        peak: c.varint()?,
                        external: c.varint()?,
                    });
                }
                Record::Counters { time_ns, tags }
            }
            TOTALS => Record::Totals {
                time_ns: d.read_time(c)?,
                live: c.varint()?,
                tracked: c.varint()?,
                overhead: c.varint()?,
            },
            PROC_START => Record::ProcStart {
                time_ns: d.read_time(c)?,
                pid: c.varint32()?,
                ppid: c.varint32()?,
                cmdline: c.string()?,
            },
            PROC_RSS => Record::ProcRss {
                time_ns: d.read_time(c)?,
                pid: c.varint32()?,
                vm_rss: c.varint()?,
                vm_hwm: c.varint()?,
                rss_anon: c.varint()?,
                rss_file: c.varint()?,
                rss_shmem: c.varint()?,
                pss: c.varint()?,
            },
            PROC_EXIT => Record::ProcExit {
                time_ns: d.read_time(c)?,
                pid: c.varint32()?,
                code: i32::try_from(c.svarint()?).unwrap_or(-1),
            },
            RSS => Record::Rss {
                time_ns: d.read_time(c)?,
                vm_rss: c.varint()?,
                vm_hwm: c.varint()?,
                rss_anon: c.varint()?,
                rss_file: c.varint()?,
            },
            JEMALLOC => Record::Jemalloc {
                time_ns: d.read_time(c)?,
                allocated: c.varint()?,
                active: c.varint()?,
                resident: c.varint()?,
                mapped: c.varint()?,
                retained: c.varint()?,
                metadata: c.varint()?,
            },
            EXTERNAL => Record::External {
                time_ns: d.read_time(c)?,
                tag: c.varint32()?,
                what: c.string()?,
                bytes: c.svarint()?,
            },
            FINGERPRINT => {
                let time_ns = d.read_time(c)?;
                let addr = d.read_addr(c)?;
                let size = c.varint()?;
                let hash = u64::from_le_bytes(c.raw(8)?.try_into().expect("8 bytes"));
                let flags = c.u8()?;
                let byte = c.u8()?;
                let fill = match flags & 3 {
                    0 => Fill::Mixed,
                    1 => Fill::Zero,
                    2 => Fill::Constant(byte),
                    _ => {
                        return Err(DecodeError {
                            offset: at,
                            what: "bad fill kind in fingerprint",
                        })
                    }
                };
                let when = match flags >> 3 {
                    0 => FpWhen::Free,
                    1 => FpWhen::Mark,
                    2 => FpWhen::Finish,
                    _ => {
                        return Err(DecodeError {
                            offset: at,
                            what: "bad moment in fingerprint",
                        })
                    }
                };
                Record::Fingerprint {
                    time_ns,
                    addr,
                    size,
                    hash,
                    full: flags & 4 != 0,
                    fill,
                    when,
                }
            }
            DROPPED => Record::Dropped {
                time_ns: d.read_time(c)?,
                events: c.varint()?,
            },
            SYMBOL => Record::Symbol {
                addr: c.varint()?,
                function: c.string()?,
                file: c.string()?,
                line: c.varint32()?,
            },
            PAD => {
                let len = c.varint32()?;
                c.raw(len as usize)?;
                Record::Pad { len }
            }
            END => Record::End {
                time_ns: d.read_time(c)?,
                dropped: c.varint()?,
            },
            _ => {
                return Err(DecodeError {
                    offset: at,
                    what: "unknown record kind",
                })
            }
        })
    }

    /// True for the records that describe one allocator event (the ones the
    /// bytes-per-event figure counts).
    pub fn is_event(&self) -> bool {
        matches!(
            self,
            Record::Alloc { .. }
                | Record::Free { .. }
                | Record::ReallocBegin { .. }
                | Record::Realloc { .. }
                | Record::SampleAlloc { .. }
                | Record::SampleFree { .. }
        )
    }
}
