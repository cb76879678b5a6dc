//! The records of a heaptag log: the one table of record kinds, from which
//! the owned and borrowed records, the allocator's ring event, the encoder,
//! the decoder, the kind names and `docs/FORMAT.md`'s record table all come
//! (see `schema.rs` for the macro, `field.rs` for the field encodings).
//!
//! A record is a kind byte, then (from format version 2) a varint length of
//! its body, then the body: its fields in table order. Times and addresses
//! are deltas against the previous record of the same frame, so a typical
//! tracked allocation takes 12-18 bytes and a free 8-12; the delta state
//! restarts at every frame, so any frame decodes on its own. A reader skips
//! a kind it does not know by its length, and ignores bytes after the fields
//! it knows (fields a newer writer appended).

use crate::codec::{varint_bytes, Count, Cursor, Sink, Staging};
use crate::field::{
    Addr, Deltas, Field, FpFlags, Frames, Hash64, OptStr, OptU32, OptU64, Str, TagCounts, Time, Zeros, I32, I64, U32,
    U64,
};
use crate::schema::records;
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
    /// Just before the block was freed (a realloc takes none).
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

/// What a fingerprint says besides its hash: how the block is filled,
/// whether it was hashed whole, and when it was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FpMeta {
    /// How the block is filled.
    pub fill: Fill,
    /// True when every byte was hashed (otherwise sampled blocks).
    pub full: bool,
    /// When it was taken.
    pub when: FpWhen,
}

/// One field of a record kind, as documented in `docs/FORMAT.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldDoc {
    /// Field name.
    pub name: &'static str,
    /// How it is encoded.
    pub encoding: &'static str,
    /// What it means (doc lines).
    pub doc: &'static str,
}

