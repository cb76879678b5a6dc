//! Format version 2: record lengths (unknown kinds and appended fields are
//! skipped), frame sequence numbers (missing, repeated and moved frames are
//! damage), the reserve frame's padding, writers that cannot grow their
//! buffer, and the record table in docs/FORMAT.md.

use heaptag_format::codec::{put_varint, Sink};
use heaptag_format::{
    kinds_markdown, write_frame, Event, Fill, FpMeta, FpWhen, FrameEncoder, Header, Kind, LogReader, ProblemKind,
    Record, RecordRef, TagCount, COMPAT, FRAME_HEADER_LEN, VERSION,
};

fn header_bytes() -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        version: VERSION,
        pid: 7,
        exe: "/bin/x".into(),
        heaptag_version: "test".into(),
        ..Header::default()
    }
    .encode(&mut out);
    out
}

/// One record of each kind; the match is exhaustive, so a new kind in the
/// table must be added here.
fn sample(kind: Kind) -> Record {
    let t = 1_000 + u64::from(kind.code());
    match kind {
        Kind::Alloc => Record::Alloc {
            time_ns: t,
            thread: 1,
            tag: 2,
            stack: 3,
            addr: 0x7f00_0000_0000,
            size: 1 << 20,
        },
        Kind::Free => Record::Free {
            time_ns: t,
            thread: 1,
            addr: 0x7f00_0000_0000,
            size: 1 << 20,
        },
        Kind::ReallocBegin => Record::ReallocBegin {
            time_ns: t,
            thread: 2,
            addr: 0x10,
        },
        Kind::Realloc => Record::Realloc {
            time_ns: t,
            thread: 2,
            tag: 4,
            old_addr: 0x10,
            old_size: 100_000,
            addr: 0x2000_0000,
            size: 200_000,
        },
        Kind::SampleAlloc => Record::SampleAlloc {
            time_ns: t,
            thread: 3,
            tag: 1,
            stack: 0,
            addr: 0x55,
            size: 48,
            weight: 524_288,
        },
        Kind::SampleFree => Record::SampleFree {
            time_ns: t,
            thread: 3,
            addr: 0x55,
            size: 48,
        },
        Kind::Native => Record::Native { addr: 0x7f00_0000_0000 },
        Kind::Fingerprint => Record::Fingerprint {
            time_ns: t,
            addr: 0x7f00_0000_0000,
            size: 1 << 20,
            hash: 0xdead_beef_0123_4567,
            meta: FpMeta {
                fill: Fill::Constant(7),
                full: true,
                when: FpWhen::Mark,
            },
        },
        Kind::TagDef => Record::TagDef {
            id: 9,
            job: Some(u64::MAX - 1),
            partition: Some(u32::MAX),
            stage: Some("synthesize_partition".into()),
        },
        Kind::StackDef => Record::StackDef {
            id: 1,
            frames: (0..300).map(|i| 0x5555_0000 + i * 17).collect(),
        },
        Kind::Mark => Record::Mark {
            time_ns: t,
            label: "after partition 3 ".repeat(20),
        },
        Kind::Counters => Record::Counters {
            time_ns: t,
            tags: (0..40)
                .map(|i| TagCount {
                    tag: i,
                    alloc_bytes: 1 << 33,
                    alloc_count: 5,
                    tracked_live: 1 << 30,
                    small_live: 77,
                    peak: 1 << 31,
                    external: 0,
                })
                .collect(),
        },
        Kind::Rss => Record::Rss {
            time_ns: t,
            vm_rss: 1,
            vm_hwm: 2,
            rss_anon: 3,
            rss_file: 4,
        },
        Kind::Jemalloc => Record::Jemalloc {
            time_ns: t,
            allocated: 1,
            active: 2,
            resident: 3,
            mapped: 4,
            retained: 5,
            metadata: 6,
        },
        Kind::External => Record::External {
            time_ns: t,
            tag: 2,
            what: "pinned".into(),
            bytes: -(1 << 40),
        },
        Kind::Dropped => Record::Dropped { time_ns: t, events: 12 },
        Kind::Symbol => Record::Symbol {
            addr: 0x5555_0011,
            function: "prover::synthesize".into(),
            file: "src/main.rs".into(),
            line: 146,
        },
        Kind::End => Record::End { time_ns: t, dropped: 0 },
        Kind::Pad => Record::Pad { len: 200 },
        Kind::Totals => Record::Totals {
            time_ns: t,
            live: 1,
            tracked: 2,
            overhead: 3,
        },
        Kind::ProcStart => Record::ProcStart {
            time_ns: t,
            pid: 10,
            ppid: 1,
            cmdline: "prover --bench".into(),
        },
        Kind::ProcRss => Record::ProcRss {
            time_ns: t,
            pid: 10,
            vm_rss: 1,
            vm_hwm: 2,
            rss_anon: 3,
            rss_file: 4,
            rss_shmem: 5,
            pss: 6,
        },
        Kind::ProcExit => Record::ProcExit {
            time_ns: t,
            pid: 10,
            code: -1,
        },
        Kind::TagRetire => Record::TagRetire { time_ns: t, id: 7 },
        Kind::TagOverflow => Record::TagOverflow {
            time_ns: t,
            job: Some(9),
            partition: None,
            stage: Some("prove".into()),
        },
        Kind::Segment => Record::Segment {
            time_ns: t,
            run: 0xfeed,
            index: 3,
        },
        Kind::Carried => Record::Carried {
            time_ns: t,
            thread: 1,
            tag: 2,
            stack: 3,
            addr: 0x7f00_0000_0000,
            size: 1 << 20,
        },
        Kind::CarriedSample => Record::CarriedSample {
            time_ns: t,
            thread: 1,
            tag: 2,
            stack: 3,
            addr: 0x7f00_0000_1000,
            size: 100,
            weight: 4096,
        },
        Kind::CarriedExternal => Record::CarriedExternal {
            time_ns: t,
            tag: 2,
            bytes: 1 << 30,
        },
    }
}

