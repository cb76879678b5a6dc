//! A small program that writes deterministic heaptag logs with the format
//! crate's encoder, so analyzer output can be compared byte for byte.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use heaptag_format::{Fill, FpMeta, FpWhen, FrameEncoder, Header, LogSettings, Module, Record, TagCount};

pub const MS: u64 = 1_000_000;
pub const MIB: u64 = 1 << 20;

/// Builds a log frame by frame.
pub struct LogBuilder {
    out: Vec<u8>,
    frame: Vec<Record>,
    enc: FrameEncoder<Vec<u8>>,
}

impl LogBuilder {
    pub fn new() -> LogBuilder {
        LogBuilder::with_settings(|_| {})
    }

    /// A builder whose header's settings `f` changed first.
    pub fn with_settings(f: impl FnOnce(&mut LogSettings)) -> LogBuilder {
        let mut header = Header {
            version: heaptag_format::VERSION,
            pid: 4242,
            start_wall_ns: 1_790_000_000_000_000_000,
            start_mono_ns: 1_000,
            exe: "/opt/prover/bin/prover".into(),
            cmdline: vec!["prover".into(), "--partitions".into(), "2".into()],
            heaptag_version: "0.1.0".into(),
            settings: LogSettings {
                threshold: 65536,
                sample_rate: 524288,
                interval_ns: 100 * MS,
                fingerprint_min: MIB,
                fingerprint_full: false,
                // The header as heaptag 0.2.0 wrote it (no appended field):
                // the golden outputs predate the XXH3 sampled hash.
                full_hash: heaptag_format::FpHash::Xxh3,
                sampled_hash: heaptag_format::FpHash::FourLane,
                stack_depth: 32,
                buffer_events: 32768,
                unprefixed_jemalloc: false,
            },
            modules: vec![Module {
                start: 0x5500_0000,
                end: 0x5600_0000,
                file_offset: 0,
                path: "/opt/prover/bin/prover".into(),
                build_id: vec![1, 2, 3, 4],
            }],
        };
        f(&mut header.settings);
        let mut out = Vec::new();
        header.encode(&mut out);
        LogBuilder {
            out,
            frame: Vec::new(),
            // The first frame stands where an allocator puts its reserve frame.
            enc: FrameEncoder::new(Vec::new(), 0),
        }
    }

    pub fn rec(&mut self, r: Record) -> &mut Self {
        self.frame.push(r);
        self
    }

    /// Ends the current frame.
    pub fn flush(&mut self) -> &mut Self {
        for r in self.frame.drain(..) {
            self.enc.push(r.borrowed());
        }
        self.enc.finish(&mut self.out);
        self
    }

    pub fn bytes(&mut self) -> Vec<u8> {
        if !self.frame.is_empty() {
            self.flush();
        }
        self.out.clone()
    }

    pub fn write(&mut self, path: &Path) {
        let b = self.bytes();
        std::fs::write(path, b).unwrap();
    }

    pub fn tag(&mut self, id: u32, job: Option<u64>, stage: Option<&str>, partition: Option<u32>) -> &mut Self {
        self.rec(Record::TagDef {
            id,
            job,
            stage: stage.map(str::to_owned),
            partition,
        })
    }

    pub fn alloc(&mut self, t: u64, tag: u32, stack: u32, addr: u64, size: u64) -> &mut Self {
        self.rec(Record::Alloc {
            time_ns: t,
            thread: 1,
            tag,
            stack,
            addr,
            size,
        })
    }

    pub fn free(&mut self, t: u64, addr: u64, size: u64) -> &mut Self {
        self.rec(Record::Free {
            time_ns: t,
            thread: 2,
            addr,
            size,
        })
    }

    pub fn fp(&mut self, t: u64, addr: u64, size: u64, hash: u64, fill: Fill, when: FpWhen) -> &mut Self {
        self.rec(Record::Fingerprint {
            time_ns: t,
            addr,
            size,
            hash,
            meta: FpMeta {
                fill,
                full: false,
                when,
            },
        })
    }