records! {
    events {
        /// A tracked (>= threshold) block was allocated.
        3 Alloc "alloc" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Allocating thread's number.
            thread: U32,
            /// Tag charged.
            tag: U32,
            /// Call stack (0: none).
            stack: U32,
            /// Address.
            addr: Addr,
            /// Requested size.
            size: U64,
        }
        /// A tracked block was freed (charged to the tag of its `alloc`).
        4 Free "free" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Freeing thread's number.
            thread: U32,
            /// Address.
            addr: Addr,
            /// Requested size.
            size: U64,
        }
        /// Thread `thread` starts resizing the tracked block at `addr`: until
        /// that thread's `realloc` from `addr`, the address may be reused by
        /// another block (the resize may move the block and free the old
        /// address before the `realloc` record can be queued).
        18 ReallocBegin "realloc_begin" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Thread's number.
            thread: U32,
            /// Address being resized.
            addr: Addr,
        }
        /// A tracked block was resized (possibly moved): its old bytes leave
        /// the tag that held them and the new size is charged to `tag`, the
        /// resizing thread's tag (a realloc is a new block).
        5 Realloc "realloc" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Thread's number.
            thread: U32,
            /// Tag charged with the new size (the resizing thread's tag; it
            /// may differ from the old block's).
            tag: U32,
            /// Old address.
            old_addr: Addr,
            /// Old size.
            old_size: U64,
            /// New address.
            addr: Addr,
            /// New size.
            size: U64,
        }
        /// A small block was sampled; it stands for `weight` bytes.
        6 SampleAlloc "sample_alloc" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Thread's number.
            thread: U32,
            /// Tag charged.
            tag: U32,
            /// Call stack (0: none).
            stack: U32,
            /// Address.
            addr: Addr,
            /// Requested size.
            size: U64,
            /// Estimated bytes this sample stands for (size / probability).
            weight: U64,
        }
        /// A sampled small block was freed.
        7 SampleFree "sample_free" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Thread's number.
            thread: U32,
            /// Address.
            addr: Addr,
            /// Requested size.
            size: U64,
        }
        /// The block just allocated at `addr` (the `alloc` or `sample_alloc`
        /// of this address before it, or the `carried`/`carried_sample`
        /// just before it) was allocated by C or C++ code through `malloc`
        /// and its family (the `native` feature), not by Rust. A reader that
        /// does not know this kind skips it and counts the block as Rust.
        /// The address is a plain varint (no delta state), so skipping it
        /// leaves every later record of the frame intact.
        29 Native "native" {
            /// Address of the block (plain, not a delta).
            addr: U64,
        }
        /// A content fingerprint of a tracked block.
        13 Fingerprint "fingerprint" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Address.
            addr: Addr,
            /// Size.
            size: U64,
            /// 64-bit hash of the length and the bytes read.
            hash: Hash64,
            /// How the block is filled, whether it was hashed whole, and when.
            meta: FpFlags,
        }
    }
    records {
        /// Defines tag `id` (sent before its first use).
        1 TagDef "tag_def" {
            /// Tag id used by other records.
            id: U32,
            /// Job.
            job: OptU64,
            /// Partition.
            partition: OptU32,
            /// Stage name.
            stage: OptStr,
        }
        /// Defines call stack `id`: return addresses, innermost first.
        2 StackDef "stack_def" {
            /// Stack id used by other records (0 means "no stack").
            id: U32,
            /// Instruction addresses, innermost first.
            frames: Frames,
        }
        /// A named point in the run.
        8 Mark "mark" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// The label given to `heaptag::mark`.
            label: Str,
        }
        /// Per-tag counters at one moment.
        9 Counters "counters" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// One entry per tag.
            tags: TagCounts,
        }
        /// The process's memory from `/proc/self/status`, in bytes.
        10 Rss "rss" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// VmRSS.
            vm_rss: U64,
            /// VmHWM (peak RSS so far).
            vm_hwm: U64,
            /// RssAnon.
            rss_anon: U64,
            /// RssFile.
            rss_file: U64,
        }
        /// jemalloc's `stats.*`, in bytes.
        11 Jemalloc "jemalloc" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// stats.allocated.
            allocated: U64,
            /// stats.active.
            active: U64,
            /// stats.resident.
            resident: U64,
            /// stats.mapped.
            mapped: U64,
            /// stats.retained.
            retained: U64,
            /// stats.metadata.
            metadata: U64,
        }
        /// External (annotated) memory recorded (+) or released (-).
        12 External "external" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Tag charged.
            tag: U32,
            /// What it is.
            what: Str,
            /// Bytes added (positive) or released (negative).
            bytes: I64,
        }
        /// Events dropped so far (cumulative), when the buffer was full or the
        /// file could not be written.
        14 Dropped "dropped" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Total events dropped since the start.
            events: U64,
        }
        /// A resolved instruction address (written at `finish()`).
        15 Symbol "symbol" {
            /// Instruction address as found in `stack_def` frames.
            addr: U64,
            /// Demangled function name (empty if unknown).
            function: Str,
            /// Source file (empty if unknown).
            file: Str,
            /// Line (0 if unknown).
            line: U32,
        }
        /// The log ended normally.
        16 End "end" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Total events dropped.
            dropped: U64,
        }
        /// Filler: reserves room that the writer can later overwrite in place
        /// (see "the reserve frame").
        17 Pad "pad" {
            /// Bytes of filler after the length.
            len: Zeros,
        }
        /// Process-wide exact totals from heaptag's counters, in bytes.
        19 Totals "totals" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Requested bytes alive, all blocks (exact).
            live: U64,
            /// Of which in tracked blocks (exact).
            tracked: U64,
            /// heaptag's own memory (tables, buffers; not in any tag).
            overhead: U64,
        }
        /// A process `heaptag run` / `heaptag watch` samples (written when it
        /// is first seen).
        20 ProcStart "proc_start" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Its pid.
            pid: U32,
            /// Its parent's pid.
            ppid: U32,
            /// Its command line.
            cmdline: Str,
        }
        /// Memory of a sampled process, from `/proc/PID/status` and
        /// `smaps_rollup`, in bytes.
        21 ProcRss "proc_rss" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// The process.
            pid: U32,
            /// VmRSS.
            vm_rss: U64,
            /// VmHWM.
            vm_hwm: U64,
            /// RssAnon.
            rss_anon: U64,
            /// RssFile.
            rss_file: U64,
            /// RssShmem.
            rss_shmem: U64,
            /// Pss from smaps_rollup (0 when not readable).
            pss: U64,
        }
        /// A sampled process ended.
        22 ProcExit "proc_exit" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// The process.
            pid: U32,
            /// Exit code (0-255), or 128 + signal number when killed; -1 unknown.
            code: I32,
        }
        /// Tag `id` is retired: it had no live tracked or sampled bytes, no
        /// external bytes and no guard held it. Its final counters are in a
        /// `counters` record before this one. A later `tag_def` may define
        /// `id` again for another tag: readers key tags by value (job,
        /// partition, stage), never by id alone.
        23 TagRetire "tag_retire" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// The id retired.
            id: U32,
        }
        /// A tag got no id because every id was in use: its allocations were
        /// charged as untagged. Sent the first time each such tag is seen.
        24 TagOverflow "tag_overflow" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Job.
            job: OptU64,
            /// Partition.
            partition: OptU32,
            /// Stage name.
            stage: OptStr,
        }
        /// First record of each segment of a rotated log (`HEAPTAG_LOG_MAX`).
        /// Every segment of one run has the same `run`, and the same header
        /// start times, so record times continue across segments.
        25 Segment "segment" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Random number shared by every segment of the run.
            run: U64,
            /// Segment number, from 0.
            index: U32,
        }
        /// A tracked block alive when this segment began, allocated in an
        /// earlier one (sent after `segment`, so a segment reads alone). A
        /// reader that read the previous segment already knows the block.
        26 Carried "carried" {
            /// When it was allocated, ns since the log's start.
            time_ns: Time,
            /// Allocating thread's number.
            thread: U32,
            /// Tag charged.
            tag: U32,
            /// Call stack (0: none).
            stack: U32,
            /// Address.
            addr: Addr,
            /// Requested size.
            size: U64,
        }
        /// A sampled small block alive when this segment began (as `carried`).
        27 CarriedSample "carried_sample" {
            /// When it was allocated, ns since the log's start.
            time_ns: Time,
            /// Allocating thread's number.
            thread: U32,
            /// Tag charged.
            tag: U32,
            /// Call stack (0: none).
            stack: U32,
            /// Address.
            addr: Addr,
            /// Requested size.
            size: U64,
            /// Estimated bytes this sample stands for.
            weight: U64,
        }
        /// External bytes a tag held when this segment began (as `carried`).
        28 CarriedExternal "carried_external" {
            /// Nanoseconds since the log's start.
            time_ns: Time,
            /// Tag charged.
            tag: U32,
            /// Bytes held.
            bytes: I64,
        }
    }
}

