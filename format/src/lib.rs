//! `heaptag-format`: the one definition of heaptag's event log, used by the
//! allocator's writer and the analyzer's reader. It has no dependency on
//! jemalloc. `docs/FORMAT.md` describes the same bytes in prose.
//!
//! A log is a [`Header`] followed by frames. A frame is a sync marker, a
//! length, a sequence number, a CRC-32 and a payload of [`Record`]s whose
//! delta state restarts at every frame, so a reader can verify each frame on
//! its own, skip a corrupt one, notice a missing or repeated one, and stop
//! cleanly at a truncated tail.
//!
//! Every record kind is defined once, in the table of `record.rs`: the
//! owned [`Record`], the borrowed [`RecordRef`] writers encode, the
//! allocator's ring [`Event`], the codec and the [`Kind`] names all come
//! from it.

#![warn(missing_docs)]

pub mod codec;
mod crc;
pub mod field;
mod frame;
pub mod hash;
mod header;
pub mod procfs;
mod reader;
mod record;
mod schema;
pub mod units;

pub use codec::Sink;
pub use field::Deltas;
pub use frame::{write_frame, FrameEncoder, FRAME_HEADER_LEN, FRAME_HEADER_LEN_V1, MAX_FRAME, SYNC};
pub use header::{
    FpHash, Header, LogSettings, Module, COMPAT, FINGERPRINT_FULL_FOUR_LANE, FINGERPRINT_FULL_XXH3,
    FINGERPRINT_SAMPLED_XXH3, MAGIC, MAX_ARGS, MAX_MODULES, VERSION,
};
pub use reader::{LogReader, Problem, ProblemKind};
pub use record::{
    kinds_markdown, Decoded, Event, FieldDoc, Fill, FpMeta, FpWhen, Kind, Record, RecordRef, TagCount, MAX_EVENT_LEN,
};
pub use units::{parse_duration, parse_size};

use std::fmt;

/// The fastest rate, in bytes per nanosecond (about 1 TB/s), at which any
/// writer can fill a block: an order of magnitude above one core's copy rate
/// and above the memory bandwidth of current CPU sockets.
///
/// A block freed sooner after its allocation than its size takes to write at
/// this rate ([`freed_unfilled`]) cannot hold a copy of anything: at most a
/// part of it was written, the rest is what the allocator handed out. The
/// allocator takes no fingerprint of such a block at its free (docs/FORMAT.md,
/// "Fingerprints"), and readers count it as holding no content.
pub const FILL_BYTES_PER_NS: u64 = 1024;

/// Whether a block of `size` bytes that lived `lifetime_ns` was freed before
/// it could have been filled (see [`FILL_BYTES_PER_NS`]).
///
/// ```
/// // 1 MiB takes 1,024 ns to write at 1,024 bytes per ns.
/// assert!(heaptag_format::freed_unfilled(1 << 20, 1_023));
/// assert!(!heaptag_format::freed_unfilled(1 << 20, 1_024));
/// // A block freed at the instant it was allocated held nothing.
/// assert!(heaptag_format::freed_unfilled(1, 0));
/// assert!(!heaptag_format::freed_unfilled(0, 0));
/// ```
#[inline]
pub const fn freed_unfilled(size: u64, lifetime_ns: u64) -> bool {
    lifetime_ns.saturating_mul(FILL_BYTES_PER_NS) < size
}

/// Stage name of the tag the log writer's own allocations are charged to;
/// readers leave it out of per-tag reports.
pub const WRITER_STAGE: &str = "heaptag:writer";

/// A record or header field that could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset in the file where decoding failed.
    pub offset: u64,
    /// What was wrong.
    pub what: &'static str,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.offset)
    }
}

impl std::error::Error for DecodeError {}

/// Why a log could not be opened at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be read.
    #[error("cannot read the log: {0}")]
    Io(#[from] std::io::Error),
    /// The file is shorter than a header.
    #[error("not a heaptag log: the file is {len} bytes, shorter than a header")]
    TooShort {
        /// File length seen.
        len: u64,
    },
    /// The first bytes are not heaptag's magic.
    #[error("not a heaptag log: the file does not start with \"HEAPTAG\\0\" (found {found:02x?})")]
    NotHeaptag {
        /// The first 8 bytes found.
        found: [u8; 8],
    },
    /// Written by a newer heaptag.
    #[error("log format version {found} is newer than this heaptag understands ({supported}): upgrade heaptag")]
    NewerVersion {
        /// Version in the file.
        found: u16,
        /// Newest version this reader reads.
        supported: u16,
    },
    /// The header is damaged.
    #[error("the log header is damaged: {0}")]
    BadHeader(DecodeError),
}
