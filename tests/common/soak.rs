//! The daemon soak's simulation, shared by `examples/daemon_soak.rs` (long,
//! with flags) and `tests/daemon_soak.rs` (short): a prover server proving
//! around the clock, each proof a fresh job id.
//!
//! Per proof (about 35 tags): the job's own tag, four job-level stages
//! (`job_setup`, `pce_load`, `aggregate_proofs`, `serialize_proof`) and, per
//! partition on the rayon pool, `synthesize_partition`, `gpu_prove` and
//! `proof_assembly` (the prover's stage names, as in
//! `examples/pce_pipeline.rs`). Every stage allocates tracked buffers of a
//! size known in advance and small blocks; the buffers are freed on a
//! separate dealloc thread, as the prover does.
#![allow(dead_code)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use heaptag::Tag;
use rayon::prelude::*;

/// The partition stages, in order.
pub const PARTITION_STAGES: [&str; 3] = ["synthesize_partition", "gpu_prove", "proof_assembly"];
/// The job-level stages, in order.
pub const JOB_STAGES: [&str; 4] = ["job_setup", "pce_load", "aggregate_proofs", "serialize_proof"];

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Config {
    /// Proofs in all (the run stops at this many or at `duration`).
    pub proofs: u64,
    /// Pipelines proving at once.
    pub pipelines: usize,
    /// Partitions per proof.
    pub partitions: u32,
    /// Longest run.
    pub duration: Duration,
    /// Proofs whose figures are checked exactly at the end (the last ones).
    pub checked: u64,
}

/// heaptag's figures at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Point {
    pub proofs: u64,
    pub overhead_bytes: u64,
    pub samples: u64,
    pub sample_tags_visited: u64,
    pub sample_ns: u64,
    pub dropped_events: u64,
    pub tags_in_use: u64,
    pub tags_retired: u64,
    pub tag_overflow: u64,
    pub secs: f64,
}

impl Point {
    fn now(proofs: u64, t0: Instant) -> Point {
        let s = heaptag::snapshot();
        Point {
            proofs,
            overhead_bytes: s.overhead_bytes,
            samples: s.health.samples,
            sample_tags_visited: s.health.sample_tags_visited,
            sample_ns: s.health.sample_ns,
            dropped_events: s.health.dropped_events,
            tags_in_use: s.health.tags,
            tags_retired: s.health.tags_retired,
            tag_overflow: s.health.tag_overflow,
            secs: t0.elapsed().as_secs_f64(),
        }
    }
}

/// Figures of a phase: between two points.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    pub from: Point,
    pub to: Point,
}

impl Phase {
    /// Tags the writer looked at per sample in the phase.
    pub fn visited_per_sample(&self) -> f64 {
        (self.to.sample_tags_visited - self.from.sample_tags_visited) as f64
            / (self.to.samples - self.from.samples).max(1) as f64
    }
    /// Microseconds per sample in the phase.
    pub fn us_per_sample(&self) -> f64 {
        (self.to.sample_ns - self.from.sample_ns) as f64 / 1e3 / (self.to.samples - self.from.samples).max(1) as f64
    }
    /// Events dropped in the phase.
    pub fn dropped(&self) -> u64 {
        self.to.dropped_events - self.from.dropped_events
    }
}

/// What a run measured.
#[derive(Debug)]
pub struct Outcome {
    pub proofs: u64,
    /// The first 1,000 proofs (or the first tenth of a shorter run).
    pub first: Phase,
    /// The last as many proofs.
    pub last: Phase,
    /// Highest number of tags in use seen at a phase point.
    pub max_tags_in_use: u64,
    /// Mismatches in the exact check of the last proofs' tags (empty: exact).
    pub mismatches: Vec<String>,
    /// Tags checked exactly.
    pub tags_checked: u64,
    /// Every point taken (one per 1,000 proofs, or per tenth of a shorter run).
    pub points: Vec<Point>,
}