    /// A sample: RSS, jemalloc, counters, totals, as the writer emits them.
    pub fn sample(&mut self, t: u64, rss: u64, allocated: u64, resident: u64, live: u64, tracked: u64) -> &mut Self {
        self.rec(Record::Rss {
            time_ns: t,
            vm_rss: rss,
            vm_hwm: rss,
            rss_anon: rss - 4 * MIB,
            rss_file: 4 * MIB,
        })
        .rec(Record::Jemalloc {
            time_ns: t,
            allocated,
            active: allocated,
            resident,
            mapped: resident,
            retained: 0,
            metadata: MIB,
        })
        .rec(Record::Counters {
            time_ns: t,
            tags: vec![TagCount {
                tag: 1,
                alloc_bytes: 100 * MIB,
                alloc_count: 1234,
                tracked_live: 0,
                small_live: 0,
                peak: 0,
                external: 0,
            }],
        })
        .rec(Record::Totals {
            time_ns: t,
            live,
            tracked,
            overhead: MIB / 2,
        })
    }
}

/// A fresh temp path for a test log.
pub fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("heaptag-analyzer-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}.htlog"))
}

/// The prover-shaped scenario used by the golden tests: a PCE loaded once
/// (two 8 MiB blocks), partitions 0 and 1 of job 1 each building identical
/// copies of a 4 MiB table (a duplicate), distinct 2 MiB witness vectors
/// from one site, a zero-filled 3 MiB buffer, sampled small blocks, an
/// external buffer, a mark, samples every 100 ms, symbols, end.
pub fn prover_log(path: &Path) {
    let mut b = LogBuilder::new();
    b.tag(0, None, None, None)
        .tag(1, Some(1), Some("pce_load"), None)
        .tag(2, Some(1), Some("synthesize_partition"), Some(0))
        .tag(3, Some(1), Some("synthesize_partition"), Some(1))
        .tag(4, Some(1), Some("gpu_prove"), Some(0))
        .rec(Record::StackDef {
            id: 1,
            frames: vec![0x5500_0100, 0x5500_2000, 0x5500_1000],
        })
        .rec(Record::StackDef {
            id: 2,
            frames: vec![0x5500_0100, 0x5500_3000, 0x5500_1000],
        })
        .rec(Record::StackDef {
            id: 3,
            frames: vec![0x5500_0100, 0x5500_4000, 0x5500_1000],
        })
        .sample(0, 40 * MIB, 2 * MIB, 8 * MIB, 2 * MIB, 0)
        .flush();
    // The PCE, once.
    b.alloc(10 * MS, 1, 1, 0x1000_0000, 8 * MIB)
        .alloc(12 * MS, 1, 1, 0x2000_0000, 8 * MIB)
        .rec(Record::External {
            time_ns: 15 * MS,
            tag: 1,
            what: "srs_mmap".into(),
            bytes: 16 * MIB as i64,
        })
        .sample(100 * MS, 80 * MIB, 20 * MIB, 30 * MIB, 18 * MIB, 16 * MIB)
        .flush();
    // Partition 0 and 1: a table each (identical: the bug), witnesses (distinct).
    b.alloc(110 * MS, 2, 2, 0x3000_0000, 4 * MIB)
        .alloc(115 * MS, 3, 2, 0x3100_0000, 4 * MIB)
        .alloc(120 * MS, 2, 3, 0x4000_0000, 2 * MIB)
        .alloc(121 * MS, 3, 3, 0x4100_0000, 2 * MIB)
        .alloc(125 * MS, 4, 3, 0x5000_0000, 3 * MIB)
        .rec(Record::SampleAlloc {
            time_ns: 126 * MS,
            thread: 1,
            tag: 2,
            stack: 3,
            addr: 0x6000_0000,
            size: 64,
            weight: 524_320,
        })
        .rec(Record::Mark {
            time_ns: 150 * MS,
            label: "partitions built".into(),
        })
        .fp(150 * MS, 0x1000_0000, 8 * MIB, 0xaaaa, Fill::Mixed, FpWhen::Mark)
        .fp(150 * MS, 0x2000_0000, 8 * MIB, 0xbbbb, Fill::Mixed, FpWhen::Mark)
        .fp(150 * MS, 0x3000_0000, 4 * MIB, 0xcccc, Fill::Mixed, FpWhen::Mark)
        .fp(150 * MS, 0x3100_0000, 4 * MIB, 0xcccc, Fill::Mixed, FpWhen::Mark)
        .fp(150 * MS, 0x4000_0000, 2 * MIB, 0xd000, Fill::Mixed, FpWhen::Mark)
        .fp(150 * MS, 0x4100_0000, 2 * MIB, 0xd001, Fill::Mixed, FpWhen::Mark)
        .fp(150 * MS, 0x5000_0000, 3 * MIB, 0, Fill::Zero, FpWhen::Mark)
        .sample(200 * MS, 120 * MIB, 40 * MIB, 70 * MIB, 39 * MIB, 31 * MIB)
        .flush();
    // Partition 1 frees its copy early (on another thread); the rest later.
    b.fp(210 * MS, 0x3100_0000, 4 * MIB, 0xcccc, Fill::Mixed, FpWhen::Free)
        .free(210 * MS, 0x3100_0000, 4 * MIB)
        .free(220 * MS, 0x4100_0000, 2 * MIB)
        .rec(Record::SampleFree {
            time_ns: 230 * MS,
            thread: 1,
            addr: 0x6000_0000,
            size: 64,
        })
        .sample(300 * MS, 100 * MIB, 30 * MIB, 60 * MIB, 29 * MIB, 29 * MIB)
        .flush();
    b.free(310 * MS, 0x3000_0000, 4 * MIB)
        .free(320 * MS, 0x4000_0000, 2 * MIB)
        .free(330 * MS, 0x5000_0000, 3 * MIB)
        .rec(Record::External {
            time_ns: 340 * MS,
            tag: 1,
            what: "srs_mmap".into(),
            bytes: -(16 * MIB as i64),
        })
        .sample(400 * MS, 60 * MIB, 17 * MIB, 40 * MIB, 16 * MIB, 16 * MIB)
        .fp(400 * MS, 0x1000_0000, 8 * MIB, 0xaaaa, Fill::Mixed, FpWhen::Finish)
        .fp(400 * MS, 0x2000_0000, 8 * MIB, 0xbbbb, Fill::Mixed, FpWhen::Finish);
    for (addr, f) in [
        (0x5500_1000u64, "prover::run_partition"),
        (0x5500_2000, "prover::pce::load"),
        (0x5500_3000, "prover::build_table"),
        (0x5500_4000, "prover::witness"),
    ] {
        b.rec(Record::Symbol {
            addr,
            function: f.into(),
            file: "/src/prover/src/lib.rs".into(),
            line: (addr >> 8) as u32 & 0xff,
        });
    }
    b.rec(Record::Symbol {
        addr: 0x5500_0100,
        function: "heaptag_alloc::global::record".into(),
        file: String::new(),
        line: 0,
    })
    .rec(Record::End {
        time_ns: 400 * MS,
        dropped: 0,
    })
    .flush();
    b.write(path);
}

/// Runs the `heaptag` binary with `args` and extra environment `env`;
/// returns (exit code, stdout, stderr).
pub fn heaptag(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_heaptag"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `heaptag export pprof --at AT -o OUT LOG`, which must succeed and say
/// what it wrote: the profile, decoded.
pub fn export_pprof(log: &Path, at: &str, out: &Path) -> heaptag_pprof::proto::Profile {
    let (code, stdout, err) = heaptag(
        &[
            "export",
            "pprof",
            "--at",
            at,
            "-o",
            out.to_str().unwrap(),
            log.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{}: {err}", log.display());
    assert!(stdout.contains("samples"), "{stdout}");
    heaptag_pprof::decode(&std::fs::read(out).unwrap()).unwrap()
}

/// The weights of the folded lines `text` under the root frame `root`
/// (a tag as reports name it), summed.
pub fn folded_sum(text: &str, root: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{root};")))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}
