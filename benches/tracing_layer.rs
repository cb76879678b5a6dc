//! Cost of heaptag's tracing layer per span enter + exit, against the same
//! registry without it. `cargo bench --features integrations --bench tracing_layer`.

use std::hint::black_box;
use std::time::Instant;

use tracing_subscriber::prelude::*;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

fn per_enter(n: u64) -> f64 {
    let span = tracing::info_span!("synthesize_partition", job_id = 7u64, partition = 3u32);
    let start = Instant::now();
    for _ in 0..n {
        span.in_scope(|| black_box(()));
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n = if full { 5_000_000 } else { 100_000 };
    let plain = tracing_subscriber::registry();
    let bare = tracing::subscriber::with_default(plain, || per_enter(n));
    let layered = tracing_subscriber::registry()
        .with(heaptag::tracing::HeaptagLayer::new().stage_spans(["synthesize_partition"]));
    let with = tracing::subscriber::with_default(layered, || per_enter(n));
    println!(
        "span enter+exit: registry {bare:.1} ns, registry + HeaptagLayer {with:.1} ns (+{:.1} ns)",
        with - bare
    );
}
