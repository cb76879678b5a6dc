//! Primitive encodings: LEB128 varints, zigzag, length-prefixed strings.

use crate::DecodeError;

/// Where encoded bytes go: a growable byte buffer. Implemented for
/// `Vec<u8>`; the allocator implements it for its internal-heap buffer.
///
/// A buffer that cannot grow may drop bytes, but must then remember it
/// ([`Sink::failed`]) until [`Sink::truncate`] cuts back to before the
/// failure, so a writer can drop a whole record instead of emitting a
/// garbled one.
pub trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
    /// Bytes held.
    fn len(&self) -> usize;
    /// The bytes held.
    fn as_slice(&self) -> &[u8];
    /// True when nothing is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Overwrites the byte at `at` (< `len()`).
    fn set(&mut self, at: usize, byte: u8);
    /// Inserts `bytes` before position `at` (<= `len()`).
    fn insert(&mut self, at: usize, bytes: &[u8]);
    /// Cuts the buffer to `len` bytes and forgets earlier failures.
    fn truncate(&mut self, len: usize);
    /// True when bytes were dropped since the last `truncate`.
    fn failed(&self) -> bool {
        false
    }
    /// Appends the first `len` (<= [`CHUNK`]) bytes of `chunk`: one
    /// encoded event, from the writer's fast path. Provided: `put` of them;
    /// a sink with room may copy the whole fixed-size chunk and keep `len`
    /// bytes of it (a fixed copy instead of a variable-length one).
    #[inline]
    fn put_chunk(&mut self, chunk: &[u8; CHUNK], len: usize) {
        self.put(&chunk[..len.min(CHUNK)]);
    }
    /// Appends `v` as an unsigned LEB128 varint (what [`put_varint`]
    /// does). Provided: the varint is built on the stack and `put` once; a
    /// sink with room at hand may write it in place.
    #[inline]
    fn put_varint(&mut self, v: u64) {
        if v < 0x80 {
            self.put(&[v as u8]);
            return;
        }
        let mut buf = [0u8; 10];
        let n = varint_bytes(v, &mut buf);
        self.put(&buf[..n]);
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn as_slice(&self) -> &[u8] {
        self
    }
    fn set(&mut self, at: usize, byte: u8) {
        self[at] = byte;
    }
    fn insert(&mut self, at: usize, bytes: &[u8]) {
        self.splice(at..at, bytes.iter().copied());
    }
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len);
    }
}

/// Encodes `v` as an unsigned LEB128 varint into `buf`; returns its length.
#[inline]
pub fn varint_bytes(mut v: u64, buf: &mut [u8; 10]) -> usize {
    let mut n = 0;
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf[n] = b;
            return n + 1;
        }
        buf[n] = b | 0x80;
        n += 1;
    }
}

/// Appends `v` as an unsigned LEB128 varint (1 to 10 bytes).
#[inline]
pub fn put_varint(out: &mut impl Sink, v: u64) {
    out.put_varint(v);
}

/// Bytes of the LEB128 varint encoding of `v` (1 to 10).
#[inline]
pub fn varint_len(v: u64) -> usize {
    // 7 bits per byte; 0 takes one byte.
    ((64 - (v | 1).leading_zeros()) as usize).div_ceil(7)
}

/// Size of the chunks of [`Sink::put_chunk`]: an encoded ring event
/// (at most [`crate::MAX_EVENT_LEN`] bytes) with room to spare.
pub const CHUNK: usize = 64;

/// A record being encoded on the stack: `N` bytes, the body written from
/// `start` on, so that the kind and the length (known once the body is)
/// go in front of it and the whole record reaches the real sink in one
/// `put`. A body that does not fit marks it overflowed (nothing of it is
/// used; the caller encodes the record another way).
pub(crate) struct Staging<const N: usize> {
    buf: [u8; N],
    len: usize,
    over: bool,
}

impl<const N: usize> Staging<N> {
    /// An empty stage whose body starts at `start` (room for the header).
    #[inline(always)]
    pub(crate) fn new(start: usize) -> Self {
        Staging {
            buf: [0; N],
            len: start,
            over: false,
        }
    }

    /// The record: `kind`, the varint length of the body written since
    /// `start`, the body; `None` when the body overflowed the stage or its
    /// length needs more header room than `start` - 1 bytes.
    #[inline(always)]
    pub(crate) fn record(&mut self, kind: u8, start: usize) -> Option<&[u8]> {
        if self.over {
            return None;
        }
        let body = self.len - start;
        let mut len = [0u8; 10];
        let n = varint_bytes(body as u64, &mut len);
        let at = start.checked_sub(n + 1)?;
        let head = self.buf.get_mut(at..start)?;
        head[0] = kind;
        head[1..].copy_from_slice(&len[..n]);
        self.buf.get(at..self.len)
    }
}

