//! The log header: who wrote the log, with which settings, and the module map
//! needed to symbolize addresses offline.

use crate::codec::{put_bytes, put_str, put_varint, Cursor, Sink};
use crate::{DecodeError, ReadError};

/// The first 8 bytes of every heaptag log.
pub const MAGIC: [u8; 8] = *b"HEAPTAG\0";
/// The format version this crate writes and the newest it reads.
pub const VERSION: u16 = 2;
/// The oldest reader version that can read what this crate writes; written
/// in the header after the version. A later writer that only adds record
/// kinds or appends fields keeps it at 2, so this reader still reads its
/// logs (skipping what it does not know); one that changes the framing
/// raises it. Version 1 logs have 0 here.
pub const COMPAT: u16 = 2;
/// Command-line arguments a reader keeps (the rest are counted in a last
/// argument saying how many were not kept).
pub const MAX_ARGS: u64 = 4096;
/// Entries a module map may have; a header with more is damaged (a process
/// maps a few hundred objects).
pub const MAX_MODULES: u64 = 65536;
/// Fixed part: magic, version, compat, body length, body CRC.
pub(crate) const FIXED_LEN: usize = 8 + 2 + 2 + 4 + 4;

/// The header's "fingerprint full" value this version writes: full
/// fingerprints are XXH3-64 of every byte. Logs of earlier versions wrote 1,
/// for a different full hash: full-fingerprint hashes compare only between
/// logs with the same value (`docs/FORMAT.md`).
pub const FINGERPRINT_FULL_XXH3: u64 = 2;
/// The header's "fingerprint full" value of logs of heaptag before XXH3
/// (0.2.0 and earlier): full fingerprints are [`FpHash::FourLane`].
pub const FINGERPRINT_FULL_FOUR_LANE: u64 = 1;
/// The "sampled fingerprint hash" field this version appends to the header
/// body, after the module map: sampled fingerprints are XXH3-64 seeded with
/// the block's length. Headers without the field (every earlier heaptag's)
/// mean [`FpHash::FourLane`]; a reader that does not know the field skips
/// it (readers ignore what follows the module map).
pub const FINGERPRINT_SAMPLED_XXH3: u64 = 1;

/// The hash function of a log's fingerprints of one kind (full or sampled).
/// Hashes compare only between fingerprints of the same kind and the same
/// hash ([`LogSettings::fingerprint_hash`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FpHash {
    /// Earlier heaptag builds: a four-lane multiply hash of the words read
    /// (full: logs with "fingerprint full" 1; sampled: logs without the
    /// appended field).
    FourLane,
    /// XXH3-64 (the reference `xxhash.h`, `xxhash-rust`, `twox-hash`): full,
    /// seed 0 over every byte; sampled, seeded with the block's length over
    /// the 64 pieces' concatenation (`docs/FORMAT.md`, "Fingerprints").
    #[default]
    Xxh3,
    /// A code this reader does not know (a later heaptag's): its hashes
    /// compare only with the same code's.
    Unknown(u64),
}

impl FpHash {
    /// A short name: `four-lane`, `XXH3-64`, `hash code N`.
    pub fn name(&self) -> String {
        match self {
            FpHash::FourLane => "four-lane".into(),
            FpHash::Xxh3 => "XXH3-64".into(),
            FpHash::Unknown(c) => format!("hash code {c}"),
        }
    }
}

/// Settings the writing process ran with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// Blocks of at least this size were tracked exactly.
    pub threshold: u64,
    /// Mean bytes between sampled small blocks (0: none).
    pub sample_rate: u64,
    /// Sampling interval of RSS, jemalloc stats and counters, in ns.
    pub interval_ns: u64,
    /// Tracked blocks of at least this size were fingerprinted.
    pub fingerprint_min: u64,
    /// Fingerprints hash the whole content (otherwise sampled blocks).
    /// Written as [`FINGERPRINT_FULL_XXH3`] (or 1 when [`full_hash`] is
    /// [`FpHash::FourLane`]); any value but 0 reads as full (1: a log of an
    /// earlier heaptag, whose full hash was another).
    ///
    /// [`full_hash`]: LogSettings::full_hash
    pub fingerprint_full: bool,
    /// The hash of full fingerprints, from the "fingerprint full" value (1:
    /// four-lane, 2: XXH3-64). Meaningful when `fingerprint_full`; a log
    /// with 0 there has no full fingerprints and reads as XXH3-64.
    pub full_hash: FpHash,
    /// The hash of sampled fingerprints: the "sampled fingerprint hash"
    /// field appended to the header ([`FINGERPRINT_SAMPLED_XXH3`]), four-lane
    /// when absent (logs of earlier heaptag builds, and version 1).
    pub sampled_hash: FpHash,
    /// Maximum frames per call stack (0: stacks off).
    pub stack_depth: u32,
    /// Capacity of the event buffer, in events.
    pub buffer_events: u64,
    /// C and C++ code also allocates from jemalloc (unprefixed build).
    pub unprefixed_jemalloc: bool,
}

