//! External memory held now, by tag and kind: the registry that
//! [`external_alloc`](crate::external_alloc) writes and snapshots read.
//!
//! Kept apart from the annotation API (`external.rs`), which also writes to
//! the log, so that snapshots, which the log's writer takes, read it without
//! an import cycle (snapshot -> held, external -> log -> snapshot).

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, PoisonError};

use allocator_api2::vec::Vec as IVec;

use hashbrown::HashMap;
use serde::{Deserialize, Serialize};

use crate::internal::{ForkHeld, Internal, MixBuild};
use crate::tag::{self, Tag};

/// External memory of one kind held under one tag.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalStats {
    /// The tag that holds it.
    pub tag: Tag,
    /// What it is (the `what` given to [`external_alloc`](crate::external_alloc)).
    pub what: String,
    /// Bytes held now.
    pub bytes: u64,
}

/// Bytes held per (tag id, kind).
type Held = HashMap<(u32, &'static str), u64, MixBuild, Internal>;

/// What is held now.
static HELD: Mutex<Held> = Mutex::new(HashMap::with_hasher_in(MixBuild::new(), Internal));

/// Adds `bytes` of `what` to tag `id` (its entry's figure and the registry).
pub(crate) fn add(id: u32, what: &'static str, bytes: u64) {
    tag::mark_dirty(id);
    if let Some(e) = tag::entry(id) {
        // Relaxed: an independent statistic.
        e.external_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    if held.try_reserve(1).is_ok() {
        *held.entry((id, what)).or_insert(0) += bytes;
    }
}

/// Takes back what [`add`] added.
pub(crate) fn remove(id: u32, what: &'static str, bytes: u64) {
    tag::mark_dirty(id);
    if let Some(e) = tag::entry(id) {
        // Relaxed: an independent statistic.
        // Release: a retirement that reads zero (Acquire) comes after this.
        e.external_bytes.fetch_sub(bytes, Ordering::Release);
    }
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(b) = held.get_mut(&(id, what)) {
        *b = b.saturating_sub(bytes);
        if *b == 0 {
            held.remove(&(id, what));
        }
    }
}

/// External memory held now, by tag and kind, largest first.
pub(crate) fn list() -> Vec<ExternalStats> {
    // Copied into internal memory: HELD's holders never call the global
    // allocator (see "fork" in `start.rs`).
    let mut copy: IVec<((u32, &'static str), u64), Internal> = IVec::new_in(Internal);
    {
        let held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if copy.try_reserve(held.len()).is_ok() {
            copy.extend(held.iter().map(|(k, b)| (*k, *b)));
        }
    }
    let mut out: Vec<ExternalStats> = copy
        .iter()
        .map(|&((id, what), bytes)| ExternalStats {
            tag: tag::tag_of(id),
            what: what.to_owned(),
            bytes,
        })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.what.cmp(&b.what)));
    out
}

static FORK_HELD: ForkHeld<MutexGuard<'static, Held>> = ForkHeld::new();

/// Locks the registry before a `fork()` (the prepare handler in `start.rs`),
/// so a child's `external_alloc` never waits for a thread it does not have.
pub(crate) fn fork_prepare() {
    // SAFETY: called only from the atfork prepare handler.
    unsafe { FORK_HELD.hold(HELD.lock().unwrap_or_else(PoisonError::into_inner)) };
}

/// Unlocks what [`fork_prepare`] locked (atfork parent and child handlers).
pub(crate) fn fork_release() {
    // SAFETY: called only from the atfork parent and child handlers.
    unsafe { FORK_HELD.release() };
}
