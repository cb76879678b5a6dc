//! Holds N small blocks alive at once under one stage (default 2,000,000
//! blocks of 32 bytes), marks the peak, then frees them: a log with a large
//! live set, for measuring the analyzer's memory (docs/PERFORMANCE.md, "A
//! live block in 40 bytes").
//!
//! ```sh
//! HEAPTAG_THRESHOLD=0 HEAPTAG_LOG=/tmp/live2m.htlog cargo run --release --example live_blocks -- 2000000
//! /usr/bin/time -v target/release/heaptag report /tmp/live2m.htlog > /dev/null
//! ```

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn main() {
    let n: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 2_000_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("live_blocks: the block count must be a whole number: {e}");
            std::process::exit(2);
        }
    };
    let _stage = heaptag::stage("hold");
    let held: Vec<Box<[u8; 32]>> = (0..n).map(|i| Box::new([i as u8; 32])).collect();
    heaptag::mark("held");
    std::hint::black_box(&held);
    drop(held);
    heaptag::finish();
}
