//! A small block sampled without the log, grown past the threshold by
//! realloc, becomes a tracked block that keeps the small block's birth time:
//! `tracked_blocks()` must show that time, not 0 ("allocated at start-up").
//! Every small block is sampled here (`sample_rate(1)`).

use std::hint::black_box;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new().sample_rate(1);

#[test]
fn a_sampled_block_grown_into_a_tracked_one_gets_the_realloc_time() {
    // The coarse clock moves at each timer tick (1-10 ms): after this a
    // birth time is past heaptag's start, whatever the load.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut v: Vec<u8> = Vec::with_capacity(1000);
    v.push(1);
    v.reserve_exact(4 << 20);
    let addr = black_box(v.as_ptr()) as usize;
    let b = heaptag::tracked_blocks()
        .into_iter()
        .find(|b| b.addr == addr)
        .expect("the grown block is tracked");
    assert!(b.time_ns > 0, "the grown block's birth time is 0: {b:?}");
    drop(black_box(v));
}
