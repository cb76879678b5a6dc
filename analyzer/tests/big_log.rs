//! Writes a big synthetic log for measuring the analyzer (docs/PERFORMANCE.md):
//! `HEAPTAG_BIG_LOG=/tmp/big.htlog HEAPTAG_BIG_EVENTS=4000000 cargo test -p
//! heaptag-analyzer --test big_log -- --ignored`. 64 tags (8 jobs x 8
//! partitions) allocating and freeing tracked blocks from 16 stacks, one
//! sampled small block in 8, a memory sample (RSS, counters) every 10,000
//! events.

mod common;

use common::{LogBuilder, MIB};
use heaptag_format::{Record, TagCount};

#[test]
#[ignore = "writes a big log for measurements; run with --ignored"]
fn write_big_log() {
    let Ok(path) = std::env::var("HEAPTAG_BIG_LOG") else {
        eprintln!("set HEAPTAG_BIG_LOG to the log to write");
        return;
    };
    let events: u64 = std::env::var("HEAPTAG_BIG_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_000_000);
    let mut b = LogBuilder::new();
    for id in 1..=64u32 {
        let stage = if id % 2 == 0 {
            "synthesize_partition"
        } else {
            "gpu_prove"
        };
        b.tag(id, Some(u64::from(id / 8)), Some(stage), Some(id % 8));
    }
    for s in 1..=16u32 {
        b.rec(Record::StackDef {
            id: s,
            frames: vec![0x5500_0100, 0x5500_1000 + u64::from(s) * 0x100, 0x5500_1000],
        });
    }
    let mut alloc = [0u64; 65];
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut rss = 100 * MIB;
    for i in 0..events {
        let t = i * 1_000;
        let tag = (i % 64) as u32 + 1;
        if i % 3 == 2 && !live.is_empty() {
            let (addr, size) = live.swap_remove((i as usize * 7919) % live.len());
            b.free(t, addr, size);
        } else if i % 8 == 5 {
            b.rec(Record::SampleAlloc {
                time_ns: t,
                thread: 1,
                tag,
                stack: (i % 16) as u32 + 1,
                addr: 0x7000_0000_0000 + i * 64,
                size: 64,
                weight: 524_288,
            });
        } else {
            let size = 65_536 * (1 + i % 32);
            let addr = 0x1000_0000_0000 + i * 0x10_0000;
            b.alloc(t, tag, (i % 16) as u32 + 1, addr, size);
            alloc[tag as usize] += size;
            live.push((addr, size));
        }
        if i % 10_000 == 9_999 {
            rss += MIB;
            b.rec(Record::Rss {
                time_ns: t,
                vm_rss: rss,
                vm_hwm: rss,
                rss_anon: rss,
                rss_file: 0,
            })
            .rec(Record::Counters {
                time_ns: t,
                tags: (1..=64u32)
                    .map(|tag| TagCount {
                        tag,
                        alloc_bytes: alloc[tag as usize],
                        alloc_count: 1,
                        ..TagCount::default()
                    })
                    .collect(),
            });
            b.flush();
        }
    }
    b.rec(Record::End {
        time_ns: events * 1_000,
        dropped: 0,
    });
    b.write(std::path::Path::new(&path));
}
