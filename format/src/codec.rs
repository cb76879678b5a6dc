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
    if v < 0x80 {
        out.put(&[v as u8]);
        return;
    }
    let mut buf = [0u8; 10];
    let n = varint_bytes(v, &mut buf);
    out.put(&buf[..n]);
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
    buf: &'a [u8],
    pos: usize,
    /// File offset of `buf[0]`, for error messages.
    base: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor over `buf`, which starts at byte `base` of the file.
    pub fn new(buf: &'a [u8], base: u64) -> Self {
        Cursor { buf, pos: 0, base }
    }

    /// True when every byte was read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
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
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.err("unexpected end of record"))?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads a varint.
    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        // Most values fit in one byte.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.varint_long()
    }

    fn varint_long(&mut self) -> Result<u64, DecodeError> {
        let rest = &self.buf[self.pos.min(self.buf.len())..];
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
        if len > self.buf.len() - self.pos {
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
        self.buf.len().saturating_sub(self.pos)
    }

    /// Splits off the next `n` bytes as a cursor of their own (a record's
    /// body), keeping file offsets.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<Cursor<'a>, DecodeError> {
        let at = self.offset();
        let b = self.raw(n)?;
        Ok(Cursor::new(b, at))
    }

    /// Reads `n` raw bytes.
    #[inline]
    pub fn raw(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() - self.pos {
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
    fn zigzag_keeps_small_magnitudes_small() {
        for v in [0i64, -1, 1, -64, 63, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn overlong_varint_is_an_error_with_its_offset() {
        let bad = [0xffu8; 11];
        let e = Cursor::new(&bad, 100).varint().unwrap_err();
        assert!(e.offset >= 100 && e.offset <= 111, "{e}");
    }
}
