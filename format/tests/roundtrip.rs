//! Every record type round-trips through the encoder and the reader; damaged
//! logs are read up to the damage and the damage is reported with its offset.

use heaptag_format::{
    Fill, FpMeta, FpWhen, FrameEncoder, Header, Kind, LogReader, LogSettings, Module, ProblemKind, ReadError, Record,
    TagCount,
};
use proptest::prelude::*;

fn header() -> Header {
    Header {
        version: heaptag_format::VERSION,
        pid: 4242,
        start_wall_ns: 1_790_000_000_000_000_000,
        start_mono_ns: 123_456_789,
        exe: "/usr/bin/prover".into(),
        cmdline: vec!["prover".into(), "--partitions".into(), "10".into()],
        heaptag_version: "0.1.0".into(),
        settings: LogSettings {
            threshold: 65536,
            sample_rate: 524288,
            interval_ns: 100_000_000,
            fingerprint_min: 1 << 20,
            fingerprint_full: false,
            full_hash: heaptag_format::FpHash::Xxh3,
            sampled_hash: heaptag_format::FpHash::Xxh3,
            stack_depth: 32,
            buffer_events: 65536,
            unprefixed_jemalloc: false,
        },
        modules: vec![Module {
            start: 0x5555_0000_0000,
            end: 0x5555_0010_0000,
            file_offset: 0x1000,
            path: "/usr/bin/prover".into(),
            build_id: vec![0xde, 0xad, 0xbe, 0xef],
        }],
    }
}

fn arb_fill() -> impl Strategy<Value = Fill> {
    prop_oneof![
        Just(Fill::Mixed),
        Just(Fill::Zero),
        any::<u8>().prop_map(Fill::Constant)
    ]
}

fn arb_when() -> impl Strategy<Value = FpWhen> {
    prop_oneof![Just(FpWhen::Free), Just(FpWhen::Mark), Just(FpWhen::Finish)]
}

fn arb_record() -> impl Strategy<Value = Record> {
    let t = any::<u64>();
    prop_oneof![
        (
            any::<u32>(),
            any::<Option<u64>>(),
            any::<Option<String>>(),
            any::<Option<u32>>()
        )
            .prop_map(|(id, job, stage, partition)| Record::TagDef {
                id,
                job,
                stage,
                partition
            }),
        (any::<u32>(), prop::collection::vec(any::<u64>(), 0..64))
            .prop_map(|(id, frames)| Record::StackDef { id, frames }),
        (t, any::<u32>(), any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
            |(time_ns, thread, tag, stack, addr, size)| Record::Alloc {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size
            }
        ),
        (t, any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(time_ns, thread, addr, size)| Record::Free {
            time_ns,
            thread,
            addr,
            size
        }),
        (t, any::<u32>(), any::<u32>(), any::<(u64, u64, u64, u64)>()).prop_map(
            |(time_ns, thread, tag, (old_addr, old_size, addr, size))| Record::Realloc {
                time_ns,
                thread,
                tag,
                old_addr,
                old_size,
                addr,
                size
            }
        ),
        (t, any::<u32>(), any::<u32>(), any::<u32>(), any::<(u64, u64, u64)>()).prop_map(
            |(time_ns, thread, tag, stack, (addr, size, weight))| Record::SampleAlloc {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size,
                weight
            }
        ),
        (t, any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(time_ns, thread, addr, size)| {
            Record::SampleFree {
                time_ns,
                thread,
                addr,
                size,
            }
        }),
        (t, ".*").prop_map(|(time_ns, label)| Record::Mark { time_ns, label }),
        (
            t,
            prop::collection::vec(any::<(u32, u64, u64, u64, u64, u64, u64)>(), 0..8)
        )
            .prop_map(|(time_ns, v)| {
                Record::Counters {
                    time_ns,
                    tags: v
                        .into_iter()
                        .map(|(tag, a, b, c, d, e, f)| TagCount {
                            tag,
                            alloc_bytes: a,
                            alloc_count: b,
                            tracked_live: c,
                            small_live: d,
                            peak: e,
                            external: f,
                        })
                        .collect(),
                }
            }),
        (t, any::<(u64, u64, u64, u64)>()).prop_map(|(time_ns, (a, b, c, d))| Record::Rss {
            time_ns,
            vm_rss: a,
            vm_hwm: b,
            rss_anon: c,
            rss_file: d
        }),
        (t, any::<(u64, u64, u64, u64, u64, u64)>()).prop_map(|(time_ns, (a, b, c, d, e, f))| Record::Jemalloc {
            time_ns,
            allocated: a,
            active: b,
            resident: c,
            mapped: d,
            retained: e,
            metadata: f
        }),
        (t, any::<u32>(), ".*", any::<i64>()).prop_map(|(time_ns, tag, what, bytes)| Record::External {
            time_ns,
            tag,
            what,
            bytes
        }),
        (t, any::<(u64, u64, u64, bool)>(), arb_fill(), arb_when()).prop_map(
            |(time_ns, (addr, size, hash, full), fill, when)| Record::Fingerprint {
                time_ns,
                addr,
                size,
                hash,
                meta: FpMeta { fill, full, when },
            }
        ),
        (t, any::<u64>()).prop_map(|(time_ns, events)| Record::Dropped { time_ns, events }),
        (any::<u64>(), ".*", ".*", any::<u32>()).prop_map(|(addr, function, file, line)| Record::Symbol {
            addr,
            function,
            file,
            line
        }),
        (t, any::<u64>()).prop_map(|(time_ns, dropped)| Record::End { time_ns, dropped }),
        (0u32..300).prop_map(|len| Record::Pad { len }),
        (t, any::<u32>(), any::<u32>(), ".*").prop_map(|(time_ns, pid, ppid, cmdline)| Record::ProcStart {
            time_ns,
            pid,
            ppid,
            cmdline
        }),
        (t, any::<u32>(), any::<(u64, u64, u64, u64, u64, u64)>()).prop_map(|(time_ns, pid, (a, b, c, d, e, f))| {
            Record::ProcRss {
                time_ns,
                pid,
                vm_rss: a,
                vm_hwm: b,
                rss_anon: c,
                rss_file: d,
                rss_shmem: e,
                pss: f,
            }
        }),
        (t, any::<u32>(), any::<i32>()).prop_map(|(time_ns, pid, code)| Record::ProcExit { time_ns, pid, code }),
        (t, any::<(u64, u64, u64)>()).prop_map(|(time_ns, (live, tracked, overhead))| Record::Totals {
            time_ns,
            live,
            tracked,
            overhead
        }),
        (t, any::<u32>(), any::<u64>()).prop_map(|(time_ns, thread, addr)| Record::ReallocBegin {
            time_ns,
            thread,
            addr
        }),
        (t, any::<u32>()).prop_map(|(time_ns, id)| Record::TagRetire { time_ns, id }),
        (t, any::<Option<u64>>(), any::<Option<u32>>(), any::<Option<String>>()).prop_map(
            |(time_ns, job, partition, stage)| Record::TagOverflow {
                time_ns,
                job,
                partition,
                stage
            }
        ),
        (t, any::<u64>(), any::<u32>()).prop_map(|(time_ns, run, index)| Record::Segment { time_ns, run, index }),
        (t, any::<u32>(), any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
            |(time_ns, thread, tag, stack, addr, size)| Record::Carried {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size
            }
        ),
        (t, any::<u32>(), any::<u32>(), any::<u32>(), any::<(u64, u64, u64)>()).prop_map(
            |(time_ns, thread, tag, stack, (addr, size, weight))| Record::CarriedSample {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size,
                weight
            }
        ),
        (t, any::<u32>(), any::<i64>()).prop_map(|(time_ns, tag, bytes)| Record::CarriedExternal {
            time_ns,
            tag,
            bytes
        }),
    ]
}

