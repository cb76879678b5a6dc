//! Crafted hostile logs (issue 13): each is small and well formed where it
//! must be (checksums verify), and aims at one way a reader can be made to
//! hang, exhaust memory or lie. Shared by `analyzer/tests/hostile.rs` and
//! the fuzz loop (`analyzer/examples/fuzz.rs`).
#![allow(dead_code)]

use heaptag_format::{FrameEncoder, Header, LogSettings, Module, Record, FRAME_HEADER_LEN, SYNC, VERSION};

/// A header with `modules` and the usual settings.
pub fn header(modules: Vec<Module>) -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        version: VERSION,
        pid: 99,
        start_wall_ns: 1_790_000_000_000_000_000,
        start_mono_ns: 0,
        exe: "/crafted".into(),
        cmdline: vec!["crafted".into()],
        heaptag_version: "crafted".into(),
        settings: LogSettings {
            threshold: 65536,
            sample_rate: 524288,
            interval_ns: 10_000_000,
            fingerprint_min: 1 << 20,
            stack_depth: 64,
            buffer_events: 1024,
            ..LogSettings::default()
        },
        modules,
    }
    .encode(&mut out);
    out
}

/// A log of `records` after `head`, in frames of about 64 KiB.
pub fn log_with(head: Vec<u8>, records: impl IntoIterator<Item = Record>) -> Vec<u8> {
    let mut out = head;
    let mut enc = FrameEncoder::new(Vec::new(), 0);
    for r in records {
        enc.push(r.borrowed());
        if enc.len() >= 64 << 10 {
            enc.finish(&mut out);
        }
    }
    if !enc.is_empty() {
        enc.finish(&mut out);
    }
    out
}

/// A log of `records` with the usual header.
pub fn log(records: impl IntoIterator<Item = Record>) -> Vec<u8> {
    log_with(header(Vec::new()), records)
}

fn tag(id: u32) -> Record {
    Record::TagDef {
        id,
        job: Some(u64::from(id)),
        stage: Some("s".into()),
        partition: None,
    }
}

fn alloc(t: u64, tag: u32, stack: u32, addr: u64, size: u64) -> Record {
    Record::Alloc {
        time_ns: t,
        thread: 1,
        tag,
        stack,
        addr,
        size,
    }
}

fn rss(t: u64, v: u64) -> Record {
    Record::Rss {
        time_ns: t,
        vm_rss: v,
        vm_hwm: v,
        rss_anon: v,
        rss_file: 0,
    }
}

fn end(t: u64) -> Record {
    Record::End { time_ns: t, dropped: 0 }
}

/// Ids far beyond what is defined (dense vectors indexed by them would
/// take gigabytes), then many memory samples with a rising RSS (each
/// would scan every id).
pub fn dense_ids() -> Vec<u8> {
    let mut r = vec![tag(1)];
    for i in 0..2000u32 {
        let id = u32::MAX - i * 7919;
        r.push(alloc(u64::from(i), id, id, 0x1000 + u64::from(i) * 0x10_0000, 1 << 20));
        r.push(alloc(
            u64::from(i),
            (1 << 22) + i,
            (1 << 30) + i,
            0x9000_0000_0000 + u64::from(i) * 4096,
            70000,
        ));
    }
    for i in 0..60_000u64 {
        r.push(rss(10_000 + i, 1 << 20 | i));
    }
    r.push(end(100_000));
    log(r)
}

/// Many processes, each sampled: a linear search per sample is quadratic.
pub fn many_pids() -> Vec<u8> {
    let mut r = Vec::new();
    for pid in 0..40_000u32 {
        r.push(Record::ProcStart {
            time_ns: u64::from(pid),
            pid,
            ppid: 1,
            cmdline: "x".into(),
        });
    }
    for pid in 0..40_000u32 {
        r.push(Record::ProcRss {
            time_ns: 50_000 + u64::from(pid),
            pid,
            vm_rss: 1,
            vm_hwm: 1,
            rss_anon: 1,
            rss_file: 0,
            rss_shmem: 0,
            pss: 1,
        });
    }
    r.push(end(200_000));
    log(r)
}

/// Many modules and many stacks (a linear module search per frame), the
/// modules pointing nowhere readable.
pub fn modules_x_stacks() -> Vec<u8> {
    let modules = (0..60_000u64)
        .map(|i| Module {
            start: 0x10_0000 + i * 0x1000,
            end: 0x10_0000 + i * 0x1000 + 0x1000,
            file_offset: 0,
            path: format!("/nonexistent/m{i}"),
            build_id: Vec::new(),
        })
        .collect();
    let mut r = vec![tag(1)];
    for s in 0..3000u32 {
        let frames = (0..64u64)
            .map(|k| 0x10_0000 + (u64::from(s) * 64 + k) * 0x300)
            .collect();
        r.push(Record::StackDef { id: s, frames });
        r.push(alloc(
            u64::from(s),
            1,
            s,
            0x7000_0000 + u64::from(s) * 0x10_0000,
            1 << 16,
        ));
    }
    r.push(end(10_000));
    log_with(header(modules), r)
}

