//! A scaled-down model of the GPU prover's memory behaviour, run under heaptag.
//!
//! A "pre-compiled constraint evaluator" (PCE) keeps the circuit's R1CS as
//! three CSR matrices (row pointers `Vec<u32>`, column indices `Vec<u32>`,
//! 32-byte field elements) in a process-wide cache: it must exist once. Each
//! job runs its partitions on the rayon pool: witness generation, a sparse
//! matrix multiply against the PCE producing a/b/c vectors, a simulated GPU
//! stage, proof assembly; aux vectors are freed on a separate dealloc thread.
//!
//! ```text
//! cargo run --release --example pce_pipeline -- [--pce shared|per-partition|cloned|race]
//!     [--jobs J] [--partitions N] [--pce-mib M] [--hold-baseline]
//! ```
//!
//! `--pce per-partition` (each partition builds its own copy), `--pce
//! cloned` (each partition clones the cached one) and `--pce race` (two jobs
//! extract it at once, both copies alive until one is dropped) reproduce the
//! bugs the report must catch. All jobs set their partitions up before any
//! proves (the scheduler's batch), so per-partition copies pile up to
//! jobs x partitions. The run writes an event log (`--log`, default
//! `pce_pipeline-<pid>.htlog` in the current directory). At the end the
//! example prints how many PCE-sized copies were alive at once (measured
//! in-process by a monitor thread reading `heaptag::snapshot()`), then runs
//! the analyzer on its own log: `heaptag report` and `heaptag dups`, and
//! writes the whole run as one HTML page (`heaptag html`; `--html PATH`,
//! default `report.html`; `--no-html`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::Duration;

use heaptag::Tag;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// A 32-byte field element (BLS12-381 Fr, as 4 limbs).
type Fr = [u64; 4];

/// One CSR matrix.
#[derive(Clone)]
struct Csr {
    row_ptrs: Vec<u32>,
    cols: Vec<u32>,
    vals: Vec<Fr>,
}

/// The three R1CS matrices.
#[derive(Clone)]
struct Pce {
    a: Csr,
    b: Csr,
    c: Csr,
    num_inputs: usize,
}

impl Pce {
    fn bytes(&self) -> u64 {
        [&self.a, &self.b, &self.c]
            .iter()
            .map(|m| (m.row_ptrs.len() * 4 + m.cols.len() * 4 + m.vals.len() * 32) as u64)
            .sum()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// One process-wide cache; every partition reads it.
    Shared,
    /// Each partition builds its own identical copy (a bug).
    PerPartition,
    /// Each partition clones the cached one (the other bug).
    Cloned,
    /// Two jobs extract it at once; both copies live a while, one is dropped.
    Race,
}

struct Args {
    mode: Mode,
    jobs: u64,
    partitions: u32,
    pce_mib: usize,
    hold_baseline: bool,
    log: Option<String>,
    html: Option<String>,
    quiet: bool,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        mode: Mode::Shared,
        jobs: 2,
        partitions: 4,
        pce_mib: 64,
        hold_baseline: false,
        log: Some("pce_pipeline-%p.htlog".into()),
        html: Some("report.html".into()),
        quiet: false,
    };
    let mut it = argv.iter().cloned();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--pce" => {
                a.mode = match value("--pce")?.as_str() {
                    "shared" => Mode::Shared,
                    "per-partition" => Mode::PerPartition,
                    "cloned" => Mode::Cloned,
                    "race" => Mode::Race,
                    other => return Err(format!("--pce {other}: expected shared, per-partition, cloned or race")),
                }
            }
            "--jobs" => a.jobs = num(&value("--jobs")?, "--jobs")?,
            "--partitions" => a.partitions = num(&value("--partitions")?, "--partitions")?,
            "--pce-mib" => a.pce_mib = num(&value("--pce-mib")?, "--pce-mib")?,
            "--hold-baseline" => a.hold_baseline = true,
            "--log" => a.log = Some(value("--log")?),
            "--no-log" => a.log = None,
            "--html" => a.html = Some(value("--html")?),
            "--no-html" => a.html = None,
            "--quiet" => a.quiet = true,
            "-h" | "--help" => {
                println!(
                    "usage: pce_pipeline [--pce shared|per-partition|cloned|race] [--jobs J] [--partitions N] \
                     [--pce-mib M] [--hold-baseline] [--log PATH (default pce_pipeline-%p.htlog) | --no-log] \
                     [--html PATH (default report.html) | --no-html] [--quiet]"
                );
                return Err(String::new());
            }
            other => return Err(format!("unknown argument {other} (try --help)")),
        }
    }
    if a.jobs == 0 || a.partitions == 0 || a.pce_mib == 0 {
        return Err("--jobs, --partitions and --pce-mib must be at least 1".into());
    }
    Ok(a)
}