/// Tracked bytes each stage allocates, in two buffers of at least the
/// 64 KiB threshold each.
pub fn stage_bytes(stage: &str, partition: Option<u32>) -> u64 {
    let base = match stage {
        "synthesize_partition" => 256 << 10,
        "gpu_prove" => 192 << 10,
        "proof_assembly" => 160 << 10,
        "job_setup" => 128 << 10,
        "pce_load" => 512 << 10,
        "aggregate_proofs" => 160 << 10,
        "serialize_proof" => 144 << 10,
        _ => 128 << 10,
    };
    base + u64::from(partition.unwrap_or(0)) * 4096
}

/// Small blocks per stage, of 200 bytes each.
pub const SMALL_PER_STAGE: u64 = 40;

/// One stage's work: two tracked buffers (sent to the dealloc thread) and
/// small blocks (freed here).
fn stage_work(tag: Tag, free: &mpsc::Sender<Vec<u8>>, outstanding: &AtomicU64) {
    tag.scope(|| {
        let n = stage_bytes(tag.stage.unwrap_or(""), tag.partition) as usize;
        let a = black_box(vec![1u8; n / 2]);
        let b = black_box(vec![2u8; n - n / 2]);
        let small: Vec<Box<[u8; 200]>> = (0..SMALL_PER_STAGE).map(|_| black_box(Box::new([3u8; 200]))).collect();
        drop(small);
        outstanding.fetch_add(2, Ordering::Relaxed);
        let _ = free.send(a);
        let _ = free.send(b);
    });
}

/// One proof of job `job`.
fn proof(job: u64, partitions: u32, free: &mpsc::Sender<Vec<u8>>, outstanding: &AtomicU64) {
    let job_tag = Tag::new(Some(job), None, None);
    job_tag.scope(|| {
        drop(black_box(vec![0u8; 4096]));
        for stage in &JOB_STAGES[..2] {
            stage_work(Tag::new(Some(job), Some(stage), None), free, outstanding);
        }
        (0..partitions).into_par_iter().for_each_with(free.clone(), |free, p| {
            for stage in PARTITION_STAGES {
                stage_work(Tag::new(Some(job), Some(stage), Some(p)), free, outstanding);
            }
        });
        for stage in &JOB_STAGES[2..] {
            stage_work(Tag::new(Some(job), Some(stage), None), free, outstanding);
        }
    });
}

