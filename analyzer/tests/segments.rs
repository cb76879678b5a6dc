//! Issue 16, analyzer side: tags retired and reused (keyed by value, never
//! by id), tags without an id, and rotated logs read as one run: in segment
//! order whatever the file names, carried state skipped after a segment's
//! predecessor and applied when read alone or after a gap.
//!
//! The logs are written as the format's docs say a writer writes them: a
//! rotated log's segments each start with `segment` (run, index), then the
//! definitions of the tags in use and `carried*` records of what is alive.

mod common;

use std::path::{Path, PathBuf};

use common::{heaptag, MIB, MS};
use heaptag_analyzer::model::{LoadOptions, Model, TagKey};
use heaptag_format::{FrameEncoder, Header, LogSettings, Record, TagCount};

const RUN: u64 = 0x5eed_0000_0016;

fn header() -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        version: heaptag_format::VERSION,
        pid: 77,
        start_wall_ns: 1_790_000_000_000_000_000,
        start_mono_ns: 1_000,
        exe: "/opt/prover/bin/prover-daemon".into(),
        heaptag_version: "0.2.0".into(),
        settings: LogSettings {
            threshold: 65536,
            sample_rate: 524288,
            interval_ns: 100 * MS,
            fingerprint_min: MIB,
            stack_depth: 32,
            buffer_events: 32768,
            ..LogSettings::default()
        },
        ..Header::default()
    }
    .encode(&mut out);
    out
}

fn file(records: &[Record]) -> Vec<u8> {
    let mut out = header();
    let mut enc = FrameEncoder::new(Vec::new(), 0);
    for r in records {
        enc.push(r.borrowed());
    }
    enc.finish(&mut out);
    out
}

/// What a writer knows while it writes: what it must carry into the next
/// segment.
#[derive(Default)]
struct WriterState {
    defs: std::collections::BTreeMap<u32, Record>,
    live: std::collections::BTreeMap<u64, Record>,
    samples: std::collections::BTreeMap<u64, Record>,
    external: std::collections::BTreeMap<u32, i64>,
}

impl WriterState {
    fn see(&mut self, r: &Record) {
        match r {
            Record::TagDef { id, .. } => {
                self.defs.insert(*id, r.clone());
            }
            Record::TagRetire { id, .. } => {
                self.defs.remove(id);
            }
            Record::Alloc {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size,
            } => {
                self.live.insert(
                    *addr,
                    Record::Carried {
                        time_ns: *time_ns,
                        thread: *thread,
                        tag: *tag,
                        stack: *stack,
                        addr: *addr,
                        size: *size,
                    },
                );
            }
            Record::Free { addr, .. } => {
                self.live.remove(addr);
            }
            Record::SampleAlloc {
                time_ns,
                thread,
                tag,
                stack,
                addr,
                size,
                weight,
            } => {
                self.samples.insert(
                    *addr,
                    Record::CarriedSample {
                        time_ns: *time_ns,
                        thread: *thread,
                        tag: *tag,
                        stack: *stack,
                        addr: *addr,
                        size: *size,
                        weight: *weight,
                    },
                );
            }
            Record::SampleFree { addr, .. } => {
                self.samples.remove(addr);
            }
            Record::External { tag, bytes, .. } => {
                *self.external.entry(*tag).or_default() += bytes;
            }
            _ => {}
        }
    }

    /// The start of segment `index` at `t`.
    fn start(&self, t: u64, index: u32) -> Vec<Record> {
        let mut out = vec![Record::Segment {
            time_ns: t,
            run: RUN,
            index,
        }];
        out.extend(self.defs.values().cloned());
        out.extend(self.live.values().cloned());
        out.extend(self.samples.values().cloned());
        out.extend(
            self.external
                .iter()
                .filter(|e| *e.1 != 0)
                .map(|(&tag, &bytes)| Record::CarriedExternal { time_ns: t, tag, bytes }),
        );
        out
    }
}

