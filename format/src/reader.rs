//! Reading a log back: frames verified one by one, damage skipped and
//! reported with its offset, sequence numbers checked, records decoded one
//! at a time in bounded memory.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

use crate::codec::Cursor;
use crate::crc;
use crate::field::Deltas;
use crate::frame::{FRAME_HEADER_LEN, FRAME_HEADER_LEN_V1, MAX_FRAME, SYNC};
use crate::header::FIXED_LEN;
use crate::record::{Kind, Record};
use crate::{DecodeError, Header, ReadError};

/// What went wrong in the body of a log (the header was fine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// The file ends inside a frame: the writer was killed or the disk
    /// filled. Everything before is intact.
    Truncated,
    /// A frame's checksum or length is wrong; it was skipped.
    CorruptFrame,
    /// A record inside a checksummed frame did not decode; the rest of that
    /// frame was skipped.
    BadRecord(&'static str),
    /// Frames numbered `expected` to `found - 1` are missing: deleted, or
    /// lost to damage that could not be located.
    MissingFrames {
        /// The number the reader expected.
        expected: u64,
        /// The number it found.
        found: u64,
    },
    /// A frame whose number was already passed: a repeated or moved frame.
    /// Its records were not used (they would count twice or out of order).
    OutOfOrder {
        /// Its number.
        seq: u64,
        /// The number the reader expected.
        expected: u64,
    },
    /// Records after the `End` record (frames appended, repeated or moved
    /// after the log was finished); not used.
    AfterEnd {
        /// How many.
        records: u64,
    },
    /// Reading failed.
    Io(String),
}

/// A problem met while reading, with the byte offset where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Byte offset in the file.
    pub offset: u64,
    /// What happened.
    pub kind: ProblemKind,
    /// Bytes skipped because of it.
    pub skipped: u64,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ProblemKind::Truncated => write!(
                f,
                "log truncated at byte {}: the last {} bytes are an incomplete frame (the writer stopped mid-write); \
                 everything before is used",
                self.offset, self.skipped
            ),
            ProblemKind::CorruptFrame => write!(
                f,
                "corrupt frame at byte {}: skipped {} bytes to the next intact frame",
                self.offset, self.skipped
            ),
            ProblemKind::BadRecord(what) => write!(
                f,
                "undecodable record at byte {} ({what}): skipped the rest of its frame",
                self.offset
            ),
            ProblemKind::MissingFrames { expected, found } if found.saturating_sub(*expected) == 1 => write!(
                f,
                "frame {expected} is missing before byte {} (deleted or lost): figures lack what it held",
                self.offset
            ),
            ProblemKind::MissingFrames { expected, found } => write!(
                f,
                "frames {expected} to {} are missing before byte {} (deleted or lost): figures lack what they held",
                found.saturating_sub(1),
                self.offset
            ),
            ProblemKind::OutOfOrder { seq, expected } => write!(
                f,
                "frame {seq} at byte {} was already passed (the reader is at frame {}): a repeated or moved frame, \
                 its {} bytes were not used",
                self.offset,
                expected.saturating_sub(1),
                self.skipped
            ),
            ProblemKind::AfterEnd { records } => write!(
                f,
                "{records} records ({} bytes) from byte {} come after the end record (appended or moved frames): not used",
                self.skipped, self.offset
            ),
            ProblemKind::Io(e) => write!(f, "read error at byte {}: {e}", self.offset),
        }
    }
}

/// Bytes read from the source at a time.
const CHUNK: usize = 1 << 20;

/// The bytes of the log not yet consumed, read from the source in large
/// chunks: frames are verified and decoded in place, and a resync scan
/// looks ahead without reading anything twice.
///
/// `buf` is allocated (and zeroed) once and reused: the held bytes are
/// `buf[lo..hi]`, reads land in `buf[hi..]`, and forgetting bytes only
/// moves `lo`. The held bytes move to the front only when the space after
/// them is too small for the next read and at least as much was forgotten
/// before them, so each byte moves at most once on average and nothing is
/// zeroed per read.
struct Window<R> {
    inner: R,
    buf: Vec<u8>,
    /// The held bytes are `buf[lo..hi]`.
    lo: usize,
    hi: usize,
    /// File offset of `buf[lo]`.
    base: u64,
    eof: bool,
    /// A read error, reported once by the reader.
    err: Option<String>,
}