/// Many tags holding copies of one content (a duplicate group whose
/// sweep visits every tag at every moment is quadratic).
pub fn many_tags_dups() -> Vec<u8> {
    let mut r = Vec::new();
    let n = 20_000u32;
    for id in 1..=n {
        r.push(tag(id));
    }
    for id in 1..=n {
        let addr = 0x1000_0000 + u64::from(id) * 0x20_0000;
        r.push(alloc(u64::from(id), id, 1, addr, 1 << 20));
        r.push(Record::Fingerprint {
            time_ns: u64::from(id),
            addr,
            size: 1 << 20,
            hash: 0xfeed,
            meta: heaptag_format::FpMeta {
                fill: heaptag_format::Fill::Mixed,
                full: false,
                when: heaptag_format::FpWhen::Mark,
            },
        });
    }
    for id in 1..=n {
        let addr = 0x1000_0000 + u64::from(id) * 0x20_0000;
        r.push(Record::Free {
            time_ns: 100_000 + u64::from(id),
            thread: 1,
            addr,
            size: 1 << 20,
        });
    }
    r.push(end(300_000));
    log(r)
}

/// Many marks and a `run` log's many samples (phases x samples).
pub fn marks_x_samples() -> Vec<u8> {
    let mut r = vec![Record::ProcStart {
        time_ns: 0,
        pid: 5,
        ppid: 1,
        cmdline: "x".into(),
    }];
    for i in 0..30_000u64 {
        r.push(Record::Mark {
            time_ns: i * 10,
            label: "m".into(),
        });
        r.push(Record::ProcRss {
            time_ns: i * 10 + 5,
            pid: 5,
            vm_rss: i,
            vm_hwm: i,
            rss_anon: i,
            rss_file: 0,
            rss_shmem: 0,
            pss: i,
        });
    }
    r.push(end(400_000));
    log(r)
}

/// Many live tags and many memory samples (a timeline of samples x tags).
pub fn tags_x_samples() -> Vec<u8> {
    let mut r = Vec::new();
    for id in 0..20_000u32 {
        r.push(tag(id));
        r.push(alloc(
            u64::from(id),
            id,
            1,
            0x1000_0000 + u64::from(id) * 0x10_0000,
            1 << 16,
        ));
    }
    for i in 0..40_000u64 {
        r.push(rss(50_000 + i, 1 << 30 | i));
    }
    r.push(end(100_000));
    log(r)
}

/// One frame whose payload is `n` nested fake frame headers, each claiming
/// to run to the end of the file and failing its checksum: a resync that
/// re-reads each candidate is quadratic. A real frame follows.
pub fn nested_sync(n: usize) -> Vec<u8> {
    let mut out = header(Vec::new());
    let body_len = n * FRAME_HEADER_LEN;
    for i in 0..n {
        out.extend_from_slice(&SYNC);
        let rest = (body_len - i * FRAME_HEADER_LEN - FRAME_HEADER_LEN) as u32;
        out.extend_from_slice(&rest.to_le_bytes());
        out.extend_from_slice(&(i as u64).to_le_bytes());
        out.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    }
    let mut enc = FrameEncoder::new(Vec::new(), 0);
    enc.push(tag(1).borrowed());
    enc.push(end(5).borrowed());
    enc.finish(&mut out);
    out
}

/// Values that wrap: two blocks of 2^63 bytes, external records of
/// i64::MAX, a tag id above 2^22 never defined, records after End.
pub fn overflow() -> Vec<u8> {
    let r = vec![
        tag(1),
        alloc(1, 1, 0, 0x1000, 1 << 63),
        alloc(2, 1, 0, 0x2000, 1 << 63),
        alloc(3, (1 << 22) + 1, 0, 0x3000, 100),
        Record::External {
            time_ns: 4,
            tag: 1,
            what: "x".into(),
            bytes: i64::MAX,
        },
        Record::External {
            time_ns: 5,
            tag: 1,
            what: "x".into(),
            bytes: i64::MAX,
        },
        end(6),
        alloc(7, 1, 0, 0x4000, 1 << 30),
    ];
    log(r)
}

/// Every crafted log, by name.
pub fn all() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("dense_ids", dense_ids()),
        ("many_pids", many_pids()),
        ("modules_x_stacks", modules_x_stacks()),
        ("many_tags_dups", many_tags_dups()),
        ("marks_x_samples", marks_x_samples()),
        ("tags_x_samples", tags_x_samples()),
        ("nested_sync", nested_sync(100_000)),
        ("overflow", overflow()),
    ]
}