fn read_all(bytes: &[u8]) -> (Vec<Record>, Vec<ProblemKind>, u64) {
    let mut r = LogReader::new(bytes).unwrap();
    let got: Vec<Record> = r.by_ref().collect();
    let problems = r.problems().iter().map(|p| p.kind.clone()).collect();
    (got, problems, r.unknown_records())
}

#[test]
fn every_kind_round_trips_through_owned_and_borrowed_forms() {
    let mut bytes = header_bytes();
    let mut enc = FrameEncoder::new(Vec::new(), 1);
    // The End record last: records after it are damage (issue 13).
    let mut all: Vec<Record> = Kind::ALL.iter().map(|&k| sample(k)).collect();
    all.sort_by_key(|r| r.kind() == Kind::End);
    for r in &all {
        assert_eq!(r.borrowed().to_owned(), *r);
        assert_eq!(r.kind(), r.borrowed().kind());
        assert!(enc.push(r.borrowed()));
    }
    assert!(enc.finish(&mut bytes));
    let (got, problems, unknown) = read_all(&bytes);
    assert_eq!(got, all);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(unknown, 0);
}

#[test]
fn ring_events_are_the_allocator_kinds_and_convert_to_the_same_records() {
    let ev = Event::Realloc {
        time_ns: 5,
        thread: 1,
        tag: 2,
        old_addr: 3,
        old_size: 4,
        addr: 6,
        size: 7,
    };
    assert_eq!(ev.kind(), Kind::Realloc);
    assert_eq!(Record::from(ev), ev.borrowed().to_owned());
    let ring: Vec<Kind> = Kind::ALL.iter().copied().filter(|k| k.is_ring_event()).collect();
    assert_eq!(
        ring,
        [
            Kind::Alloc,
            Kind::Free,
            Kind::ReallocBegin,
            Kind::Realloc,
            Kind::SampleAlloc,
            Kind::SampleFree,
            Kind::Native,
            Kind::Fingerprint
        ]
    );
    // No larger than the hand-written event it replaced (56 bytes).
    assert!(std::mem::size_of::<Event>() <= 56, "{}", std::mem::size_of::<Event>());
}

/// A frame holding raw record bytes as a newer writer would make them.
fn frame_with(seq: u64, payload: &[u8], out: &mut Vec<u8>) {
    write_frame(seq, payload, out);
}