impl<R: Read> Window<R> {
    /// A window on `inner` whose first byte is at file offset `base`.
    fn new(inner: R, base: u64) -> Self {
        Window {
            inner,
            buf: Vec::new(),
            lo: 0,
            hi: 0,
            base,
            eof: false,
            err: None,
        }
    }

    /// File offset one past the last byte held.
    fn end(&self) -> u64 {
        self.base + (self.hi - self.lo) as u64
    }

    /// The bytes held, from offset `base`.
    fn held(&self) -> &[u8] {
        &self.buf[self.lo..self.hi]
    }

    /// Makes the window hold the file up to offset `to`; false when the
    /// file ends (or reading fails) first.
    fn fill(&mut self, to: u64) -> bool {
        while self.end() < to {
            if self.eof {
                return false;
            }
            let want = usize::try_from(to - self.end()).unwrap_or(usize::MAX).max(CHUNK);
            if self.buf.len() - self.hi < want {
                // Move the held bytes to the front when at least as many
                // bytes were forgotten before them (so each byte moves at
                // most once on average), then grow geometrically if the room
                // is still short (the only zeroing: of new capacity).
                let held = self.hi - self.lo;
                if self.lo >= held {
                    self.buf.copy_within(self.lo..self.hi, 0);
                    self.hi = held;
                    self.lo = 0;
                }
                if self.buf.len() - self.hi < want {
                    let len = (self.hi + want).max(self.buf.len().saturating_mul(2));
                    self.buf.resize(len, 0);
                }
            }
            match self.inner.read(&mut self.buf[self.hi..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.hi += n.min(self.buf.len() - self.hi),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.eof = true;
                    self.err = Some(e.to_string());
                }
            }
        }
        true
    }

    /// The bytes from offset `from` to `to` (both held).
    fn slice(&self, from: u64, to: u64) -> &[u8] {
        &self.held()[(from - self.base) as usize..(to - self.base) as usize]
    }

    /// Forgets the bytes before offset `before` (their room is reused by a
    /// later read).
    fn discard(&mut self, before: u64) {
        let n = (before.saturating_sub(self.base) as usize).min(self.hi - self.lo);
        self.lo += n;
        self.base += n as u64;
        if self.lo == self.hi {
            self.lo = 0;
            self.hi = 0;
        }
    }
}

/// A frame the resync scan found: verified once the scan's running CRC
/// reaches its end.
struct Candidate {
    start: u64,
    end: u64,
    /// The CRC its header claims.
    want: u32,
    /// CRC of the header bytes it covers, then xor the stream's CRC at the
    /// payload start (see `crc::range`).
    pre: u32,
    /// None until its end is reached.
    ok: Option<bool>,
}

/// Streams the records of a log, frame by frame, in bounded memory.
///
/// Damage never stops the reader early without saying so: every skipped
/// range is listed in [`problems`](LogReader::problems), and
/// [`ended`](LogReader::ended) tells whether the writer finished the log.
/// Time is linear in the file: a resync after damage looks at each byte a
/// constant number of times, however many fake sync markers it holds
/// ([`bytes_examined`](LogReader::bytes_examined) counts it).
pub struct LogReader<R> {
    win: Window<R>,
    header: Header,
    /// Offset of the next frame.
    offset: u64,
    /// Next undecoded byte of the current frame's payload, as an offset
    /// from `frame_base`.
    pos: usize,
    /// File offset of the current payload and its length.
    frame_base: u64,
    frame_len: usize,
    deltas: Deltas,
    /// Frame header length of this log's version.
    head_len: usize,
    /// Number the next frame should have (version 2 and later).
    next_seq: u64,
    /// Records of unknown kinds skipped.
    unknown: u64,
    /// Damage was skipped since the last intact frame (a gap in numbers
    /// right after it is that damage, already reported).
    after_damage: bool,
    problems: Vec<Problem>,
    ended: bool,
    /// Records met after the `End` record (not used): count, offset of the
    /// first, bytes.
    after_end: (u64, u64, u64),
    done: bool,
    frames: u64,
    payload_bytes: u64,
    examined: u64,
    /// Offset of the record `next` returned last.
    last_record: u64,
}

