//! Workloads shared by the bench binaries. Each binary installs its own global
//! allocator and calls `main_with(variant, tags)`; `benches/run.sh` runs the
//! binaries interleaved and turns their lines into ratios.
//!
//! Output, one line per measurement (tab-separated):
//! `variant  workload  param  ns_per_op  wall_ms`

use std::alloc::{alloc, dealloc, Layout};
use std::hint::black_box;
use std::sync::mpsc;
use std::time::Instant;

/// Options from the command line.
pub struct Opts {
    /// Full run (`cargo bench` passes `--bench`); otherwise a smoke run.
    pub full: bool,
    /// Only workloads whose name contains this.
    pub filter: Option<String>,
    /// Scale factor for the pipeline workload.
    pub scale: usize,
    /// Divides the iteration counts of the micro workloads (`BENCH_DIV`):
    /// peers that cost microseconds per call (dhat) run fewer iterations;
    /// results are per operation, so they stay comparable.
    pub div: usize,
}

impl Opts {
    pub fn from_args() -> Opts {
        let mut o = Opts {
            full: false,
            filter: None,
            scale: 1,
            div: std::env::var("BENCH_DIV")
                .ok()
                .and_then(|d| d.parse().ok())
                .unwrap_or(1)
                .max(1),
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--bench" => o.full = true,
                "--scale" => o.scale = args.next().and_then(|s| s.parse().ok()).unwrap_or(1),
                s if s.starts_with("--") => {}
                s => o.filter = Some(s.to_owned()),
            }
        }
        o
    }

    fn wants(&self, name: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| name.contains(f))
    }
}