#[test]
fn unknown_kinds_and_appended_fields_are_skipped_by_their_length() {
    let mut payload = Vec::new();
    // A kind this version does not know, 5 bytes long.
    payload.extend_from_slice(&[200, 5, 1, 2, 3, 4, 5]);
    // A known kind (dropped) with one extra field appended: time 9, events 4, extra 77.
    payload.extend_from_slice(&[Kind::Dropped.code(), 3, 18, 4, 77]);
    // Then an ordinary record.
    let mut d = heaptag_format::Deltas::default();
    Record::Dropped { time_ns: 9, events: 4 }.encode(&mut d, &mut Vec::new());
    Record::End {
        time_ns: 10,
        dropped: 4,
    }
    .encode(&mut d, &mut payload);
    let mut bytes = header_bytes();
    frame_with(1, &payload, &mut bytes);
    let (got, problems, unknown) = read_all(&bytes);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(unknown, 1);
    assert_eq!(
        got,
        [
            Record::Dropped { time_ns: 9, events: 4 },
            Record::End {
                time_ns: 10,
                dropped: 4
            }
        ]
    );
}

#[test]
fn a_newer_writer_that_keeps_compat_is_read() {
    let mut bytes = header_bytes();
    bytes[8] = 7; // version 7 ...
    assert_eq!(u16::from_le_bytes([bytes[10], bytes[11]]), COMPAT); // ... readable by version 2
    let mut enc = FrameEncoder::new(Vec::new(), 1);
    enc.push(sample(Kind::Mark).borrowed());
    enc.finish(&mut bytes);
    let mut r = LogReader::new(&bytes[..]).unwrap();
    assert_eq!(r.header().version, 7);
    assert_eq!(r.by_ref().count(), 1);
}

fn numbered_frames(seqs: &[u64]) -> Vec<u8> {
    let mut bytes = header_bytes();
    for &s in seqs {
        let mut payload = Vec::new();
        let mut d = heaptag_format::Deltas::default();
        Record::Mark {
            time_ns: s,
            label: format!("frame {s}"),
        }
        .encode(&mut d, &mut payload);
        frame_with(s, &payload, &mut bytes);
    }
    bytes
}

fn labels(got: &[Record]) -> Vec<u64> {
    got.iter()
        .map(|r| match r {
            Record::Mark { time_ns, .. } => *time_ns,
            _ => unreachable!(),
        })
        .collect()
}

#[test]
fn a_deleted_frame_is_reported_as_missing() {
    let (got, problems, _) = read_all(&numbered_frames(&[0, 1, 2, 4, 5]));
    assert_eq!(labels(&got), [0, 1, 2, 4, 5]);
    assert_eq!(problems, [ProblemKind::MissingFrames { expected: 3, found: 4 }]);
}

#[test]
fn a_repeated_frame_is_reported_and_not_counted_twice() {
    let (got, problems, _) = read_all(&numbered_frames(&[1, 2, 2, 3]));
    assert_eq!(labels(&got), [1, 2, 3]);
    assert_eq!(problems, [ProblemKind::OutOfOrder { seq: 2, expected: 3 }]);
}

#[test]
fn swapped_frames_are_reported() {
    let (got, problems, _) = read_all(&numbered_frames(&[1, 3, 2, 4]));
    assert_eq!(labels(&got), [1, 3, 4]);
    assert_eq!(
        problems,
        [
            ProblemKind::MissingFrames { expected: 2, found: 3 },
            ProblemKind::OutOfOrder { seq: 2, expected: 4 }
        ]
    );
}

#[test]
fn a_log_may_start_without_the_reserve_frame_but_not_later() {
    let (_, problems, _) = read_all(&numbered_frames(&[1, 2]));
    assert!(problems.is_empty(), "{problems:?}");
    let (_, problems, _) = read_all(&numbered_frames(&[2, 3]));
    assert_eq!(problems, [ProblemKind::MissingFrames { expected: 0, found: 2 }]);
}

#[test]
fn a_corrupt_frame_is_one_problem_not_also_a_gap() {
    let mut bytes = numbered_frames(&[1, 2, 3]);
    let second = numbered_frames(&[1]).len();
    bytes[second + FRAME_HEADER_LEN + 3] ^= 0x55; // a payload byte of frame 2
    let (got, problems, _) = read_all(&bytes);
    assert_eq!(labels(&got), [1, 3]);
    assert_eq!(problems, [ProblemKind::CorruptFrame]);
}

#[test]
fn padding_fills_a_payload_to_the_byte_at_every_size() {
    for target in 8..600 {
        let mut enc = FrameEncoder::new(Vec::new(), 0);
        enc.push(RecordRef::Dropped { time_ns: 99, events: 3 });
        assert!(enc.pad_to(target), "target {target}");
        assert_eq!(enc.len(), target);
        let mut bytes = header_bytes();
        enc.finish(&mut bytes);
        let (got, problems, _) = read_all(&bytes);
        assert!(problems.is_empty(), "target {target}: {problems:?}");
        assert!(matches!(got[0], Record::Dropped { events: 3, .. }));
        assert!(got[1..].iter().all(|r| r.kind() == Kind::Pad), "{got:?}");
    }
}