impl LogReader<File> {
    /// Opens the log at `path`.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        LogReader::new(File::open(path)?)
    }
}

impl<R: Read> LogReader<R> {
    /// Reads the header from `r`.
    pub fn new(mut r: R) -> Result<Self, ReadError> {
        let mut fixed = [0u8; FIXED_LEN];
        let got = read_full(&mut r, &mut fixed)?;
        if got < FIXED_LEN {
            if got >= 8 && fixed[..8] != crate::MAGIC {
                return Err(ReadError::NotHeaptag {
                    found: fixed[..8].try_into().expect("8 bytes"),
                });
            }
            return Err(ReadError::TooShort { len: got as u64 });
        }
        let (version, len, crc) = Header::parse_fixed(&fixed)?;
        let mut body = vec![0u8; len];
        if read_full(&mut r, &mut body)? < len {
            return Err(ReadError::BadHeader(DecodeError {
                offset: FIXED_LEN as u64,
                what: "file ends inside the header",
            }));
        }
        let header = Header::decode_body(version, &body, crc)?;
        let offset = (FIXED_LEN + len) as u64;
        Ok(LogReader {
            win: Window::new(r, offset),
            header,
            offset,
            pos: 0,
            frame_base: 0,
            frame_len: 0,
            deltas: Deltas::default(),
            head_len: if version < 2 {
                FRAME_HEADER_LEN_V1
            } else {
                FRAME_HEADER_LEN
            },
            next_seq: 0,
            unknown: 0,
            after_damage: false,
            problems: Vec::new(),
            ended: false,
            after_end: (0, 0, 0),
            done: false,
            frames: 0,
            payload_bytes: 0,
            examined: 0,
            last_record: 0,
        })
    }

    /// The log's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Problems met so far (damage skipped, truncation).
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// True once an `End` record was read: the writer finished the log.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Bytes consumed so far (the offset of the next frame).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Records skipped because their kind is unknown to this version (a
    /// newer heaptag wrote them).
    pub fn unknown_records(&self) -> u64 {
        self.unknown
    }

    /// Intact frames read so far and the bytes of their payloads.
    pub fn frames_read(&self) -> (u64, u64) {
        (self.frames, self.payload_bytes)
    }

    /// Bytes looked at so far: frames checksummed plus bytes scanned and
    /// checksummed while resynchronizing. At most a small multiple of the
    /// file's size, whatever the file holds (the bound tests assert).
    pub fn bytes_examined(&self) -> u64 {
        self.examined
    }

    /// Byte offset of the record [`next`](Iterator::next), `next_with` or
    /// `for_each_with` handed over last.
    pub fn record_offset(&self) -> u64 {
        self.last_record
    }

    /// Reports a read error met by the window, if any; true if there was one.
    fn io_problem(&mut self) -> bool {
        match self.win.err.take() {
            Some(e) => {
                let at = self.win.end();
                self.problem(at, ProblemKind::Io(e), 0);
                true
            }
            None => false,
        }
    }

