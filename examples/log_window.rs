//! A long-lived process that writes an event log around each benchmark only:
//! `LogConfig::start` before it, `heaptag::finish` after it (an end record,
//! the file closed), and a new log for the next one. Between benchmarks
//! nothing is logged.
//!
//! ```sh
//! cargo run --release --example log_window -- /tmp/windows
//! heaptag report /tmp/windows/bench-1.htlog
//! ```
//!
//! `tests/log_start_stop.rs` runs it and reads the logs back.

use std::hint::black_box;
use std::path::Path;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// Work the service does between benchmarks (not logged).
fn serve_requests() -> usize {
    let _stage = heaptag::stage("serve");
    (0..50).map(|i| black_box(vec![i as u8; 100_000]).len()).sum()
}

/// One benchmark: a few large buffers under the benchmark's tags.
fn benchmark(round: u64) -> usize {
    let _job = heaptag::job(round);
    let _stage = heaptag::stage("bench");
    let bufs: Vec<Vec<u8>> = (0..8).map(|i| black_box(vec![i as u8; 1 << 20])).collect();
    heaptag::mark("bench peak");
    bufs.iter().map(Vec::len).sum()
}

/// Runs `rounds` benchmarks in this process, each in its own log
/// `dir/bench-N.htlog`; returns what each `finish()` reported.
pub fn run(dir: &Path, rounds: u64) -> Result<Vec<heaptag::LogSummary>, heaptag::LogError> {
    // Memory the service holds all along, allocated before any log.
    let cache = black_box(vec![7u8; 4 << 20]);
    let mut logs = Vec::new();
    for round in 1..=rounds {
        serve_requests();
        heaptag::LogConfig::new(dir.join(format!("bench-{round}.htlog"))).start()?;
        benchmark(round);
        // The end record, the file closed; the next start opens a new log.
        logs.extend(heaptag::finish());
    }
    serve_requests();
    drop(cache);
    Ok(logs)
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "log_window".into());
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("log_window: cannot create {dir}: {e}");
        std::process::exit(2);
    }
    match run(Path::new(&dir), 3) {
        Ok(logs) => {
            for l in logs {
                println!(
                    "{}: {} events, {} bytes, {} dropped, end record: {}",
                    l.path.display(),
                    l.events,
                    l.bytes,
                    l.dropped,
                    l.ended
                );
            }
        }
        Err(e) => {
            eprintln!("log_window: {e}");
            std::process::exit(1);
        }
    }
}