/// What reading one record gave.
#[derive(Debug)]
pub enum Decoded {
    /// A record of a kind this version knows.
    Record(Record),
    /// A record of a kind this version does not know (a newer writer's),
    /// skipped by its length.
    Unknown {
        /// Its kind code.
        code: u8,
        /// Its body's length.
        len: usize,
    },
}

/// Largest encoded ring event ([`Event`]): kind, a one-byte length and a
/// body of at most 60 bytes (`realloc`: a time delta and four 64-bit
/// values of up to 10 bytes each, two 32-bit ones of up to 5).
pub const MAX_EVENT_LEN: usize = 62;

/// Stage of a ring event: its body from byte 2 (kind, one-byte length);
/// a [`Sink::put_chunk`] chunk.
const EVENT_STAGE: usize = crate::codec::CHUNK;
/// Stage of any other record: its body from byte 3 (kind, a length of up
/// to two bytes); a longer body is counted first instead.
const RECORD_STAGE: usize = 320;

impl RecordRef<'_> {
    /// Appends the record as format version 2 writes it: kind, varint body
    /// length, body. Updates the frame's delta state.
    ///
    /// The body is encoded on the stack, where its length is known before
    /// anything reaches `out`; then kind, length and body go to `out` in one
    /// `put`. A body too long for the stack (a deep stack's definition, a
    /// counter snapshot of many tags, a long string) is measured by a
    /// counting pass first and then written to `out` directly. Either way
    /// the bytes are the same.
    #[inline]
    pub fn encode(&self, d: &mut Deltas, out: &mut impl Sink) {
        let code = self.kind().code();
        let before = *d;
        let mut stage = Staging::<RECORD_STAGE>::new(3);
        self.encode_body(d, &mut stage);
        match stage.record(code, 3) {
            Some(bytes) => out.put(bytes),
            None => {
                *d = before;
                self.encode_long(d, out);
            }
        }
    }

    /// A record whose body does not fit on the stack: its length by a
    /// counting pass, then kind, length and body straight to `out`.
    #[cold]
    #[inline(never)]
    fn encode_long(&self, d: &mut Deltas, out: &mut impl Sink) {
        let mut count = Count(0);
        self.encode_body(&mut d.clone(), &mut count);
        let mut head = [0u8; 11];
        head[0] = self.kind().code();
        let mut len = [0u8; 10];
        let n = varint_bytes(count.0 as u64, &mut len);
        head[1..=n].copy_from_slice(&len[..n]);
        out.put(&head[..=n]);
        self.encode_body(d, out);
    }
}

