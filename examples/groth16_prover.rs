//! A real Groth16 prover (bellperson on the CPU, BLS12-381) under heaptag.
//!
//! Each job proves a batch of partition circuits with bellperson's batch
//! prover (`create_random_proof_batch`), the way the GPU prover proves a
//! PoRep's partitions, and verifies every proof (`verify_proof` per proof and
//! `verify_proofs_batch` per job); the example exits with 1 if any proof
//! does not verify.
//!
//! The circuit is a hash-like chain: `x <- (x + k_i)^3` for `R` rounds, two
//! R1CS constraints per round, with public inputs `x0` (the partition's
//! seed) and the result `y`. `--constraints-log K` sizes it to exactly `2^K`
//! constraints (bellperson's evaluation domain, so no padding). The round
//! constants `k_i` come from a process-wide table (`--table-mib`) that every
//! partition's synthesis reads; the proving parameters (the SRS) are
//! generated once (`generate_random_parameters`) into a process-wide cache.
//! Both must exist once, and both are built under `heaptag::shared`, so they
//! are charged to `stage=constants_load` and `stage=srs_load` (no job, no
//! partition).
//!
//! Tags, with the real prover's stage names (filecoin-project/curio,
//! extern/cuzk: `srs_load`, `synthesize_partition`, `gpu_prove`): each job
//! thread is `job=J`; a partition's circuit carries its tag and enters it
//! inside `synthesize`, which bellperson runs on the rayon pool; the rest of
//! the batch prove (FFTs, multiexps) runs under `job=J stage=gpu_prove` on
//! the job thread, and on bellperson's own worker threads, which no tag
//! reaches (docs/GROTH16.md measures that part). `--pool-tags` gives the
//! rayon pool's threads a standing tag (`stage=rayon_pool`), the fix
//! pattern docs/GROTH16.md describes.
//!
//! ```text
//! cargo run --release --features groth16 --example groth16_prover -- \
//!     [--jobs J] [--partitions N] [--constraints-log K] [--table-mib M] \
//!     [--duplicate constants|srs] [--pool-tags] [--tamper]
//! ```
//!
//! `--duplicate constants` makes each partition's circuit hold its own deep
//! copy of the round-constant table, `--duplicate srs` each partition's
//! context its own deep copy of the parameters (the bugs `heaptag dups`
//! must catch: `DUPLICATED`); by default both are shared (`SHARED ONCE`).
//! `--tamper` verifies one proof against a wrong public input (it must fail:
//! the example then exits with 1). The run writes an event log (`--log`,
//! default `groth16_prover-<pid>.htlog`), then runs `heaptag report` and
//! `heaptag dups` on it.

use std::sync::{Arc, Barrier, OnceLock};

use bellperson::groth16::{self, Parameters, Proof};
use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::{Bls12, Scalar};
use ff::Field;
use heaptag::Tag;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// The stage of the round-constant table (process-wide, built once).
pub const CONSTANTS_STAGE: &str = "constants_load";
/// The stage of the proving parameters (the real prover's SRS cache).
pub const SRS_STAGE: &str = "srs_load";
/// The stage a partition's synthesis runs under.
pub const SYNTH_STAGE: &str = "synthesize_partition";
/// The stage of the batch prove (FFTs, multiexps) on the job thread.
pub const PROVE_STAGE: &str = "gpu_prove";
/// The stage of verification.
pub const VERIFY_STAGE: &str = "verify";
/// The standing tag of the rayon pool's threads with `--pool-tags`.
pub const POOL_STAGE: &str = "rayon_pool";

/// What `--duplicate` copies per partition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Duplicate {
    /// Nothing: one table and one SRS for the process.
    None,
    /// Each partition's circuit holds its own copy of the constant table.
    Constants,
    /// Each partition's context holds its own copy of the parameters.
    Srs,
}

