//! Tags on futures (feature `futures`; works with tokio and any executor).
//!
//! A task can move between executor threads at every `.await`, and one
//! thread runs many tasks. [`TagFutureExt::with_tag`] enters the tag around
//! every poll of the future and restores the thread's previous tag after, so
//! the future's allocations are charged to it wherever it runs and other
//! tasks on the same threads are not affected.
//!
//! ```
//! use heaptag::future::TagFutureExt;
//!
//! # async fn prove() {}
//! let tag = heaptag::Tag::new(Some(7), Some("gpu_prove"), Some(3));
//! let fut = prove().with_tag(tag);
//! # let _ = fut;
//! ```
//!
//! For `spawn_blocking`, wrap the closure: `tokio::task::spawn_blocking(
//! heaptag::thread::in_current_tag(move || synthesize(p)))`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use heaptag_alloc::{current, Tag, TagId};

pin_project_lite::pin_project! {
    /// A future polled under a tag.
    #[must_use = "futures do nothing unless polled"]
    pub struct Tagged<F> {
        #[pin]
        inner: F,
        tag: TagId,
    }
}

impl<F: Future> Future for Tagged<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _g = this.tag.enter();
        this.inner.poll(cx)
    }
}

/// Tags for futures.
pub trait TagFutureExt: Future + Sized {
    /// Polls this future under `tag`.
    fn with_tag(self, tag: Tag) -> Tagged<Self> {
        Tagged {
            inner: self,
            tag: tag.id(),
        }
    }

    /// Polls this future under the tag current where this is called.
    fn in_current_tag(self) -> Tagged<Self> {
        self.with_tag(current())
    }
}

impl<F: Future> TagFutureExt for F {}