/// A buffer that holds at most `cap` bytes and drops the rest, remembering it.
struct Small {
    v: Vec<u8>,
    cap: usize,
    failed: bool,
}

impl Sink for Small {
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
fn a_record_that_does_not_fit_is_dropped_whole_and_the_frame_stays_readable() {
    let mut enc = FrameEncoder::new(
        Small {
            v: Vec::new(),
            cap: 64,
            failed: false,
        },
        1,
    );
    let a = Record::Mark {
        time_ns: 5,
        label: "short".into(),
    };
    let big = sample(Kind::StackDef);
    let c = Record::Mark {
        time_ns: 6,
        label: "after".into(),
    };
    assert!(enc.push(a.borrowed()));
    assert!(!enc.push(big.borrowed()), "300 frames do not fit in 64 bytes");
    assert!(enc.push(c.borrowed()));
    let mut bytes = header_bytes();
    assert!(enc.finish(&mut bytes));
    let (got, problems, _) = read_all(&bytes);
    assert!(problems.is_empty(), "{problems:?}");
    // The time delta of `c` is against `a`, not against the dropped record.
    assert_eq!(got, [a, c]);
}

#[test]
fn long_bodies_get_a_longer_length_prefix() {
    let r = sample(Kind::Counters);
    let mut out = Vec::new();
    r.encode(&mut heaptag_format::Deltas::default(), &mut out);
    let mut prefix = Vec::new();
    put_varint(&mut prefix, (out.len() - 1 - 2) as u64);
    assert_eq!(prefix.len(), 2);
    assert_eq!(&out[1..3], &prefix[..]);
}

#[test]
fn docs_format_md_holds_the_generated_record_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let (begin, end) = ("<!-- records:begin -->\n", "<!-- records:end -->");
    let (Some(b), Some(e)) = (doc.find(begin), doc.find(end)) else {
        panic!("docs/FORMAT.md lacks the {begin:?} ... {end:?} markers");
    };
    let table = kinds_markdown();
    let have = &doc[b + begin.len()..e];
    if have != table {
        if std::env::var_os("HEAPTAG_UPDATE_DOCS").is_some() {
            let new = format!("{}{table}{}", &doc[..b + begin.len()], &doc[e..]);
            std::fs::write(path, new).unwrap();
        } else {
            panic!(
                "docs/FORMAT.md's record table differs from the record table in format/src/record.rs; \
                 run `HEAPTAG_UPDATE_DOCS=1 cargo test -p heaptag-format --test v2` and commit.\n\
                 generated:\n{table}"
            );
        }
    }
}

/// An allocator's log (its header has an event buffer) always starts with
/// its reserve frame (0): losing it would hide the lost-event count.
#[test]
fn an_allocator_log_without_frame_0_is_damaged() {
    let mut h = Vec::new();
    Header {
        version: VERSION,
        settings: heaptag_format::LogSettings {
            buffer_events: 32768,
            ..Default::default()
        },
        ..Header::default()
    }
    .encode(&mut h);
    let mut enc = FrameEncoder::new(Vec::new(), 1);
    enc.push(RecordRef::Dropped { time_ns: 1, events: 0 });
    enc.finish(&mut h);
    let (_, problems, _) = read_all(&h);
    assert_eq!(problems, [ProblemKind::MissingFrames { expected: 0, found: 1 }]);
}

/// A log of every kind (End last) in two frames, an unknown kind before
/// them, then a record after the End record (damage: not used). With
/// `cut`, a record cut short in the middle of the first frame (damage: the
/// rest of that frame is skipped), and the bytes that skips. Also every
/// record, in order.
fn every_kind_log(cut: bool) -> (Vec<u8>, Vec<Record>, u64) {
    let mut all: Vec<Record> = Kind::ALL.iter().map(|&k| sample(k)).collect();
    all.sort_by_key(|r| r.kind() == Kind::End);
    let mut d = heaptag_format::Deltas::default();
    let mut first = vec![200, 3, 1, 2, 3];
    let mut second = Vec::new();
    let half = all.len() / 2;
    let mut cut_at = None;
    for (i, r) in all.iter().enumerate() {
        if i == half {
            // The delta state restarts at every frame.
            d = heaptag_format::Deltas::default();
        }
        if cut && i == half / 2 {
            // An Alloc whose one body byte starts a varint that never ends.
            cut_at = Some(first.len());
            first.extend_from_slice(&[Kind::Alloc.code(), 1, 0x80]);
        }
        r.encode(&mut d, if i < half { &mut first } else { &mut second });
    }
    Record::Dropped { time_ns: 9, events: 4 }.encode(&mut d, &mut second);
    let mut bytes = header_bytes();
    frame_with(1, &first, &mut bytes);
    frame_with(2, &second, &mut bytes);
    (bytes, all, cut_at.map_or(0, |at| (first.len() - at) as u64))
}

