//! The workloads on heaptag (around the same jemalloc), with tags set as a
//! user would. Run with `HEAPTAG=off` for the "compiled in, switched off"
//! figure; `benches/run.sh` runs both, interleaved with the baseline.

#[allow(dead_code, missing_docs)]
mod common;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn main() {
    let off = std::env::var("HEAPTAG").is_ok_and(|v| v == "off" || v == "0");
    // HEAPTAG_LOG itself is gone from the environment once read.
    let logging = heaptag::log_path().is_some();
    let variant = match (off, logging) {
        (true, _) => "heaptag-off",
        (false, true) => "heaptag-log",
        (false, false) => "heaptag-on",
    };
    common::main_with(variant, true);
    // heaptag's own memory after the run, for benches/run.py.
    let s = heaptag::snapshot();
    println!("{variant}\town_memory\tbytes\t{}\t0", s.overhead_bytes);
    if let Some(log) = heaptag::finish() {
        let per_event = log.bytes as f64 / log.events.max(1) as f64;
        println!(
            "{variant}\tlog_bytes_per_event\t{}\t{per_event:.2}\t{}",
            log.events, log.dropped
        );
    }
}
