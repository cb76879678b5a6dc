//! A prover daemon under heaptag for minutes: thousands of proofs with fresh
//! job ids (about 35 tags each), partitions on rayon, frees on a dealloc
//! thread, the log on. Prints heaptag's own memory, the writer's cost per
//! sample, dropped events and tags in use for the first 1,000 proofs and the
//! last 1,000, and checks the last proofs' per-tag figures exactly.
//!
//! ```text
//! cargo run --release --example daemon_soak -- --proofs 20000 --pipelines 16 \
//!     --partitions 10 --duration 300 --log /tmp/daemon-soak.htlog
//! ```
//!
//! `--log PATH` (default `/tmp/heaptag-daemon-soak-%p.htlog`; `--log none`
//! runs without a log) is kept for the analyzer to read; `--stack-depth N`
//! (default 32, 0: no stacks) as `HEAPTAG_STACK_DEPTH`.

#[path = "../tests/common/soak.rs"]
mod soak;

use std::time::Duration;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn main() {
    let mut cfg = soak::Config {
        proofs: 20_000,
        pipelines: 16,
        partitions: 10,
        duration: Duration::from_secs(300),
        checked: 16,
    };
    let mut log = String::from("/tmp/heaptag-daemon-soak-%p.htlog");
    let mut stack_depth = 32;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("daemon_soak: {name} needs a value");
                std::process::exit(2)
            })
        };
        let number = |name: &str, v: String| -> u64 {
            v.parse().unwrap_or_else(|_| {
                eprintln!("daemon_soak: {name} {v}: expected a whole number");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--proofs" => cfg.proofs = number("--proofs", value("--proofs")),
            "--pipelines" => cfg.pipelines = number("--pipelines", value("--pipelines")).max(1) as usize,
            "--partitions" => cfg.partitions = number("--partitions", value("--partitions")).max(1) as u32,
            "--duration" => cfg.duration = Duration::from_secs(number("--duration", value("--duration"))),
            "--log" => log = value("--log"),
            "--stack-depth" => stack_depth = number("--stack-depth", value("--stack-depth")) as u32,
            other => {
                eprintln!("daemon_soak: unknown flag {other} (--proofs N --pipelines N --partitions N --duration SECS --log PATH|none --stack-depth N)");
                std::process::exit(2)
            }
        }
    }
    if log != "none" {
        match heaptag::LogConfig::new(&log).stack_depth(stack_depth).start() {
            Ok(p) => eprintln!("daemon_soak: log {}", p.display()),
            Err(e) => {
                eprintln!("daemon_soak: {e}");
                std::process::exit(1)
            }
        }
    }
    let o = soak::run(&cfg);
    println!(
        "daemon_soak: {} proofs, {} pipelines, {} partitions; tags in use at most {}; {} tags retired; overflow {}",
        o.proofs, cfg.pipelines, cfg.partitions, o.max_tags_in_use, o.last.to.tags_retired, o.last.to.tag_overflow
    );
    print!("{}", soak::table(&o));
    println!(
        "over the run (proofs: own memory MiB, tags in use, tags visited per sample so far, dropped events so far):"
    );
    let step = (o.points.len() / 10).max(1);
    for p in o.points.iter().step_by(step) {
        println!(
            "  {:>7}: {:6.1} MiB, {:5} tags, {:7.1} visited/sample, {} dropped",
            p.proofs,
            p.overhead_bytes as f64 / (1 << 20) as f64,
            p.tags_in_use,
            p.sample_tags_visited as f64 / p.samples.max(1) as f64,
            p.dropped_events
        );
    }
    println!(
        "exact check of the last {} proofs: {} tags, {} mismatches",
        cfg.checked,
        o.tags_checked,
        o.mismatches.len()
    );
    for m in o.mismatches.iter().take(10) {
        println!("  {m}");
    }
    if let Some(s) = heaptag::finish() {
        println!(
            "log: {} ({} bytes, {} events, {} dropped)",
            s.path.display(),
            s.bytes,
            s.events,
            s.dropped
        );
    }
    if !o.mismatches.is_empty() {
        std::process::exit(1);
    }
}
