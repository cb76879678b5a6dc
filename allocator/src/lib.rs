//! `heaptag-alloc`: the attributing global allocator behind the `heaptag` crate.
//!
//! Users depend on the `heaptag` facade crate, which re-exports everything
//! here; this crate holds the hot path only (no CLI, no report logic).
//!
//! # Model
//!
//! - A [`Tag`] is (job, stage, partition), each optional. Each thread has a
//!   current tag, set by guards ([`stage`], [`partition`], [`job`],
//!   [`Tag::enter`]) and read by the allocator as one thread-local integer.
//!   Tags no longer used (no guard, nothing alive) retire and their ids are
//!   reused, so a daemon can make new tags forever (`tag.rs`).
//! - Every allocation is counted under the current tag, per thread (exact).
//! - Blocks of at least the threshold (64 KiB by default) are recorded by
//!   address with their tag, size, time and thread: their live bytes per tag
//!   are exact, and their free is charged to the allocating tag whichever
//!   thread frees them.
//! - Smaller blocks are sampled by bytes (one per 512 KiB on average, a
//!   per-thread countdown to the next sample point); a free learns whether
//!   its block was sampled from a per-granule filter beside the table, so
//!   unsampled frees never take a lock; per-tag small live bytes are an unbiased estimate
//!   with a standard error. `threshold(0)` (or `HEAPTAG_THRESHOLD=0`) tracks
//!   every block exactly.
//! - No per-block header: sizes and size classes are exactly what the program
//!   would get without heaptag.
//!
//! # Layout
//!
//! The modules follow DESIGN.md's data flow, in one direction:
//!
//! ```text
//!                              hot path
//! app thread -- tag guard --> tag ----------> thread    the thread's tag id (TLS)
//! GlobalAlloc call ---------> global -------> thread    per-thread counts, exact
//!                               |-----------> thread    sampled? (the thread's byte countdown)
//!                               |-----------> sampling  maybe sampled? (the free-side filter)
//!                               |-----------> table     tracked and sampled blocks by address
//!                               |-----------> tag       per-tag live bytes and peaks
//!                               '-----------> log       events --> ring --> writer thread --> file
//! writer thread, every interval: snapshot (the counters), jemalloc, /proc ----^
//!
//! start-up     first allocation: global --> start: settings, clock, tags, fork handlers, mode
//! fork         start: lock names, held, interning, stacks, table; in the child give back thread slots, stop the log
//!              before main:      start --> log (HEAPTAG_LOG)
//! degradation  any module --> health (a leaf: every counter Health reports)
//! ```
//!
//! Each module uses (`crate::...`) only modules below it in this list, so
//! there is no import cycle (a test in this file checks it):
//!
//! ```text
//! module    holds                                          uses
//! global    the only GlobalAlloc: counts, records, events  start log table tag sampling thread config clock health
//! start     start-up, in order; fork handlers              native log held tag table thread config clock internal
//! native    C/C++ malloc family (feature `native`)         log table tag sampling thread jemalloc config clock health
//! external  the annotation API (external_alloc)            log held tag clock
//! testing   memory assertions for cargo test               log snapshot table tag internal
//! profile   live blocks, stacks, maps for heap profiles    log table tag sampling
//! log/      ring, writer, finish, segments, stacks, fps    snapshot tag table thread sampling jemalloc config clock internal health
//! snapshot  in-process queries: sums of the counters       held tag table thread config clock internal health
//! held      external memory held, by tag and kind          tag internal
//! tag       tags, guards, the tag table                    thread sampling internal health
//! table     the side table of tracked and sampled blocks   sampling internal health
//! thread    TLS tag id, counter slots, sample countdown    sampling internal health
//! sampling  sample gaps, free-side filter, weights         config
//! config    settings; HOT, what the hot path reads         health
//! jemalloc  jemalloc controls and statistics               -
//! clock     clocks                                         -
//! internal  heaptag's own heap (never tracked), hashing    -
//! health    every counter of Health, and Health            -
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

#[cfg(all(feature = "native", not(all(target_os = "linux", target_env = "gnu"))))]
compile_error!(
    "heaptag-alloc: the `native` feature replaces glibc's malloc family and needs Linux with glibc (docs/NATIVE.md)"
);

