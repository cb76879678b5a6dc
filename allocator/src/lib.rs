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
//! - Every allocation is counted under the current tag, per thread (exact).
//! - Blocks of at least the threshold (64 KiB by default) are recorded by
//!   address with their tag, size, time and thread: their live bytes per tag
//!   are exact, and their free is charged to the allocating tag whichever
//!   thread frees them.
//! - Smaller blocks are sampled by bytes (one per 512 KiB on average) with a
//!   decision recomputed from the address at free, so unsampled frees never
//!   touch shared state; per-tag small live bytes are an unbiased estimate
//!   with a standard error. `threshold(0)` (or `HEAPTAG_THRESHOLD=0`) tracks
//!   every block exactly.
//! - No per-block header: sizes and size classes are exactly what the program
//!   would get without heaptag.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod clock;
mod config;
mod external;
mod global;
mod health;
mod held;
mod internal;
mod jemalloc;
mod log;
mod sampling;
mod snapshot;
mod start;
mod table;
mod tag;
pub mod testing;
mod thread;

pub use clock::now_ns;
pub use config::{settings, Settings};
pub use external::{external_alloc, ExternalGuard};
pub use global::Alloc;
pub use health::Health;
pub use heaptag_format::Fill;
pub use held::ExternalStats;
pub use jemalloc::{flush_thread_cache, jemalloc_stats, purge, JemallocError, JemallocStats};
pub use log::{finish, mark, LogConfig, LogError, LogSummary};
pub use snapshot::{snapshot, tracked_blocks, Block, SmallStats, Snapshot, TagStats, Totals, TrackedStats};
pub use tag::{current, job, partition, stage, static_name, Tag, TagGuard, TagId, MAX_TAGS};
pub use thread::MAX_THREAD_SLOTS;
