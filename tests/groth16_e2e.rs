//! The Groth16 example (bellperson, CPU) end to end: each mode runs small in
//! a child process writing its own log; the proofs must verify, and the
//! analyzer's JSON gives the verdicts on the shared data.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/groth16_prover.rs"]
mod prover;

mod common;

use std::path::PathBuf;

use heaptag_analyzer::{Command, Format};
use serde_json::Value;

const JOBS: u64 = 2;
const PARTITIONS: u64 = 3;
/// 2^10 constraints: the parameters' smallest vectors (h, l) are 1023 and
/// 1020 G1 points, ~96 KiB each, over the 64 KiB tracking and fingerprint
/// thresholds.
const CONSTRAINTS_LOG: u32 = 10;
const TABLE_MIB: usize = 1;

/// What a child run left: its log, exit code and output.
struct Run {
    log: PathBuf,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs the example with `extra` arguments in a child (one log per process).
fn prover_run(test: &str, name: &str, extra: &str) -> Run {
    let log = common::temp_log(&format!("groth16-{name}"));
    let args = format!(
        "--jobs {JOBS} --partitions {PARTITIONS} --constraints-log {CONSTRAINTS_LOG} --table-mib {TABLE_MIB} \
         --log {} --quiet {extra}",
        log.display()
    );
    let out = common::child(test, &[("GROTH16_ARGS", &args)]).output().unwrap();
    Run {
        log,
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// In the child: run the example on `GROTH16_ARGS` and exit with its code.
fn child_runs_prover() {
    if !common::in_child() {
        return;
    }
    let args: Vec<String> = std::env::var("GROTH16_ARGS")
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    std::process::exit(prover::run(&args));
}

fn dups(r: &Run) -> Value {
    common::json(&Command::Dups {
        logs: vec![r.log.clone()],
        format: Format::Json,
    })["sources"][0]
        .clone()
}

fn report(r: &Run) -> Value {
    common::json(&Command::Report {
        logs: vec![r.log.clone()],
        format: Format::Json,
    })["sources"][0]
        .clone()
}

/// The run succeeded and every job says all its proofs verify, each alone
/// and as a batch.
fn all_proofs_verified(r: &Run) {
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    for job in 1..=JOBS {
        let line = format!(
            "job {job}: {PARTITIONS}/{PARTITIONS} proofs verify (verify_proof), batch verify (verify_proofs_batch): ok\n"
        );
        assert!(r.stdout.contains(&line), "{line:?} missing:\n{}", r.stdout);
    }
    assert!(!r.stdout.contains("FAILED"), "{}", r.stdout);
}

fn tags(rep: &Value) -> Vec<Value> {
    rep["tags"].as_array().unwrap().clone()
}

fn tag_named(rep: &Value, name: &str) -> Value {
    tags(rep)
        .into_iter()
        .find(|t| t["tag"] == name)
        .unwrap_or_else(|| panic!("no tag {name}: {rep}"))
}

/// Bytes of the bucket arrays ec-gpu-gen's CPU multiexp allocates for one
/// job's proofs, by hand from its source (`multiexp_cpu`): a multiexp over
/// `len` exponents uses windows of `c = ceil(ln len)` bits (3 below 32
/// exponents), one array of `2^c - 1` projective points per window, over
/// the scalar's 255 bits. Per proof (with randomization, so b_g1 too): h
/// (2^K - 1 exponents), l, a_aux, b_g1_aux, b_g2_aux (the aux variables)
/// and a_inputs, b_g1_inputs, b_g2_inputs (the 3 inputs).
fn multiexp_bucket_bytes() -> u64 {
    let buckets = |len: u64, point: usize| -> u64 {
        let c = if len < 32 { 3 } else { (len as f64).ln().ceil() as u64 };
        let windows = 255u64.div_ceil(c);
        windows * ((1 << c) - 1) * point as u64
    };
    let (g1, g2) = (
        std::mem::size_of::<blstrs::G1Projective>(),
        std::mem::size_of::<blstrs::G2Projective>(),
    );
    let aux = 2 * prover::rounds(CONSTRAINTS_LOG) as u64;
    let h = (1u64 << CONSTRAINTS_LOG) - 1;
    let per_proof = buckets(h, g1) + 3 * buckets(aux, g1) + buckets(aux, g2) + 2 * buckets(3, g1) + buckets(3, g2);
    per_proof * JOBS * PARTITIONS
}

#[test]
fn shared_once() {
    child_runs_prover();
    let r = prover_run("shared_once", "shared", "");
    all_proofs_verified(&r);
    let d = dups(&r);
    assert!(d["unverified"].is_null(), "{d}");
    for stage in [prover::CONSTANTS_STAGE, prover::SRS_STAGE] {
        let v = common::verdict(&d, stage);
        assert_eq!(
            (v["verdict"].as_str(), v["copies_made"].as_u64()),
            (Some("SHARED ONCE"), Some(0)),
            "{v}"
        );
    }

    let rep = report(&r);
    // The table is built once, under the shared tag, and held to the end:
    // its size by hand is table_len x 32 bytes.
    let table = tag_named(&rep, "stage=constants_load");
    assert_eq!(
        table["live_end_tracked_bytes"],
        prover::table_bytes(TABLE_MIB),
        "{table}"
    );
    assert_eq!(table["peak_tracked_bytes"], prover::table_bytes(TABLE_MIB), "{table}");
    // The parameters, held by the cache to the end, by hand: h has 2^K - 1
    // G1 points, l one per aux variable (2 per round); a, b_g1 and b_g2 are
    // collected in place from vectors of one point per variable (3 inputs
    // and the aux), so their blocks keep that capacity.
    let srs = tag_named(&rep, "stage=srs_load");
    let (g1, g2) = (
        std::mem::size_of::<blstrs::G1Affine>() as u64,
        std::mem::size_of::<blstrs::G2Affine>() as u64,
    );
    let aux = 2 * prover::rounds(CONSTRAINTS_LOG) as u64;
    let vars = 3 + aux;
    let expected = ((1u64 << CONSTRAINTS_LOG) - 1) * g1 + aux * g1 + 2 * vars * g1 + vars * g2;
    assert_eq!(srs["live_end_tracked_bytes"], expected, "{srs}");
    // Every partition's synthesis is charged to that partition: the a/b/c
    // vectors of 2^K 32-byte scalars (tracked: 32 KiB each at K = 10 is
    // below the threshold, so count allocated bytes, which are exact).
    for job in 1..=JOBS {
        for part in 0..PARTITIONS {
            let t = tag_named(&rep, &format!("job={job} stage=synthesize_partition partition={part}"));
            let abc = 3 * (1u64 << CONSTRAINTS_LOG) * 32;
            assert!(t["allocated_bytes"].as_u64().unwrap() >= abc, "{t}");
        }
    }
    // The multiexps' bucket arrays run on rayon workers that no tag reaches
    // (spawned from ec-gpu-gen's own pool): untagged (docs/GROTH16.md).
    let untagged = tag_named(&rep, "untagged");
    assert!(
        untagged["allocated_bytes"].as_u64().unwrap() >= multiexp_bucket_bytes(),
        "{untagged} < {}",
        multiexp_bucket_bytes()
    );
}

#[test]
fn duplicate_constants() {
    child_runs_prover();
    let r = prover_run("duplicate_constants", "dup-constants", "--duplicate constants");
    all_proofs_verified(&r);
    let d = dups(&r);
    let n = JOBS * PARTITIONS;
    let v = common::verdict(&d, prover::CONSTANTS_STAGE);
    assert_eq!(v["verdict"], "DUPLICATED", "{v}");
    assert_eq!(v["copies_made"], n, "one copy per partition of every job: {v}");
    assert_eq!(v["wasted_bytes"], n * prover::table_bytes(TABLE_MIB), "{v}");
    assert_eq!(common::verdict(&d, prover::SRS_STAGE)["verdict"], "SHARED ONCE", "{d}");
    // Each copy is charged to the partition that made it.
    let rep = report(&r);
    for job in 1..=JOBS {
        for part in 0..PARTITIONS {
            let t = tag_named(&rep, &format!("job={job} stage=constants_load partition={part}"));
            // The copy and its `Arc` (two counters and the `Vec` header).
            let arc = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Vec<blstrs::Scalar>>();
            assert_eq!(t["allocated_bytes"], prover::table_bytes(TABLE_MIB) + arc as u64, "{t}");
            assert_eq!(t["live_end_tracked_bytes"], 0, "freed after synthesis: {t}");
        }
    }
}

#[test]
fn duplicate_srs() {
    child_runs_prover();
    let r = prover_run("duplicate_srs", "dup-srs", "--duplicate srs");
    all_proofs_verified(&r);
    let d = dups(&r);
    let v = common::verdict(&d, prover::SRS_STAGE);
    assert_eq!(v["verdict"], "DUPLICATED", "{v}");
    assert!(
        v["copies"].as_u64().unwrap() > JOBS * PARTITIONS,
        "the cache and a copy per partition: {v}"
    );
    assert_eq!(
        common::verdict(&d, prover::CONSTANTS_STAGE)["verdict"],
        "SHARED ONCE",
        "{d}"
    );
}

#[test]
fn a_proof_that_does_not_verify_fails_the_run() {
    child_runs_prover();
    let r = prover_run(
        "a_proof_that_does_not_verify_fails_the_run",
        "tamper",
        "--tamper --no-log",
    );
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("partition 0: proof does NOT verify"), "{}", r.stderr);
    assert!(r.stdout.contains("FAILED"), "{}", r.stdout);
}

#[test]
fn pool_tags_name_the_rayon_workers() {
    child_runs_prover();
    let r = prover_run("pool_tags_name_the_rayon_workers", "pool-tags", "--pool-tags");
    all_proofs_verified(&r);
    let rep = report(&r);
    // The bucket arrays move from untagged to the pool's standing tag.
    let pool = tag_named(&rep, &format!("stage={}", prover::POOL_STAGE));
    let untagged = tag_named(&rep, "untagged");
    let pool_bytes = pool["allocated_bytes"].as_u64().unwrap();
    assert!(pool_bytes >= multiexp_bucket_bytes(), "{pool}");
    assert!(
        untagged["allocated_bytes"].as_u64().unwrap() < multiexp_bucket_bytes(),
        "{untagged}"
    );
}

#[test]
fn bad_arguments_are_named() {
    for (args, msg) in [
        (&["--constraints-log", "2"][..], "--constraints-log 2: expected 3 to 20"),
        (
            &["--duplicate", "x"][..],
            "--duplicate x: expected constants, srs or none",
        ),
        (&["--jobs"][..], "--jobs needs a value"),
    ] {
        let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        assert_eq!(prover::check_args(&argv), Err(msg.to_string()));
        assert_eq!(prover::run(&argv), 2, "{msg}");
    }
}
