//! The encoder's bytes are fixed: a large, varied, deterministic stream of
//! records of every kind (values at every varint length, deltas up and
//! down, strings and stacks whose bodies cross the one- and two-byte length
//! prefixes, records that do not fit in a small sink) is encoded into
//! frames, and the bytes must hash to what the encoder wrote before the
//! writer's encoding was made cheaper (`EXPECTED_*`, measured with the old
//! encoder, which wrote a 0 length byte, the body, then set or inserted the
//! real length). Any change of a single byte of the log changes the hash.
//!
//! The same stream is also encoded record by record into a plain `Vec<u8>`
//! and into a sink that drops what does not fit, whose surviving records
//! must decode to the records given.

use heaptag_format::codec::{Sink, CHUNK};
use heaptag_format::{
    Deltas, Event, Fill, FpMeta, FpWhen, FrameEncoder, Header, Kind, LogReader, Record, TagCount, VERSION,
};

/// splitmix64: a small deterministic generator, so the stream is the same
/// on every machine and run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A value of a random bit width (0 to 64 bits), so every varint length
    /// (and the zigzag of large deltas both ways) is met.
    fn wide(&mut self) -> u64 {
        let bits = self.below(65);
        match bits {
            0 => 0,
            64 => self.next(),
            b => self.next() & ((1u64 << b) - 1),
        }
    }

    fn wide32(&mut self) -> u32 {
        (self.wide() >> 32) as u32 ^ self.wide() as u32
    }

    /// A time near the previous one, mostly forward (as a log's are), now
    /// and then anywhere.
    fn time(&mut self, prev: &mut u64) -> u64 {
        *prev = match self.below(8) {
            0 => self.next(),
            1 => prev.wrapping_sub(self.below(1 << 20)),
            _ => {
                let bits = self.below(40) + 1;
                prev.wrapping_add(self.below(1 << bits))
            }
        };
        *prev
    }

    /// An address near a previous one, or anywhere.
    fn addr(&mut self, prev: &mut u64) -> u64 {
        *prev = match self.below(6) {
            0 => self.next(),
            1 => prev.wrapping_sub(self.below(1 << 24) & !15),
            _ => {
                let bits = self.below(36) + 1;
                prev.wrapping_add(self.below(1 << bits) & !15)
            }
        };
        *prev
    }

    fn string(&mut self) -> String {
        // Lengths around the one/two/three-byte varint boundaries too.
        let len = match self.below(10) {
            0 => 120 + self.below(20),
            1 => 250 + self.below(20),
            2 => 16_370 + self.below(30),
            _ => self.below(40),
        } as usize;
        let alphabet = "abcdefghijklmnopqrstuvwxyz_:/.0123456789é✓";
        let chars: Vec<char> = alphabet.chars().collect();
        (0..len)
            .map(|_| chars[self.below(chars.len() as u64) as usize])
            .collect()
    }

    fn opt<T>(&mut self, f: impl FnOnce(&mut Rng) -> T) -> Option<T> {
        if self.below(3) == 0 {
            None
        } else {
            Some(f(self))
        }
    }
}