#[cfg(all(feature = "native", feature = "unprefixed_malloc"))]
compile_error!(
    "heaptag-alloc: features `native` and `unprefixed_malloc` both define malloc; pick one (`native` also tags C/C++)"
);

mod clock;
mod config;
mod external;
mod global;
mod health;
mod held;
mod internal;
mod jemalloc;
mod log;
#[cfg(feature = "native")]
mod native;
mod profile;
mod sampling;
mod snapshot;
mod start;
mod table;
mod tag;
pub mod testing;
mod thread;

pub use clock::{clock_source, now_ns};
pub use config::{settings, Settings};
pub use external::{external_alloc, ExternalGuard};
pub use global::Alloc;
pub use health::Health;
pub use heaptag_format::Fill;
pub use held::ExternalStats;
pub use jemalloc::{flush_thread_cache, jemalloc_stats, purge, JemallocError, JemallocStats};
pub use log::{finish, log_path, mark, LogConfig, LogError, LogSummary};
pub use profile::{live_blocks, modules, stack_frames, LiveBlock, Module};
pub use snapshot::{
    snapshot, tracked_blocks, Block, NativeStats, SmallStats, Snapshot, TagStats, Totals, TrackedStats,
};
pub use tag::{current, job, partition, shared, stage, static_name, Tag, TagGuard, TagId, MAX_TAGS, TAGS_KEPT};
pub use thread::MAX_THREAD_SLOTS;

#[cfg(test)]
mod tests {
    //! The module graph drawn in the crate docs, checked against the sources.

    use std::path::Path;

    /// The list in the crate docs: each module may use only modules after it.
    const ORDER: &[&str] = &[
        "global", "start", "native", "external", "testing", "profile", "log", "snapshot", "held", "tag", "table",
        "thread", "sampling", "config", "jemalloc", "clock", "internal", "health",
    ];

    /// The code of a module (its file, or every file of its folder), with
    /// comments and unit tests left out.
    fn code(module: &str) -> String {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let dir = src.join(module);
        let mut files = if dir.is_dir() {
            std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "rs"))
                .collect()
        } else {
            vec![src.join(format!("{module}.rs"))]
        };
        files.sort();
        let mut out = String::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
            for line in text.lines() {
                out.push_str(line.split("//").next().unwrap_or(""));
                out.push('\n');
            }
        }
        out
    }

    /// The first segment of every `crate::` path in `code` (`crate::{a, b::c}`
    /// gives `a` and `b`).
    fn crate_paths(code: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let group = match rest.strip_prefix('{') {
                Some(g) => &g[..g.find('}').unwrap()],
                None => rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap(),
            };
            for part in group.split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        }
        out
    }

    /// The module an item re-exported by this file comes from.
    fn reexported_from(item: &str) -> Option<&'static str> {
        let lib = include_str!("lib.rs");
        lib.lines()
            .filter_map(|l| l.strip_prefix("pub use "))
            .find(|l| {
                l.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .skip(1)
                    .any(|w| w == item)
            })
            .and_then(|l| ORDER.iter().copied().find(|m| l.starts_with(&format!("{m}::"))))
    }

    #[test]
    fn modules_use_only_modules_below_them() {
        let mut wrong = Vec::new();
        for (rank, module) in ORDER.iter().enumerate() {
            for name in crate_paths(&code(module)) {
                let used = match ORDER.iter().position(|m| *m == name) {
                    Some(_) => name.as_str(),
                    None => reexported_from(&name).unwrap_or_else(|| panic!("{module}: crate::{name} is no module")),
                };
                let used_rank = ORDER.iter().position(|m| *m == used).unwrap();
                if used_rank <= rank && used != *module {
                    wrong.push(format!("{module} -> {used}"));
                }
            }
        }
        assert!(wrong.is_empty(), "uses against the module order (a cycle?): {wrong:?}");
    }

    #[test]
    fn every_module_is_in_the_order() {
        let lib = include_str!("lib.rs");
        for line in lib.lines() {
            let Some(m) = line.strip_prefix("mod ").or_else(|| line.strip_prefix("pub mod ")) else {
                continue;
            };
            let m = m.trim_end_matches(';');
            if m != "tests {" {
                assert!(ORDER.contains(&m), "module {m} is missing from the layout");
            }
        }
    }

    #[test]
    fn health_is_a_leaf() {
        assert_eq!(crate_paths(&code("health")), Vec::<String>::new());
    }
}