/// A whole log: header, then `frames` as separate frames.
fn log(frames: &[Vec<Record>]) -> Vec<u8> {
    let mut out = Vec::new();
    header().encode(&mut out);
    let mut enc = FrameEncoder::new(Vec::new(), 0);
    for f in frames {
        for r in f {
            assert!(enc.push(r.borrowed()));
        }
        assert!(enc.finish(&mut out));
    }
    out
}

proptest! {
    #[test]
    fn records_round_trip(frames in prop::collection::vec(prop::collection::vec(arb_record(), 0..20), 0..5)) {
        let bytes = log(&frames);
        let mut r = LogReader::new(&bytes[..]).unwrap();
        prop_assert_eq!(r.header(), &header());
        let got: Vec<Record> = r.by_ref().collect();
        let all: Vec<Record> = frames.into_iter().flatten().collect();
        // Records after the End record are damage (issue 13): not returned.
        let used = all.iter().position(|r| r.kind() == Kind::End).map_or(all.len(), |i| i + 1);
        prop_assert_eq!(&got[..], &all[..used]);
        if used == all.len() {
            prop_assert!(r.problems().is_empty(), "{:?}", r.problems());
        } else {
            let records = (all.len() - used) as u64;
            prop_assert_eq!(r.problems().len(), 1);
            prop_assert_eq!(&r.problems()[0].kind, &ProblemKind::AfterEnd { records });
        }
    }
}

fn alloc(i: u64) -> Record {
    Record::Alloc {
        time_ns: i * 1000,
        thread: 1,
        tag: 2,
        stack: 0,
        addr: 0x7f00_0000_0000 + i * 0x10000,
        size: 65536,
    }
}

#[test]
fn truncated_log_reads_to_the_last_whole_frame_and_says_where() {
    let frames: Vec<Vec<Record>> = (0..4).map(|f| (0..10).map(|i| alloc(f * 10 + i)).collect()).collect();
    let bytes = log(&frames);
    let cut = bytes.len() - 7; // inside the last frame
    let mut r = LogReader::new(&bytes[..cut]).unwrap();
    let got: Vec<Record> = r.by_ref().collect();
    assert_eq!(got.len(), 30, "the three whole frames");
    assert!(!r.ended());
    assert_eq!(r.problems().len(), 1);
    let p = &r.problems()[0];
    assert_eq!(p.kind, ProblemKind::Truncated);
    assert!(p.to_string().contains("truncated at byte"), "{p}");
}

