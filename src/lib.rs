//! heaptag: who holds the memory in a multi-threaded Rust pipeline, and is any
//! of it held twice?
//!
//! This facade re-exports the allocator API of `heaptag-alloc`; it never
//! installs a global allocator itself. Install one in your binary:
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();
//!
//! fn main() {
//!     let _job = heaptag::job(7);
//!     let _stage = heaptag::stage("synthesize_partition");
//!     for p in 0..10 {
//!         let _part = heaptag::partition(p);
//!         let witness = vec![0u8; 1 << 20]; // charged to job 7 / stage / partition p
//!         drop(witness);
//!     }
//!     let snap = heaptag::snapshot();
//!     for t in &snap.tags {
//!         println!("{}: live {} peak {}", t.tag, t.live_bytes, t.peak_live_bytes);
//!     }
//! }
//! ```
//!
//! # Behind a cargo feature
//!
//! ```toml
//! [dependencies]
//! heaptag = { path = "../heaptag", optional = true }   # not on crates.io: a path or git dependency
//!
//! [features]
//! heaptag = ["dep:heaptag"]
//! ```
//!
//! ```ignore
//! #[cfg(feature = "heaptag")]
//! #[global_allocator]
//! static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();
//! ```
//!
//! # Moving a tag with the work
//!
//! The tag is per thread. Capture it where work is created and enter it where
//! the work runs:
//!
//! ```no_run
//! let tag = heaptag::current();
//! std::thread::spawn(move || tag.scope(|| { /* charged to `tag` */ }));
//! ```
//!
//! # Integrations (cargo features)
//!
//! - [`thread`]: `spawn`, `spawn_scoped`, `in_current_tag` (always on).
//! - `rayon`: `par_iter().with_current_tag()`, `heaptag::rayon::{join, scope,
//!   spawn}` carrying the tag onto the pool (docs/RAYON.md).
//! - `futures`: `fut.with_tag(tag)` / `fut.in_current_tag()`, entered around
//!   every poll, for tokio or any executor (docs/ASYNC.md).
//! - `tracing`: `heaptag::tracing::HeaptagLayer`, tags from span fields
//!   `job_id`, `stage`, `partition`, and stages from the span names you list
//!   (docs/TRACING.md).
//! - `pprof`: `heaptag::pprof::heap_profile()`, a pprof heap profile of what
//!   is live now with tag labels, for `/debug/pprof/heap` (docs/PPROF.md).
//! - `prometheus`: `heaptag::prometheus::encode` and a `prometheus_client`
//!   collector: per-tag live, peak and allocated bytes and heaptag's health
//!   (docs/PPROF.md).
//!
//! # What is exact and what is estimated
//!
//! Allocated bytes and counts per tag are exact. Blocks of at least the
//! threshold (64 KiB by default) are tracked by address: their live and peak
//! bytes per tag are exact, and a free is charged to the allocating tag
//! whichever thread frees it. Smaller blocks' live bytes per tag are estimated
//! from a sample (the process-wide total is exact); [`SmallStats`] carries the
//! standard error. `HEAPTAG_THRESHOLD=0` makes everything exact.
//!
//! # The event log
//!
//! `HEAPTAG_LOG=run-%p.htlog` (or [`LogConfig`]) writes every tracked and
//! sampled event, call stacks, content fingerprints, marks and periodic memory
//! samples to a file for the `heaptag` analyzer; [`mark`] names a point in the
//! run, [`finish`] (also run at exit, and never waiting longer than
//! `HEAPTAG_FINISH_TIMEOUT`) completes the file; a later
//! [`LogConfig::start`] opens a new log. `HEAPTAG_LOG_MAX` writes a daemon's
//! log in segments. See the README and `docs/FORMAT.md`.
//!
//! # Environment
//!
//! `HEAPTAG=off` (pass-through), `HEAPTAG_THRESHOLD`, `HEAPTAG_SAMPLE_RATE`,
//! `HEAPTAG_SEED`: see [`Settings`] and the README.
#![warn(missing_docs)]

pub use heaptag_alloc::*;

pub mod thread;

#[cfg(feature = "futures")]
pub mod future;
#[cfg(feature = "pprof")]
pub mod pprof;
#[cfg(feature = "prometheus")]
pub mod prometheus;
#[cfg(feature = "rayon")]
pub mod rayon;
#[cfg(feature = "tracing")]
pub mod tracing;

/// docs/NATIVE.md, so that its Rust examples are compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/NATIVE.md")]
pub struct NativeDoc;