/// One record of `kind` with random fields.
fn record(kind: Kind, r: &mut Rng, t: &mut u64, a: &mut u64) -> Record {
    match kind {
        Kind::Alloc => Record::Alloc {
            time_ns: r.time(t),
            thread: r.wide32(),
            tag: r.wide32(),
            stack: r.wide32(),
            addr: r.addr(a),
            size: r.wide(),
        },
        Kind::Free => Record::Free {
            time_ns: r.time(t),
            thread: r.wide32(),
            addr: r.addr(a),
            size: r.wide(),
        },
        Kind::ReallocBegin => Record::ReallocBegin {
            time_ns: r.time(t),
            thread: r.wide32(),
            addr: r.addr(a),
        },
        Kind::Realloc => Record::Realloc {
            time_ns: r.time(t),
            thread: r.wide32(),
            tag: r.wide32(),
            old_addr: r.addr(a),
            old_size: r.wide(),
            addr: r.addr(a),
            size: r.wide(),
        },
        Kind::SampleAlloc => Record::SampleAlloc {
            time_ns: r.time(t),
            thread: r.wide32(),
            tag: r.wide32(),
            stack: r.wide32(),
            addr: r.addr(a),
            size: r.wide(),
            weight: r.wide(),
        },
        Kind::SampleFree => Record::SampleFree {
            time_ns: r.time(t),
            thread: r.wide32(),
            addr: r.addr(a),
            size: r.wide(),
        },
        Kind::Native => Record::Native { addr: r.wide() },
        Kind::Fingerprint => Record::Fingerprint {
            time_ns: r.time(t),
            addr: r.addr(a),
            size: r.wide(),
            hash: r.next(),
            meta: FpMeta {
                fill: match r.below(3) {
                    0 => Fill::Mixed,
                    1 => Fill::Zero,
                    _ => Fill::Constant(r.next() as u8),
                },
                full: r.below(2) == 0,
                when: match r.below(3) {
                    0 => FpWhen::Free,
                    1 => FpWhen::Mark,
                    _ => FpWhen::Finish,
                },
            },
        },
        Kind::TagDef => Record::TagDef {
            id: r.wide32(),
            job: r.opt(Rng::wide),
            partition: r.opt(Rng::wide32),
            stage: r.opt(Rng::string),
        },
        Kind::StackDef => Record::StackDef {
            id: r.wide32(),
            frames: {
                // 0 to 300 frames: bodies on both sides of 128 and 256 bytes.
                let n = match r.below(4) {
                    0 => r.below(301),
                    _ => r.below(64),
                };
                let mut at = 0x5555_0000_0000 + r.below(1 << 30);
                (0..n)
                    .map(|_| {
                        at = match r.below(5) {
                            0 => r.next(),
                            _ => at.wrapping_add(r.below(1 << 16)).wrapping_sub(1 << 15),
                        };
                        at
                    })
                    .collect()
            },
        },
        Kind::Mark => Record::Mark {
            time_ns: r.time(t),
            label: r.string(),
        },
        Kind::Counters => Record::Counters {
            time_ns: r.time(t),
            tags: {
                let n = match r.below(5) {
                    0 => r.below(2_000),
                    _ => r.below(8),
                };
                (0..n)
                    .map(|_| TagCount {
                        tag: r.wide32(),
                        alloc_bytes: r.wide(),
                        alloc_count: r.wide(),
                        tracked_live: r.wide(),
                        small_live: r.wide(),
                        peak: r.wide(),
                        external: r.wide(),
                    })
                    .collect()
            },
        },
        Kind::Rss => Record::Rss {
            time_ns: r.time(t),
            vm_rss: r.wide(),
            vm_hwm: r.wide(),
            rss_anon: r.wide(),
            rss_file: r.wide(),
        },
        Kind::Jemalloc => Record::Jemalloc {
            time_ns: r.time(t),
            allocated: r.wide(),
            active: r.wide(),
            resident: r.wide(),
            mapped: r.wide(),
            retained: r.wide(),
            metadata: r.wide(),
        },
        Kind::External => Record::External {
            time_ns: r.time(t),
            tag: r.wide32(),
            what: r.string(),
            bytes: r.wide() as i64,
        },
        Kind::Dropped => Record::Dropped {
            time_ns: r.time(t),
            events: r.wide(),
        },
        Kind::Symbol => Record::Symbol {
            addr: r.wide(),
            function: r.string(),
            file: r.string(),
            line: r.wide32(),
        },
        Kind::End => Record::End {
            time_ns: r.time(t),
            dropped: r.wide(),
        },
        Kind::Pad => Record::Pad {
            len: match r.below(4) {
                0 => 120 + r.below(300) as u32,
                _ => r.below(130) as u32,
            },
        },
        Kind::Totals => Record::Totals {
            time_ns: r.time(t),
            live: r.wide(),
            tracked: r.wide(),
            overhead: r.wide(),
        },
        Kind::ProcStart => Record::ProcStart {
            time_ns: r.time(t),
            pid: r.wide32(),
            ppid: r.wide32(),
            cmdline: r.string(),
        },
        Kind::ProcRss => Record::ProcRss {
            time_ns: r.time(t),
            pid: r.wide32(),
            vm_rss: r.wide(),
            vm_hwm: r.wide(),
            rss_anon: r.wide(),
            rss_file: r.wide(),
            rss_shmem: r.wide(),
            pss: r.wide(),
        },
        Kind::ProcExit => Record::ProcExit {
            time_ns: r.time(t),
            pid: r.wide32(),
            code: r.wide32() as i32,
        },
        Kind::TagRetire => Record::TagRetire {
            time_ns: r.time(t),
            id: r.wide32(),
        },
        Kind::TagOverflow => Record::TagOverflow {
            time_ns: r.time(t),
            job: r.opt(Rng::wide),
            partition: r.opt(Rng::wide32),
            stage: r.opt(Rng::string),
        },
        Kind::Segment => Record::Segment {
            time_ns: r.time(t),
            run: r.next(),
            index: r.wide32(),
        },
        Kind::Carried => Record::Carried {
            time_ns: r.time(t),
            thread: r.wide32(),
            tag: r.wide32(),
            stack: r.wide32(),
            addr: r.addr(a),
            size: r.wide(),
        },
        Kind::CarriedSample => Record::CarriedSample {
            time_ns: r.time(t),
            thread: r.wide32(),
            tag: r.wide32(),
            stack: r.wide32(),
            addr: r.addr(a),
            size: r.wide(),
            weight: r.wide(),
        },
        Kind::CarriedExternal => Record::CarriedExternal {
            time_ns: r.time(t),
            tag: r.wide32(),
            bytes: r.wide() as i64,
        },
    }
}