/// C's `malloc` + `free` pairs of one size on `threads` threads, ns per
/// pair: through whatever serves C's `malloc` in this binary (glibc, or
/// heaptag's shim with the `native` feature) when `bare_jemalloc` is false,
/// else tikv-jemalloc-sys's prefixed `malloc`/`free` called directly (bare
/// jemalloc, no shim: the baseline of the native figures).
pub fn c_pairs(size: usize, threads: usize, iters: usize, bare_jemalloc: bool, tags: bool) -> f64 {
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let _tag = tags.then(|| heaptag::partition(1));
                for i in 0..iters {
                    // SAFETY: C's malloc/free (or jemalloc's), each block
                    // written once and freed once by the same family.
                    unsafe {
                        let p = if bare_jemalloc {
                            tikv_jemalloc_sys::malloc(size)
                        } else {
                            libc::malloc(size)
                        }
                        .cast::<u8>();
                        if p.is_null() {
                            std::process::abort();
                        }
                        *p = i as u8;
                        black_box(p);
                        if bare_jemalloc {
                            tikv_jemalloc_sys::free(p.cast())
                        } else {
                            libc::free(p.cast())
                        }
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

/// Pins the calling thread to the CPU it is running on, so that a
/// single-threaded measurement is not migrated between cores (a migration
/// costs it cold caches mid-run); false when the kernel refused.
fn pin_to_current_cpu() -> bool {
    // SAFETY: sched_getcpu has no preconditions; `set` is a zeroed cpu_set_t
    // (a valid empty set) that CPU_SET fills within its bounds (the CPU
    // number is checked against the set's size), and sched_setaffinity only
    // reads it.
    unsafe {
        let cpu = libc::sched_getcpu();
        if cpu < 0 || cpu as usize >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return false;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Repetitions of each small-pair measurement (`pairs_median`).
pub const PAIR_REPS: usize = 5;

/// [`pairs`] run `reps` times; the median ns per pair. A small pair takes a
/// few ns, so one run of a few million pairs lasts tens of ms, of the order of
/// a scheduler time slice on a shared machine: one preempted run would move
/// a single measurement by 10-20%, where it moves the median of several
/// not at all. Every repetition does the same work as a single run would, so
/// the figure is the same loop's cost, not a best case.
pub fn pairs_median(size: usize, threads: usize, iters: usize, reps: usize) -> f64 {
    let mut v: Vec<f64> = (0..reps.max(1)).map(|_| pairs(size, threads, iters)).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Allocation + free pairs of one size on `threads` threads; ns per pair
/// (per thread: wall time / pairs done by one thread). A single thread is
/// pinned to the CPU it starts on (`pin_to_current_cpu`).
pub fn pairs(size: usize, threads: usize, iters: usize) -> f64 {
    let layout = Layout::from_size_align(size, 8).unwrap();
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                if threads == 1 {
                    pin_to_current_cpu();
                }
                for i in 0..iters {
                    // SAFETY: non-zero size; the block is freed with its layout.
                    unsafe {
                        let p = alloc(layout);
                        if p.is_null() {
                            std::process::abort();
                        }
                        *p = i as u8;
                        black_box(p);
                        dealloc(p, layout);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

/// Small objects held in a batch then freed: the churn of witness generation.
pub fn batch(size: usize, threads: usize, batch: usize, rounds: usize) -> f64 {
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut v: Vec<Box<[u8]>> = Vec::with_capacity(batch);
                for r in 0..rounds {
                    for i in 0..batch {
                        v.push(vec![(t + r + i) as u8; size].into_boxed_slice());
                    }
                    black_box(&v);
                    v.clear();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    start.elapsed().as_nanos() as f64 / (batch * rounds) as f64
}

/// A scaled-down prover partition pipeline: partitions on worker threads,
/// each with many small objects, a few large buffers (1-64 MiB) of which a
/// page per 4 KiB is touched, Vecs grown by realloc, and the large buffers
/// freed on a separate dealloc thread. Returns total wall ns.
pub fn pipeline(tags: bool, partitions: u32, scale: usize) -> f64 {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let dealloc_thread = std::thread::spawn(move || {
        let _s = tags.then(|| heaptag::stage("dealloc"));
        for b in rx {
            drop(black_box(b));
        }
    });
    let start = Instant::now();
    let workers: Vec<_> = (0..2u32)
        .map(|w| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _j = tags.then(|| heaptag::job(1));
                for p in (w..partitions).step_by(2) {
                    let _p = tags.then(|| heaptag::partition(p));
                    partition(tags, p, scale, &tx);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    drop(tx);
    dealloc_thread.join().unwrap();
    start.elapsed().as_nanos() as f64
}

fn touch(v: &mut [u8]) {
    for i in (0..v.len()).step_by(4096) {
        v[i] = 1;
    }
}

fn partition(tags: bool, p: u32, scale: usize, tx: &mpsc::Sender<Vec<u8>>) {
    // Witness generation: many small objects, grown vectors.
    let witness = {
        let _s = tags.then(|| heaptag::stage("synthesize_partition"));
        let mut nodes: Vec<Box<[u64; 4]>> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for i in 0..(200_000 * scale) {
            nodes.push(Box::new([i as u64; 4]));
            if i % 8 == 0 {
                names.push(format!("var_{p}_{i}"));
            }
        }
        let mut aux: Vec<u64> = Vec::new();
        for i in 0..(1_000_000 * scale) {
            aux.push(i as u64);
        }
        black_box(&names);
        (nodes, aux)
    };
    // Large a/b/c buffers, then the simulated GPU stage on them.
    let _s = tags.then(|| heaptag::stage("gpu_prove"));
    let mut bufs: Vec<Vec<u8>> = [1usize, 4, 16, 64]
        .iter()
        .map(|mib| vec![0u8; (mib << 20) * scale])
        .collect();
    for b in &mut bufs {
        touch(b);
    }
    let mut scratch: Vec<Box<[u8]>> = Vec::new();
    for i in 0..(50_000 * scale) {
        scratch.push(vec![i as u8; 32 + i % 200].into_boxed_slice());
        if scratch.len() > 1000 {
            scratch.clear();
        }
    }
    drop(witness);
    // Cross-thread frees of the big buffers.
    for b in bufs {
        let _ = tx.send(b);
    }
}

/// Runs the workloads the options select and prints one line per result.
pub fn main_with(variant: &str, tags: bool) {
    let o = Opts::from_args();
    let k = if o.full { 1 } else { 20 } * o.div; // smoke runs do 1/20th of the work
    let out = |workload: &str, param: String, ns: f64, wall_ns: f64| {
        println!("{variant}\t{workload}\t{param}\t{ns:.2}\t{:.1}", wall_ns / 1e6);
    };
    // BENCH_SIZE=N: only pairs of N bytes, any N (for instruction counts
    // per pair under callgrind, see docs/PERFORMANCE.md, or a profile of one
    // size).
    let only_size: Option<usize> = std::env::var("BENCH_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0);
    let sizes = match only_size {
        Some(n) => vec![n],
        None => vec![16usize, 64, 256, 1024, 4096, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
    };
    for threads in [1usize, 2] {
        for &size in &sizes {
            let name = format!("pairs/{threads}t");
            if !o.wants(&name) {
                continue;
            }
            // Small pairs: the median of PAIR_REPS runs of 4 M pairs (see
            // `pairs_median`); large ones take ~250 ns a pair, 50 ms a run.
            let (iters, reps) = if size >= 64 << 10 {
                (200_000, 1)
            } else {
                (4_000_000, PAIR_REPS)
            };
            let iters = (iters / k).max(100);
            let ns = pairs_median(size, threads, iters, reps);
            out(&name, size.to_string(), ns, ns * (iters * reps) as f64);
        }
    }
    for threads in [1usize, 2] {
        let name = format!("batch/{threads}t");
        if o.wants(&name) {
            let rounds = (200 / k).max(1);
            let ns = batch(48, threads, 10_000, rounds);
            out(&name, "48".into(), ns, ns * (10_000 * rounds) as f64);
        }
    }
    if o.wants("realloc") {
        // A Vec grown to 64 MiB by appending 4 KiB at a time: realloc growth,
        // in place where the allocator can.
        let rounds = if o.full { 10 } else { 2 };
        let chunk = [7u8; 4096];
        let start = Instant::now();
        for _ in 0..rounds {
            let mut v: Vec<u8> = Vec::new();
            while v.len() < 64 << 20 {
                v.extend_from_slice(&chunk);
            }
            black_box(&v);
        }
        let ns = start.elapsed().as_nanos() as f64;
        out("realloc", "64MiB".into(), ns / rounds as f64, ns);
    }
    if o.wants("big") {
        // 64 MiB written then freed: what a log pays per large block
        // (an event each way, a fingerprint at free).
        let rounds = if o.full { 40 } else { 4 };
        let mut free_ns = 0.0;
        let start = Instant::now();
        for i in 0..rounds {
            // (never 0: a zeroed block comes untouched from the kernel, and
            // its fingerprint would pay the page faults the free's figure
            // leaves out)
            let v = black_box(vec![i as u8 + 1; 64 << 20]);
            let t = Instant::now();
            drop(v);
            free_ns += t.elapsed().as_nanos() as f64;
        }
        let ns = start.elapsed().as_nanos() as f64;
        out("big", "64MiB".into(), ns / rounds as f64, ns);
        // The free alone (its event, and with the log its fingerprint):
        // without the page faults and the memset that make most of a
        // round, a full fingerprint's cost stands out of the noise.
        out("big", "64MiB free".into(), free_ns / rounds as f64, free_ns);
        // The floor of any full-content hash on this machine: one plain
        // read of a block just written as the rounds above write theirs.
        let reads = if o.full { 10 } else { 2 };
        let mut read_ns = 0.0;
        for i in 0..reads {
            let v = black_box(vec![i as u8 + 1; 64 << 20]);
            let t = Instant::now();
            let sum = v
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
                .fold(0u64, u64::wrapping_add);
            read_ns += t.elapsed().as_nanos() as f64;
            black_box(sum);
        }
        out("big", "64MiB read".into(), read_ns / reads as f64, read_ns);
    }
    // C's malloc/free (the `native` feature's cost): through this binary's
    // C malloc, and bare prefixed jemalloc in the same process.
    for threads in [1usize, 2] {
        for size in [64usize, 4096, 256 << 10] {
            for (name, bare) in [
                (format!("native/{threads}t"), false),
                (format!("native-je/{threads}t"), true),
            ] {
                if !o.wants(&name) {
                    continue;
                }
                let iters = ((if size >= 64 << 10 { 200_000 } else { 5_000_000 }) / k).max(100);
                let ns = c_pairs(size, threads, iters, bare, tags);
                out(&name, size.to_string(), ns, ns * iters as f64);
            }
        }
    }
    if o.wants("pipeline") {
        let partitions = if o.full { 10 } else { 2 };
        let ns = pipeline(tags, partitions, o.scale);
        out("pipeline", format!("{partitions}p"), ns, ns);
    }
}