    /// Finds the next intact frame and makes it current; false at the end.
    /// Once per frame: kept out of line, so the record loop stays small.
    #[inline(never)]
    fn next_frame(&mut self) -> bool {
        loop {
            let start = self.offset;
            self.win.discard(start);
            let hl = self.head_len;
            if !self.win.fill(start + hl as u64) {
                let have = self.win.end() - start;
                if !self.io_problem() && have > 0 {
                    self.offset = self.win.end();
                    self.problem(start, ProblemKind::Truncated, have);
                }
                return false;
            }
            let mut head = [0u8; FRAME_HEADER_LEN];
            head[..hl].copy_from_slice(self.win.slice(start, start + hl as u64));
            let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
            let len = word(4) as usize;
            if head[..4] != SYNC || len > MAX_FRAME {
                if !self.resync(start, start + 1, false) {
                    return false;
                }
                continue;
            }
            let end = start + (hl + len) as u64;
            if !self.win.fill(end) {
                if self.io_problem() {
                    return false;
                }
                // Past the end of the file: the log was cut inside this
                // frame, or its length is damaged and intact frames follow.
                if !self.resync(start, start + 4, true) {
                    return false;
                }
                continue;
            }
            let payload = self.win.slice(start + hl as u64, end);
            self.examined += (hl + len) as u64;
            let (seq, crc_ok) = if hl == FRAME_HEADER_LEN_V1 {
                (None, crc32fast::hash(payload) == word(8))
            } else {
                let mut crc = crc32fast::Hasher::new();
                crc.update(&head[4..16]);
                crc.update(payload);
                let seq = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
                (Some(seq), crc.finalize() == word(16))
            };
            if !crc_ok {
                // The length may be the damaged part: do not trust it to find
                // the next frame; scan from just after this sync instead.
                if !self.resync(start, start + 4, false) {
                    return false;
                }
                continue;
            }
            self.offset = end;
            if let Some(seq) = seq {
                if seq < self.next_seq {
                    let expected = self.next_seq;
                    self.problem(start, ProblemKind::OutOfOrder { seq, expected }, (hl + len) as u64);
                    continue;
                }
                // The reserve frame (0) is optional: a log may start at 1.
                // Only a log without an allocator (`heaptag run`/`watch`:
                // no event buffer) has no reserve frame.
                let first_without_reserve = self.frames == 0 && seq == 1 && self.header.settings.buffer_events == 0;
                if seq > self.next_seq && !self.after_damage && !first_without_reserve {
                    let expected = self.next_seq;
                    self.problem(start, ProblemKind::MissingFrames { expected, found: seq }, 0);
                }
                self.next_seq = seq.saturating_add(1);
            }
            self.after_damage = false;
            self.frames += 1;
            self.payload_bytes += len as u64;
            // Records are decoded one at a time by `next`, from here.
            self.pos = 0;
            self.frame_base = start + hl as u64;
            self.frame_len = len;
            self.deltas = Deltas::default();
            return true;
        }
    }

    /// Damage at `damage`: finds the first frame starting at or after `from`
    /// that verifies, records the skipped range and leaves `offset` at that
    /// frame. False when none is left (the range up to the end is recorded
    /// as truncation when `truncated`, else as a corrupt frame).
    ///
    /// Every "HTFR" in the range is a candidate frame. Instead of reading
    /// each candidate's payload (quadratic when candidates nest), one
    /// running CRC passes over the range once; a candidate's CRC follows
    /// from the running value at its payload's start and end (`crc::range`),
    /// so each byte is scanned once and checksummed once.
    #[cold]
    #[inline(never)]
    fn resync(&mut self, damage: u64, from: u64, truncated: bool) -> bool {
        let hl = self.head_len as u64;
        let mut pending: VecDeque<Candidate> = VecDeque::new();
        // (offset, 0: a payload starts / 1: a frame ends, candidate start)
        let mut events: BinaryHeap<Reverse<(u64, u8, u64)>> = BinaryHeap::new();
        let mut hasher = crc32fast::Hasher::new();
        let mut hashed = from;
        let mut scan = from;
        let mut scan_done = false;
        loop {
            while let Some(c) = pending.front() {
                match c.ok {
                    Some(true) => {
                        let at = c.start;
                        self.problem(damage, ProblemKind::CorruptFrame, at - damage);
                        self.offset = at;
                        return true;
                    }
                    Some(false) => {
                        pending.pop_front();
                    }
                    None => break,
                }
            }
            if let Some(&Reverse((x, what, id))) = events.peek() {
                if scan_done || x <= scan + hl {
                    events.pop();
                    let i = pending.partition_point(|c| c.start < id);
                    if !self.win.fill(x) {
                        // Its end is past the end of the file.
                        if let Some(c) = pending.get_mut(i).filter(|c| c.start == id) {
                            c.ok = Some(false);
                        }
                        continue;
                    }
                    if x > hashed {
                        hasher.update(self.win.slice(hashed, x));
                        self.examined += x - hashed;
                        hashed = x;
                    }
                    let v = hasher.clone().finalize();
                    if let Some(c) = pending.get_mut(i).filter(|c| c.start == id) {
                        if what == 0 {
                            c.pre ^= v;
                        } else {
                            c.ok = Some(crc::range(c.pre, v, c.end - (c.start + hl)) == c.want);
                        }
                    }
                    continue;
                }
            }
            if scan_done {
                break;
            }
            // Scan up to the next event's turn (or a chunk) for "HTFR".
            let stop = events.peek().map_or(u64::MAX, |e| e.0 .0 - hl).min(scan + CHUNK as u64);
            self.win.fill(stop + 3);
            let avail = self.win.end();
            if avail < scan + 4 {
                scan_done = true;
                continue;
            }
            let hi = stop.min(avail - 3);
            let found = find_sync(self.win.slice(scan, hi + 3)).map(|i| scan + i as u64);
            self.examined += found.unwrap_or(hi).saturating_sub(scan);
            match found {
                None => scan = hi.max(scan),
                Some(p) => {
                    scan = p + 1;
                    if self.win.fill(p + hl) {
                        let head = self.win.slice(p, p + hl);
                        let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
                        let len = word(4) as u64;
                        if len <= MAX_FRAME as u64 {
                            let pre = if hl as usize == FRAME_HEADER_LEN {
                                crc32fast::hash(&head[4..16])
                            } else {
                                0
                            };
                            let want = word(hl as usize - 4);
                            let end = p + hl + len;
                            pending.push_back(Candidate {
                                start: p,
                                end,
                                want,
                                pre,
                                ok: None,
                            });
                            events.push(Reverse((p + hl, 0, p)));
                            events.push(Reverse((end, 1, p)));
                        }
                    }
                }
            }
            if pending.is_empty() {
                // Nothing refers to the running CRC: restart it here, so
                // the window need not hold what was scanned.
                hasher = crc32fast::Hasher::new();
                hashed = scan;
            }
            let keep = pending.front().map_or(scan, |c| c.start).min(hashed).min(scan);
            self.win.discard(keep);
        }
        if self.io_problem() {
            return false;
        }
        let end = self.win.end().max(damage);
        let kind = if truncated {
            ProblemKind::Truncated
        } else {
            ProblemKind::CorruptFrame
        };
        self.problem(damage, kind, end - damage);
        self.offset = end;
        false
    }

