//! Tags from `tracing` spans (feature `tracing`).
//!
//! [`HeaptagLayer`] sets the thread's tag while a span is entered, from the
//! span's fields: by default `job_id` gives the job, `partition` the
//! partition, and `stage` the stage. A span's *name* becomes the stage only
//! for the names listed with [`HeaptagLayer::stage_spans`]: never by default,
//! since every library span (an HTTP client's, a database driver's) would
//! otherwise make a tag of its own per job and partition.
//! Dimensions a span does not set are inherited from the tag current when it
//! is entered, so nested spans refine their parents. Exiting restores the
//! previous tag, per thread: a span may be entered on several threads at once.
//!
//! ```
//! use tracing_subscriber::prelude::*;
//!
//! let layer = heaptag::tracing::HeaptagLayer::new().stage_spans(["synthesize_partition"]);
//! tracing_subscriber::registry().with(layer).init();
//!
//! let span = tracing::info_span!("synthesize_partition", job_id = 7, partition = 3);
//! span.in_scope(|| {
//!     // allocations here are charged to job 7 / synthesize_partition / partition 3
//!     assert_eq!(heaptag::current().stage, Some("synthesize_partition"));
//!     // a span not listed and without a `stage` field keeps the stage
//!     tracing::info_span!("http_request").in_scope(|| {
//!         assert_eq!(heaptag::current().stage, Some("synthesize_partition"));
//!     });
//! });
//! ```
//!
//! Cost: entering a span reads the span's precomputed tag and swaps one
//! thread-local; the tag is interned once per (span, parent tag), and span
//! names are `&'static str` already, so nothing is allocated per enter
//! (docs/PERFORMANCE.md has the measured figure).

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use heaptag_alloc::{static_name, Tag, TagGuard, TagId};
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The layer. Add it to a `tracing_subscriber::registry()`.
#[derive(Clone, Debug)]
pub struct HeaptagLayer {
    job_field: &'static str,
    partition_field: &'static str,
    stage_field: &'static str,
    /// Span names that name the stage (sorted, for a binary search).
    stage_spans: Arc<[&'static str]>,
}

impl Default for HeaptagLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl HeaptagLayer {
    /// Fields `job_id`, `partition`, `stage`; no span name is a stage.
    pub fn new() -> Self {
        HeaptagLayer {
            job_field: "job_id",
            partition_field: "partition",
            stage_field: "stage",
            stage_spans: Arc::from(Vec::new()),
        }
    }

    /// The field that gives the job (an integer).
    pub fn job_field(mut self, name: &'static str) -> Self {
        self.job_field = name;
        self
    }

    /// The field that gives the partition (an integer).
    pub fn partition_field(mut self, name: &'static str) -> Self {
        self.partition_field = name;
        self
    }

    /// The field that gives the stage (a string).
    pub fn stage_field(mut self, name: &'static str) -> Self {
        self.stage_field = name;
        self
    }

    /// Spans with one of these names and no stage field name the stage by
    /// their own name (e.g. the pipeline's stage spans). Others only set job
    /// and partition, or nothing. Replaces an earlier list.
    pub fn stage_spans(mut self, names: impl IntoIterator<Item = &'static str>) -> Self {
        let mut v: Vec<&'static str> = names.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        self.stage_spans = Arc::from(v);
        self
    }

    /// The stage a span of this name gives when it has no stage field.
    fn stage_of_name(&self, name: &'static str) -> Option<&'static str> {
        self.stage_spans.binary_search(&name).is_ok().then_some(name)
    }
}

/// What a span sets, stored in its extensions.
struct SpanTag {
    job: Option<u64>,
    stage: Option<&'static str>,
    partition: Option<u32>,
    /// The parent tag of the last enter (its `to_bits`; u64::MAX: none) and
    /// the merged tag's bits. Two words written without a lock: a reader may
    /// pair a key with another enter's value, which is harmless, since the
    /// merged tag's value is computed from the parent, never taken from the
    /// cache, and entering a `TagId` whose bits are another tag's enters its
    /// tag by value (`TagId::from_parts`).
    cache_key: AtomicU64,
    cache_val: AtomicU64,
}

impl SpanTag {
    fn is_empty(&self) -> bool {
        self.job.is_none() && self.stage.is_none() && self.partition.is_none()
    }

