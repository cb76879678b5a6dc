//! Tags on the rayon pool (feature `rayon`).
//!
//! Rayon's worker threads do not inherit the tag of the thread that handed
//! them work, and work stealing moves tasks between them. These helpers
//! capture the caller's tag when the work is created and enter it wherever
//! the work runs:
//!
//! ```
//! use heaptag::rayon::TagParallelIterator;
//! use rayon::prelude::*;
//!
//! let _p = heaptag::partition(3);
//! let sums: Vec<u64> = (0..100u64)
//!     .into_par_iter()
//!     .with_current_tag()                // every item runs under partition 3
//!     .map(|i| vec![i; 1000].iter().sum())
//!     .collect();
//! heaptag::rayon::join(|| heaptag::current(), || heaptag::current());
//! # let _ = sums;
//! ```
//!
//! A task that itself waits inside rayon (a nested `join`, a `par_iter` in a
//! `par_iter`) can run stolen work from elsewhere while it waits; that work
//! runs under its own tag when it was created with these helpers, and under
//! the waiting task's tag otherwise.

use ::rayon::iter::ParallelIterator;
use heaptag_alloc::{current, Tag, TagGuard};

/// Runs every item of a parallel iterator under a tag.
pub trait TagParallelIterator: ParallelIterator {
    /// Items run under `tag` (entered once per piece of work a thread takes,
    /// not per item).
    fn with_tag(self, tag: Tag) -> impl ParallelIterator<Item = Self::Item> {
        let id = tag.id();
        self.map_init(move || id.enter(), |_guard: &mut TagGuard, item| item)
    }

    /// Items run under the tag current where the iterator is built.
    fn with_current_tag(self) -> impl ParallelIterator<Item = Self::Item> {
        self.with_tag(current())
    }
}

impl<I: ParallelIterator> TagParallelIterator for I {}

/// `rayon::spawn` carrying the caller's tag.
pub fn spawn<F>(f: F)
where
    F: FnOnce() + Send + 'static,
{
    let tag = current();
    ::rayon::spawn(move || tag.scope(f))
}

/// `rayon::join` with both closures under the caller's tag (the second may
/// be stolen by another thread).
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let tag = current().id();
    ::rayon::join(move || tag.scope(a), move || tag.scope(b))
}

/// `rayon::scope` whose [`TaggedScope::spawn`] carries the caller's tag
/// into every task.
pub fn scope<'scope, F, R>(f: F) -> R
where
    F: FnOnce(&TaggedScope<'_, 'scope>) -> R + Send,
    R: Send,
{
    let tag = current();
    ::rayon::scope(move |s| {
        let _g = tag.enter();
        f(&TaggedScope { inner: s, tag })
    })
}

/// A rayon scope whose spawned tasks run under a tag.
pub struct TaggedScope<'a, 'scope> {
    inner: &'a ::rayon::Scope<'scope>,
    tag: Tag,
}

impl<'scope> TaggedScope<'_, 'scope> {
    /// Spawns `f` under the tag current where the scope was created.
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'scope,
    {
        let tag = self.tag;
        self.inner.spawn(move |_| tag.scope(f));
    }

    /// Spawns `f` under `tag`.
    pub fn spawn_in<F>(&self, tag: Tag, f: F)
    where
        F: FnOnce() + Send + 'scope,
    {
        self.inner.spawn(move |_| tag.scope(f));
    }
}
