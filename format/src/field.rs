//! Field encodings: each record field in the table (`record.rs`) names one
//! of these types, which says how its value is written and read, what Rust
//! type it has when owned and when borrowed, and how `docs/FORMAT.md`
//! describes it. Encoder, decoder, borrowed form and docs all come from
//! here, so they cannot disagree.

use std::fmt::Debug;

use crate::codec::{put_opt, put_str, put_varint, zigzag, Cursor, Sink};
use crate::record::{Fill, FpMeta, FpWhen, TagCount};
use crate::DecodeError;

/// Delta state of one frame, shared by the encoder and the decoder: times
/// and addresses are written as differences from the previous ones in the
/// same frame, and the state restarts at every frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct Deltas {
    time: u64,
    addr: u64,
}

/// How one field is encoded.
pub trait Field {
    /// The field's type in [`crate::Record`] (and [`crate::Event`]).
    type Owned: Clone + Debug + PartialEq + Eq;
    /// The field's type in [`crate::RecordRef`]: borrowed, never allocating.
    type Ref<'a>: Copy + Debug;
    /// How `docs/FORMAT.md` describes the encoding.
    const ENCODING: &'static str;
    /// Borrows an owned value.
    fn borrow(v: &Self::Owned) -> Self::Ref<'_>;
    /// Makes an owned value of a borrowed one.
    fn own(v: Self::Ref<'_>) -> Self::Owned;
    /// Appends the value.
    fn put(d: &mut Deltas, v: Self::Ref<'_>, out: &mut impl Sink);
    /// Reads the value.
    fn get(d: &mut Deltas, c: &mut Cursor<'_>) -> Result<Self::Owned, DecodeError>;
}

/// Defines a `Copy` field type: owned and borrowed forms are the value
/// itself; `put` and `get` say how it is written and read.
macro_rules! scalar {
    (
        $(#[doc = $doc:literal])*
        $name:ident: $ty:ty, $enc:literal,
        put($d:ident, $v:ident, $out:ident) $put:block
        get($gd:ident, $c:ident) $get:block
    ) => {
        $(#[doc = $doc])*
        pub struct $name;
        impl Field for $name {
            type Owned = $ty;
            type Ref<'a> = $ty;
            const ENCODING: &'static str = $enc;
            #[inline]
            fn borrow(v: &$ty) -> $ty {
                *v
            }
            #[inline]
            fn own(v: $ty) -> $ty {
                v
            }
            #[inline]
            fn put($d: &mut Deltas, $v: $ty, $out: &mut impl Sink) $put
            #[inline]
            fn get($gd: &mut Deltas, $c: &mut Cursor<'_>) -> Result<$ty, DecodeError> $get
        }
    };
}

fn err(c: &Cursor<'_>, what: &'static str) -> DecodeError {
    DecodeError {
        offset: c.offset(),
        what,
    }
}

/// Writes `v` as a zigzag varint difference from `*prev`, and remembers it.
#[inline]
fn put_delta(prev: &mut u64, v: u64, out: &mut impl Sink) {
    put_varint(out, zigzag(v.wrapping_sub(*prev) as i64));
    *prev = v;
}

/// Reads a zigzag varint difference from `*prev`, and remembers the value.
#[inline(always)]
fn get_delta(prev: &mut u64, c: &mut Cursor<'_>) -> Result<u64, DecodeError> {
    *prev = prev.wrapping_add(c.svarint()? as u64);
    Ok(*prev)
}

scalar! {
    /// Nanoseconds since the log's start: zigzag varint of the difference
    /// from the previous time in the frame.
    Time: u64, "time delta (zigzag varint)",
    put(d, v, out) { put_delta(&mut d.time, v, out) }
    get(d, c) { get_delta(&mut d.time, c) }
}

scalar! {
    /// An address: zigzag varint of the difference from the previous
    /// address in the frame.
    Addr: u64, "address delta (zigzag varint)",
    put(d, v, out) { put_delta(&mut d.addr, v, out) }
    get(d, c) { get_delta(&mut d.addr, c) }
}

scalar! {
    /// An unsigned 64-bit value: LEB128 varint.
    U64: u64, "varint",
    put(_d, v, out) { put_varint(out, v) }
    get(_d, c) { c.varint() }
}

scalar! {
    /// An unsigned 32-bit value (an id, a count): varint that must fit 32 bits.
    U32: u32, "varint (32 bits)",
    put(_d, v, out) { put_varint(out, u64::from(v)) }
    get(_d, c) { c.varint32() }
}

scalar! {
    /// A signed 64-bit value: zigzag varint.
    I64: i64, "zigzag varint",
    put(_d, v, out) { put_varint(out, zigzag(v)) }
    get(_d, c) { c.svarint() }
}

scalar! {
    /// A signed 32-bit value: zigzag varint; a value outside 32 bits reads -1.
    I32: i32, "zigzag varint (32 bits; wider reads -1)",
    put(_d, v, out) { put_varint(out, zigzag(i64::from(v))) }
    get(_d, c) { Ok(i32::try_from(c.svarint()?).unwrap_or(-1)) }
}

scalar! {
    /// An optional 64-bit value: varint 0 for none, `v + 1` otherwise.
    OptU64: Option<u64>, "optional varint (0: none, else v+1)",
    put(_d, v, out) { put_opt(out, v) }
    get(_d, c) { c.opt() }
}

scalar! {
    /// An optional 32-bit value: as [`OptU64`], and it must fit 32 bits.
    OptU32: Option<u32>, "optional varint (32 bits)",
    put(_d, v, out) { put_opt(out, v.map(u64::from)) }
    get(_d, c) {
        match c.opt()? {
            None => Ok(None),
            Some(v) => u32::try_from(v).map(Some).map_err(|_| err(c, "value does not fit in 32 bits")),
        }
    }
}

scalar! {
    /// A 64-bit hash: 8 bytes, little-endian.
    Hash64: u64, "u64 LE (8 bytes)",
    put(_d, v, out) { out.put(&v.to_le_bytes()) }
    get(_d, c) {
        let mut a = [0u8; 8];
        a.copy_from_slice(c.raw(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

scalar! {
    /// How a fingerprinted block is filled, whether it was hashed whole, and
    /// when: two bytes, `fill | full << 2 | when << 3` (fill: 0 mixed, 1 zero,
    /// 2 constant; when: 0 free, 1 mark, 2 finish), then the constant byte.
    FpFlags: FpMeta, "2 bytes: fill | full << 2 | when << 3, then the fill byte",
    put(_d, v, out) {
        let when = match v.when {
            FpWhen::Free => 0u8,
            FpWhen::Mark => 1,
            FpWhen::Finish => 2,
        };
        let (f, byte) = match v.fill {
            Fill::Mixed => (0u8, 0u8),
            Fill::Zero => (1, 0),
            Fill::Constant(b) => (2, b),
        };
        out.put(&[f | (u8::from(v.full) << 2) | (when << 3), byte]);
    }
    get(_d, c) {
        let flags = c.u8()?;
        let byte = c.u8()?;
        let fill = match flags & 3 {
            0 => Fill::Mixed,
            1 => Fill::Zero,
            2 => Fill::Constant(byte),
            _ => return Err(err(c, "bad fill kind in fingerprint")),
        };
        let when = match flags >> 3 {
            0 => FpWhen::Free,
            1 => FpWhen::Mark,
            2 => FpWhen::Finish,
            _ => return Err(err(c, "bad moment in fingerprint")),
        };
        Ok(FpMeta {
            fill,
            full: flags & 4 != 0,
            when,
        })
    }
}

scalar! {
    /// Filler: varint length, then that many zero bytes.
    Zeros: u32, "varint length, then that many zero bytes",
    put(_d, v, out) {
        put_varint(out, u64::from(v));
        let zeros = [0u8; 64];
        let mut left = v as usize;
        while left > 0 {
            let n = left.min(zeros.len());
            out.put(&zeros[..n]);
            left -= n;
        }
    }
    get(_d, c) {
        let len = c.varint32()?;
        c.raw(len as usize)?;
        Ok(len)
    }
}

/// A string: varint length, then UTF-8 bytes (invalid UTF-8 is replaced
/// when read).
pub struct Str;
impl Field for Str {
    type Owned = String;
    type Ref<'a> = &'a str;
    const ENCODING: &'static str = "string (varint length, UTF-8)";
    fn borrow(v: &String) -> &str {
        v
    }
    fn own(v: &str) -> String {
        v.to_owned()
    }
    fn put(_: &mut Deltas, v: &str, out: &mut impl Sink) {
        put_str(out, v);
    }
    fn get(_: &mut Deltas, c: &mut Cursor<'_>) -> Result<String, DecodeError> {
        c.string()
    }
}

/// An optional string: varint 0 for none; 1, then the string.
pub struct OptStr;
impl Field for OptStr {
    type Owned = Option<String>;
    type Ref<'a> = Option<&'a str>;
    const ENCODING: &'static str = "optional string (0: none; 1, string)";
    fn borrow(v: &Option<String>) -> Option<&str> {
        v.as_deref()
    }
    fn own(v: Option<&str>) -> Option<String> {
        v.map(str::to_owned)
    }
    fn put(_: &mut Deltas, v: Option<&str>, out: &mut impl Sink) {
        match v {
            None => put_varint(out, 0),
            Some(s) => {
                put_varint(out, 1);
                put_str(out, s);
            }
        }
    }
    fn get(_: &mut Deltas, c: &mut Cursor<'_>) -> Result<Option<String>, DecodeError> {
        match c.varint()? {
            0 => Ok(None),
            1 => Ok(Some(c.string()?)),
            _ => Err(err(c, "bad marker of an optional string")),
        }
    }
}

/// Most frames a stack may have.
pub const MAX_STACK_FRAMES: u64 = 4096;

/// Instruction addresses, innermost first: varint count (at most 4096),
/// then each as a zigzag varint difference from the previous one.
pub struct Frames;
impl Field for Frames {
    type Owned = Vec<u64>;
    type Ref<'a> = &'a [u64];
    const ENCODING: &'static str = "varint count (<= 4096), then address deltas (zigzag varints)";
    fn borrow(v: &Vec<u64>) -> &[u64] {
        v
    }
    fn own(v: &[u64]) -> Vec<u64> {
        v.to_vec()
    }
    fn put(_: &mut Deltas, v: &[u64], out: &mut impl Sink) {
        put_varint(out, v.len() as u64);
        let mut prev = 0u64;
        for &a in v {
            put_varint(out, zigzag(a.wrapping_sub(prev) as i64));
            prev = a;
        }
    }
    fn get(_: &mut Deltas, c: &mut Cursor<'_>) -> Result<Vec<u64>, DecodeError> {
        let n = c.varint()?;
        if n > MAX_STACK_FRAMES {
            return Err(err(c, "stack deeper than 4096 frames"));
        }
        let mut frames = Vec::with_capacity(n as usize);
        let mut prev = 0u64;
        for _ in 0..n {
            prev = prev.wrapping_add(c.svarint()? as u64);
            frames.push(prev);
        }
        Ok(frames)
    }
}

/// Most tags one counter snapshot may list.
pub const MAX_SNAPSHOT_TAGS: u64 = 1 << 24;

/// Per-tag counters: varint count (at most 2^24), then per tag seven
/// varints (tag, alloc_bytes, alloc_count, tracked_live, small_live, peak,
/// external).
pub struct TagCounts;
impl Field for TagCounts {
    type Owned = Vec<TagCount>;
    type Ref<'a> = &'a [TagCount];
    const ENCODING: &'static str = "varint count (<= 2^24), then 7 varints per tag: tag, alloc_bytes, alloc_count, \
                                    tracked_live, small_live, peak, external";
    fn borrow(v: &Vec<TagCount>) -> &[TagCount] {
        v
    }
    fn own(v: &[TagCount]) -> Vec<TagCount> {
        v.to_vec()
    }
    fn put(_: &mut Deltas, v: &[TagCount], out: &mut impl Sink) {
        put_varint(out, v.len() as u64);
        for t in v {
            for x in [
                u64::from(t.tag),
                t.alloc_bytes,
                t.alloc_count,
                t.tracked_live,
                t.small_live,
                t.peak,
                t.external,
            ] {
                put_varint(out, x);
            }
        }
    }
    fn get(_: &mut Deltas, c: &mut Cursor<'_>) -> Result<Vec<TagCount>, DecodeError> {
        let n = c.varint()?;
        if n > MAX_SNAPSHOT_TAGS {
            return Err(err(c, "counter snapshot with more than 2^24 tags"));
        }
        // Each entry takes at least 7 bytes: never reserve more than the
        // bytes left could hold.
        let mut tags = Vec::with_capacity((n as usize).min(c.remaining() / 7));
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
        Ok(tags)
    }
}
