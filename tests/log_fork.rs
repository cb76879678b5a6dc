//! A forked child never writes into the parent's log, and can allocate
//! tracked blocks even when another thread held a table shard at the fork.
//! (Its own file: fork with as few threads as possible.) The two tests run
//! one at a time: the log is the process's, so the second test's busy
//! threads, run alongside, put their blocks into the first one's log (seen:
//! up to 1,937 of them) and could fill its queue.

mod common;

use std::hint::black_box;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// Held by each test for its whole run (see the module docs).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn a_forked_child_never_writes_into_the_parents_log() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let path = common::temp_log("fork");
    heaptag::LogConfig::new(&path)
        .interval(Duration::from_millis(5))
        .start()
        .unwrap();
    const MARK_SIZE: usize = 777_777;
    // SAFETY: the child only allocates, frees and exits (through exit(3), so
    // atexit handlers, including heaptag's, run in the child too).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        for _ in 0..50 {
            drop(black_box(vec![1u8; MARK_SIZE]));
        }
        heaptag::mark("child mark");
        // SAFETY: ends the child.
        unsafe { libc::exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    let parent_block = black_box(vec![2u8; MARK_SIZE + 1]);
    heaptag::finish().unwrap();
    let (recs, r) = common::read_all(&path);
    assert!(r.problems().is_empty(), "{:?}", r.problems());
    assert!(r.ended());
    // A dropped event could be the parent's block looked for below.
    let dropped = recs.iter().find_map(|r| match r {
        Record::End { dropped, .. } => Some(*dropped),
        _ => None,
    });
    assert_eq!(dropped, Some(0), "events dropped at the full queue");
    assert!(!recs
        .iter()
        .any(|r| matches!(r, Record::Alloc { size, .. } if *size == MARK_SIZE as u64)));
    assert!(!recs
        .iter()
        .any(|r| matches!(r, Record::Mark { label, .. } if label == "child mark")));
    assert!(recs
        .iter()
        .any(|r| matches!(r, Record::Alloc { size, .. } if *size == MARK_SIZE as u64 + 1)));
    assert_eq!(recs.iter().filter(|r| matches!(r, Record::End { .. })).count(), 1);
    drop(parent_block);
}

#[test]
fn forking_while_other_threads_allocate_tracked_blocks_never_deadlocks_the_child() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    drop(black_box(vec![3u8; 100_000]));
                }
            })
        })
        .collect();
    for _ in 0..100 {
        // SAFETY: the child allocates a tracked block (taking a table shard)
        // and leaves with _exit; heaptag's atfork handlers released every
        // shard in it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            for _ in 0..64 {
                drop(black_box(vec![4u8; 200_000]));
            }
            // SAFETY: ends the child without running the parent's handlers.
            unsafe { libc::_exit(0) };
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut status = 0;
        loop {
            // SAFETY: polls the child forked above.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if std::time::Instant::now() > deadline {
                // SAFETY: kills the stuck child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the forked child deadlocked");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    stop.store(true, Ordering::Relaxed);
    for b in busy {
        b.join().unwrap();
    }
}