/// The stream: `n` records, ring events 7 times in 8 (as in a real log),
/// every other kind the rest; frames of 1 to 2,000 records. An `end` (after
/// which a reader reads nothing) comes once, last.
fn stream(n: usize) -> Vec<Vec<Record>> {
    let mut r = Rng(0x4845_4150_5441_4721);
    let events: Vec<Kind> = Kind::ALL.iter().copied().filter(|k| k.is_ring_event()).collect();
    let others: Vec<Kind> = Kind::ALL.iter().copied().filter(|&k| k != Kind::End).collect();
    let (mut t, mut a) = (0u64, 0x7f00_0000_0000u64);
    let mut frames = Vec::new();
    let mut left = n;
    while left > 0 {
        let len = (1 + r.below(2_000) as usize).min(left);
        left -= len;
        let frame: Vec<Record> = (0..len)
            .map(|_| {
                let kind = if r.below(8) != 0 {
                    events[r.below(events.len() as u64) as usize]
                } else {
                    others[r.below(others.len() as u64) as usize]
                };
                record(kind, &mut r, &mut t, &mut a)
            })
            .collect();
        frames.push(frame);
    }
    let end = record(Kind::End, &mut r, &mut t, &mut a);
    frames.last_mut().expect("n > 0").push(end);
    frames
}

/// FNV-1a, 64 bits: the digest of the bytes (a test constant, not security).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Frames of the stream through `FrameEncoder` into a `Vec<u8>`.
fn encode_frames(frames: &[Vec<Record>]) -> Vec<u8> {
    let mut enc = FrameEncoder::new(Vec::new(), 1);
    let mut out = Vec::new();
    for f in frames {
        for rec in f {
            assert!(enc.push(rec.borrowed()));
        }
        assert!(enc.finish(&mut out));
    }
    out
}

/// The ring event of a record of a ring kind.
fn as_event(r: &Record) -> Option<Event> {
    Some(match *r {
        Record::Alloc {
            time_ns,
            thread,
            tag,
            stack,
            addr,
            size,
        } => Event::Alloc {
            time_ns,
            thread,
            tag,
            stack,
            addr,
            size,
        },
        Record::Free {
            time_ns,
            thread,
            addr,
            size,
        } => Event::Free {
            time_ns,
            thread,
            addr,
            size,
        },
        Record::ReallocBegin { time_ns, thread, addr } => Event::ReallocBegin { time_ns, thread, addr },
        Record::Realloc {
            time_ns,
            thread,
            tag,
            old_addr,
            old_size,
            addr,
            size,
        } => Event::Realloc {
            time_ns,
            thread,
            tag,
            old_addr,
            old_size,
            addr,
            size,
        },
        Record::SampleAlloc {
            time_ns,
            thread,
            tag,
            stack,
            addr,
            size,
            weight,
        } => Event::SampleAlloc {
            time_ns,
            thread,
            tag,
            stack,
            addr,
            size,
            weight,
        },
        Record::SampleFree {
            time_ns,
            thread,
            addr,
            size,
        } => Event::SampleFree {
            time_ns,
            thread,
            addr,
            size,
        },
        Record::Native { addr } => Event::Native { addr },
        Record::Fingerprint {
            time_ns,
            addr,
            size,
            hash,
            meta,
        } => Event::Fingerprint {
            time_ns,
            addr,
            size,
            hash,
            meta,
        },
        _ => return None,
    })
}

/// A `Vec<u8>` sink that takes chunks as the allocator's buffer does: the
/// whole fixed-size chunk copied, then cut to the record's length.
struct ChunkVec(Vec<u8>);

