//! Memory the allocator never sees (mmaps, pinned host buffers, C++ heaps),
//! recorded under a tag by the program that holds it: the annotation API. What
//! is held now lives in `held.rs`; each change also goes to the event log.

use crate::held;
use crate::tag::{self, Tag};

/// Records `bytes` of memory the allocator never sees (an `mmap`ed SRS, a
/// `cudaHostAlloc` buffer) under the calling thread's tag, until the returned
/// guard drops. `what` names the kind of memory in reports.
///
/// ```
/// let srs = heaptag_alloc::external_alloc(48 << 30, "srs_mmap");
/// // ... the mapping lives as long as `srs` ...
/// drop(srs);
/// ```
pub fn external_alloc(bytes: u64, what: &'static str) -> ExternalGuard {
    // The guard holds the tag, so it cannot retire (and its id be reused)
    // while the memory is recorded under it.
    let id = tag::hold_current();
    held::add(id, what, bytes);
    log_change(id, what, bytes as i64);
    ExternalGuard { id, bytes, what }
}

/// Keeps external memory recorded; dropping it records the release.
///
/// The guard is `Send`: it may travel with the buffer it describes.
#[must_use = "the memory is recorded only while the guard lives"]
#[derive(Debug)]
pub struct ExternalGuard {
    id: u32,
    bytes: u64,
    what: &'static str,
}

impl ExternalGuard {
    /// Bytes this guard records.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The tag the memory is charged to.
    pub fn tag(&self) -> Tag {
        tag::tag_of(self.id)
    }
}

impl Drop for ExternalGuard {
    fn drop(&mut self) {
        held::remove(self.id, self.what, self.bytes);
        log_change(self.id, self.what, -(self.bytes as i64));
        tag::release_hold(self.id);
    }
}

/// Writes the change to the event log, when one is being written.
fn log_change(tag: u32, what: &'static str, bytes: i64) {
    if crate::log::on() {
        crate::log::side_external(crate::clock::now_ns(), tag, what, bytes);
    }
}