struct Args {
    jobs: u64,
    partitions: u32,
    constraints_log: u32,
    table_mib: usize,
    duplicate: Duplicate,
    pool_tags: bool,
    tamper: bool,
    log: Option<String>,
    quiet: bool,
}

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        jobs: 2,
        partitions: 4,
        constraints_log: 13,
        table_mib: 2,
        duplicate: Duplicate::None,
        pool_tags: false,
        tamper: false,
        log: Some("groth16_prover-%p.htlog".into()),
        quiet: false,
    };
    let mut it = argv.iter().cloned();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--jobs" => a.jobs = num(&value("--jobs")?, "--jobs")?,
            "--partitions" => a.partitions = num(&value("--partitions")?, "--partitions")?,
            "--constraints-log" => a.constraints_log = num(&value("--constraints-log")?, "--constraints-log")?,
            "--table-mib" => a.table_mib = num(&value("--table-mib")?, "--table-mib")?,
            "--duplicate" => {
                a.duplicate = match value("--duplicate")?.as_str() {
                    "constants" => Duplicate::Constants,
                    "srs" => Duplicate::Srs,
                    "none" => Duplicate::None,
                    other => return Err(format!("--duplicate {other}: expected constants, srs or none")),
                }
            }
            "--pool-tags" => a.pool_tags = true,
            "--tamper" => a.tamper = true,
            "--log" => a.log = Some(value("--log")?),
            "--no-log" => a.log = None,
            "--quiet" => a.quiet = true,
            "-h" | "--help" => {
                println!(
                    "usage: groth16_prover [--jobs J (2)] [--partitions N (4)] [--constraints-log K (13: 2^K constraints, 3..=20)] \
                     [--table-mib M (2)] [--duplicate constants|srs|none] [--pool-tags] [--tamper] \
                     [--log PATH (default groth16_prover-%p.htlog) | --no-log] [--quiet]"
                );
                return Err(String::new());
            }
            other => return Err(format!("unknown argument {other} (try --help)")),
        }
    }
    if a.jobs == 0 || a.partitions == 0 || a.table_mib == 0 {
        return Err("--jobs, --partitions and --table-mib must be at least 1".into());
    }
    if !(3..=20).contains(&a.constraints_log) {
        return Err(format!("--constraints-log {}: expected 3 to 20", a.constraints_log));
    }
    Ok(a)
}

/// What is wrong with `argv`, if anything (`Err("")` for `--help`).
pub fn check_args(argv: &[String]) -> Result<(), String> {
    parse_args(argv).map(|_| ())
}

fn num<T: std::str::FromStr>(v: &str, name: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{name} {v}: not a number"))
}

/// Rounds of a circuit of exactly `2^k` constraints: two per round, one for
/// the output, and the three bellperson adds for the public inputs (one,
/// `x0`, `y`).
pub fn rounds(k: u32) -> usize {
    (1usize << (k - 1)) - 2
}

/// Entries of a table of `mib` MiB of 32-byte scalars.
pub fn table_len(mib: usize) -> usize {
    (mib << 20) / std::mem::size_of::<Scalar>()
}

/// Bytes of the constant table of `mib` MiB.
pub fn table_bytes(mib: usize) -> u64 {
    (table_len(mib) * std::mem::size_of::<Scalar>()) as u64
}

/// A deterministic table of distinct-looking scalars (a squaring chain).
fn build_constants(mib: usize) -> Vec<Scalar> {
    let mut k = Scalar::from(7u64);
    (0..table_len(mib) as u64)
        .map(|i| {
            k = k.square() + Scalar::from(i);
            k
        })
        .collect()
}

/// The table entry round `i` uses: spread over the whole table.
fn constant_index(i: usize, len: usize) -> usize {
    i.wrapping_mul(0x9E37_79B1) % len
}

/// One partition's circuit: `x <- (x + k_i)^3` for `rounds` rounds.
#[derive(Clone)]
struct Chain {
    /// The tag synthesis runs under (`None` for parameter generation).
    tag: Option<Tag>,
    rounds: usize,
    constants: Arc<Vec<Scalar>>,
    /// The witness: `x0` (absent for parameter generation).
    x0: Option<Scalar>,
}

