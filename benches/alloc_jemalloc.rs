//! Baseline: the workloads on bare tikv-jemallocator.
//!
//! `cargo bench --bench alloc_jemalloc` (full) or `cargo test --benches` (smoke).

#[allow(dead_code, missing_docs)]
mod common;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    common::main_with("jemalloc", false);
}