/// One run's records; `None` marks where the writer rotates.
fn run() -> Vec<Option<Record>> {
    let tag = |id, job, partition| {
        Some(Record::TagDef {
            id,
            job: Some(job),
            partition: Some(partition),
            stage: Some("prove".into()),
        })
    };
    let alloc = |t: u64, tag, addr, size| {
        Some(Record::Alloc {
            time_ns: t * MS,
            thread: 1,
            tag,
            stack: 0,
            addr,
            size,
        })
    };
    let free = |t: u64, addr, size| {
        Some(Record::Free {
            time_ns: t * MS,
            thread: 2,
            addr,
            size,
        })
    };
    let rss = |t: u64, mib: u64| {
        Some(Record::Rss {
            time_ns: t * MS,
            vm_rss: mib * MIB,
            vm_hwm: mib * MIB,
            rss_anon: mib * MIB,
            rss_file: 0,
        })
    };
    let counters = |t: u64, tags: Vec<(u32, u64, u64)>| {
        Some(Record::Counters {
            time_ns: t * MS,
            tags: tags
                .into_iter()
                .map(|(tag, alloc_bytes, alloc_count)| TagCount {
                    tag,
                    alloc_bytes,
                    alloc_count,
                    ..TagCount::default()
                })
                .collect(),
        })
    };
    vec![
        // Job 1, partitions 0 and 1, under ids 1 and 2.
        tag(1, 1, 0),
        tag(2, 1, 1),
        alloc(10, 1, 0xA000_0000, 4 * MIB),
        alloc(11, 2, 0xB000_0000, 2 * MIB),
        Some(Record::SampleAlloc {
            time_ns: 12 * MS,
            thread: 1,
            tag: 1,
            stack: 0,
            addr: 0x7000_0100,
            size: 64,
            weight: 512 * 1024,
        }),
        Some(Record::External {
            time_ns: 13 * MS,
            tag: 2,
            what: "gpu".into(),
            bytes: MIB as i64,
        }),
        rss(100, 50),
        counters(100, vec![(1, 5 * MIB, 40), (2, 2 * MIB, 1)]),
        // Partition 0 of job 1 ends: its last counters, then id 1 retires.
        Some(Record::SampleFree {
            time_ns: 140 * MS,
            thread: 2,
            addr: 0x7000_0100,
            size: 64,
        }),
        free(150, 0xA000_0000, 4 * MIB),
        counters(151, vec![(1, 6 * MIB, 50)]),
        Some(Record::TagRetire {
            time_ns: 152 * MS,
            id: 1,
        }),
        // Id 1 again, for job 2: another tag.
        tag(1, 2, 0),
        alloc(160, 1, 0xC000_0000, 8 * MIB),
        rss(200, 60),
        counters(200, vec![(1, 8 * MIB, 1), (2, 2 * MIB, 1)]),
        None,
        rss(300, 60),
        // Job 1 partition 0 comes back under id 3: the same tag as id 1's
        // first lifetime, its counters restart at 0.
        tag(3, 1, 0),
        alloc(310, 3, 0xD000_0000, MIB),
        Some(Record::TagOverflow {
            time_ns: 311 * MS,
            job: Some(9),
            partition: Some(4),
            stage: Some("prove".into()),
        }),
        rss(400, 61),
        counters(400, vec![(1, 8 * MIB, 1), (2, 2 * MIB, 1), (3, MIB, 1)]),
        None,
        free(450, 0xB000_0000, 2 * MIB),
        Some(Record::External {
            time_ns: 451 * MS,
            tag: 2,
            what: "gpu".into(),
            bytes: -(MIB as i64),
        }),
        rss(500, 58),
        free(550, 0xC000_0000, 8 * MIB),
        rss(600, 50),
        Some(Record::End {
            time_ns: 700 * MS,
            dropped: 0,
        }),
    ]
}

/// Writes the run unsegmented, and as segments: returns (whole, [segments]).
fn write(dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    std::fs::create_dir_all(dir).unwrap();
    let whole: Vec<Record> = run().into_iter().flatten().collect();
    let whole_path = dir.join("whole.log");
    std::fs::write(&whole_path, file(&whole)).unwrap();
    let mut segs: Vec<Vec<Record>> = vec![WriterState::default().start(0, 0)];
    let mut st = WriterState::default();
    let mut t = 0;
    for r in run() {
        match r {
            Some(r) => {
                st.see(&r);
                if let Some(rt) = time_of(&r) {
                    t = rt;
                }
                segs.last_mut().unwrap().push(r);
            }
            None => {
                let index = segs.len() as u32;
                segs.push(st.start(t + 1, index));
            }
        }
    }
    // File names that sort against the segment order: the loader must go
    // by the segment records.
    let names = ["run-c.htlog", "run-a.htlog", "run-b.htlog"];
    let paths: Vec<PathBuf> = segs
        .iter()
        .zip(names)
        .map(|(s, n)| {
            let p = dir.join("set").join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, file(s)).unwrap();
            p
        })
        .collect();
    (whole_path, paths)
}

