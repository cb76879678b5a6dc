//! Reading a log back: frames verified one by one, damage skipped and
//! reported with its offset, sequence numbers checked, records decoded one
//! at a time in bounded memory.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::Path;

use crate::codec::Cursor;
use crate::field::Deltas;
use crate::frame::{FRAME_HEADER_LEN, FRAME_HEADER_LEN_V1, MAX_FRAME, SYNC};
use crate::header::FIXED_LEN;
use crate::record::{Decoded, Kind, Record};
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
            ProblemKind::MissingFrames { expected, found } => write!(
                f,
                "frames {expected} to {} are missing before byte {} (deleted or lost): figures lack what they held",
                found - 1,
                self.offset
            ),
            ProblemKind::OutOfOrder { seq, expected } => write!(
                f,
                "frame {seq} at byte {} comes after frame {} (repeated or moved): its {} bytes were not used",
                self.offset,
                expected.saturating_sub(1),
                self.skipped
            ),
            ProblemKind::Io(e) => write!(f, "read error at byte {}: {e}", self.offset),
        }
    }
}

/// A reader with a push-back buffer, so a resync can return bytes it read ahead.
struct Src<R> {
    inner: R,
    back: Vec<u8>,
    pos: usize,
}

impl<R: Read> Read for Src<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos < self.back.len() {
            let n = buf.len().min(self.back.len() - self.pos);
            buf[..n].copy_from_slice(&self.back[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.back.len() {
                self.back.clear();
                self.pos = 0;
            }
            return Ok(n);
        }
        self.inner.read(buf)
    }
}

/// Streams the records of a log, frame by frame, in bounded memory.
///
/// Damage never stops the reader early without saying so: every skipped
/// range is listed in [`problems`](LogReader::problems), and
/// [`ended`](LogReader::ended) tells whether the writer finished the log.
pub struct LogReader<R> {
    src: Src<R>,
    header: Header,
    offset: u64,
    /// Next undecoded byte of the current frame's payload (`buf`).
    pos: usize,
    /// File offset of `buf[0]`.
    frame_base: u64,
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
    done: bool,
    buf: Vec<u8>,
    frames: u64,
    payload_bytes: u64,
}

