//! Start-up, in order, in one place.
//!
//! heaptag starts in two steps, each triggered from exactly one place:
//!
//! 1. [`tracking`], at the first allocation (from `Alloc`'s not-yet-started
//!    path in `global.rs`), on the allocating thread, before the block is
//!    counted:
//!    1. read the settings: the [`Alloc`](crate::Alloc) builder's defaults,
//!       overridden by the `HEAPTAG*` environment (`config.rs`);
//!    2. pick the sampling salt (`HEAPTAG_SEED`, or one per run);
//!    3. store the settings the hot path reads;
//!    4. take the clock's origin (record times are relative to it);
//!    5. intern the untagged tag as id 0;
//!    6. when tracking is on, install the fork handlers (below);
//!    7. publish the mode (`ON` or `OFF`): from here on the hot path runs.
//!
//!    Nothing here may allocate through the global allocator (it is the
//!    allocator starting): settings are read with `getenv`, the tag table
//!    lives on the internal heap. Allocations of other threads meanwhile see
//!    the mode `INITIALIZING` and are counted, untagged, but not recorded.
//! 2. [`log_from_env`], a constructor that runs before `main`: when
//!    `HEAPTAG_LOG` is set, it makes the first allocation happen (step 1),
//!    reads the `HEAPTAG_LOG*` environment, removes `HEAPTAG_LOG` from it
//!    (unless `HEAPTAG_LOG_INHERIT=1`: programs this one starts must not log
//!    into its file), then starts the log writer. A program may instead
//!    start the log itself with [`LogConfig::start`](crate::LogConfig::start).
//!
//! # Fork
//!
//! A child forked without exec has one thread; every lock held by another
//! thread at the fork stays locked in it forever. So the prepare handler takes
//! every lock a child can need, in this fixed order, and the parent and child
//! handlers release them in reverse:
//!
//! 1. stage names (`tag.rs`, `static_name`);
//! 2. external memory held (`held.rs`);
//! 3. tag interning (`tag.rs`);
//! 4. the stack table (`log/stacks.rs`);
//! 5. the side table's shards, in index order (`table.rs`).
//!
//! Deadlock-free because no holder of one of these locks takes another one or
//! calls the global allocator (their memory comes from the internal heap,
//! whose `malloc` locks glibc takes after the prepare handlers): the prepare
//! handler only ever waits for critical sections that finish by themselves.
//! Taking them in one order anyway keeps it so if that ever changes.
//!
//! Left out on purpose: the log writer's state (`WRITER`, `SIDE`). Its holder
//! (the writer thread) allocates and does I/O for a whole cycle; the child
//! handler turns the child's log off instead, and nothing in the child
//! touches them again. In the child, the thread slots of the threads it does
//! not have are given back, and tags retire without a writer. jemalloc has its own fork handlers.

use std::sync::atomic::Ordering;

use crate::config::{self, Settings, HOT, INITIALIZING, OFF, ON, UNINIT};
use crate::log::{self, LogConfig};
use crate::{clock, held, internal, table, tag, thread};

/// Step 1: starts tracking with `defaults` overridden by the environment and
/// returns the mode. The first caller does the work; every other caller
/// returns the mode it finds (`INITIALIZING` while the first is at work).
#[cold]
pub(crate) fn tracking(defaults: &Settings) -> u8 {
    // Acquire on success and failure: a caller that finds ON or OFF sees the
    // settings published with it (the Release store at the end).
    match HOT
        .mode
        .compare_exchange(UNINIT, INITIALIZING, Ordering::Acquire, Ordering::Acquire)
    {
        Ok(_) => {}
        Err(mode) => return mode,
    }
    #[cfg(feature = "native")]
    crate::native::linked();
    let settings = config::from_env(defaults);
    let salt = settings.seed.unwrap_or_else(random_salt);
    HOT.store_settings(&settings, salt);
    clock::init();
    tag::init();
    if settings.enabled {
        install_fork_handlers();
    }
    let mode = if settings.enabled { ON } else { OFF };
    // Release: publishes the settings stored above.
    HOT.mode.store(mode, Ordering::Release);
    mode
}