impl Chain {
    /// `y` for `x0`, computed outside the circuit (the public output).
    fn output(&self, x0: Scalar) -> Scalar {
        let mut x = x0;
        for i in 0..self.rounds {
            let t = x + self.constants[constant_index(i, self.constants.len())];
            x = t.square() * t;
        }
        x
    }
}

impl Circuit<Scalar> for Chain {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        // bellperson runs each circuit's synthesis on the rayon pool, whose
        // threads carry no tag of ours: enter the partition's here, so the
        // circuit's a/b/c and assignment vectors (grown in `enforce` and
        // `alloc`) are charged to it.
        let _tag = self.tag.map(|t| t.enter());
        let missing = || SynthesisError::AssignmentMissing;
        let mut x_val = self.x0;
        let mut x = cs.alloc_input(|| "x0", || x_val.ok_or_else(missing))?;
        for i in 0..self.rounds {
            let k = self.constants[constant_index(i, self.constants.len())];
            let t_val = x_val.map(|x| x + k);
            let t2_val = t_val.map(|t| t.square());
            let t2 = cs.alloc(|| "t^2", || t2_val.ok_or_else(missing))?;
            cs.enforce(
                || "t*t = t^2",
                |lc| lc + x + (k, CS::one()),
                |lc| lc + x + (k, CS::one()),
                |lc| lc + t2,
            );
            let next_val = t2_val.zip(t_val).map(|(t2, t)| t2 * t);
            let next = cs.alloc(|| "t^3", || next_val.ok_or_else(missing))?;
            cs.enforce(
                || "t^2*t = t^3",
                |lc| lc + t2,
                |lc| lc + x + (k, CS::one()),
                |lc| lc + next,
            );
            x = next;
            x_val = next_val;
        }
        let y = cs.alloc_input(|| "y", || x_val.ok_or_else(missing))?;
        cs.enforce(|| "x = y", |lc| lc + x, |lc| lc + CS::one(), |lc| lc + y);
        Ok(())
    }
}

static CONSTANTS: OnceLock<Arc<Vec<Scalar>>> = OnceLock::new();
/// The parameters, or why they could not be made (kept, so every job sees it).
static SRS: OnceLock<Result<Arc<Parameters<Bls12>>, String>> = OnceLock::new();

/// The process-wide round-constant table, built once (charged to
/// `stage=constants_load`, no job, no partition).
fn shared_constants(mib: usize) -> Arc<Vec<Scalar>> {
    CONSTANTS
        .get_or_init(|| heaptag::shared(CONSTANTS_STAGE, || Arc::new(build_constants(mib))))
        .clone()
}

/// The process-wide parameters, generated once for the circuit shape
/// (charged to `stage=srs_load`).
fn shared_srs(rounds: usize, constants: &Arc<Vec<Scalar>>) -> Result<Arc<Parameters<Bls12>>, String> {
    SRS.get_or_init(|| {
        heaptag::shared(SRS_STAGE, || {
            let shape = Chain {
                tag: None,
                rounds,
                constants: constants.clone(),
                x0: None,
            };
            let mut rng = ChaCha8Rng::seed_from_u64(0x5253);
            groth16::generate_random_parameters::<Bls12, _, _>(shape, &mut rng)
                .map(Arc::new)
                .map_err(|e| format!("generate_random_parameters: {e}"))
        })
    })
    .clone()
}

/// A deep copy of the parameters (`--duplicate srs`): new vectors, the same
/// points.
fn deep_copy(p: &Parameters<Bls12>) -> Parameters<Bls12> {
    Parameters {
        vk: p.vk.clone(),
        h: Arc::new((*p.h).clone()),
        l: Arc::new((*p.l).clone()),
        a: Arc::new((*p.a).clone()),
        b_g1: Arc::new((*p.b_g1).clone()),
        b_g2: Arc::new((*p.b_g2).clone()),
    }
}

