//! Memory the allocator never sees (mmaps, pinned host buffers, C++ heaps),
//! recorded under a tag by the program that holds it.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};

use hashbrown::HashMap;

use crate::internal::{Internal, MixBuild};
use crate::snapshot::ExternalStats;
use crate::tag::{self, Tag};

/// Bytes held per (tag id, kind).
static HELD: Mutex<HashMap<(u32, &'static str), u64, MixBuild, Internal>> =
    Mutex::new(HashMap::with_hasher_in(MixBuild::new(), Internal));

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
    let id = tag::intern(&tag::current());
    if let Some(e) = tag::entry(id) {
        // Relaxed: an independent statistic.
        e.external_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if held.try_reserve(1).is_ok() {
            *held.entry((id, what)).or_insert(0) += bytes;
        }
    }
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
        if let Some(e) = tag::entry(self.id) {
            e.external_bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        }
        {
            let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(b) = held.get_mut(&(self.id, self.what)) {
                *b = b.saturating_sub(self.bytes);
                if *b == 0 {
                    held.remove(&(self.id, self.what));
                }
            }
        }
        log_change(self.id, self.what, -(self.bytes as i64));
    }
}

/// Writes the change to the event log, when one is being written.
fn log_change(tag: u32, what: &'static str, bytes: i64) {
    if crate::log::on() {
        crate::log::side(heaptag_format::Record::External {
            time_ns: crate::clock::now_ns(),
            tag,
            what: what.to_owned(),
            bytes,
        });
    }
}

/// External memory held now, by tag and kind, largest first.
pub(crate) fn list() -> Vec<ExternalStats> {
    let copy: Vec<((u32, &'static str), u64)> = {
        let held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        let mut v = Vec::new();
        // Allocating while holding HELD is safe: the allocator never takes it.
        v.extend(held.iter().map(|(k, b)| (*k, *b)));
        v
    };
    let mut out: Vec<ExternalStats> = copy
        .into_iter()
        .map(|((id, what), bytes)| ExternalStats {
            tag: tag::tag_of(id),
            what: what.to_owned(),
            bytes,
        })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.what.cmp(&b.what)));
    out
}