#[test]
fn next_with_hands_over_what_next_returns_with_the_same_offsets_and_damage() {
    let (bytes, all, _) = every_kind_log(false);
    let mut a = LogReader::new(&bytes[..]).unwrap();
    let mut by_next = Vec::new();
    while let Some(r) = a.next() {
        by_next.push((r, a.record_offset()));
    }
    let mut b = LogReader::new(&bytes[..]).unwrap();
    let mut by_with = Vec::new();
    // The consumer may take what the record owns.
    while let Some(got) = b.next_with(|r, at| (std::mem::replace(r, Record::Pad { len: 0 }), at)) {
        assert_eq!(b.record_offset(), got.1);
        by_with.push(got);
    }
    assert_eq!(by_with, by_next);
    assert_eq!(by_with.iter().map(|e| e.0.clone()).collect::<Vec<_>>(), all);
    assert_eq!(
        (a.problems(), a.unknown_records(), a.ended()),
        (b.problems(), b.unknown_records(), b.ended())
    );
    assert_eq!(b.unknown_records(), 1);
    assert!(
        matches!(b.problems(), [p] if p.kind == ProblemKind::AfterEnd { records: 1 }),
        "{:?}",
        b.problems()
    );
    assert!(b.next_with(|_, _| ()).is_none());
}

#[test]
fn for_each_with_hands_over_what_next_returns_stopping_and_resuming_anywhere() {
    let (bytes, all, skipped) = every_kind_log(true);
    let mut a = LogReader::new(&bytes[..]).unwrap();
    let mut by_next = Vec::new();
    while let Some(r) = a.next() {
        by_next.push((r, a.record_offset()));
    }
    assert!(
        by_next.len() < all.len() - 1,
        "the damage skipped records: {}",
        by_next.len()
    );
    // Stopping after every `k`th record and going on gives the same, and
    // at each stop the reader stands where `next_with`, called as many
    // times, leaves one: same offset, problems, unknown kinds, end.
    for k in 1..=by_next.len() + 1 {
        let mut b = LogReader::new(&bytes[..]).unwrap();
        let mut c = LogReader::new(&bytes[..]).unwrap();
        let mut got = Vec::new();
        let mut stops = 0;
        loop {
            let mut n = 0;
            let ended = b.for_each_with(|r, at| {
                got.push((std::mem::replace(r, Record::Pad { len: 0 }), at));
                n += 1;
                n < k
            });
            for _ in 0..n {
                assert!(c.next_with(|_, _| ()).is_some(), "k {k}");
            }
            if ended {
                assert!(n < k, "k {k}: a stop reported as the end");
                break;
            }
            assert_eq!(n, k, "k {k}: stopped after {n} records");
            stops += 1;
            assert_eq!(b.record_offset(), got.last().unwrap().1);
            assert_eq!(
                (b.record_offset(), b.problems(), b.unknown_records(), b.ended()),
                (c.record_offset(), c.problems(), c.unknown_records(), c.ended()),
                "k {k}, stop {stops}"
            );
        }
        assert_eq!(stops, by_next.len() / k, "k {k}");
        assert_eq!(got, by_next, "k {k}");
        assert_eq!(
            (a.problems(), a.unknown_records(), a.ended()),
            (b.problems(), b.unknown_records(), b.ended()),
            "k {k}"
        );
        assert!(b.for_each_with(|_, _| panic!("a record after the end")));
    }
    assert_eq!(a.unknown_records(), 1);
    let kinds: Vec<_> = a.problems().iter().map(|p| p.kind.clone()).collect();
    assert!(
        matches!(
            &kinds[..],
            [ProblemKind::BadRecord(_), ProblemKind::AfterEnd { records: 1 }]
        ),
        "{kinds:?}"
    );
    assert_eq!(a.problems()[0].skipped, skipped, "skipped from the bad record's start");
}