/// What one job found.
struct JobResult {
    job: u64,
    proofs: usize,
    verified: usize,
    batch_verified: bool,
}

/// One job: set its partitions up, prove them as one batch, verify.
fn run_job(args: &Args, job: u64, admitted: &Barrier) -> Result<JobResult, String> {
    let _j = heaptag::job(job);
    let job_tag = heaptag::current();
    let rounds = rounds(args.constraints_log);
    let shared = shared_constants(args.table_mib);
    let srs = shared_srs(rounds, &shared);
    let srs = match srs {
        Ok(srs) => srs,
        Err(e) => {
            // Still meet the other jobs at the barrier, or they would wait forever.
            admitted.wait();
            return Err(format!("job {job}: {e}"));
        }
    };

    // Setup: each partition's circuit (and, with `--duplicate srs`, its own
    // parameters), made under the partition's tag.
    let mut circuits = Vec::new();
    let mut srs_copies = Vec::new();
    let mut public = Vec::new();
    for part in 0..args.partitions {
        let tag = Tag {
            partition: Some(part),
            ..job_tag
        };
        let _p = tag.enter();
        let constants = match args.duplicate {
            Duplicate::Constants => {
                let _s = heaptag::stage(CONSTANTS_STAGE);
                Arc::new((*shared).clone())
            }
            _ => shared.clone(),
        };
        if args.duplicate == Duplicate::Srs {
            let _s = heaptag::stage(SRS_STAGE);
            srs_copies.push(deep_copy(&srs));
        }
        let x0 = Scalar::from(job * 1_000 + u64::from(part) + 1);
        let circuit = Chain {
            tag: Some(Tag {
                stage: Some(SYNTH_STAGE),
                ..tag
            }),
            rounds,
            constants,
            x0: Some(x0),
        };
        public.push(vec![x0, circuit.output(x0)]);
        circuits.push(circuit);
    }
    // Every job is set up before any proves (the scheduler's batch): that
    // is when per-partition copies pile up.
    admitted.wait();

    let proofs: Vec<Proof<Bls12>> = {
        let _s = heaptag::stage(PROVE_STAGE);
        let mut rng = ChaCha8Rng::seed_from_u64(job);
        groth16::create_random_proof_batch(circuits, &*srs, &mut rng).map_err(|e| format!("job {job}: prove: {e}"))?
    };
    drop(srs_copies);

    let _s = heaptag::stage(VERIFY_STAGE);
    let pvk = groth16::prepare_verifying_key(&srs.vk);
    if args.tamper {
        public[0][1] += Scalar::ONE;
    }
    let mut verified = 0;
    for (i, (proof, inputs)) in proofs.iter().zip(&public).enumerate() {
        match groth16::verify_proof(&pvk, proof, inputs) {
            Ok(true) => verified += 1,
            Ok(false) => eprintln!("groth16_prover: job {job} partition {i}: proof does NOT verify"),
            Err(e) => eprintln!("groth16_prover: job {job} partition {i}: verify: {e}"),
        }
    }
    let refs: Vec<&Proof<Bls12>> = proofs.iter().collect();
    let mut rng = ChaCha8Rng::seed_from_u64(job ^ 0xbee5);
    let batch_verified = groth16::verify_proofs_batch(&pvk, &mut rng, &refs, &public).unwrap_or(false);
    Ok(JobResult {
        job,
        proofs: proofs.len(),
        verified,
        batch_verified,
    })
}

/// Bytes in binary units, as the analyzer prints them.
fn bytes(b: u64) -> String {
    heaptag_analyzer::render::bytes(b)
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(run(&argv));
}

