//! 8 threads logging at once: every event arrives, in order per thread, and
//! every free matches an allocation of the same block.

mod common;

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use heaptag::Tag;
use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const THREADS: u32 = 8;
const ROUNDS: u64 = 3000;

#[test]
fn eight_threads_every_event_in_order() {
    let path = common::temp_log("concurrent");
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(5))
        .buffer_events(1 << 16)
        .stack_depth(8)
        .start()
        .unwrap();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let _g = Tag::new(Some(9), Some("concurrent"), Some(t)).enter();
                for i in 0..ROUNDS {
                    // The size encodes the round, so order can be checked.
                    let v = black_box(vec![t as u8; 65_536 + i as usize]);
                    drop(v);
                    if i % 256 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let summary = heaptag::finish().unwrap();
    assert_eq!(summary.dropped, 0, "the buffer is big enough for this test");

    let (recs, r) = common::read_all(&path);
    assert!(r.problems().is_empty() && r.ended());
    let tags = common::tag_defs(&recs);
    let part_of: HashMap<u32, u32> = tags
        .iter()
        .filter(|(_, v)| v.1.as_deref() == Some("concurrent"))
        .map(|(id, v)| (*id, v.2.unwrap()))
        .collect();
    assert_eq!(part_of.len(), THREADS as usize);

    // Replay: each free must find a live allocation of the same address.
    let mut live: HashMap<u64, (u32, u64)> = HashMap::new();
    let mut next_round = vec![0u64; THREADS as usize];
    let mut frees = vec![0u64; THREADS as usize];
    for rec in &recs {
        match rec {
            Record::Alloc { tag, addr, size, .. } => {
                if let Some(&p) = part_of.get(tag) {
                    let round = size - 65_536;
                    assert_eq!(
                        round, next_round[p as usize],
                        "thread {p}: allocations in program order"
                    );
                    next_round[p as usize] += 1;
                    assert!(
                        live.insert(*addr, (p, *size)).is_none(),
                        "address {addr:#x} allocated twice"
                    );
                }
            }
            Record::Free { addr, size, .. } => {
                if let Some((p, s)) = live.remove(addr) {
                    assert_eq!(s, *size);
                    frees[p as usize] += 1;
                }
            }
            _ => {}
        }
    }
    assert_eq!(next_round, vec![ROUNDS; THREADS as usize], "every allocation arrived");
    assert_eq!(
        frees,
        vec![ROUNDS; THREADS as usize],
        "every free arrived after its allocation"
    );
}
