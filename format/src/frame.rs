//! Frames: how records are batched, numbered and checksummed (the reader
//! is in `reader.rs`).
//!
//! Format version 2 frame: `"HTFR"`, payload length (u32 LE), sequence
//! number (u64 LE), CRC-32 (u32 LE) of the length, the sequence number and
//! the payload; then the payload. Version 1 frames (still read) have no
//! sequence number and their CRC covers the payload only.

use crate::codec::Sink;
use crate::field::Deltas;
use crate::record::{Event, RecordRef};

/// Marks the start of every frame; a reader that meets a damaged frame scans
/// forward to the next one.
pub const SYNC: [u8; 4] = *b"HTFR";
/// Sync, payload length (u32 LE), sequence number (u64 LE), CRC-32 (u32 LE).
pub const FRAME_HEADER_LEN: usize = 20;
/// The frame header of format version 1: sync, length, CRC.
pub const FRAME_HEADER_LEN_V1: usize = 12;
/// Largest payload a reader accepts; a larger length means damage. The
/// allocator's writer ends a frame at the first record that takes it past
/// 1 MiB, and its largest record is a `counters` of every tag (65,536 tags
/// x at most 61 bytes, 4 MiB): 16 MiB leaves room for three times that.
pub const MAX_FRAME: usize = 16 << 20;

/// Appends a version 2 frame numbered `seq` holding `payload` to `out`.
pub fn write_frame(seq: u64, payload: &[u8], out: &mut impl Sink) {
    let len = (payload.len() as u32).to_le_bytes();
    let seq = seq.to_le_bytes();
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len);
    crc.update(&seq);
    crc.update(payload);
    out.put(&SYNC);
    out.put(&len);
    out.put(&seq);
    out.put(&crc.finalize().to_le_bytes());
    out.put(payload);
}

/// Builds frames: records are appended to a payload buffer with the frame's
/// delta state, and [`finish`](FrameEncoder::finish) wraps them in a
/// numbered, checksummed frame. Every writer of logs (the allocator, `heaptag
/// run`, tests) uses it, so frames are made one way.
#[derive(Debug)]
pub struct FrameEncoder<B> {
    payload: B,
    deltas: Deltas,
    seq: u64,
}

impl<B: Sink> FrameEncoder<B> {
    /// An encoder whose first frame is numbered `seq` (the reserve frame is
    /// 0, so a log's first data frame is 1), building payloads in `payload`.
    pub fn new(payload: B, seq: u64) -> Self {
        FrameEncoder {
            payload,
            deltas: Deltas::default(),
            seq,
        }
    }

    /// Appends one record. When the buffer cannot grow, nothing of the
    /// record is kept (the frame stays well formed) and false is returned.
    #[inline]
    pub fn push(&mut self, r: RecordRef<'_>) -> bool {
        let len = self.payload.len();
        let deltas = self.deltas;
        r.encode(&mut self.deltas, &mut self.payload);
        if self.payload.failed() {
            self.payload.truncate(len);
            self.deltas = deltas;
            return false;
        }
        true
    }

    /// Appends one allocator event (the same bytes as [`push`] of its
    /// [`Event::borrowed`] form, by [`Event::encode`]'s fast path). When the
    /// buffer cannot grow, nothing is kept and false is returned.
    ///
    /// [`push`]: FrameEncoder::push
    #[inline]
    pub fn push_event(&mut self, ev: &Event) -> bool {
        let len = self.payload.len();
        let deltas = self.deltas;
        ev.encode(&mut self.deltas, &mut self.payload);
        if self.payload.failed() {
            self.payload.truncate(len);
            self.deltas = deltas;
            return false;
        }
        true
    }

    /// Payload bytes so far.
    pub fn len(&self) -> usize {
        self.payload.len()
    }

    /// True when no record is pending.
    pub fn is_empty(&self) -> bool {
        self.payload.is_empty()
    }

    /// The number the next frame gets.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Appends the pending records to `out` as one frame and starts the
    /// next. False when `out` could not hold it (nothing is kept of it, and
    /// its number is used again).
    pub fn finish(&mut self, out: &mut impl Sink) -> bool {
        let start = out.len();
        write_frame(self.seq, self.payload.as_slice(), out);
        self.payload.truncate(0);
        self.deltas = Deltas::default();
        if out.failed() {
            out.truncate(start);
            return false;
        }
        self.seq += 1;
        true
    }

    /// The frame last finished never reached the file (its write failed and
    /// it was cut off): the next frame takes its number, so numbers in the
    /// file stay consecutive and a gap always means damage.
    pub fn retract(&mut self) {
        self.seq = self.seq.saturating_sub(1);
    }

    /// Appends a `pad` record that makes the payload exactly `len` bytes.
    /// False when the payload is already too long for that.
    pub fn pad_to(&mut self, len: usize) -> bool {
        let have = self.payload.len();
        let Some(need) = len.checked_sub(have) else {
            return false;
        };
        // A pad of `n` zeros takes 1 (kind) + varint(body) + varint(n) + n
        // bytes; find the `n` that fills `need` exactly.
        let size = |n: usize| {
            let body = vlen(n) + n;
            1 + vlen(body) + body
        };
        let fit = |need: usize| (need.saturating_sub(24)..=need).rev().find(|&n| size(n) == need);
        let n = match fit(need) {
            Some(n) => n,
            // Just past a varint boundary no single pad fits (the length
            // grows by a byte): an empty pad (3 bytes) first, then one more.
            None if need > 3 => {
                let Some(n) = fit(need - 3) else {
                    return false;
                };
                if !self.push(RecordRef::Pad { len: 0 }) {
                    return false;
                }
                n
            }
            None => return false,
        };
        let Ok(n) = u32::try_from(n) else {
            return false;
        };
        self.push(RecordRef::Pad { len: n }) && self.payload.len() == len
    }
}

/// Bytes of the varint encoding of `v`.
fn vlen(v: usize) -> usize {
    let bits = usize::BITS - v.leading_zeros();
    (bits.max(1) as usize).div_ceil(7)
}