/// Runs the soak. heaptag must be the global allocator (and the log on, if
/// it is to be measured).
pub fn run(cfg: &Config) -> Outcome {
    let t0 = Instant::now();
    let (free_tx, free_rx) = mpsc::channel::<Vec<u8>>();
    let outstanding = Arc::new(AtomicU64::new(0));
    let freer = {
        let outstanding = outstanding.clone();
        std::thread::Builder::new()
            .name("dealloc".into())
            .spawn(move || {
                for buf in free_rx {
                    drop(buf);
                    outstanding.fetch_sub(1, Ordering::Relaxed);
                }
            })
            .unwrap()
    };
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let phase_len = 1000.min((cfg.proofs / 10).max(1));
    let first_from = Point::now(0, t0);
    let points = Arc::new(std::sync::Mutex::new(Vec::<Point>::new()));
    let base_job = 1u64 << 40;
    let deadline = t0 + cfg.duration;
    std::thread::scope(|s| {
        for _ in 0..cfg.pipelines {
            let (next, done, free_tx, outstanding) = (next.clone(), done.clone(), free_tx.clone(), outstanding.clone());
            s.spawn(move || loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= cfg.proofs || Instant::now() >= deadline {
                    return;
                }
                proof(base_job + j, cfg.partitions, &free_tx, &outstanding);
                done.fetch_add(1, Ordering::Relaxed);
            });
        }
        // The sampler: a point every phase_len proofs.
        let (done, points) = (done.clone(), points.clone());
        s.spawn(move || {
            let mut mark = phase_len;
            loop {
                let d = done.load(Ordering::Relaxed);
                if d >= mark {
                    points.lock().unwrap().push(Point::now(d, t0));
                    mark += phase_len;
                }
                if d >= cfg.proofs || (Instant::now() >= deadline && next.load(Ordering::Relaxed) >= d) {
                    // every pipeline stopped taking proofs
                }
                if Instant::now() >= deadline + Duration::from_secs(600) || d >= cfg.proofs {
                    return;
                }
                if Instant::now() >= deadline {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
    });
    drop(free_tx);
    // Wait for the dealloc thread (bounded: it ends when every sender is gone).
    freer.join().unwrap();
    let proofs = done.load(Ordering::Relaxed);
    let end = Point::now(proofs, t0);
    let points = points.lock().unwrap().clone();
    let first_to = points.first().copied().unwrap_or(end);
    let last_from = points
        .iter()
        .rev()
        .find(|p| p.proofs + phase_len <= proofs)
        .copied()
        .unwrap_or(first_from);
    let max_tags_in_use = points.iter().chain([&end]).map(|p| p.tags_in_use).max().unwrap_or(0);

    // Exact check of the last proofs' tags: every tracked byte allocated and
    // freed, against the sizes the simulation chose (hand computation).
    let snap = heaptag::snapshot();
    let mut mismatches = Vec::new();
    let mut tags_checked = 0;
    let first_checked = proofs.saturating_sub(cfg.checked);
    for j in first_checked..proofs {
        let job = base_job + j;
        let mut expect: Vec<(Tag, u64)> = JOB_STAGES
            .iter()
            .map(|s| (Tag::new(Some(job), Some(s), None), stage_bytes(s, None)))
            .collect();
        for p in 0..cfg.partitions {
            for s in PARTITION_STAGES {
                expect.push((Tag::new(Some(job), Some(s), Some(p)), stage_bytes(s, Some(p))));
            }
        }
        for (tag, bytes) in expect {
            tags_checked += 1;
            match snap.tag(&tag) {
                None => mismatches.push(format!("{tag}: not in the snapshot")),
                Some(st) => {
                    let t = st.tracked;
                    if t.alloc_bytes != bytes
                        || t.free_bytes != bytes
                        || t.live_bytes != 0
                        || t.alloc_count != 2
                        || t.free_count != 2
                    {
                        mismatches.push(format!(
                            "{tag}: tracked {t:?}, expected {bytes} allocated and freed in 2 blocks"
                        ));
                    }
                    if st.small.alloc_count < SMALL_PER_STAGE || st.small.alloc_bytes < SMALL_PER_STAGE * 200 {
                        mismatches.push(format!(
                            "{tag}: small {:?}, expected at least {SMALL_PER_STAGE} blocks",
                            st.small
                        ));
                    }
                }
            }
        }
    }
    Outcome {
        proofs,
        first: Phase {
            from: first_from,
            to: first_to,
        },
        last: Phase {
            from: last_from,
            to: end,
        },
        max_tags_in_use,
        mismatches,
        tags_checked,
        points,
    }
}

/// The outcome as a table for docs/PERFORMANCE.md.
pub fn table(o: &Outcome) -> String {
    let row = |name: &str, p: &Phase| {
        format!(
            "| {name} (proofs {}..{}) | {:.1} | {:.2} | {:.1} | {:.0} | {} | {} |\n",
            p.from.proofs,
            p.to.proofs,
            p.to.overhead_bytes as f64 / (1 << 20) as f64,
            p.visited_per_sample(),
            p.us_per_sample(),
            (p.to.proofs - p.from.proofs) as f64 / (p.to.secs - p.from.secs).max(1e-9),
            p.dropped(),
            p.to.tags_in_use,
        )
    };
    let mut s = String::from(
        "| phase | heaptag's own memory at end (MiB) | tags visited per sample | us per sample | proofs/s | dropped events | tags in use at end |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    s += &row("first", &o.first);
    s += &row("last", &o.last);
    s
}
