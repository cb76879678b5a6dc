//! Peer: the workloads on the system allocator (glibc malloc).

#[allow(dead_code, missing_docs)]
mod common;

#[global_allocator]
static GLOBAL: std::alloc::System = std::alloc::System;

fn main() {
    common::main_with("system", false);
}
