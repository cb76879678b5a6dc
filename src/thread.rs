//! Threads that carry the spawner's tag.

use heaptag_alloc::{current, Tag};

/// `std::thread::spawn`, with the new thread running under the caller's
/// current tag.
///
/// ```
/// let _p = heaptag::partition(3);
/// let h = heaptag::thread::spawn(|| heaptag::current().partition);
/// assert_eq!(h.join().unwrap(), Some(3));
/// ```
pub fn spawn<F, T>(f: F) -> std::thread::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let tag = current();
    std::thread::spawn(move || tag.scope(f))
}

/// `std::thread::Scope::spawn`, carrying the caller's current tag.
pub fn spawn_scoped<'scope, 'env, F, T>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    f: F,
) -> std::thread::ScopedJoinHandle<'scope, T>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    let tag = current();
    scope.spawn(move || tag.scope(f))
}

/// Wraps `f` so that it runs under the caller's current tag wherever it is
/// called: hand the result to any executor's `spawn_blocking`, a thread
/// pool, or a callback.
///
/// ```
/// let _s = heaptag::stage("synthesize_partition");
/// let work = heaptag::thread::in_current_tag(|| heaptag::current().stage);
/// assert_eq!(std::thread::spawn(work).join().unwrap(), Some("synthesize_partition"));
/// ```
pub fn in_current_tag<F, R>(f: F) -> impl FnOnce() -> R + Send
where
    F: FnOnce() -> R + Send,
{
    in_tag(current(), f)
}

/// Wraps `f` so that it runs under `tag` wherever it is called.
pub fn in_tag<F, R>(tag: Tag, f: F) -> impl FnOnce() -> R + Send
where
    F: FnOnce() -> R + Send,
{
    move || tag.scope(f)
}