impl LogReader<BufReader<File>> {
    /// Opens the log at `path`.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        LogReader::new(BufReader::with_capacity(1 << 20, File::open(path)?))
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
        Ok(LogReader {
            src: Src {
                inner: r,
                back: Vec::new(),
                pos: 0,
            },
            header,
            offset: (FIXED_LEN + len) as u64,
            pos: 0,
            frame_base: 0,
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
            done: false,
            buf: Vec::new(),
            frames: 0,
            payload_bytes: 0,
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

    /// Reads the next intact frame into `buf`; false at the end.
    fn next_frame(&mut self) -> bool {
        loop {
            let start = self.offset;
            let hl = self.head_len;
            let mut head = [0u8; FRAME_HEADER_LEN];
            let got = match read_full(&mut self.src, &mut head[..hl]) {
                Ok(n) => n,
                Err(e) => {
                    self.problem(start, ProblemKind::Io(e.to_string()), 0);
                    return false;
                }
            };
            if got == 0 {
                return false;
            }
            if got < hl {
                self.offset += got as u64;
                self.problem(start, ProblemKind::Truncated, got as u64);
                return false;
            }
            let word = |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
            let len = word(4) as usize;
            if head[..4] != SYNC || len > MAX_FRAME {
                if !self.resync(start, &head[..hl]) {
                    return false;
                }
                continue;
            }
            self.buf.resize(len, 0);
            let got = match read_full(&mut self.src, &mut self.buf) {
                Ok(n) => n,
                Err(e) => {
                    self.problem(start, ProblemKind::Io(e.to_string()), 0);
                    return false;
                }
            };
            if got < len {
                self.offset += (hl + got) as u64;
                self.problem(start, ProblemKind::Truncated, (hl + got) as u64);
                return false;
            }
            let (seq, crc_ok) = if hl == FRAME_HEADER_LEN_V1 {
                (None, crc32fast::hash(&self.buf) == word(8))
            } else {
                let mut crc = crc32fast::Hasher::new();
                crc.update(&head[4..16]);
                crc.update(&self.buf);
                let seq = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
                (Some(seq), crc.finalize() == word(16))
            };
            if !crc_ok {
                // The length may be the damaged part: do not trust it to find
                // the next frame; scan from just after this sync instead.
                let mut rest = head[4..hl].to_vec();
                rest.extend_from_slice(&self.buf);
                self.unread(rest);
                self.offset = start + 4;
                if !self.scan_to_sync(start) {
                    return false;
                }
                continue;
            }
            self.offset = start + (hl + len) as u64;
            if let Some(seq) = seq {
                if seq < self.next_seq {
                    let expected = self.next_seq;
                    self.problem(start, ProblemKind::OutOfOrder { seq, expected }, (hl + len) as u64);
                    continue;
                }
                // The reserve frame (0) is optional: a log may start at 1.
                let first_without_reserve = self.frames == 0 && seq == 1;
                if seq > self.next_seq && !self.after_damage && !first_without_reserve {
                    let expected = self.next_seq;
                    self.problem(start, ProblemKind::MissingFrames { expected, found: seq }, 0);
                }
                self.next_seq = seq + 1;
            }
            self.after_damage = false;
            self.frames += 1;
            self.payload_bytes += len as u64;
            // Records are decoded one at a time by `next`, from here.
            self.pos = 0;
            self.frame_base = start + hl as u64;
            self.deltas = Deltas::default();
            return true;
        }
    }

    /// A damaged frame header at `start`: push its bytes after the first back
    /// and scan for the next sync marker.
    fn resync(&mut self, start: u64, head: &[u8]) -> bool {
        self.unread(head[1..].to_vec());
        self.offset = start + 1;
        self.scan_to_sync(start)
    }

    /// Reads forward from `self.offset` to the next sync marker, leaving it
    /// unread; records the skipped range as a corrupt frame starting at
    /// `damage`. False when the file ends first (recorded as truncation).
    fn scan_to_sync(&mut self, damage: u64) -> bool {
        let mut window: Vec<u8> = Vec::new();
        loop {
            if let Some(i) = window.windows(4).position(|w| w == SYNC) {
                let found = self.offset + i as u64;
                self.problem(damage, ProblemKind::CorruptFrame, found - damage);
                self.unread(window[i..].to_vec());
                self.offset = found;
                return true;
            }
            let keep_from = window.len().saturating_sub(3);
            self.offset += keep_from as u64;
            window.drain(..keep_from);
            let mut chunk = [0u8; 4096];
            let n = match self.src.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    let at = self.offset;
                    self.problem(at, ProblemKind::Io(e.to_string()), 0);
                    return false;
                }
            };
            if n == 0 {
                let end = self.offset + window.len() as u64;
                self.problem(damage, ProblemKind::CorruptFrame, end - damage);
                self.offset = end;
                return false;
            }
            window.extend_from_slice(&chunk[..n]);
        }
    }

    /// Puts `bytes` back in front of the unread stream.
    fn unread(&mut self, bytes: Vec<u8>) {
        let src = &mut self.src;
        src.back.drain(..src.pos);
        src.pos = 0;
        src.back.splice(0..0, bytes);
    }

    fn problem(&mut self, offset: u64, kind: ProblemKind, skipped: u64) {
        self.after_damage |= kind == ProblemKind::CorruptFrame;
        self.problems.push(Problem { offset, kind, skipped });
    }
}

impl<R: Read> Iterator for LogReader<R> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        loop {
            if self.pos < self.buf.len() {
                let base = self.frame_base + self.pos as u64;
                let mut c = Cursor::new(&self.buf[self.pos..], base);
                match Record::decode(&mut self.deltas, &mut c, self.header.version) {
                    Ok(Decoded::Record(r)) => {
                        self.pos += (c.offset() - base) as usize;
                        if r.kind() == Kind::End {
                            self.ended = true;
                        }
                        return Some(r);
                    }
                    Ok(Decoded::Unknown { .. }) => {
                        self.pos += (c.offset() - base) as usize;
                        self.unknown += 1;
                        continue;
                    }
                    Err(e) => {
                        let rest = (self.buf.len() - self.pos) as u64;
                        self.pos = self.buf.len();
                        self.problem(e.offset, ProblemKind::BadRecord(e.what), rest);
                    }
                }
            }
            if self.done || !self.next_frame() {
                self.done = true;
                self.buf.clear();
                self.pos = 0;
                return None;
            }
        }
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