fn time_of(r: &Record) -> Option<u64> {
    match r {
        Record::Rss { time_ns, .. }
        | Record::Alloc { time_ns, .. }
        | Record::Free { time_ns, .. }
        | Record::Counters { time_ns, .. }
        | Record::TagRetire { time_ns, .. }
        | Record::External { time_ns, .. } => Some(*time_ns),
        _ => None,
    }
}

fn dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("heaptag-segments-{}-{name}", std::process::id()))
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = heaptag(args, &[]);
    assert!(code == 0 || code == 1, "heaptag {args:?}: {code}\n{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The report without what names the files.
fn figures(mut v: serde_json::Value) -> serde_json::Value {
    for s in v["sources"].as_array_mut().unwrap() {
        let src = s["source"].as_object_mut().unwrap();
        src.remove("log");
        src.remove("segments");
    }
    v
}

fn row<'a>(report: &'a serde_json::Value, tag: &str) -> &'a serde_json::Value {
    report["sources"][0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tag"] == tag)
        .unwrap_or_else(|| panic!("no row {tag}: {report}"))
}

#[test]
fn a_reused_id_never_merges_two_tags_and_one_tag_sums_its_lifetimes() {
    let d = dir("reuse");
    let (whole, _) = write(&d);
    let r = json(&["report", "--format", "json", whole.to_str().unwrap()]);
    // Id 1 was job 1 partition 0, then job 2 partition 0: two rows.
    let j1 = row(&r, "job=1 stage=prove partition=0");
    let j2 = row(&r, "job=2 stage=prove partition=0");
    // Job 1 partition 0: 4 MiB + a 512 KiB sample at its peak; its 1 MiB
    // block under id 3 came later, alone.
    assert_eq!(j1["peak_tracked_bytes"], 4 * MIB);
    // Counters: id 1's first lifetime ended at 6 MiB / 50 blocks, id 3's
    // lifetime is at 1 MiB / 1: 7 MiB and 51 over the run.
    assert_eq!(j1["allocated_bytes"], 7 * MIB, "{j1}");
    assert_eq!(j1["allocations"], 51, "{j1}");
    assert_eq!(j1["live_end_tracked_bytes"], MIB);
    // Job 2 got only id 1's second lifetime.
    assert_eq!(j2["peak_tracked_bytes"], 8 * MIB);
    assert_eq!(j2["allocated_bytes"], 8 * MIB);
    assert_eq!(j2["live_end_bytes"], 0);
    // The tag that got no id is a health figure and a warning.
    assert_eq!(r["sources"][0]["source"]["tags_without_id"], 1);
    let (_, _, err) = heaptag(&["report", whole.to_str().unwrap()], &[]);
    assert!(
        err.contains("1 tag got no tag id") && err.contains("job=9 stage=prove partition=4"),
        "{err}"
    );
    // check: max_tags_without_id.
    let policy = d.join("policy.toml");
    std::fs::write(&policy, "[[rule]]\nname = \"ids\"\nmax_tags_without_id = 0\n").unwrap();
    let (code, out, _) = heaptag(
        &["check", "--policy", policy.to_str().unwrap(), whole.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("1 tags got no tag id"), "{out}");
    // Timeline by tag: two series, not one.
    let t = json(&["timeline", "--format", "json", "--by", "tag", whole.to_str().unwrap()]);
    let keys: Vec<&str> = t["sources"][0]["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&"job=1 stage=prove partition=0") && keys.contains(&"job=2 stage=prove partition=0"));
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_set_of_segments_reads_as_the_unsegmented_log_in_any_form() {
    let d = dir("set");
    let (whole, segs) = write(&d);
    let want = figures(json(&["report", "--format", "json", whole.to_str().unwrap()]));
    let set_dir = d.join("set");
    let glob = format!("{}/run-*.htlog", set_dir.display());
    // Several paths in name order (not segment order), a directory, a
    // quoted glob.
    let mut by_name = segs.clone();
    by_name.sort();
    let paths: Vec<&str> = by_name.iter().map(|p| p.to_str().unwrap()).collect();
    let forms: Vec<Vec<&str>> = vec![paths.clone(), vec![set_dir.to_str().unwrap()], vec![glob.as_str()]];
    for form in forms {
        let mut args = vec!["report", "--format", "json"];
        args.extend(&form);
        let got = json(&args);
        assert_eq!(
            got["sources"][0]["source"]["segments"].as_array().map(|s| s.len()),
            Some(3),
            "{form:?}"
        );
        // Read in segment order, whatever the names.
        assert!(got["sources"][0]["source"]["segments"][0]
            .as_str()
            .unwrap()
            .ends_with("run-c.htlog"));
        assert_eq!(figures(got), want, "{form:?}");
    }
    // The other commands agree too.
    for cmd in ["dups", "peak", "sites", "timeline"] {
        let a = json(&[cmd, "--format", "json", whole.to_str().unwrap()]);
        let b = json(&[cmd, "--format", "json", set_dir.to_str().unwrap()]);
        let strip = |mut v: serde_json::Value| {
            for s in v["sources"].as_array_mut().unwrap() {
                s["source"].as_object_mut().unwrap().remove("log");
                s["source"].as_object_mut().unwrap().remove("segments");
            }
            v
        };
        assert_eq!(strip(a), strip(b), "{cmd}");
    }
    // dump takes the set, in segment order.
    let (code, out, err) = heaptag(&["dump", set_dir.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let c = out.find("run-c.htlog").unwrap();
    let a = out.find("run-a.htlog").unwrap();
    let b = out.find("run-b.htlog").unwrap();
    assert!(c < a && a < b, "{out}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn one_segment_alone_starts_from_its_carried_state() {
    let d = dir("alone");
    let (_, segs) = write(&d);
    // Segment 1 (run-a) alone: alive at its start were job 1 partition 1's
    // 2 MiB block and 1 MiB of external memory, job 2's 8 MiB block.
    let m = Model::load_set(&[segs[1].clone()], &LoadOptions::default()).unwrap();
    let m = &m[0];
    let first = m.timeline.replay().next().unwrap().1;
    let mut named: Vec<(String, u64)> = first.iter().map(|&(t, b)| (m.tag(t).to_string(), b)).collect();
    named.sort();
    assert_eq!(
        named,
        vec![
            ("job=1 stage=prove partition=1".to_string(), 2 * MIB),
            ("job=2 stage=prove partition=0".to_string(), 8 * MIB),
        ]
    );
    let j1p1 = m
        .tag_number(&TagKey {
            job: Some(1),
            partition: Some(1),
            stage: Some("prove".into()),
            ..TagKey::default()
        })
        .unwrap();
    assert_eq!(m.tag_acc.get(j1p1).unwrap().external, MIB as i64);
    assert!(
        m.damage
            .iter()
            .any(|d| d.contains("segment 0") && d.contains("missing")),
        "{:?}",
        m.damage
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_gap_is_warned_about_and_the_next_segment_resyncs() {
    let d = dir("gap");
    let (whole, segs) = write(&d);
    let want = json(&["report", "--format", "json", whole.to_str().unwrap()]);
    // Segments 0 and 2: segment 1 is missing.
    let (code, out, err) = heaptag(
        &[
            "report",
            "--format",
            "json",
            segs[2].to_str().unwrap(),
            segs[0].to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("segment 1 of run")
            && err.contains(&format!("between {} and {}", segs[0].display(), segs[2].display())),
        "{err}"
    );
    let got: serde_json::Value = serde_json::from_str(&out).unwrap();
    // What lived at the end is right (the carried state of segment 2 was
    // applied: job 1 partition 0's 1 MiB block, allocated in the gap).
    for tag in [
        "job=1 stage=prove partition=0",
        "job=1 stage=prove partition=1",
        "job=2 stage=prove partition=0",
    ] {
        assert_eq!(
            row(&got, tag)["live_end_bytes"],
            row(&want, tag)["live_end_bytes"],
            "{tag}"
        );
    }
    assert_eq!(
        row(&got, "job=1 stage=prove partition=0")["live_end_tracked_bytes"],
        MIB
    );
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn segments_given_twice_or_of_two_runs_are_errors_naming_the_files() {
    let d = dir("bad");
    let (whole, segs) = write(&d);
    let copy = d.join("copy.htlog");
    std::fs::copy(&segs[1], &copy).unwrap();
    let (code, _, err) = heaptag(&["report", segs[1].to_str().unwrap(), copy.to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("both segment 1") && err.contains("copy.htlog") && err.contains("run-a.htlog"),
        "{err}"
    );
    // dump reads one run: a segment and another log are two.
    let (code, _, err) = heaptag(&["dump", segs[0].to_str().unwrap(), whole.to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("2 different runs") && err.contains("whole.log"), "{err}");
    // report reads several runs, one section each (as for several logs).
    let r = json(&[
        "report",
        "--format",
        "json",
        whole.to_str().unwrap(),
        segs[0].to_str().unwrap(),
    ]);
    assert_eq!(r["sources"].as_array().unwrap().len(), 2);
    let (code, _, err) = heaptag(&["report", &format!("{}/nothing-*.htlog", d.display())], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no file matches"), "{err}");
    std::fs::remove_dir_all(&d).ok();
}

/// Issue 18's passes over a run (folded stacks, the Perfetto counters,
/// `report --by`'s group peaks) read a set of segments as the unsegmented
/// log, and keep a reused id's two tags apart.
#[test]
fn exports_and_report_by_read_a_set_and_keep_reused_ids_apart() {
    let d = dir("exports");
    let (whole, segs) = write(&d);
    // Each segment alone starts from its carried state, as the report does.
    for seg in &segs {
        let seg = seg.to_str().unwrap();
        let r = json(&["report", "--format", "json", seg]);
        let (_, folded, _) = heaptag(&["export", "folded", "--at", "end", seg], &[]);
        for t in r["sources"][0]["tags"].as_array().unwrap() {
            let tag = t["tag"].as_str().unwrap();
            assert_eq!(
                common::folded_sum(&folded, tag),
                t["live_end_bytes"].as_u64().unwrap(),
                "{seg} {tag}"
            );
        }
    }
    let set_dir = d.join("set");
    let (whole, set) = (whole.to_str().unwrap(), set_dir.to_str().unwrap());
    let out = |args: &[&str]| {
        let (code, out, err) = heaptag(args, &[]);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    for args in [
        vec!["export", "folded"],
        vec!["export", "folded", "--at", "end"],
        vec!["export", "folded", "--at", "0.2"],
        vec!["export", "folded", "--weight", "allocated"],
    ] {
        let a = out(&[&args[..], &[whole]].concat());
        let b = out(&[&args[..], &[set]].concat());
        assert_eq!(a, b, "{args:?}");
        assert!(!a.is_empty());
    }
    // Allocated per tag, by hand: job 1 partition 0 had id 1's first
    // lifetime (6 MiB) and id 3's (1 MiB); job 2 partition 0 id 1's second.
    let alloc = out(&["export", "folded", "--weight", "allocated", whole]);
    let per_tag = |tag: &str| common::folded_sum(&alloc, tag);
    assert_eq!(per_tag("job=1 stage=prove partition=0"), 7 * MIB);
    assert_eq!(per_tag("job=2 stage=prove partition=0"), 8 * MIB);
    // At 200 ms: job 1 partition 1's 2 MiB and job 2's 8 MiB.
    let at = out(&["export", "folded", "--at", "0.2", set]);
    assert_eq!(
        at,
        format!(
            "job=1 stage=prove partition=1;[no stack] {}\njob=2 stage=prove partition=0;[no stack] {}\n",
            2 * MIB,
            8 * MIB
        )
    );
    // Group peaks and the trace's counters: the same from the set.
    let groups = |log: &str| {
        let r = json(&["report", "--by", "job", "--format", "json", log]);
        r["sources"][0]["groups"].clone()
    };
    assert_eq!(groups(whole), groups(set));
    let j1 = &groups(set)[0];
    // Job 1 at its peak (12 ms): 4 MiB + 2 MiB + the 512 KiB sample.
    assert_eq!(j1["key"], "job 1");
    assert_eq!(j1["peak_live"]["bytes"], 6 * MIB + 512 * 1024);
    let counters = |log: &str| {
        let t = json(&["export", "perfetto", log]);
        let c: Vec<serde_json::Value> = t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "C")
            .cloned()
            .collect();
        c
    };
    assert_eq!(counters(whole), counters(set));
    std::fs::remove_dir_all(&d).ok();
}

/// A decoded pprof profile's samples: (labels, frames) -> values
/// (alloc_objects, alloc_space, inuse_objects, inuse_space).
type Samples = std::collections::BTreeMap<(Vec<(String, String)>, Vec<String>), Vec<i64>>;

/// `heaptag export pprof --at AT LOG`, decoded: its samples, time and
/// duration.
fn pprof(log: &Path, at: &str) -> (Samples, i64, i64) {
    let out = log.with_extension(format!("{at}.pb.gz"));
    let p = common::export_pprof(log, at, &out);
    std::fs::remove_file(&out).ok();
    let s = |i: i64| p.string_table[i as usize].clone();
    let frame = |id: u64| {
        let loc = p.location.iter().find(|l| l.id == id).unwrap();
        match loc.line.first() {
            Some(line) => s(p.function.iter().find(|f| f.id == line.function_id).unwrap().name),
            None => format!("{:#x}", loc.address),
        }
    };
    let mut out = Samples::new();
    for x in &p.sample {
        let mut labels: Vec<(String, String)> = x.label.iter().map(|l| (s(l.key), s(l.str))).collect();
        labels.sort();
        let frames = x.location_id.iter().map(|&id| frame(id)).collect();
        assert!(
            out.insert((labels, frames), x.value.clone()).is_none(),
            "one sample per stack and tag"
        );
    }
    (out, p.time_nanos, p.duration_nanos)
}

/// The (partition, values) of job `job`'s samples.
fn of_job(s: &Samples, job: &str) -> Vec<(String, Vec<i64>)> {
    s.iter()
        .filter(|((l, _), _)| l.contains(&("job".into(), job.into())))
        .map(|((l, _), v)| {
            let p = l.iter().find(|(k, _)| k == "partition").map(|x| x.1.clone());
            (p.unwrap_or_default(), v.clone())
        })
        .collect()
}

/// `export pprof` reads a rotated log's segments as the unsegmented log:
/// the same samples at every moment (carried state skipped after a
/// segment read whole, a reused id's two tags apart), figures by hand.
#[test]
fn export_pprof_reads_a_set_as_the_unsegmented_log() {
    let d = dir("pprof");
    let (whole, segs) = write(&d);
    let set = d.join("set");
    for at in ["peak", "end", "0.12", "0.2", "0.35", "0.5"] {
        let a = pprof(&whole, at);
        let b = pprof(&set, at);
        assert_eq!(a, b, "--at {at}");
        assert!(!a.0.is_empty(), "--at {at}");
    }
    // By hand (every block at no stack: one sample per tag). At 120 ms:
    // job 1 partition 0's 4 MiB block and a sample of 64 B of weight
    // 512 KiB (8192 blocks); allocated by then, its counters at 100 ms
    // (5 MiB, 40 blocks). Partition 1: its 2 MiB block, all it allocated.
    let (at, _, duration) = pprof(&set, "0.12");
    // The state then is the last record's, at 100 ms.
    assert_eq!(duration, 100 * MS as i64);
    let mib = MIB as i64;
    assert_eq!(
        of_job(&at, "1"),
        vec![
            ("0".into(), vec![40, 5 * mib, 8193, 4 * mib + 512 * 1024]),
            ("1".into(), vec![1, 2 * mib, 1, 2 * mib]),
        ]
    );
    assert!(of_job(&at, "2").is_empty());
    // At the end: job 1 partition 0 allocated 6 MiB / 50 under id 1's first
    // lifetime and 1 MiB / 1 under id 3, whose block is alive; job 2 got id
    // 1's second lifetime (8 MiB, freed).
    let (end, _, _) = pprof(&set, "end");
    assert_eq!(
        of_job(&end, "1"),
        vec![
            ("0".into(), vec![51, 7 * mib, 1, mib]),
            ("1".into(), vec![1, 2 * mib, 0, 0]),
        ]
    );
    assert_eq!(of_job(&end, "2"), vec![("0".into(), vec![1, 8 * mib, 0, 0])]);
    // And as `heaptag report` of the set counts each tag.
    let r = json(&["report", "--format", "json", set.to_str().unwrap()]);
    for t in r["sources"][0]["tags"].as_array().unwrap() {
        let tag = t["tag"].as_str().unwrap();
        let (job, part) = (t["job"].to_string(), t["partition"].to_string());
        let got: Vec<i64> = of_job(&end, &job)
            .into_iter()
            .filter(|(p, _)| *p == part)
            .map(|(_, v)| v)
            .fold(vec![0; 4], |a, v| a.iter().zip(&v).map(|(x, y)| x + y).collect());
        let want = |f: &str| t[f].as_i64().unwrap();
        assert_eq!(got[0], want("allocations"), "{tag}");
        assert_eq!(got[1], want("allocated_bytes"), "{tag}");
        assert_eq!(got[3], want("live_end_bytes"), "{tag}");
    }
    // A segment alone starts from its carried state: segment 2 holds job 1
    // partition 0's carried 1 MiB block, alive at its end and allocated
    // before it (the counters it repeats say so).
    let (last, _, _) = pprof(&segs[2], "end");
    let p0 = of_job(&last, "1").into_iter().find(|(p, _)| p == "0").unwrap().1;
    assert_eq!(p0[3], mib);
    std::fs::remove_dir_all(&d).ok();
}
