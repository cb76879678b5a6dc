//! Issue 13, item 1: a child forked (without exec) while other threads
//! intern tags, enter guards, record external memory, name stages and
//! capture stacks never deadlocks on a lock one of those threads held at the
//! fork. Run without a log and with one, each in its own process (this test
//! binary re-run as a child).

mod common;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const FORKS: u32 = 60;
/// Far longer than a healthy child needs (it allocates a few blocks);
/// `FORK_CHILD_LIMIT_MS` overrides it.
fn child_limit() -> Duration {
    let ms = std::env::var("FORK_CHILD_LIMIT_MS").ok().and_then(|v| v.parse().ok());
    Duration::from_millis(ms.unwrap_or(10_000))
}

/// What a forked child does: a guard with a tag never seen before, external
/// memory, a new stage name, tracked and small blocks; then `_exit(0)`.
fn in_forked_child(k: u32) -> ! {
    let _job = heaptag::job(1_000_000 + u64::from(k));
    let _stage = heaptag::stage(heaptag::static_name(&format!("child-stage-{k}")));
    let ext = heaptag::external_alloc(4096, "child_external");
    for i in 0..16 {
        drop(black_box(vec![i as u8; 200_000]));
        drop(black_box(vec![i as u8; 100]));
    }
    let _ = black_box(heaptag::snapshot());
    heaptag::mark("child mark");
    drop(ext);
    // SAFETY: ends the child without running the parent's atexit handlers.
    unsafe { libc::_exit(0) }
}

/// The forking loop: 3 busy threads, `FORKS` forks; returns the number of
/// children that did not exit by themselves within `child_limit()`.
fn fork_loop() -> u32 {
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let busy: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            let next = next.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    // New tags (interning), guards, external memory, names.
                    let _g = heaptag::job(n % 2_000);
                    let _p = heaptag::partition((n % 7) as u32);
                    let ext = heaptag::external_alloc(n % 1000 + 1, "busy_external");
                    let _s = heaptag::stage(heaptag::static_name(&format!("busy-{}", n % 500)));
                    // Tracked blocks (table shards; stacks when logging).
                    drop(black_box(vec![t as u8; 70_000 + (n % 64) as usize * 8]));
                    drop(black_box(vec![t as u8; 64]));
                    if n.is_multiple_of(64) {
                        // The external-memory list and the table's size.
                        let _ = black_box(heaptag::snapshot());
                    }
                    drop(ext);
                }
            })
        })
        .collect();
    let limit = child_limit();
    let mut hung = 0;
    for k in 0..FORKS {
        // Let the busy threads get going between forks.
        while next.load(Ordering::Relaxed) < u64::from(k + 1) * 50 {
            std::thread::yield_now();
        }
        // SAFETY: the child runs only `in_forked_child`, which leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            in_forked_child(k);
        }
        assert!(pid > 0, "fork failed");
        let started = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: polls the child forked above.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "child {k}: status {status:#x}"
                );
                break;
            }
            if started.elapsed() > limit {
                // SAFETY: kills and reaps the stuck child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                hung += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for b in busy {
        b.join().unwrap();
    }
    hung
}

#[test]
fn forked_children_never_deadlock_while_other_threads_use_heaptag() {
    if common::in_child() {
        if let Ok(path) = std::env::var("FORK_TEST_LOG") {
            heaptag::LogConfig::new(path)
                .interval(Duration::from_millis(5))
                .start()
                .unwrap();
        }
        let hung = fork_loop();
        println!("HUNG {hung}/{FORKS}");
        if heaptag::finish().is_some() {
            println!("LOGGED");
        }
        return;
    }
    let log = common::temp_log("fork-busy");
    for (mode, env) in [
        ("no log", vec![]),
        ("log", vec![("FORK_TEST_LOG", log.to_str().unwrap())]),
    ] {
        let out = common::child("forked_children_never_deadlock_while_other_threads_use_heaptag", &env)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // The harness prints the test's name on the same line.
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("HUNG "))
            .map(|(_, n)| format!("HUNG {}", n.split_whitespace().next().unwrap_or("")))
            .unwrap_or_else(|| {
                panic!(
                    "{mode}: no result: {}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        eprintln!("{mode}: {line}");
        assert!(out.status.success(), "{mode}: {}", out.status);
        assert_eq!(line, format!("HUNG 0/{FORKS}"), "{mode}: children hung");
        assert_eq!(stdout.contains("LOGGED"), mode == "log", "{mode}");
    }
    let (_, r) = common::read_all(&log);
    assert!(r.ended());
}