fn num<T: std::str::FromStr>(v: &str, name: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{name} {v}: not a number"))
}

/// Rows of each matrix for a PCE of about `mib` MiB: per non-zero, 4 (col)
/// + 32 (val) bytes, three matrices, 4 non-zeros per row on average.
fn pce_rows(mib: usize) -> usize {
    ((mib << 20) / 3 / 36 / 4).max(1)
}

/// Non-zeros in row `r` of matrix `seed`: 2 to 6, so the three matrices'
/// row pointers differ (identical ones would be a real duplicate).
fn nnz_in_row(seed: u64, r: usize) -> usize {
    2 + (r + seed as usize * 2) % 5
}

/// Bytes of a PCE of `mib` MiB, without building one.
pub fn pce_bytes(mib: usize) -> u64 {
    let rows = pce_rows(mib);
    (1..=3u64)
        .map(|seed| {
            let nnz: usize = (0..rows).map(|r| nnz_in_row(seed, r)).sum();
            ((rows + 1) * 4 + nnz * 4 + nnz * 32) as u64
        })
        .sum()
}

/// A deterministic synthetic circuit of about `mib` MiB of CSR data.
fn build_pce(mib: usize) -> Pce {
    let rows = pce_rows(mib);
    let num_inputs = rows;
    let matrix = |seed: u64| {
        let nnz: usize = (0..rows).map(|r| nnz_in_row(seed, r)).sum();
        let mut row_ptrs = Vec::with_capacity(rows + 1);
        let mut cols = Vec::with_capacity(nnz);
        let mut vals = Vec::with_capacity(nnz);
        let mut x = seed;
        row_ptrs.push(0);
        for r in 0..rows {
            for _ in 0..nnz_in_row(seed, r) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                cols.push((x >> 33) as u32 % num_inputs as u32);
                vals.push([x, x ^ seed, x.rotate_left(7), 1]);
            }
            row_ptrs.push(cols.len() as u32);
        }
        Csr { row_ptrs, cols, vals }
    };
    Pce {
        a: matrix(1),
        b: matrix(2),
        c: matrix(3),
        num_inputs,
    }
}

static PCE: OnceLock<Arc<Pce>> = OnceLock::new();

/// The process-wide PCE, extracted once. Every job and partition uses it, so
/// it is charged to the shared tag (no job, `pce_load`, no partition), not
/// to the partition that happens to build it.
fn shared_pce(mib: usize) -> Arc<Pce> {
    PCE.get_or_init(|| heaptag::shared("pce_load", || Arc::new(build_pce(mib))))
        .clone()
}

fn spmv(m: &Csr, w: &[Fr]) -> Vec<Fr> {
    let mut out = vec![[0u64; 4]; m.row_ptrs.len() - 1];
    for (r, o) in out.iter_mut().enumerate() {
        let (s, e) = (m.row_ptrs[r] as usize, m.row_ptrs[r + 1] as usize);
        for k in s..e {
            let (c, v) = (m.cols[k] as usize, m.vals[k]);
            for l in 0..4 {
                o[l] = o[l].wrapping_add(v[l].wrapping_mul(w[c][l]));
            }
        }
    }
    out
}

/// The PCE a partition proves against, got the way `mode` says. Runs under
/// the partition's tag, at job setup.
fn pce_for(args: &Args, cached: Option<&Arc<Pce>>) -> Arc<Pce> {
    match args.mode {
        Mode::Shared | Mode::Race => cached.cloned().unwrap_or_else(|| shared_pce(args.pce_mib)),
        Mode::PerPartition => {
            let _s = heaptag::stage("pce_load");
            Arc::new(build_pce(args.pce_mib))
        }
        Mode::Cloned => {
            let shared = shared_pce(args.pce_mib);
            let _s = heaptag::stage("pce_load");
            Arc::new((*shared).clone())
        }
    }
}