impl Event {
    /// Appends the event as a record, exactly as
    /// [`RecordRef::encode`] of [`Event::borrowed`] does, on the writer's
    /// fast path: the body (at most [`MAX_EVENT_LEN`] - 2 bytes) is encoded
    /// into a small stack buffer and reaches `out` with the kind and its
    /// one-byte length in one `put`.
    #[inline(always)]
    pub fn encode(&self, d: &mut Deltas, out: &mut impl Sink) {
        let before = *d;
        let mut stage = Staging::<EVENT_STAGE>::new(2);
        self.encode_body(d, &mut stage);
        match stage.chunk(self.kind().code()) {
            Some((chunk, len)) => out.put_chunk(chunk, len),
            // Not reached (every event fits): the general path.
            None => {
                *d = before;
                self.borrowed().encode(d, out);
            }
        }
    }
}

impl Record {
    /// Appends the record (format version 2), updating the delta state.
    pub fn encode(&self, d: &mut Deltas, out: &mut impl Sink) {
        self.borrowed().encode(d, out);
    }

    /// Reads one record from `c` as format `version` wrote it, updating the
    /// frame's delta state.
    ///
    /// Version 1 records have no length: a kind this reader does not know
    /// is an error (the rest of the frame cannot be found). From version 2
    /// the body's length comes first: an unknown kind is skipped, and bytes
    /// after the known fields are ignored.
    #[inline(always)]
    pub fn decode(d: &mut Deltas, c: &mut Cursor<'_>, version: u16) -> Result<Decoded, DecodeError> {
        let at = c.offset();
        let code = c.u8()?;
        if version < 2 {
            return match Record::decode_body(code, d, c)? {
                Some(r) => Ok(Decoded::Record(r)),
                None => Err(Record::unknown_v1(at)),
            };
        }
        let mut body = Record::body(c, at)?;
        let len = body.remaining();
        Ok(match Record::decode_body(code, d, &mut body)? {
            Some(r) => Decoded::Record(r),
            None => Decoded::Unknown { code, len },
        })
    }

    /// A version-2 record's body: its length (a varint at `c`), checked
    /// against what is left of the frame; `at` is the record's offset.
    #[inline(always)]
    fn body<'a>(c: &mut Cursor<'a>, at: u64) -> Result<Cursor<'a>, DecodeError> {
        let len = usize::try_from(c.varint()?).unwrap_or(usize::MAX);
        if len > c.remaining() {
            return Err(DecodeError {
                offset: at,
                what: "record length runs past the end of the frame",
            });
        }
        c.take(len)
    }

    /// A kind a version-1 log cannot skip (it has no record lengths).
    #[cold]
    fn unknown_v1(at: u64) -> DecodeError {
        DecodeError {
            offset: at,
            what: "unknown record kind",
        }
    }

    /// As [`Record::decode`], handing the record to `f` where it was built
    /// (see `decode_body_with`), with `Ok(None)` for a kind this version
    /// does not know (skipped by its length; `f` is not called then): the
    /// reader's loop, where the record goes straight to its consumer.
    #[inline(always)]
    pub(crate) fn decode_known_with<T>(
        d: &mut Deltas,
        c: &mut Cursor<'_>,
        version: u16,
        f: impl FnOnce(&mut Record) -> T,
    ) -> Result<Option<T>, DecodeError> {
        let at = c.offset();
        let code = c.u8()?;
        if version < 2 {
            return match Record::decode_body_with(code, d, c, f)? {
                Some(r) => Ok(Some(r)),
                None => Err(Record::unknown_v1(at)),
            };
        }
        let mut body = Record::body(c, at)?;
        Record::decode_body_with(code, d, &mut body, f)
    }

    /// True for the records that describe one allocator event (the ones the
    /// bytes-per-event figure counts).
    #[inline]
    pub fn is_event(&self) -> bool {
        self.kind().is_event()
    }
}

