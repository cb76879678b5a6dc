//! The workloads on heaptag (around the same jemalloc), with tags set as a
//! user would. Run with `HEAPTAG=off` for the "compiled in, switched off"
//! figure; `benches/run.sh` runs both, interleaved with the baseline.

#[allow(dead_code, missing_docs)]
mod common;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn main() {
    let off = std::env::var("HEAPTAG").is_ok_and(|v| v == "off" || v == "0");
    let variant = if off { "heaptag-off" } else { "heaptag-on" };
    common::main_with(variant, true);
    // heaptag's own memory after the run, for benches/run.py.
    let s = heaptag::snapshot();
    println!("{variant}\town_memory\tbytes\t{}\t0", s.overhead_bytes);
}