/// `--pce race`: every job extracts the PCE itself when the cache is empty
/// (no lock around the extraction), then keeps the first one stored; the
/// loser's copy lives until it finds out, then is dropped.
fn race_extract(args: &Args, cache: &Mutex<Option<Arc<Pce>>>, all_looked: &Barrier) -> Arc<Pce> {
    let empty = cache.lock().unwrap().is_none();
    // Every job has looked at the cache before any extracts: the race is
    // certain, not a matter of scheduling.
    all_looked.wait();
    if !empty {
        return cache.lock().unwrap().clone().expect("cache was filled");
    }
    let mine = {
        let _s = heaptag::stage("pce_load");
        Arc::new(build_pce(args.pce_mib))
    };
    let mut slot = cache.lock().unwrap();
    match slot.as_ref() {
        Some(winner) => {
            let winner = winner.clone();
            drop(slot);
            // The loser notices late: both copies are alive meanwhile.
            std::thread::sleep(Duration::from_millis(30));
            drop(mine);
            winner
        }
        None => {
            *slot = Some(mine.clone());
            mine
        }
    }
}

/// One partition: witness, a/b/c by SpMV, simulated GPU work, assembly.
fn partition(job: u64, part: u32, pce: &Pce, dealloc: &mpsc::Sender<Vec<Fr>>) -> u64 {
    let (a, b, c, aux) = {
        let _s = heaptag::stage("synthesize_partition");
        // Witness values differ per job and partition (distinct data from
        // one call site: never a duplicate).
        let seed = (job << 32) | u64::from(part);
        let aux: Vec<Fr> = (0..pce.num_inputs as u64)
            .map(|i| [i ^ seed, i, i.rotate_left(3), seed])
            .collect();
        let a = spmv(&pce.a, &aux);
        let b = spmv(&pce.b, &aux);
        let c = spmv(&pce.c, &aux);
        (a, b, c, aux)
    };
    let digest = {
        let _s = heaptag::stage("gpu_prove");
        let scratch: Vec<u64> = a.iter().zip(&b).zip(&c).map(|((x, y), z)| x[0] ^ y[1] ^ z[2]).collect();
        scratch.iter().fold(0u64, |h, v| h.rotate_left(5) ^ v)
    };
    drop((a, b, c));
    // The aux vector is freed on the dealloc thread, under the tag it was
    // allocated with.
    let _ = dealloc.send(aux);
    let _s = heaptag::stage("proof_assembly");
    let proof = format!("proof-{part}-{digest:016x}").into_bytes();
    proof.len() as u64
}

/// Bytes in binary units, as the analyzer prints them.
fn gib(b: u64) -> String {
    heaptag_analyzer::render::bytes(b)
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(run(&argv));
}