/// Runs the prover with command-line arguments `argv`; returns the exit
/// code: 0 when every proof verified, 1 when one did not, 2 on bad
/// arguments.
pub fn run(argv: &[String]) -> i32 {
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(e) if e.is_empty() => return 0, // --help
        Err(e) => {
            eprintln!("groth16_prover: {e}");
            return 2;
        }
    };
    if args.pool_tags {
        // The fix pattern for pool threads no tag reaches: a standing tag
        // for the thread's whole life (the guard is leaked on purpose).
        let built = rayon::ThreadPoolBuilder::new()
            .start_handler(|_| std::mem::forget(heaptag::stage(POOL_STAGE)))
            .build_global();
        if let Err(e) = built {
            eprintln!("groth16_prover: --pool-tags: the rayon pool already exists: {e}");
            return 2;
        }
    }
    let started = std::time::Instant::now();
    if let Some(path) = &args.log {
        if heaptag::log_path().is_none() {
            // Fingerprint every block of 64 KiB and more (the parameters'
            // vectors at small sizes), and sample memory every 10 ms.
            let log = heaptag::LogConfig::new(path)
                .fingerprint_min(64 << 10)
                .interval(std::time::Duration::from_millis(10));
            if let Err(e) = log.start() {
                eprintln!("groth16_prover: no event log: {e}");
            }
        }
    }

    let admitted = Barrier::new(args.jobs as usize);
    let results: Vec<Result<JobResult, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..=args.jobs)
            .map(|job| {
                let (args, admitted) = (&args, &admitted);
                s.spawn(move || run_job(args, job, admitted))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a job panicked".into())))
            .collect()
    });
    heaptag::mark("jobs done");

    let srs_bytes = SRS.get().and_then(|p| p.as_ref().ok()).map_or(0, |p| {
        let g1 = (p.h.len() + p.l.len() + p.a.len() + p.b_g1.len()) * std::mem::size_of::<blstrs::G1Affine>();
        (g1 + p.b_g2.len() * std::mem::size_of::<blstrs::G2Affine>()) as u64
    });
    println!(
        "heaptag: groth16_prover --jobs {} --partitions {} --constraints-log {} ({} constraints, {} rounds) \
         --table-mib {} --duplicate {:?}{} in {:.1?}",
        args.jobs,
        args.partitions,
        args.constraints_log,
        1u64 << args.constraints_log,
        rounds(args.constraints_log),
        args.table_mib,
        args.duplicate,
        if args.pool_tags { " --pool-tags" } else { "" },
        started.elapsed()
    );
    println!(
        "shared: constant table {} (constants_load), parameters {} of points (srs_load)",
        bytes(table_bytes(args.table_mib)),
        bytes(srs_bytes)
    );
    let mut failed = false;
    for r in &results {
        match r {
            Ok(r) => {
                let ok = r.verified == r.proofs && r.batch_verified;
                failed |= !ok;
                println!(
                    "job {}: {}/{} proofs verify (verify_proof), batch verify (verify_proofs_batch): {}{}",
                    r.job,
                    r.verified,
                    r.proofs,
                    if r.batch_verified { "ok" } else { "FAILED" },
                    if ok { "" } else { "  <- FAILED" }
                );
            }
            Err(e) => {
                failed = true;
                println!("{e}");
            }
        }
    }
    let snap = heaptag::snapshot();
    println!(
        "process: live {} (tracked {}), allocated {}, heaptag's own memory {}",
        bytes(snap.totals.live_bytes),
        bytes(snap.totals.tracked_live_bytes),
        bytes(snap.totals.alloc_bytes),
        bytes(snap.overhead_bytes)
    );

    if let Some(log) = heaptag::finish() {
        println!(
            "\nevent log: {} ({}, {} events, {} dropped)",
            log.path.display(),
            bytes(log.bytes),
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
                eprintln!("groth16_prover: analyzer: {e}");
            }
        }
        let p = log.path.display();
        println!("\nmore: cargo run --release -p heaptag-analyzer -- {{report|peak|dups|sites|timeline|html}} {p}");
    }
    if failed {
        eprintln!("groth16_prover: a proof did not verify");
        1
    } else {
        0
    }
}
