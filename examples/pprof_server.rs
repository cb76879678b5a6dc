//! A daemon serving heaptag's live heap profile and metrics while it runs a
//! tagged workload:
//!
//! - `GET /debug/pprof/heap`: `heaptag::pprof::heap_profile()` (gzipped
//!   pprof, one sample per call stack and tag, labels job/stage/partition);
//! - `GET /metrics`: `heaptag::prometheus::encode` (Prometheus text format;
//!   `/metrics?job=1` adds the job label);
//! - `GET /step`: runs one more round of the workload now (`--manual` runs
//!   rounds only then; otherwise one every `--every-ms`, 500 by default);
//! - `GET /quit`: stops the server (the log, if any, is finished at exit).
//!
//! ```text
//! HEAPTAG_LOG=/tmp/daemon-%p.htlog cargo run --example pprof_server --features pprof,prometheus -- [--addr 127.0.0.1:6060] [--manual] [--every-ms 500]
//! go tool pprof -top -sample_index=inuse_space -tagfocus stage=synthesize_partition http://127.0.0.1:6060/debug/pprof/heap
//! curl -s http://127.0.0.1:6060/metrics
//! ```
//!
//! The workload: round `r` is job `r` (a prover request): in stage
//! `synthesize_partition`, each of 4 partitions builds a 1 MiB witness
//! (tracked exactly) and 100 small strings (sampled); the last 3 rounds'
//! witnesses are kept (a cache), older ones freed. Stacks appear in the heap
//! profile when heaptag's log runs (`HEAPTAG_LOG`), as heaptag captures them
//! for the log; without it every sample's frame is `(no stack)`.
//!
//! The HTTP server is `tiny_http` (a small, synchronous, maintained crate:
//! enough for two endpoints, no async runtime); it binds the address given
//! (loopback by default) and prints `listening on http://ADDR` first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// Bytes of one partition's witness.
const WITNESS: usize = 1 << 20;
/// Partitions per round.
const PARTITIONS: u32 = 4;
/// Rounds whose witnesses stay cached.
const KEEP: usize = 3;

/// What one partition of one round holds.
struct Built {
    #[allow(dead_code)]
    witness: Vec<u8>,
    #[allow(dead_code)]
    names: Vec<String>,
}

/// The workload's state: the cached rounds, newest last.
#[derive(Default)]
struct Work {
    rounds: u64,
    cache: VecDeque<Vec<Built>>,
}

#[inline(never)]
fn build_witness(round: u64, p: u32) -> Vec<u8> {
    vec![(round as u8) ^ (p as u8) | 1; WITNESS]
}

#[inline(never)]
fn build_names(round: u64, p: u32) -> Vec<String> {
    (0..100)
        .map(|i| format!("round {round} partition {p} wire {i}"))
        .collect()
}

/// One round: job `round`, 4 partitions of `synthesize_partition`.
fn step(work: &Mutex<Work>) {
    let mut w = work.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    w.rounds += 1;
    let round = w.rounds;
    let _job = heaptag::job(round);
    let _stage = heaptag::stage("synthesize_partition");
    let built = (0..PARTITIONS)
        .map(|p| {
            let _part = heaptag::partition(p);
            Built {
                witness: build_witness(round, p),
                names: build_names(round, p),
            }
        })
        .collect();
    w.cache.push_back(built);
    while w.cache.len() > KEEP {
        w.cache.pop_front();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(run(&args));
}

/// Runs the server with these arguments until `/quit`; returns the exit code.
pub fn run(args: &[String]) -> i32 {
    let mut addr = "127.0.0.1:6060".to_string();
    let mut manual = false;
    let mut every = Duration::from_millis(500);
    let mut args = args.iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--addr" => match args.next() {
                Some(a) => addr = a.clone(),
                None => return usage("--addr needs HOST:PORT"),
            },
            "--manual" => manual = true,
            "--every-ms" => match args.next().and_then(|v| v.parse().ok()) {
                Some(ms) => every = Duration::from_millis(ms),
                None => return usage("--every-ms needs a number of milliseconds"),
            },
            "--help" | "-h" => return usage(""),
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    let server = match tiny_http::Server::http(&addr) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pprof_server: cannot listen on {addr}: {e}");
            return 2;
        }
    };
    let bound = server.server_addr().to_ip().map_or(addr.clone(), |a| a.to_string());
    println!("listening on http://{bound}");
    let work = Arc::new(Mutex::new(Work::default()));
    if !manual {
        let work = Arc::clone(&work);
        std::thread::spawn(move || loop {
            step(&work);
            std::thread::sleep(every);
        });
    }
    for req in server.incoming_requests() {
        let url = req.url().to_string();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let header = |k: &str, v: &str| tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).ok();
        let res = match path {
            "/debug/pprof/heap" => {
                let body = heaptag::pprof::heap_profile();
                tiny_http::Response::from_data(body)
                    .with_header(header("Content-Type", "application/octet-stream").unwrap())
                    .with_header(header("Content-Disposition", "attachment; filename=\"heap.pb.gz\"").unwrap())
            }
            "/metrics" => {
                let options = heaptag::prometheus::Options::new().with_job(query.split('&').any(|q| q == "job=1"));
                let mut body = String::new();
                let _ = heaptag::prometheus::encode_with(&mut body, options);
                tiny_http::Response::from_data(body.into_bytes())
                    .with_header(header("Content-Type", heaptag::prometheus::CONTENT_TYPE).unwrap())
            }
            "/step" => {
                step(&work);
                let n = work.lock().map_or(0, |w| w.rounds);
                tiny_http::Response::from_data(format!("round {n}\n").into_bytes())
            }
            "/quit" => {
                let _ = req.respond(tiny_http::Response::from_string("bye\n"));
                break;
            }
            _ => tiny_http::Response::from_data(b"not found\n".to_vec()).with_status_code(404),
        };
        let _ = req.respond(res);
    }
    0
}

/// Prints the usage (after `why`, when not empty); the exit code.
fn usage(why: &str) -> i32 {
    if !why.is_empty() {
        eprintln!("pprof_server: {why}");
    }
    eprintln!("usage: pprof_server [--addr HOST:PORT] [--manual] [--every-ms N]");
    if why.is_empty() {
        0
    } else {
        2
    }
}
