//! The workloads on heaptag built with the `native` feature: C's malloc and
//! free (the `native/*` workloads) go through heaptag's shim to jemalloc.
//! `benches/run.py` runs it as `heaptag-native` (and `HEAPTAG=off` as
//! `heaptag-native-off`), interleaved with the others.

#[allow(dead_code, missing_docs)]
mod common;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn main() {
    let off = std::env::var("HEAPTAG").is_ok_and(|v| v == "off" || v == "0");
    common::main_with(if off { "heaptag-native-off" } else { "heaptag-native" }, true);
}
