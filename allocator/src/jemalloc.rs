//! What heaptag asks jemalloc directly: purging and statistics.

use std::fmt;

use serde::{Deserialize, Serialize};
use tikv_jemalloc_ctl::{epoch, stats};

/// jemalloc refused a control call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JemallocError {
    /// What was asked, e.g. `"arena.<all>.purge"`.
    pub what: &'static str,
    /// jemalloc's reason.
    pub reason: String,
}

impl fmt::Display for JemallocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "jemalloc mallctl {} failed: {}", self.what, self.reason)
    }
}

impl std::error::Error for JemallocError {}

/// Calls a jemalloc control that takes no input and gives no output.
fn mallctl_void(name: &'static [u8], what: &'static str) -> Result<(), JemallocError> {
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: `name` is NUL-terminated; the controls used with this helper
    // take no input and give no output, so all four pointers are null as
    // jemalloc requires.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(JemallocError {
            what,
            reason: format!("errno {rc}"),
        })
    }
}

/// Returns the calling thread's cached free blocks (its tcache) to the arenas.
///
/// jemalloc counts blocks sitting in a thread cache as allocated, so compare
/// `stats.allocated` with heaptag's totals after flushing.
pub fn flush_thread_cache() -> Result<(), JemallocError> {
    mallctl_void(b"thread.tcache.flush\0", "thread.tcache.flush")
}

/// Returns dirty and muzzy pages of every jemalloc arena to the OS: the
/// jemalloc equivalent of glibc's `malloc_trim(0)`, which does nothing when
/// jemalloc is the allocator. Call it where the program used to trim (after
/// each partition, say).
pub fn purge() -> Result<(), JemallocError> {
    // "arena.<MALLCTL_ARENAS_ALL>.purge"; MALLCTL_ARENAS_ALL is 4096.
    mallctl_void(b"arena.4096.purge\0", "arena.<all>.purge")
}

/// jemalloc's process-wide statistics, in bytes (see jemalloc's `stats.*`).
///
/// `allocated` counts usable sizes (size classes), so it is at least heaptag's
/// live total of requested bytes; `resident - allocated` is the allocator's
/// overhead in the RSS decomposition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JemallocStats {
    /// `stats.allocated`: bytes in blocks the application holds.
    pub allocated: u64,
    /// `stats.active`: bytes in active pages.
    pub active: u64,
    /// `stats.resident`: bytes in physically resident pages jemalloc maps.
    pub resident: u64,
    /// `stats.mapped`: bytes in extents mapped by jemalloc.
    pub mapped: u64,
    /// `stats.retained`: virtual memory retained for reuse, not resident.
    pub retained: u64,
    /// `stats.metadata`: jemalloc's own metadata.
    pub metadata: u64,
}

/// Reads jemalloc's statistics (refreshing its epoch first).
pub fn jemalloc_stats() -> Result<JemallocStats, JemallocError> {
    let err = |what| {
        move |e: tikv_jemalloc_ctl::Error| JemallocError {
            what,
            reason: e.to_string(),
        }
    };
    epoch::advance().map_err(err("epoch"))?;
    Ok(JemallocStats {
        allocated: stats::allocated::read().map_err(err("stats.allocated"))? as u64,
        active: stats::active::read().map_err(err("stats.active"))? as u64,
        resident: stats::resident::read().map_err(err("stats.resident"))? as u64,
        mapped: stats::mapped::read().map_err(err("stats.mapped"))? as u64,
        retained: stats::retained::read().map_err(err("stats.retained"))? as u64,
        metadata: stats::metadata::read().map_err(err("stats.metadata"))? as u64,
    })
}