impl Staging<CHUNK> {
    /// The record, when its body (written from byte 2) is shorter than 128
    /// bytes: `kind`, the one-byte length, the body, as the whole stage and
    /// the record's length; `None` when the body overflowed.
    #[inline(always)]
    pub(crate) fn chunk(&mut self, kind: u8) -> Option<(&[u8; CHUNK], usize)> {
        if self.over || self.len < 2 {
            return None;
        }
        // CHUNK - 2 < 128: the length is one byte.
        self.buf[0] = kind;
        self.buf[1] = (self.len - 2) as u8;
        Some((&self.buf, self.len))
    }
}

impl<const N: usize> Sink for Staging<N> {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.over = true,
        }
    }
    #[inline(always)]
    fn put_varint(&mut self, v: u64) {
        // In place, with room for the longest varint.
        let Some(dst) = self.buf.get_mut(self.len..self.len + 10) else {
            let mut buf = [0u8; 10];
            let n = varint_bytes(v, &mut buf);
            self.put(&buf[..n]);
            return;
        };
        if v < 0x80 {
            // Most fields (ids, threads, small deltas): one byte.
            dst[0] = v as u8;
            self.len += 1;
            return;
        }
        if v < 1 << 56 {
            // Up to 8 bytes (every time, address delta and size a real log
            // holds): the 7-bit groups spread to bytes with a few word
            // operations (the decoder's packing backwards), the
            // continuation bit set on every byte below the highest one
            // that holds bits, and one 8-byte store of which those bytes
            // count.
            let mut x = v;
            x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x00ff_ffff_f000_0000) << 4);
            x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x0fff_c000_0fff_c000) << 2);
            x = (x & 0x007f_007f_007f_007f) | ((x & 0x3f80_3f80_3f80_3f80) << 1);
            // `x` >= 0x100 (v >= 0x80): its highest bit is in byte 1 to 7.
            let top = 63 - x.leading_zeros();
            let last = top & !7;
            x |= 0x8080_8080_8080_8080 & ((1u64 << last) - 1);
            dst[..8].copy_from_slice(&x.to_le_bytes());
            self.len += (last / 8) as usize + 1;
            return;
        }
        let mut buf = [0u8; 10];
        let n = varint_bytes(v, &mut buf);
        dst[..n].copy_from_slice(&buf[..n]);
        self.len += n;
    }
    fn len(&self) -> usize {
        self.len
    }
    fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    fn set(&mut self, at: usize, byte: u8) {
        if at < self.len {
            self.buf[at] = byte;
        }
    }
    fn insert(&mut self, at: usize, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if at > self.len || end > N {
            self.over = true;
            return;
        }
        self.buf.copy_within(at..self.len, at + bytes.len());
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
        self.len = end;
    }
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        self.over = false;
    }
    fn failed(&self) -> bool {
        self.over
    }
}

/// A sink that only counts the bytes put: the length of a record body too
/// long for a [`Staging`], found before the body is written.
pub(crate) struct Count(pub(crate) usize);

impl Sink for Count {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
    #[inline]
    fn put_varint(&mut self, v: u64) {
        self.0 += varint_len(v);
    }
    fn len(&self) -> usize {
        self.0
    }
    fn as_slice(&self) -> &[u8] {
        // It holds no bytes; nothing reads them back.
        &[]
    }
    fn set(&mut self, _at: usize, _byte: u8) {}
    fn insert(&mut self, _at: usize, bytes: &[u8]) {
        self.0 += bytes.len();
    }
    fn truncate(&mut self, len: usize) {
        self.0 = self.0.min(len);
    }
}

/// Maps a signed value to unsigned so small magnitudes stay small.
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `s` as a varint length and its UTF-8 bytes.
pub fn put_str(out: &mut impl Sink, s: &str) {
    put_bytes(out, s.as_bytes());
}

/// Appends a varint length and the bytes.
pub fn put_bytes(out: &mut impl Sink, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.put(b);
}

/// Appends an optional value: 0 for none, `v + 1` otherwise.
pub fn put_opt(out: &mut impl Sink, v: Option<u64>) {
    put_varint(out, v.map_or(0, |v| v.wrapping_add(1)));
}