impl Sink for ChunkVec {
    fn put(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    fn put_chunk(&mut self, chunk: &[u8; CHUNK], len: usize) {
        let at = self.0.len();
        self.0.extend_from_slice(chunk);
        self.0.truncate(at + len);
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn as_slice(&self) -> &[u8] {
        &self.0
    }
    fn set(&mut self, at: usize, b: u8) {
        self.0[at] = b;
    }
    fn insert(&mut self, at: usize, b: &[u8]) {
        self.0.splice(at..at, b.iter().copied());
    }
    fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }
}

/// As [`encode_frames`], the ring events by the writer's fast path
/// (`push_event`) into `payload`.
fn encode_frames_as_the_writer<B: Sink>(frames: &[Vec<Record>], payload: B) -> Vec<u8> {
    let mut enc = FrameEncoder::new(payload, 1);
    let mut out = Vec::new();
    for f in frames {
        for rec in f {
            match as_event(rec) {
                Some(ev) => assert!(enc.push_event(&ev)),
                None => assert!(enc.push(rec.borrowed())),
            }
        }
        assert!(enc.finish(&mut out));
    }
    out
}

/// Records of the stream, each encoded alone with the delta state of its
/// frame, into one buffer (no frame headers): the record codec alone.
fn encode_records(frames: &[Vec<Record>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        let mut d = Deltas::default();
        for rec in f {
            rec.encode(&mut d, &mut out);
        }
    }
    out
}

const RECORDS: usize = 200_000;
/// Length and digest of `encode_frames(stream(RECORDS))` as the encoder
/// before this test wrote them.
const EXPECTED_FRAMES: (usize, u64) = (21_986_882, 0x044c_af91_ec35_c997);
/// The same for `encode_records`.
const EXPECTED_RECORDS: (usize, u64) = (21_982_882, 0x55c9_6c05_e62c_cdbf);

#[test]
fn the_encoder_writes_the_same_bytes_as_before() {
    let frames = stream(RECORDS);
    // Every kind is in the stream.
    for k in Kind::ALL {
        assert!(frames.iter().flatten().any(|r| r.kind() == *k), "{k:?} missing");
    }
    let bytes = encode_frames(&frames);
    let records = encode_records(&frames);
    eprintln!(
        "frames ({}, {:#x}) records ({}, {:#x})",
        bytes.len(),
        fnv(&bytes),
        records.len(),
        fnv(&records)
    );
    assert_eq!((bytes.len(), fnv(&bytes)), EXPECTED_FRAMES, "frame bytes changed");
    assert_eq!((records.len(), fnv(&records)), EXPECTED_RECORDS, "record bytes changed");
    // The writer's path for events: the same bytes, into either sink.
    for writer in [
        encode_frames_as_the_writer(&frames, Vec::new()),
        encode_frames_as_the_writer(&frames, ChunkVec(Vec::new())),
    ] {
        assert_eq!((writer.len(), fnv(&writer)), EXPECTED_FRAMES, "event bytes changed");
    }

    // And they read back as the records given.
    let mut log = Vec::new();
    Header {
        version: VERSION,
        pid: 1,
        ..Header::default()
    }
    .encode(&mut log);
    // A reserve frame (number 0) first, as the allocator writes.
    let mut reserve = FrameEncoder::new(Vec::new(), 0);
    assert!(reserve.pad_to(256));
    assert!(reserve.finish(&mut log));
    log.extend_from_slice(&bytes);
    let mut reader = LogReader::new(&log[..]).unwrap();
    let got: Vec<Record> = reader.by_ref().collect();
    assert!(reader.problems().is_empty(), "{:?}", reader.problems());
    // The reserve frame's pad first, then the stream.
    assert_eq!(got[0].kind(), Kind::Pad);
    let want: Vec<&Record> = frames.iter().flatten().collect();
    assert_eq!(got.len() - 1, want.len());
    for (i, (g, w)) in got[1..].iter().zip(want).enumerate() {
        assert_eq!(g, w, "record {i}");
    }
}

/// A sink that holds at most `cap` bytes, then drops and remembers.
struct Capped {
    v: Vec<u8>,
    cap: usize,
    failed: bool,
}

impl Sink for Capped {
    fn put(&mut self, b: &[u8]) {
        if self.v.len() + b.len() > self.cap {
            self.failed = true;
        } else {
            self.v.extend_from_slice(b);
        }
    }
    fn len(&self) -> usize {
        self.v.len()
    }
    fn as_slice(&self) -> &[u8] {
        &self.v
    }
    fn set(&mut self, at: usize, b: u8) {
        self.v[at] = b;
    }
    fn insert(&mut self, at: usize, b: &[u8]) {
        if self.v.len() + b.len() > self.cap {
            self.failed = true;
        } else {
            self.v.splice(at..at, b.iter().copied());
        }
    }
    fn truncate(&mut self, len: usize) {
        self.v.truncate(len);
        self.failed = false;
    }
    fn failed(&self) -> bool {
        self.failed
    }
}

#[test]
fn records_that_do_not_fit_are_dropped_whole_and_the_rest_are_the_same_bytes() {
    // Sinks of several capacities: each record either fits whole, with the
    // same bytes a roomy sink gets, or leaves nothing.
    let frames = stream(5_000);
    for cap in [1usize, 7, 40, 127, 129, 300, 5_000, 70_000] {
        for f in &frames {
            let mut small = FrameEncoder::new(
                Capped {
                    v: Vec::new(),
                    cap,
                    failed: false,
                },
                1,
            );
            let mut kept = FrameEncoder::new(Vec::new(), 1);
            for rec in f {
                if small.push(rec.borrowed()) {
                    kept.push(rec.borrowed());
                }
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            assert!(small.finish(&mut a));
            assert!(kept.finish(&mut b));
            assert_eq!(a, b, "cap {cap}");
        }
    }
}
