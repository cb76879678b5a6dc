//! A seeded mutation fuzzer for the reader and the replay, on the stable
//! toolchain (issue 13): mutates the logs of a corpus (bit flips, byte
//! runs, frame lengths, deleted / duplicated / swapped frames, splices) and
//! runs every log through `LogReader` and the analyzer's model and reports
//! in this process. A panic is a crash: the input is saved to
//! `DIR/crashes/` to become a regression test.
//!
//! `cargo run --release -p heaptag-analyzer --example fuzz -- --seconds 60
//! --seed 1 [--corpus analyzer/tests/fuzz-corpus]`
//!
//! The corpus holds real v1 logs (tests/fixtures/v1), v2 logs and the
//! crafted hostile logs (`examples/hostile/gen.rs`, written on each run).

#[path = "hostile/gen.rs"]
mod gen;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use heaptag_analyzer::{report, Model};

/// xorshift64*: deterministic for a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Offsets of "HTFR" in `b` (frame starts, and fakes).
fn syncs(b: &[u8]) -> Vec<usize> {
    b.windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"HTFR")
        .map(|(i, _)| i)
        .collect()
}

fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            break;
        }
        let s = syncs(&b);
        match rng.below(9) {
            0 => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(b.len());
                let v = [0u8, 0xff, 0x7f, 0x80][rng.below(4)];
                let n = (1 + rng.below(16)).min(b.len() - i);
                b[i..i + n].iter_mut().for_each(|x| *x = v);
            }
            2 if !s.is_empty() => {
                // A frame length: flipped bit or an extreme value.
                let at = s[rng.below(s.len())] + 4;
                if at + 4 <= b.len() {
                    if rng.below(2) == 0 {
                        b[at + rng.below(4)] ^= 1 << rng.below(8);
                    } else {
                        let v = [0u32, u32::MAX, 16 << 20, (16 << 20) + 1][rng.below(4)];
                        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            3..=5 if s.len() >= 2 => {
                // Whole frames: delete, duplicate or swap two.
                let i = rng.below(s.len() - 1);
                let (a, e) = (s[i], s[i + 1]);
                let frame = b[a..e].to_vec();
                match rng.below(3) {
                    0 => {
                        b.drain(a..e);
                    }
                    1 => {
                        b.splice(e..e, frame);
                    }
                    _ if i + 2 < s.len() => {
                        let next = b[e..s[i + 2]].to_vec();
                        let mut both = next;
                        both.extend_from_slice(&frame);
                        b.splice(a..s[i + 2], both);
                    }
                    _ => {}
                }
            }
            6 => {
                b.truncate(rng.below(b.len() + 1));
            }
            7 => {
                // Splice in a piece of another log.
                let other = &corpus[rng.below(corpus.len())];
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let n = rng.below(other.len() - from + 1).min(1 << 16);
                    let at = rng.below(b.len() + 1);
                    b.splice(at..at, other[from..from + n].iter().copied());
                }
            }
            _ => {
                // A varint-sized value somewhere: huge counts, ids, sizes.
                let i = rng.below(b.len());
                let n = 10.min(b.len() - i);
                for x in &mut b[i..i + n - 1] {
                    *x = 0xff;
                }
                b[i + n - 1] = 0x01;
            }
        }
    }
    b
}

/// Everything the analyzer does with a log, in this process (no binaries
/// read: symbolization is left to the crafted-log tests).
fn analyze(path: &Path) {
    let Ok(m) = Model::load(path, true, true) else {
        return;
    };
    let models = [m];
    let _ = report::report(&models);
    let _ = report::peak(&models, 10);
    let _ = report::dups(&models);
    let _ = report::sites(&models, 10);
    let _ = report::timeline(&models, report::By::Tag);
    let _ = report::timeline(&models, report::By::Stage);
    use heaptag_analyzer::export::pprof::{profile, At};
    for at in [At::Peak, At::End, At::Time(models[0].end_ns / 2)] {
        if let Ok((p, _)) = profile(&models[0], at) {
            let _ = p.encode();
        }
    }
    // The HTML page: its chart, flame graphs (inferno) and markup.
    if let Ok(d) = heaptag_analyzer::html::data(&models) {
        let _ = heaptag_analyzer::html::render(&d, &mut std::io::sink());
    }
}

fn main() {
    let mut seconds = 60u64;
    let mut seed = 1u64;
    let mut corpus_dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz-corpus"));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().and_then(|v| v.parse().ok()).expect("--seconds N"),
            "--seed" => seed = args.next().and_then(|v| v.parse().ok()).expect("--seed N"),
            "--corpus" => corpus_dir = args.next().expect("--corpus DIR").into(),
            other => panic!("unknown argument {other}"),
        }
    }
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    let fixtures = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v1"));
    for dir in [&corpus_dir, &fixtures] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            let mut paths: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            paths.sort();
            for p in paths {
                if p.extension().is_some_and(|e| e == "htlog") {
                    corpus.push(std::fs::read(&p).expect("read corpus"));
                }
            }
        }
    }
    // The crafted logs, small variants (the big ones are in the tests).
    corpus.push(gen::overflow());
    corpus.push(gen::nested_sync(200));
    assert!(!corpus.is_empty(), "empty corpus");
    let work = std::env::temp_dir().join(format!("heaptag-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("work dir");
    let case = work.join("case.htlog");
    let crashes = corpus_dir.join("crashes");
    std::panic::set_hook(Box::new(|_| {}));
    let mut rng = Rng(seed.max(1) ^ 0x9e37_79b9_7f4a_7c15);
    let start = Instant::now();
    let (mut cases, mut bytes, mut found) = (0u64, 0u64, 0u64);
    let mut max_case_secs = 0f64;
    while start.elapsed() < Duration::from_secs(seconds) {
        let input = &corpus[rng.below(corpus.len())];
        let m = mutate(&mut rng, input, &corpus);
        std::fs::write(&case, &m).expect("write case");
        let t = Instant::now();
        let ok = std::panic::catch_unwind(|| analyze(&case)).is_ok();
        max_case_secs = max_case_secs.max(t.elapsed().as_secs_f64());
        cases += 1;
        bytes += m.len() as u64;
        if !ok {
            found += 1;
            std::fs::create_dir_all(&crashes).expect("crashes dir");
            let p = crashes.join(format!("crash-{seed}-{cases}.htlog"));
            std::fs::write(&p, &m).expect("save crash");
            eprintln!("crash: {}", p.display());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let mib = bytes as f64 / (1 << 20) as f64;
    // SAFETY: getrusage writes into the struct it is given.
    let maxrss_kib = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_maxrss
    };
    println!(
        "fuzz: seed {seed}, {cases} cases, {found} crashes, {:.1} MiB of input in {secs:.1} s \
         ({:.3} s per MiB), slowest case {max_case_secs:.3} s, max RSS {} MiB",
        mib,
        secs / mib.max(1e-9),
        maxrss_kib / 1024
    );
    let _ = std::fs::remove_dir_all(&work);
    if found > 0 {
        std::process::exit(1);
    }
}