extern "C" fn fork_prepare() {
    tag::fork_prepare_names();
    held::fork_prepare();
    tag::fork_prepare_intern();
    log::stacks::fork_prepare();
    table::fork_prepare();
}

extern "C" fn fork_parent() {
    table::fork_release();
    log::stacks::fork_release();
    tag::fork_release_intern();
    held::fork_release();
    tag::fork_release_names();
}

extern "C" fn fork_child() {
    fork_parent();
    thread::after_fork_in_child();
    tag::after_fork_in_child();
    log::after_fork_in_child();
}

/// Makes `fork()` safe for every lock a child can touch (see "Fork" above).
/// Called once, when tracking starts.
fn install_fork_handlers() {
    // SAFETY: the handlers are extern "C" functions valid for the life of the
    // process; pthread_atfork does not call back into the Rust allocator.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
}

/// A per-run salt from the clock, the pid and ASLR (a stack address).
fn random_salt() -> u64 {
    let stack = 0u8;
    let addr = std::ptr::addr_of!(stack) as u64;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    internal::mix64(clock::wall_ns() ^ addr.rotate_left(17) ^ (pid << 40))
}

/// Step 2: starts the log from `HEAPTAG_LOG` before `main`, when set.
extern "C" fn log_from_env() {
    if config::getenv(c"HEAPTAG_LOG").is_none_or(|v| v.is_empty()) {
        return;
    }
    // The first allocation starts the installed global allocator (step 1)
    // with its own settings; if heaptag is not installed, the mode stays
    // unset and `start` below says so.
    drop(std::hint::black_box(Box::new(0u64)));
    let config = LogConfig::from_env();
    // Before `start` below starts the writer thread.
    forget_log_env();
    match config {
        Some(Ok(c)) => {
            if let Err(e) = c.start() {
                eprintln!("heaptag: not logging: {e}");
            }
        }
        Some(Err(e)) => eprintln!("heaptag: not logging: {e}"),
        None => {}
    }
}

/// Removes `HEAPTAG_LOG` from the environment, so a program this process
/// execs (a worker, a test harness) neither fails to log (the file exists)
/// nor truncates this log (with `HEAPTAG_LOG_OVERWRITE=1`). Kept when
/// `HEAPTAG_LOG_INHERIT` is `1` (`true`, `yes`, `on`): `heaptag run` sets it,
/// with a `%p` in the path, so every process of the command logs to its own
/// file. Kept too (said on stderr) when other threads already run, where
/// changing the environment would be unsound.
fn forget_log_env() {
    let keep = config::getenv(c"HEAPTAG_LOG_INHERIT").is_some_and(|v| matches!(v, b"1" | b"true" | b"yes" | b"on"));
    if keep {
        return;
    }
    match threads() {
        Some(1) => {}
        n => {
            let n = n.map_or_else(|| "an unknown number of".to_owned(), |n| n.to_string());
            eprintln!(
                "heaptag: HEAPTAG_LOG stays in the environment ({n} threads already run, so it cannot be \
                 changed safely): programs this one starts inherit it"
            );
            return;
        }
    }
    // SAFETY: changing the environment is unsound while another thread
    // reads it (getenv, std::env, building a child's environment). This runs
    // only from `log_from_env`, heaptag's `.init_array` constructor, on the
    // thread that runs it: before `main` in a program (Rust's runtime has not
    // started, nor any thread of the program), or inside `dlopen` when
    // heaptag is in a library loaded later. The check above found this
    // thread to be the process's only one, and no other can appear before
    // the call below but by this thread starting it (heaptag starts its
    // writer thread only after this). glibc's unsetenv only removes the
    // entry from `environ`; it never frees the string, so the values read
    // before stay valid. The name is a NUL-terminated C string.
    unsafe { libc::unsetenv(c"HEAPTAG_LOG".as_ptr()) };
}

/// Threads of this process now (`Threads:` of `/proc/self/status`).
fn threads() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

#[used]
#[link_section = ".init_array"]
static LOG_FROM_ENV: extern "C" fn() = log_from_env;
