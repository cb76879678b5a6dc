//! Writes a synthetic heaptag log of N allocator events, for measuring the
//! analyzer's throughput: `cargo run --release -p heaptag-analyzer --example
//! synth_log -- /tmp/big.htlog 20000000`, then time `heaptag report` on it.
//!
//! Shape: 64 tags, 256 stacks, ~4,000 tracked blocks alive at a time
//! (64 KiB-8 MiB), alloc/free pairs with ~10% sampled small blocks, a memory
//! sample every 10,000 events (`--sample-every N` to change it),
//! fingerprints at free for blocks >= 1 MiB.

use std::io::Write;

use heaptag_format::{Fill, FpMeta, FpWhen, FrameEncoder, Header, LogSettings, Record};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: synth_log PATH EVENTS");
    let events: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(1_000_000);
    // `--sample-every N`: a memory sample every N events (default 10,000;
    // 20 gives a day-long run's 864,000 samples in 17 M events).
    let mut sample_every: u64 = 10_000;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--sample-every" => {
                sample_every = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .expect("--sample-every N: N > 0")
            }
            other => panic!("unknown argument {other:?} (usage: synth_log PATH EVENTS [--sample-every N])"),
        }
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    let mut head = Vec::new();
    Header {
        version: heaptag_format::VERSION,
        pid: 1,
        exe: "/synthetic".into(),
        heaptag_version: "synthetic".into(),
        settings: LogSettings {
            threshold: 65536,
            sample_rate: 524288,
            interval_ns: 100_000_000,
            fingerprint_min: 1 << 20,
            stack_depth: 32,
            buffer_events: 32768,
            ..LogSettings::default()
        },
        ..Header::default()
    }
    .encode(&mut head);
    out.write_all(&head).unwrap();

    // Frame 0 first, as an allocator writes (its reserve frame).
    let mut enc = FrameEncoder::new(Vec::new(), 0);
    let put = |r: Record, enc: &mut FrameEncoder<Vec<u8>>, out: &mut std::io::BufWriter<std::fs::File>| {
        enc.push(r.borrowed());
        if enc.len() > 1 << 20 {
            let mut frame = Vec::new();
            enc.finish(&mut frame);
            out.write_all(&frame).unwrap();
        }
    };
    for id in 0..64u32 {
        put(
            Record::TagDef {
                id,
                job: Some(u64::from(id / 16)),
                stage: Some(
                    ["pce_load", "synthesize_partition", "gpu_prove", "proof_assembly"][id as usize % 4].into(),
                ),
                partition: Some(id % 10),
            },
            &mut enc,
            &mut out,
        );
    }
    for id in 1..=256u32 {
        let frames = (0..12)
            .map(|k| 0x5500_0000 + u64::from(id) * 0x100 + k * 0x10_0000)
            .collect();
        put(Record::StackDef { id, frames }, &mut enc, &mut out);
    }
    let mut x: u64 = 0x1234_5678;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    const SLOTS: usize = 4096;
    let mut live: Vec<Option<(u64, u64)>> = vec![None; SLOTS];
    let mut t = 0u64;
    let mut n = 0u64;
    while n < events {
        t += 1000 + rnd() % 1000;
        let slot = (rnd() as usize) % SLOTS;
        let thread = (rnd() % 8) as u32;
        if let Some((addr, size)) = live[slot].take() {
            if size >= 1 << 20 {
                put(
                    Record::Fingerprint {
                        time_ns: t,
                        addr,
                        size,
                        hash: rnd(),
                        meta: FpMeta {
                            fill: Fill::Mixed,
                            full: false,
                            when: FpWhen::Free,
                        },
                    },
                    &mut enc,
                    &mut out,
                );
            }
            put(
                Record::Free {
                    time_ns: t,
                    thread,
                    addr,
                    size,
                },
                &mut enc,
                &mut out,
            );
        } else if rnd() % 10 == 0 {
            let addr = 0x7f00_0000_0000 + (slot as u64) * 0x1000_0000 + 0x10;
            put(
                Record::SampleAlloc {
                    time_ns: t,
                    thread,
                    tag: (rnd() % 64) as u32,
                    stack: (rnd() % 256) as u32 + 1,
                    addr,
                    size: 64,
                    weight: 524_320,
                },
                &mut enc,
                &mut out,
            );
            put(
                Record::SampleFree {
                    time_ns: t + 10,
                    thread,
                    addr,
                    size: 64,
                },
                &mut enc,
                &mut out,
            );
            n += 1;
        } else {
            let addr = 0x7f00_0000_0000 + (slot as u64) * 0x1000_0000;
            let size = 65536 << (rnd() % 8);
            put(
                Record::Alloc {
                    time_ns: t,
                    thread,
                    tag: (rnd() % 64) as u32,
                    stack: (rnd() % 256) as u32 + 1,
                    addr,
                    size,
                },
                &mut enc,
                &mut out,
            );
            live[slot] = Some((addr, size));
        }
        n += 1;
        if n.is_multiple_of(sample_every) {
            put(
                Record::Rss {
                    time_ns: t,
                    vm_rss: 8 << 30,
                    vm_hwm: 8 << 30,
                    rss_anon: 7 << 30,
                    rss_file: 1 << 30,
                },
                &mut enc,
                &mut out,
            );
        }
    }
    put(Record::End { time_ns: t, dropped: 0 }, &mut enc, &mut out);
    let mut frame = Vec::new();
    enc.finish(&mut frame);
    out.write_all(&frame).unwrap();
    out.flush().unwrap();
    eprintln!("{path}: {events} events");
}