    /// The tag to enter over `cur`, interned once per distinct `cur`.
    /// A cached `TagId` whose tag retired since is still right: entering it
    /// interns its tag again (see `TagId`).
    fn merged(&self, cur: TagId) -> TagId {
        let key = cur.to_bits();
        let parent = cur.tag();
        let tag = Tag {
            job: self.job.or(parent.job),
            stage: self.stage.or(parent.stage),
            partition: self.partition.or(parent.partition),
        };
        // Relaxed: see the fields' docs; a torn pair is harmless.
        if self.cache_key.load(Ordering::Relaxed) == key {
            return TagId::from_parts(self.cache_val.load(Ordering::Relaxed), tag);
        }
        let merged = tag.id();
        self.cache_key.store(u64::MAX, Ordering::Relaxed);
        self.cache_val.store(merged.to_bits(), Ordering::Relaxed);
        self.cache_key.store(key, Ordering::Relaxed);
        merged
    }
}

thread_local! {
    /// One entry per span entered on this thread, innermost last: the guard
    /// of a span that sets a tag, `None` for one that does not (so exit
    /// pops without looking the span up).
    static ENTERED: RefCell<Vec<Option<TagGuard>>> = const { RefCell::new(Vec::new()) };
}

struct Visitor<'a> {
    layer: &'a HeaptagLayer,
    job: Option<u64>,
    stage: Option<&'static str>,
    partition: Option<u32>,
}

impl Visitor<'_> {
    fn number(&mut self, field: &Field, v: u64) {
        if field.name() == self.layer.job_field {
            self.job = Some(v);
        } else if field.name() == self.layer.partition_field {
            self.partition = u32::try_from(v).ok();
        }
    }
}

impl Visit for Visitor<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Ok(v) = u64::try_from(value) {
            self.number(field, v);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == self.layer.stage_field {
            self.stage = Some(static_name(value));
        } else if let Ok(v) = value.parse::<u64>() {
            self.number(field, v);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if name == self.layer.stage_field || name == self.layer.job_field || name == self.layer.partition_field {
            let text = format!("{value:?}");
            self.record_str(field, text.trim_matches('"'));
        }
    }
}

impl<S> Layer<S> for HeaptagLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut v = Visitor {
            layer: self,
            job: None,
            stage: None,
            partition: None,
        };
        attrs.record(&mut v);
        let stage = v.stage.or_else(|| self.stage_of_name(attrs.metadata().name()));
        let t = SpanTag {
            job: v.job,
            stage,
            partition: v.partition,
            cache_key: AtomicU64::new(u64::MAX),
            cache_val: AtomicU64::new(0),
        };
        if let (false, Some(span)) = (t.is_empty(), ctx.span(id)) {
            span.extensions_mut().insert(t);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        let mut v = Visitor {
            layer: self,
            job: None,
            stage: None,
            partition: None,
        };
        values.record(&mut v);
        if v.job.is_none() && v.stage.is_none() && v.partition.is_none() {
            return;
        }
        let old = ext.remove::<SpanTag>();
        let stage_default = self.stage_of_name(span.metadata().name());
        ext.insert(SpanTag {
            job: v.job.or(old.as_ref().and_then(|o| o.job)),
            stage: v.stage.or(old.as_ref().and_then(|o| o.stage)).or(stage_default),
            partition: v.partition.or(old.as_ref().and_then(|o| o.partition)),
            cache_key: AtomicU64::new(u64::MAX),
            cache_val: AtomicU64::new(0),
        });
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let guard = ctx.span(id).and_then(|span| {
            span.extensions()
                .get::<SpanTag>()
                .map(|t| t.merged(TagId::current()).enter())
        });
        let _ = ENTERED.try_with(|e| e.borrow_mut().push(guard));
    }

    fn on_exit(&self, _id: &Id, _ctx: Context<'_, S>) {
        // Enter and exit nest per thread: the innermost entry is this span's.
        let _ = ENTERED.try_with(|e| drop(e.borrow_mut().pop()));
    }
}