    /// A record after the End record: damage (frames appended or moved);
    /// counted, not used.
    #[cold]
    #[inline(never)]
    fn after_end(after: &mut (u64, u64, u64), at: u64, len: u64) {
        if after.0 == 0 {
            after.1 = at;
        }
        after.0 += 1;
        after.2 += len;
    }

    fn problem(&mut self, offset: u64, kind: ProblemKind, skipped: u64) {
        self.after_damage |= kind == ProblemKind::CorruptFrame;
        self.problems.push(Problem { offset, kind, skipped });
    }
}

/// Position of the first "HTFR" in `b`.
fn find_sync(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 4 <= b.len() {
        let j = i + b[i..b.len() - 3].iter().position(|&x| x == SYNC[0])?;
        if b[j..j + 4] == SYNC {
            return Some(j);
        }
        i = j + 1;
    }
    None
}

impl<R: Read> LogReader<R> {
    /// A record inside a checksummed frame did not decode: the rest of the
    /// frame is skipped and reported.
    #[cold]
    #[inline(never)]
    fn bad_record(&mut self, e: DecodeError) {
        let rest = (self.frame_len - self.pos) as u64;
        self.pos = self.frame_len;
        self.problem(e.offset, ProblemKind::BadRecord(e.what), rest);
    }

    /// The current frame is used up: makes the next intact one current;
    /// false at the end of the log (once there, always).
    #[inline(never)]
    fn advance(&mut self) -> bool {
        if self.done || !self.next_frame() {
            if !self.done {
                let (records, offset, bytes) = self.after_end;
                if records > 0 {
                    self.problem(offset, ProblemKind::AfterEnd { records }, bytes);
                }
            }
            self.done = true;
            self.frame_len = 0;
            self.pos = 0;
            return false;
        }
        true
    }
}