#[test]
fn corrupt_frame_in_the_middle_is_skipped_and_reported() {
    let frames: Vec<Vec<Record>> = (0..3).map(|f| (0..10).map(|i| alloc(f * 10 + i)).collect()).collect();
    let mut bytes = log(&frames);
    let first = log(&frames[..1]).len();
    bytes[first + 20] ^= 0xff; // a payload byte of frame 2
    let mut r = LogReader::new(&bytes[..]).unwrap();
    let got: Vec<Record> = r.by_ref().collect();
    assert_eq!(got.len(), 20, "frames 1 and 3");
    assert_eq!(got[10], alloc(20));
    assert_eq!(r.problems().len(), 1, "{:?}", r.problems());
    assert_eq!(r.problems()[0].kind, ProblemKind::CorruptFrame);
    assert_eq!(r.problems()[0].offset, first as u64);
}

#[test]
fn damaged_frame_length_resyncs_on_the_next_frame() {
    let frames: Vec<Vec<Record>> = (0..3).map(|f| (0..5).map(|i| alloc(f * 5 + i)).collect()).collect();
    let mut bytes = log(&frames);
    let first = log(&frames[..1]).len();
    bytes[first + 7] = 0x7f; // length field of frame 2: absurdly large
    let mut r = LogReader::new(&bytes[..]).unwrap();
    let got: Vec<Record> = r.by_ref().collect();
    assert_eq!(got.len(), 10);
    assert_eq!(r.problems()[0].kind, ProblemKind::CorruptFrame);
}

#[test]
fn wrong_magic_newer_version_and_short_files_are_clear_errors() {
    let mut bytes = log(&[]);
    bytes[0] = b'X';
    let e = LogReader::new(&bytes[..]).err().unwrap();
    assert!(matches!(e, ReadError::NotHeaptag { .. }), "{e}");
    assert!(e.to_string().starts_with("not a heaptag log"), "{e}");

    let mut bytes = log(&[]);
    bytes[8] = 99;
    bytes[10] = 99; // and only readers of version 99 can read it
    let e = LogReader::new(&bytes[..]).err().unwrap();
    assert!(matches!(e, ReadError::NewerVersion { found: 99, .. }), "{e}");
    assert!(e.to_string().contains("upgrade heaptag"), "{e}");

    let e = LogReader::new(&b"HEAP"[..]).err().unwrap();
    assert!(matches!(e, ReadError::TooShort { len: 4 }), "{e}");

    let mut bytes = log(&[]);
    let n = bytes.len();
    bytes[n - 1] ^= 1;
    let e = LogReader::new(&bytes[..]).err().unwrap();
    assert!(e.to_string().contains("header checksum mismatch"), "{e}");
}

/// A source that hands out its bytes a few at a time (1 to 4,099 bytes per
/// read, varying), with an `Interrupted` error before every seventh read, as
/// a pipe or a slow disk may.
struct Trickle<'a> {
    bytes: &'a [u8],
    reads: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.reads += 1;
        if self.reads.is_multiple_of(7) {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        let n = (self.reads * 613 % 4099 + 1).min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

#[test]
fn a_log_of_many_window_fills_reads_the_same_whole_trickled_and_damaged() {
    // ~5 MiB of frames of ~8 KiB: the reader's window (1 MiB reads) fills,
    // forgets and moves its bytes many times, with frames across every
    // read boundary; a corrupt frame and a damaged length in the middle make
    // the resync scan run across boundaries too.
    let frames: Vec<Vec<Record>> = (0..1200)
        .map(|f| (0..300).map(|i| alloc(f * 300 + i)).collect())
        .collect();
    let clean = log(&frames);
    assert!(clean.len() > 4 << 20, "{} bytes", clean.len());
    let mut damaged = clean.clone();
    let at = log(&frames[..400]).len();
    damaged[at + 40] ^= 0x5a; // a payload byte of frame 401
    let at2 = log(&frames[..900]).len();
    damaged[at2 + 7] = 0x7f; // frame 901's length: absurdly large
    for bytes in [&clean, &damaged] {
        let mut whole = LogReader::new(&bytes[..]).unwrap();
        let a: Vec<Record> = whole.by_ref().collect();
        let mut slow = LogReader::new(Trickle { bytes, reads: 0 }).unwrap();
        let b: Vec<Record> = slow.by_ref().collect();
        assert_eq!(a.len(), b.len());
        assert!(a == b, "the same records either way");
        assert_eq!(whole.problems(), slow.problems());
        if std::ptr::eq(bytes, &clean) {
            assert_eq!(a.len(), 1200 * 300);
            assert!(whole.problems().is_empty(), "{:?}", whole.problems());
        } else {
            assert_eq!(a.len(), 1198 * 300, "all but the two damaged frames");
            assert_eq!(whole.problems().len(), 2, "{:?}", whole.problems());
            assert_eq!(whole.problems()[0].offset, at as u64);
            assert_eq!(whole.problems()[1].offset, at2 as u64);
        }
    }
}