impl Kind {
    /// True for the kinds that describe one allocator event (the ones the
    /// bytes-per-event figure counts): ring events other than fingerprints
    /// and `native` marks.
    #[inline]
    pub fn is_event(self) -> bool {
        self.is_ring_event() && self != Kind::Fingerprint && self != Kind::Native
    }
}

/// The record table as `docs/FORMAT.md` shows it (Markdown), generated from
/// the table above; a test keeps the document equal to it.
pub fn kinds_markdown() -> String {
    let mut kinds = Kind::ALL.to_vec();
    kinds.sort_by_key(|k| k.code());
    let mut s =
        String::from("| code | kind | fields (in order: name: encoding) | meaning |\n| ---: | --- | --- | --- |\n");
    for k in kinds {
        let fields: Vec<String> = k
            .fields()
            .iter()
            .map(|f| format!("`{}`: {}", f.name, f.encoding))
            .collect();
        let doc: Vec<&str> = k.doc().lines().map(str::trim).collect();
        s.push_str(&format!(
            "| {} | `{}` | {} | {} |\n",
            k.code(),
            k.name(),
            fields.join("; "),
            doc.join(" ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoder as it was before records were staged on the stack: a 0
    /// length byte, the body, then the length set in place and the rest of
    /// a longer varint inserted after it. The reference the new one must
    /// match byte for byte.
    fn encode_old(r: &RecordRef<'_>, d: &mut Deltas, out: &mut Vec<u8>) {
        out.put(&[r.kind().code()]);
        let at = out.len();
        out.put(&[0]);
        r.encode_body(d, out);
        let len = out.len().saturating_sub(at + 1);
        let mut buf = [0u8; 10];
        let n = varint_bytes(len as u64, &mut buf);
        Sink::set(out, at, buf[0]);
        if n > 1 {
            Sink::insert(out, at + 1, &buf[1..n]);
        }
    }

    /// splitmix64.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        /// A value of a random width, 0 to 64 bits.
        fn wide(&mut self) -> u64 {
            match self.next() % 65 {
                0 => 0,
                64 => self.next(),
                b => self.next() & ((1u64 << b) - 1),
            }
        }
        fn w32(&mut self) -> u32 {
            self.wide() as u32
        }
    }

    fn events(r: &mut Rng) -> [Event; 8] {
        [
            Event::Alloc {
                time_ns: r.wide(),
                thread: r.w32(),
                tag: r.w32(),
                stack: r.w32(),
                addr: r.wide(),
                size: r.wide(),
            },
            Event::Free {
                time_ns: r.wide(),
                thread: r.w32(),
                addr: r.wide(),
                size: r.wide(),
            },
            Event::ReallocBegin {
                time_ns: r.wide(),
                thread: r.w32(),
                addr: r.wide(),
            },
            Event::Realloc {
                time_ns: r.wide(),
                thread: r.w32(),
                tag: r.w32(),
                old_addr: r.wide(),
                old_size: r.wide(),
                addr: r.wide(),
                size: r.wide(),
            },
            Event::SampleAlloc {
                time_ns: r.wide(),
                thread: r.w32(),
                tag: r.w32(),
                stack: r.w32(),
                addr: r.wide(),
                size: r.wide(),
                weight: r.wide(),
            },
            Event::SampleFree {
                time_ns: r.wide(),
                thread: r.w32(),
                addr: r.wide(),
                size: r.wide(),
            },
            Event::Native { addr: r.wide() },
            Event::Fingerprint {
                time_ns: r.wide(),
                addr: r.wide(),
                size: r.wide(),
                hash: r.next(),
                meta: FpMeta {
                    fill: [Fill::Mixed, Fill::Zero, Fill::Constant(r.next() as u8)][(r.next() % 3) as usize],
                    full: r.next().is_multiple_of(2),
                    when: [FpWhen::Free, FpWhen::Mark, FpWhen::Finish][(r.next() % 3) as usize],
                },
            },
        ]
    }

    #[test]
    fn events_encode_as_the_old_encoder_did_through_both_paths() {
        let mut r = Rng(20);
        let (mut d_old, mut d_ref, mut d_ev) = (Deltas::default(), Deltas::default(), Deltas::default());
        let (mut old, mut by_ref, mut by_event) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..50_000 {
            if i % 1000 == 0 {
                // A new frame: the delta state restarts.
                (d_old, d_ref, d_ev) = (Deltas::default(), Deltas::default(), Deltas::default());
            }
            for ev in events(&mut r) {
                let at = by_event.len();
                encode_old(&ev.borrowed(), &mut d_old, &mut old);
                ev.borrowed().encode(&mut d_ref, &mut by_ref);
                ev.encode(&mut d_ev, &mut by_event);
                assert!(by_event.len() - at <= MAX_EVENT_LEN, "{ev:?}");
                assert_eq!(by_event[at + 1] as usize, by_event.len() - at - 2, "one-byte length");
            }
        }
        assert_eq!(old, by_ref);
        assert_eq!(old, by_event);
    }

    #[test]
    fn the_largest_events_take_max_event_len() {
        // Every value at its widest: 10-byte deltas (zigzag of i64::MIN) and
        // values, 5-byte 32-bit ones.
        let ev = Event::Realloc {
            time_ns: 1 << 63,
            thread: u32::MAX,
            tag: u32::MAX,
            old_addr: 1 << 63,
            old_size: u64::MAX,
            addr: 0,
            size: u64::MAX,
        };
        let mut out = Vec::new();
        ev.encode(&mut Deltas::default(), &mut out);
        // The second address delta is -2^63 too.
        assert_eq!(out.len(), MAX_EVENT_LEN);
    }

    #[test]
    fn long_and_short_records_encode_as_the_old_encoder_did() {
        let mut r = Rng(21);
        let mut recs = Vec::new();
        for n in (0..400).chain([1000, 4096]) {
            recs.push(Record::StackDef {
                id: r.w32(),
                frames: (0..n).map(|_| r.wide()).collect(),
            });
        }
        for n in (0..60).chain([200, 2000]) {
            recs.push(Record::Counters {
                time_ns: r.wide(),
                tags: (0..n)
                    .map(|_| TagCount {
                        tag: r.w32(),
                        alloc_bytes: r.wide(),
                        alloc_count: r.wide(),
                        tracked_live: r.wide(),
                        small_live: r.wide(),
                        peak: r.wide(),
                        external: r.wide(),
                    })
                    .collect(),
            });
        }
        for len in (0..700).chain(16_370..16_400).chain([1 << 21]) {
            recs.push(Record::Mark {
                time_ns: r.wide(),
                label: "x".repeat(len),
            });
            recs.push(Record::TagDef {
                id: r.w32(),
                job: Some(r.wide()),
                partition: None,
                stage: Some("é".repeat(len / 2)),
            });
        }
        for len in 0..700 {
            recs.push(Record::Pad { len });
        }
        let (mut d_old, mut d_new) = (Deltas::default(), Deltas::default());
        let (mut old, mut new) = (Vec::new(), Vec::new());
        for rec in &recs {
            encode_old(&rec.borrowed(), &mut d_old, &mut old);
            rec.encode(&mut d_new, &mut new);
            assert_eq!(old.len(), new.len(), "{:?}", rec.kind());
        }
        assert_eq!(old, new);
    }
}