/// A cursor over a byte slice, reporting positions relative to the file.
#[derive(Debug)]
pub struct Cursor<'a> {
    /// The bytes readable: `..end` is the cursor's, the rest may be looked
    /// at (a record's cursor sees the rest of its frame) but never read:
    /// the varint decoder loads 8 bytes at a time and uses only its own.
    buf: &'a [u8],
    /// One past the cursor's last byte (`<= buf.len()`).
    end: usize,
    pos: usize,
    /// File offset of `buf[0]`, for error messages.
    base: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor over `buf`, which starts at byte `base` of the file.
    pub fn new(buf: &'a [u8], base: u64) -> Self {
        Cursor {
            buf,
            end: buf.len(),
            pos: 0,
            base,
        }
    }

    /// True when every byte was read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.end
    }

    /// File offset of the next byte.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn err(&self, what: &'static str) -> DecodeError {
        DecodeError {
            offset: self.offset(),
            what,
        }
    }

    /// Reads one byte.
    #[inline(always)]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self.buf[..self.end]
            .get(self.pos)
            .ok_or_else(|| self.err("unexpected end of record"))?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads a varint.
    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        // Most values fit in one byte.
        if let Some(&b) = self.buf[..self.end].get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.varint_long()
    }

    /// A varint of two or more bytes. With 8 bytes left in the buffer, a
    /// varint of up to 8 bytes (56 bits: every size, time and address delta
    /// a real log holds) is found and assembled with a few word operations
    /// instead of a loop per byte; longer ones and the buffer's tail take
    /// the loop, which checks every byte.
    #[inline(always)]
    fn varint_long(&mut self) -> Result<u64, DecodeError> {
        if let Some(word) = self.buf.get(self.pos..self.pos + 8) {
            let w = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            // A clear high bit ends the varint: the lowest one says its length.
            let stops = !w & 0x8080_8080_8080_8080;
            if stops != 0 {
                let bits = stops.trailing_zeros() + 1; // 8 x length
                let mut x = if bits >= 64 { w } else { w & ((1u64 << bits) - 1) };
                // Pack the 7-bit groups: pairs, then quads, then the halves.
                x &= 0x7f7f_7f7f_7f7f_7f7f;
                x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
                x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
                x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
                let n = (bits / 8) as usize;
                // Within the cursor's bytes (else the loop says it is cut).
                if n <= self.end - self.pos {
                    self.pos += n;
                    return Ok(x);
                }
            }
        }
        self.varint_loop()
    }

    #[cold]
    #[inline(never)]
    fn varint_loop(&mut self) -> Result<u64, DecodeError> {
        let rest = &self.buf[self.pos.min(self.end)..self.end];
        let mut v: u64 = 0;
        for (i, &b) in rest.iter().take(10).enumerate() {
            if i == 9 && b > 1 {
                return Err(self.err("varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.pos += i + 1;
                return Ok(v);
            }
        }
        Err(self.err(if rest.len() < 10 {
            "unexpected end of record"
        } else {
            "varint longer than 10 bytes"
        }))
    }

    /// Reads a varint that must fit in a `u32`.
    #[inline(always)]
    pub fn varint32(&mut self) -> Result<u32, DecodeError> {
        let at = self.offset();
        u32::try_from(self.varint()?).map_err(|_| DecodeError {
            offset: at,
            what: "value does not fit in 32 bits",
        })
    }

    /// Reads a zigzag varint.
    #[inline(always)]
    pub fn svarint(&mut self) -> Result<i64, DecodeError> {
        Ok(unzigzag(self.varint()?))
    }

    /// Reads an optional value written by [`put_opt`].
    #[inline]
    pub fn opt(&mut self) -> Result<Option<u64>, DecodeError> {
        Ok(match self.varint()? {
            0 => None,
            v => Some(v - 1),
        })
    }

    /// Reads length-prefixed bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| self.err("length too large"))?;
        if len > self.end - self.pos {
            return Err(self.err("length runs past the end of the frame"));
        }
        let b = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(b)
    }

    /// Reads a length-prefixed UTF-8 string (invalid UTF-8 is replaced).
    pub fn string(&mut self) -> Result<String, DecodeError> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.end.saturating_sub(self.pos)
    }

    /// Splits off the next `n` bytes as a cursor of their own (a record's
    /// body), keeping file offsets.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<Cursor<'a>, DecodeError> {
        if n > self.end - self.pos {
            return Err(self.err("unexpected end of data"));
        }
        let c = Cursor {
            buf: self.buf,
            end: self.pos + n,
            pos: self.pos,
            base: self.base,
        };
        self.pos += n;
        Ok(c)
    }

    /// Reads `n` raw bytes.
    #[inline]
    pub fn raw(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.end - self.pos {
            return Err(self.err("unexpected end of data"));
        }
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        for v in [
            0,
            1,
            127,
            128,
            16383,
            16384,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut c = Cursor::new(&out, 0);
            assert_eq!(c.varint().unwrap(), v);
            assert!(c.is_empty());
        }
    }

    #[test]
    fn varint_len_is_the_encoded_length_and_staging_writes_what_vec_does() {
        let mut values = vec![0u64, u64::MAX];
        for bits in 1..64 {
            values.extend([(1u64 << bits) - 1, 1u64 << bits, (1u64 << bits) + 1]);
        }
        for &v in &values {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(varint_len(v), out.len(), "{v:#x}");
            let mut c = Count(0);
            put_varint(&mut c, v);
            assert_eq!(c.0, out.len(), "{v:#x}");
            // In place, with room and without (the last 9 bytes of a stage).
            for start in [0usize, 3, 20, 23, 25, 29] {
                let mut s = Staging::<32>::new(start);
                put_varint(&mut s, v);
                if start + out.len() <= 32 {
                    assert!(!s.failed(), "{v:#x} at {start}");
                    assert_eq!(&s.as_slice()[start..], &out[..], "{v:#x} at {start}");
                } else {
                    assert!(s.failed(), "{v:#x} at {start}");
                }
            }
        }
    }

    #[test]
    fn a_staged_record_is_kind_length_body_or_none() {
        let mut s = Staging::<300>::new(3);
        s.put(&[7; 200]);
        let r = s.record(9, 3).unwrap();
        assert_eq!(&r[..3], &[9, 200 & 0x7f | 0x80, 1]);
        assert_eq!(r.len(), 203);
        let mut s = Staging::<300>::new(2);
        s.put(&[7; 5]);
        assert_eq!(s.record(4, 2).unwrap(), &[4, 5, 7, 7, 7, 7, 7]);
        // A body of 128 bytes needs a 2-byte length: no room after 2.
        let mut s = Staging::<300>::new(2);
        s.put(&[7; 128]);
        assert!(s.record(4, 2).is_none());
        let mut s = Staging::<8>::new(2);
        s.put(&[1; 7]);
        assert!(s.failed() && s.record(4, 2).is_none());
    }

    #[test]
    fn zigzag_keeps_small_magnitudes_small() {
        for v in [0i64, -1, 1, -64, 63, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn every_varint_length_decodes_alike_in_the_word_and_the_byte_paths() {
        // Each length 1..=10 at each position near the end of the buffer,
        // so both the 8-byte word path and the per-byte loop are taken.
        let mut values = vec![0u64, 1, u64::MAX];
        for bits in 1..64 {
            values.push((1u64 << bits) - 1);
            values.push(1u64 << bits);
            values.push((1u64 << bits) | 0x5555_5555_5555_5555 >> (64 - bits));
        }
        for &v in &values {
            for pad in 0..10 {
                let mut out = Vec::new();
                put_varint(&mut out, v);
                let n = out.len();
                out.extend(std::iter::repeat_n(0x7f, pad));
                let mut c = Cursor::new(&out, 0);
                assert_eq!(c.varint().unwrap(), v, "{v:#x} pad {pad}");
                assert_eq!(c.offset(), n as u64, "{v:#x} pad {pad}");
            }
        }
        // Truncated in the middle: an error, with 8 or more bytes left or not.
        for len in 1..12 {
            let bytes = vec![0x80u8; len];
            let e = Cursor::new(&bytes, 0).varint().unwrap_err();
            if len < 10 {
                assert_eq!(e.what, "unexpected end of record");
            } else {
                assert_eq!(e.what, "varint overflows 64 bits");
            }
        }
        // 10 bytes whose last carries more than bit 63.
        let mut big = vec![0xffu8; 9];
        big.push(0x02);
        assert_eq!(
            Cursor::new(&big, 0).varint().unwrap_err().what,
            "varint overflows 64 bits"
        );
    }

    #[test]
    fn a_taken_cursor_never_reads_past_its_end() {
        // A 3-byte varint whose body is cut after 2 bytes, followed by more
        // bytes of the frame: the word path sees them, the cursor must not
        // use them.
        let mut bytes = vec![0x81u8, 0x82, 0x03];
        bytes.extend([0u8; 16]);
        let mut outer = Cursor::new(&bytes, 50);
        let mut body = outer.take(2).unwrap();
        let e = body.varint().unwrap_err();
        assert_eq!((e.what, e.offset), ("unexpected end of record", 50));
        let mut whole = Cursor::new(&bytes, 50).take(3).unwrap();
        assert_eq!(whole.varint().unwrap(), 1 | 2 << 7 | 3 << 14);
        assert!(whole.is_empty() && whole.remaining() == 0);
        assert!(whole.u8().is_err() && whole.raw(1).is_err() && whole.take(1).is_err());
        assert_eq!(outer.offset(), 52);
        assert_eq!(outer.varint().unwrap(), 3);
    }

    #[test]
    fn overlong_varint_is_an_error_with_its_offset() {
        let bad = [0xffu8; 11];
        let e = Cursor::new(&bad, 100).varint().unwrap_err();
        assert!(e.offset >= 100 && e.offset <= 111, "{e}");
    }
}