/// Runs the pipeline with command-line arguments `argv`; returns the exit code.
pub fn run(argv: &[String]) -> i32 {
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(e) if e.is_empty() => return 0, // --help
        Err(e) => {
            eprintln!("pce_pipeline: {e}");
            return 2;
        }
    };
    let started = std::time::Instant::now();
    // The event log for the analyzer (unless HEAPTAG_LOG already started one).
    if let Some(path) = &args.log {
        if heaptag::log_path().is_none() {
            // Fingerprint every PCE vector (the smallest are row pointers);
            // sample memory every 10 ms, since the whole run takes well
            // under a second (the default 100 ms would give a handful of
            // points on the page's chart).
            let log = heaptag::LogConfig::new(path)
                .fingerprint_min(64 << 10)
                .interval(std::time::Duration::from_millis(10));
            if let Err(e) = log.start() {
                eprintln!("pce_pipeline: no event log: {e}");
            }
        }
    }

    // The monitor: the most PCE-stage bytes alive at one moment.
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut max = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let s = heaptag::snapshot();
                let live: u64 = s
                    .tags_where(|t| t.stage == Some("pce_load"))
                    .map(|t| t.tracked.live_bytes)
                    .sum();
                max = max.max(live);
                std::thread::sleep(Duration::from_millis(2));
            }
            max
        })
    };

    // Benchmark artifact: "old path" results kept alive during the PCE path.
    let baseline: Option<Vec<Fr>> = args.hold_baseline.then(|| {
        let _s = heaptag::stage("baseline_results");
        vec![[7u64; 4]; (args.pce_mib << 20) / 32]
    });

    let (dtx, drx) = mpsc::channel::<Vec<Fr>>();
    let dealloc = std::thread::spawn(move || {
        // Frees here are charged to the tags that allocated the vectors.
        let _s = heaptag::stage("dealloc");
        for v in drx {
            drop(v);
        }
    });

    let args = &args;
    // All jobs are admitted (their partitions set up) before any proves: the
    // scheduler's batch. That is when per-partition copies pile up.
    let admitted = Barrier::new(args.jobs as usize);
    let race_cache: Mutex<Option<Arc<Pce>>> = Mutex::new(None);
    let all_looked = Barrier::new(args.jobs as usize);
    std::thread::scope(|s| {
        for job in 1..=args.jobs {
            let dtx = dtx.clone();
            let (admitted, all_looked, race_cache) = (&admitted, &all_looked, &race_cache);
            s.spawn(move || {
                let _j = heaptag::job(job);
                let job_tag = heaptag::current();
                let cached = (args.mode == Mode::Race).then(|| race_extract(args, race_cache, all_looked));
                // Setup: each partition's context gets its PCE, under its tag.
                let contexts: Vec<(Tag, Arc<Pce>)> = (0..args.partitions)
                    .map(|part| {
                        let tag = Tag {
                            partition: Some(part),
                            ..job_tag
                        };
                        (tag, tag.scope(|| pce_for(args, cached.as_ref())))
                    })
                    .collect();
                admitted.wait();
                // Partitions fan out on the rayon pool, whose threads do not
                // inherit this thread's tag: each task enters its partition's.
                rayon::scope(|rs| {
                    for (part, (tag, pce)) in contexts.iter().enumerate() {
                        let dtx = dtx.clone();
                        rs.spawn(move |_| {
                            tag.scope(|| partition(job, part as u32, pce, &dtx));
                        });
                    }
                });
                drop(contexts);
            });
        }
    });
    drop(dtx);
    dealloc.join().expect("dealloc thread");
    // With HEAPTAG_LOG set: fingerprints of everything alive now go in the log.
    heaptag::mark("jobs done");
    drop(baseline);
    stop.store(true, Ordering::Relaxed);
    let pce_peak = monitor.join().expect("monitor thread");

    let snap = heaptag::snapshot();
    let pce_bytes = pce_bytes(args.pce_mib);
    debug_assert!(PCE.get().is_none_or(|p| p.bytes() == pce_bytes));
    println!(
        "heaptag: pce_pipeline --pce {:?} --jobs {} --partitions {} ({} PCE) in {:.1?}",
        args.mode,
        args.jobs,
        args.partitions,
        gib(pce_bytes),
        started.elapsed()
    );
    println!();
    println!(
        "process: live {} (tracked {}), allocated {}, heaptag's own memory {}",
        gib(snap.totals.live_bytes),
        gib(snap.totals.tracked_live_bytes),
        gib(snap.totals.alloc_bytes),
        gib(snap.overhead_bytes)
    );
    let copies = (pce_peak as f64 / pce_bytes as f64).round() as u64;
    let verdict = if copies <= 1 {
        "SHARED ONCE".to_string()
    } else {
        format!(
            "DUPLICATED x{copies} (wasted {})",
            gib(pce_peak.saturating_sub(pce_bytes))
        )
    };
    println!(
        "pce_load: at most {} alive at once = {} PCE-sized copies -> {verdict} (judged by size, in-process)",
        gib(pce_peak),
        copies
    );

    // The analyzer on the log just written: the report and the verdict by content.
    let Some(log) = heaptag::finish() else { return 0 };
    println!(
        "\nevent log: {} ({}, {} events, {} dropped)",
        log.path.display(),
        gib(log.bytes),
        log.events,
        log.dropped
    );
    let logs = vec![log.path.clone()];
    let mut out = std::io::stdout().lock();
    let commands = [
        heaptag_analyzer::Command::Report {
            logs: logs.clone(),
            format: heaptag_analyzer::Format::Text,
        },
        heaptag_analyzer::Command::Dups {
            logs: logs.clone(),
            format: heaptag_analyzer::Format::Text,
        },
    ];
    for cmd in commands.iter().skip(usize::from(args.quiet)) {
        if let Err(e) = heaptag_analyzer::run(cmd, &mut out) {
            eprintln!("pce_pipeline: analyzer: {e}");
        }
    }
    if let Some(html) = &args.html {
        let cmd = heaptag_analyzer::Command::Html {
            logs: logs.clone(),
            out: html.into(),
        };
        match heaptag_analyzer::run(&cmd, &mut std::io::sink()) {
            Ok(_) => {
                let path = std::path::Path::new(html);
                let shown = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
                println!(
                    "\nhtml report: {} (open it in a browser: memory over time, peaks, duplicates, flame graphs)",
                    shown.display()
                );
            }
            Err(e) => eprintln!("pce_pipeline: analyzer: {e}"),
        }
    }
    let p = log.path.display();
    println!("\nmore: cargo run --release -p heaptag-analyzer -- {{report|peak|dups|sites|timeline|html}} {p}");
    0
}