impl LogSettings {
    /// The hash of this log's fingerprints of one kind (the record's `full`
    /// bit): fingerprints compare by hash only when this is the same.
    pub fn fingerprint_hash(&self, full: bool) -> FpHash {
        if full {
            self.full_hash
        } else {
            self.sampled_hash
        }
    }
}

/// One loaded object (executable or shared library) mapped executable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Module {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset the mapping starts at.
    pub file_offset: u64,
    /// Path of the object.
    pub path: String,
    /// GNU build id, if the object has one.
    pub build_id: Vec<u8>,
}

/// The header of a heaptag log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Format version of the file.
    pub version: u16,
    /// Process id of the writer.
    pub pid: u32,
    /// Wall clock at the start, ns since the Unix epoch.
    pub start_wall_ns: u64,
    /// Monotonic clock at the start, ns (record times are relative to it).
    pub start_mono_ns: u64,
    /// Executable path.
    pub exe: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// heaptag version that wrote the log.
    pub heaptag_version: String,
    /// Settings in force.
    pub settings: LogSettings,
    /// Executable mappings, for offline symbolization.
    pub modules: Vec<Module>,
}

impl Header {
    /// Appends the encoded header (fixed part and body) to `out`.
    pub fn encode(&self, out: &mut impl Sink) {
        let mut body = Vec::new();
        put_varint(&mut body, u64::from(self.pid));
        put_varint(&mut body, self.start_wall_ns);
        put_varint(&mut body, self.start_mono_ns);
        put_str(&mut body, &self.exe);
        put_varint(&mut body, self.cmdline.len() as u64);
        for a in &self.cmdline {
            put_str(&mut body, a);
        }
        put_str(&mut body, &self.heaptag_version);
        let s = &self.settings;
        for v in [
            s.threshold,
            s.sample_rate,
            s.interval_ns,
            s.fingerprint_min,
            match (s.fingerprint_full, s.full_hash) {
                (false, _) => 0,
                (true, FpHash::FourLane) => FINGERPRINT_FULL_FOUR_LANE,
                (true, FpHash::Xxh3) => FINGERPRINT_FULL_XXH3,
                (true, FpHash::Unknown(c)) => c,
            },
            u64::from(s.stack_depth),
            s.buffer_events,
            u64::from(s.unprefixed_jemalloc),
        ] {
            put_varint(&mut body, v);
        }
        put_varint(&mut body, self.modules.len() as u64);
        for m in &self.modules {
            put_varint(&mut body, m.start);
            put_varint(&mut body, m.end);
            put_varint(&mut body, m.file_offset);
            put_str(&mut body, &m.path);
            put_bytes(&mut body, &m.build_id);
        }
        // Appended fields (readers skip what follows the module map). A
        // four-lane log is written as earlier heaptags wrote it: without.
        match s.sampled_hash {
            FpHash::FourLane => {}
            FpHash::Xxh3 => put_varint(&mut body, FINGERPRINT_SAMPLED_XXH3),
            FpHash::Unknown(c) => put_varint(&mut body, c),
        }
        out.put(&MAGIC);
        out.put(&VERSION.to_le_bytes());
        out.put(&COMPAT.to_le_bytes());
        out.put(&(body.len() as u32).to_le_bytes());
        out.put(&crc32fast::hash(&body).to_le_bytes());
        out.put(&body);
    }

    /// Parses the fixed part; returns the version and body length.
    pub(crate) fn parse_fixed(fixed: &[u8; FIXED_LEN]) -> Result<(u16, usize, u32), ReadError> {
        let magic: [u8; 8] = fixed[..8].try_into().expect("8 bytes");
        if magic != MAGIC {
            return Err(ReadError::NotHeaptag { found: magic });
        }
        let version = u16::from_le_bytes([fixed[8], fixed[9]]);
        let compat = u16::from_le_bytes([fixed[10], fixed[11]]);
        // A newer log is read when its writer says this version can read
        // it (compat); version 1 had no compat field (0).
        if version > VERSION && (compat > VERSION || compat < 2) {
            return Err(ReadError::NewerVersion {
                found: version,
                supported: VERSION,
            });
        }
        if version == 0 {
            return Err(ReadError::BadHeader(DecodeError {
                offset: 8,
                what: "format version 0 does not exist",
            }));
        }
        let len = u32::from_le_bytes(fixed[12..16].try_into().expect("4 bytes")) as usize;
        if len > 64 << 20 {
            return Err(ReadError::BadHeader(DecodeError {
                offset: 12,
                what: "header longer than 64 MiB",
            }));
        }
        let crc = u32::from_le_bytes(fixed[16..20].try_into().expect("4 bytes"));
        Ok((version, len, crc))
    }