impl<R: Read> LogReader<R> {
    /// Reads the next record and hands it to `f` with its byte offset,
    /// where it was decoded: `f`'s result, `None` at the end of the log.
    ///
    /// Faster than [`next`](Iterator::next), which returns
    /// each record by value, and moving a freshly decoded record costs a
    /// store-forwarding stall (wide loads over the narrow stores that just
    /// wrote it); `f` reads the fields where they were written. `f` may
    /// take the record's strings and lists (`std::mem::take`): the reader
    /// does not look at the record after `f`. For a whole log,
    /// [`for_each_with`](LogReader::for_each_with) is faster still.
    #[inline(always)]
    pub fn next_with<T>(&mut self, f: impl FnOnce(&mut Record, u64) -> T) -> Option<T> {
        // (the one-record form of `for_each_with`'s loop, kept apart: as a
        // call of it, `next` costs whole-log readers such as `dump` 9% more
        // instructions)
        let mut f = Some(f);
        loop {
            if self.pos < self.frame_len {
                let base = self.frame_base + self.pos as u64;
                let at = (self.frame_base - self.win.base) as usize;
                let mut c = Cursor::new(&self.win.held()[at + self.pos..at + self.frame_len], base);
                let ended = self.ended;
                // `None` from the closure: a record after the End record
                // (not used); else whether it is the End record, and `f`'s
                // result.
                let step = |r: &mut Record| {
                    if ended {
                        return None;
                    }
                    let is_end = r.kind() == Kind::End;
                    f.take().map(|f| (is_end, f(r, base)))
                };
                match Record::decode_known_with(&mut self.deltas, &mut c, self.header.version, step) {
                    Ok(Some(step)) => {
                        let used = c.offset() - base;
                        self.pos += used as usize;
                        match step {
                            Some((is_end, out)) => {
                                self.ended |= is_end;
                                self.last_record = base;
                                return Some(out);
                            }
                            None => {
                                Self::after_end(&mut self.after_end, base, used);
                                continue;
                            }
                        }
                    }
                    Ok(None) => {
                        self.pos += (c.offset() - base) as usize;
                        self.unknown += 1;
                        continue;
                    }
                    // (rare: damage inside a checksummed frame)
                    Err(e) => self.bad_record(e),
                }
            }
            if !self.advance() {
                return None;
            }
        }
    }

    /// Hands every remaining record to `f` with its offset, until `f`
    /// returns false (then false: the reader stands after that record, and
    /// reading can go on) or the log ends (true), as
    /// [`next_with`](LogReader::next_with) called again and again would.
    ///
    /// Faster for a whole log: the records of a frame are decoded in one
    /// loop over one cursor, not set up again for each record. Frame
    /// changes and damage are out of line; unknown kinds are counted and
    /// skipped; records after the `End` record are counted as damage,
    /// never handed to `f`.
    pub fn for_each_with(&mut self, mut f: impl FnMut(&mut Record, u64) -> bool) -> bool {
        let version = self.header.version;
        loop {
            if self.pos < self.frame_len {
                let at = (self.frame_base - self.win.base) as usize;
                let mut c = Cursor::new(
                    &self.win.held()[at + self.pos..at + self.frame_len],
                    self.frame_base + self.pos as u64,
                );
                let mut stop = false;
                let mut bad = None;
                while !c.is_empty() {
                    let base = c.offset();
                    let ended = self.ended;
                    // `None` from the closure: a record after the End record
                    // (not used); else whether it is the End record, and
                    // whether `f` wants more.
                    let step = |r: &mut Record| (!ended).then(|| (r.kind() == Kind::End, f(r, base)));
                    match Record::decode_known_with(&mut self.deltas, &mut c, version, step) {
                        Ok(Some(Some((is_end, go)))) => {
                            self.last_record = base;
                            self.ended |= is_end;
                            if !go {
                                stop = true;
                                break;
                            }
                        }
                        Ok(Some(None)) => Self::after_end(&mut self.after_end, base, c.offset() - base),
                        Ok(None) => self.unknown += 1,
                        // (rare: damage inside a checksummed frame)
                        Err(e) => {
                            bad = Some((e, base));
                            break;
                        }
                    }
                }
                // (after damage, the bad record's start: what it skips
                // counts from there)
                let end = bad.as_ref().map_or(c.offset(), |b| b.1);
                self.pos = (end - self.frame_base) as usize;
                if let Some((e, _)) = bad {
                    self.bad_record(e);
                }
                if stop {
                    return false;
                }
                continue;
            }
            if !self.advance() {
                return true;
            }
        }
    }
}

impl<R: Read> Iterator for LogReader<R> {
    type Item = Record;

    /// Small and inlined into the caller's loop; frame changes and damage
    /// are out of line. [`next_with`](LogReader::next_with) is faster for a
    /// whole log (no move of the decoded record).
    #[inline(always)]
    fn next(&mut self) -> Option<Record> {
        self.next_with(|r, _| std::mem::replace(r, Record::Pad { len: 0 }))
    }
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