    /// Decodes the body that follows the fixed part.
    pub(crate) fn decode_body(version: u16, body: &[u8], crc: u32) -> Result<Header, ReadError> {
        if crc32fast::hash(body) != crc {
            return Err(ReadError::BadHeader(DecodeError {
                offset: FIXED_LEN as u64,
                what: "header checksum mismatch",
            }));
        }
        let mut c = Cursor::new(body, FIXED_LEN as u64);
        let h = (|| -> Result<Header, DecodeError> {
            let pid = c.varint32()?;
            let start_wall_ns = c.varint()?;
            let start_mono_ns = c.varint()?;
            let exe = c.string()?;
            let n = c.varint()?;
            let mut cmdline = Vec::new();
            for i in 0..n {
                // Each argument takes at least a byte: `n` cannot outrun
                // the body, but a flood of empty strings would cost 24
                // bytes of memory per byte of log.
                if i < MAX_ARGS {
                    cmdline.push(c.string()?);
                } else {
                    c.bytes()?;
                }
            }
            if n > MAX_ARGS {
                cmdline.push(format!("[{} more arguments not kept]", n - MAX_ARGS));
            }
            let heaptag_version = c.string()?;
            let (threshold, sample_rate, interval_ns, fingerprint_min) =
                (c.varint()?, c.varint()?, c.varint()?, c.varint()?);
            let full = c.varint()?;
            let mut settings = LogSettings {
                threshold,
                sample_rate,
                interval_ns,
                fingerprint_min,
                fingerprint_full: full != 0,
                full_hash: match full {
                    FINGERPRINT_FULL_FOUR_LANE => FpHash::FourLane,
                    0 | FINGERPRINT_FULL_XXH3 => FpHash::Xxh3,
                    c => FpHash::Unknown(c),
                },
                sampled_hash: FpHash::FourLane,
                stack_depth: c.varint32()?,
                buffer_events: c.varint()?,
                unprefixed_jemalloc: c.varint()? != 0,
            };
            let n = c.varint()?;
            if n > MAX_MODULES {
                return Err(DecodeError {
                    offset: c.offset(),
                    what: "module map of more than 65536 entries",
                });
            }
            let mut modules = Vec::new();
            for _ in 0..n {
                modules.push(Module {
                    start: c.varint()?,
                    end: c.varint()?,
                    file_offset: c.varint()?,
                    path: c.string()?,
                    build_id: c.bytes()?.to_vec(),
                });
            }
            // Appended fields, each absent in earlier logs; anything after
            // the ones this reader knows is a later writer's, skipped.
            if !c.is_empty() {
                settings.sampled_hash = match c.varint()? {
                    0 => FpHash::FourLane,
                    FINGERPRINT_SAMPLED_XXH3 => FpHash::Xxh3,
                    c => FpHash::Unknown(c),
                };
            }
            Ok(Header {
                version,
                pid,
                start_wall_ns,
                start_mono_ns,
                exe,
                cmdline,
                heaptag_version,
                settings,
                modules,
            })
        })()
        .map_err(ReadError::BadHeader)?;
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_and_back(full: bool) -> (Vec<u8>, Header) {
        encode_and_back(LogSettings {
            fingerprint_full: full,
            ..LogSettings::default()
        })
    }

    fn header_with(settings: LogSettings) -> Header {
        Header {
            version: crate::VERSION,
            pid: 7,
            exe: "/bin/x".into(),
            settings,
            modules: vec![Module {
                start: 0x1000,
                end: 0x2000,
                file_offset: 0,
                path: "/bin/x".into(),
                build_id: vec![1, 2],
            }],
            ..Header::default()
        }
    }

    fn encode_and_back(settings: LogSettings) -> (Vec<u8>, Header) {
        let mut bytes = Vec::new();
        header_with(settings).encode(&mut bytes);
        let (version, len, crc) = Header::parse_fixed(bytes[..FIXED_LEN].try_into().unwrap()).unwrap();
        let back = Header::decode_body(version, &bytes[FIXED_LEN..FIXED_LEN + len], crc).unwrap();
        (bytes, back)
    }

    fn decode(body: &[u8]) -> Result<Header, ReadError> {
        Header::decode_body(crate::VERSION, body, crc32fast::hash(body))
    }

    #[test]
    fn the_sampled_hash_is_a_field_after_the_module_map_and_absent_means_four_lane() {
        let new = LogSettings::default();
        assert_eq!(
            (new.sampled_hash, new.full_hash),
            (FpHash::Xxh3, FpHash::Xxh3),
            "what this version writes"
        );
        let (with, back) = encode_and_back(new.clone());
        assert_eq!(back.settings, new);
        assert_eq!(back, header_with(new.clone()), "every field reads back");
        let old = LogSettings {
            sampled_hash: FpHash::FourLane,
            ..new.clone()
        };
        let (without, back) = encode_and_back(old.clone());
        assert_eq!(back.settings.sampled_hash, FpHash::FourLane);
        // The new body is the old one (an earlier heaptag's, byte for byte:
        // nothing else changed) plus one varint at the end, where a reader
        // that stops after the module map never looks: every field it
        // reads is the same.
        let (bw, bo) = (&with[FIXED_LEN..], &without[FIXED_LEN..]);
        assert_eq!(bw.len(), bo.len() + 1);
        assert_eq!(&bw[..bo.len()], bo);
        assert_eq!(bw[bo.len()], FINGERPRINT_SAMPLED_XXH3 as u8);
        assert_eq!(decode(bo).unwrap().settings, old);
        // A later writer's code is kept as unknown, and fields appended
        // after it are skipped.
        let mut later = bo.to_vec();
        later.extend([9, 0x80, 0x01, 42]);
        assert_eq!(decode(&later).unwrap().settings.sampled_hash, FpHash::Unknown(9));
        let mut zero = bo.to_vec();
        zero.push(0);
        assert_eq!(decode(&zero).unwrap().settings.sampled_hash, FpHash::FourLane);
        // A damaged field (a varint cut short) is a damaged header.
        let mut cut = bo.to_vec();
        cut.push(0x80);
        assert!(matches!(decode(&cut), Err(ReadError::BadHeader(_))));
        // Which hash each kind of fingerprint has.
        assert_eq!(back.settings.fingerprint_hash(false), FpHash::FourLane);
        assert_eq!(back.settings.fingerprint_hash(true), FpHash::Xxh3);
    }

    #[test]
    fn full_hash_codes_round_trip() {
        for (hash, code) in [
            (FpHash::FourLane, FINGERPRINT_FULL_FOUR_LANE),
            (FpHash::Xxh3, FINGERPRINT_FULL_XXH3),
            (FpHash::Unknown(5), 5),
        ] {
            let s = LogSettings {
                fingerprint_full: true,
                full_hash: hash,
                ..LogSettings::default()
            };
            let (bytes, back) = encode_and_back(s.clone());
            assert_eq!(back.settings, s, "{code}");
            let (_, zero) = encode_and_back(LogSettings {
                fingerprint_full: false,
                ..s
            });
            assert!(!zero.settings.fingerprint_full);
            // The code is the byte that differs from a sampled log's body.
            let (sampled, _) = encode_and_back(LogSettings::default());
            assert!(
                bytes.iter().zip(&sampled).any(|(a, b)| (*a, *b) == (code as u8, 0)),
                "{code}"
            );
        }
    }

    #[test]
    fn full_fingerprints_are_recorded_as_xxh3_and_earlier_full_logs_still_read_as_full() {
        let (with, back) = body_and_back(true);
        assert!(back.settings.fingerprint_full);
        let (without, back) = body_and_back(false);
        assert!(!back.settings.fingerprint_full);
        // The two bodies differ in one byte: the setting, 2 against 0.
        let diff: Vec<(u8, u8)> = with
            .iter()
            .zip(&without)
            .filter(|(a, b)| a != b)
            .map(|(a, b)| (*a, *b))
            .collect();
        assert!(diff.contains(&(FINGERPRINT_FULL_XXH3 as u8, 0)), "{diff:?}");
        // A body with 1 there (an earlier heaptag's full log) reads as full.
        let (version, len, _) = Header::parse_fixed(with[..FIXED_LEN].try_into().unwrap()).unwrap();
        let mut body = with[FIXED_LEN..FIXED_LEN + len].to_vec();
        let at = with[FIXED_LEN..]
            .iter()
            .zip(&without[FIXED_LEN..])
            .position(|(a, b)| a != b)
            .unwrap();
        body[at] = 1;
        let crc = crc32fast::hash(&body);
        assert!(
            Header::decode_body(version, &body, crc)
                .unwrap()
                .settings
                .fingerprint_full
        );
    }
}
