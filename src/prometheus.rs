//! heaptag's figures as Prometheus metrics (cargo feature `prometheus`),
//! with the official [`prometheus_client`] crate, for a daemon's existing
//! `/metrics` endpoint.
//!
//! ```
//! # #[global_allocator]
//! # static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();
//! let _stage = heaptag::stage("gpu_prove");
//! let buf = vec![0u8; 1 << 20];
//! // Alone: the Prometheus text format (version 0.0.4).
//! let mut body = String::new();
//! heaptag::prometheus::encode(&mut body).unwrap();
//! assert!(body.contains("heaptag_live_bytes{stage=\"gpu_prove\"} "));
//! # drop(buf);
//!
//! // Or beside the daemon's own metrics, read afresh at every scrape.
//! let mut registry = prometheus_client::registry::Registry::default();
//! registry.register_collector(Box::new(heaptag::prometheus::Collector::default()));
//! ```
//!
//! | metric | type | labels | what |
//! | --- | --- | --- | --- |
//! | `heaptag_live_bytes` | gauge | stage, partition | bytes alive now (tracked exact + small estimated) |
//! | `heaptag_peak_live_bytes` | gauge | stage, partition | the highest peak of one tag in the group (see below) |
//! | `heaptag_allocated_bytes_total` | counter | stage, partition | bytes allocated (exact) |
//! | `heaptag_allocations_total` | counter | stage, partition | blocks allocated (exact) |
//! | `heaptag_process_live_bytes` | gauge | - | bytes alive now, all tags (exact) |
//! | `heaptag_overhead_bytes` | gauge | - | heaptag's own bookkeeping memory |
//! | `heaptag_tags` | gauge | - | distinct tags in use so far |
//! | `heaptag_tag_overflow_total` | counter | - | tags that got no id (charged as untagged) |
//! | `heaptag_dropped_events_total` | counter | - | log events dropped (ring full or write failures) |
//! | `heaptag_log_write_errors_total` | counter | - | failed writes to the log file |
//! | `heaptag_alloc_failures_total` | counter | - | allocations the inner allocator refused |
//! | `heaptag_untracked_frees_total` | counter | - | frees of tracked-size blocks heaptag had no record of |
//! | `heaptag_table_insert_failures_total` | counter | - | blocks that could not be recorded |
//! | `heaptag_stacks_not_stored_total` | counter | - | call stacks that could not be stored |
//! | `heaptag_stacks_truncated_total` | counter | - | call stacks stored cut to their innermost 8 frames (the stack table at its bound) |
//! | `heaptag_thread_slots` | gauge | - | per-thread counter slots owned by live threads |
//!
//! **Label cardinality is bounded**: by default the labels are `stage` and
//! `partition` only, and the figures of every job of one (stage,
//! partition) are added up, so a daemon that runs job after job keeps a
//! fixed set of series. [`Options::with_job`] adds a `job` label (one series
//! per job: only for short runs, or when jobs are few). A missing part has
//! no label (untagged memory has none). Summed over jobs, a peak is no
//! longer one moment's figure: `heaptag_peak_live_bytes` is then the
//! highest peak any one tag of the group reached (with `job`, each tag's
//! own peak).

use std::collections::BTreeMap;

use prometheus_client::collector::Collector as PromCollector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::Snapshot;

/// The `Content-Type` of what [`encode`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Which labels the per-tag metrics carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    job: bool,
}

impl Options {
    /// Labels `stage` and `partition`; jobs added up (the default).
    pub const fn new() -> Options {
        Options { job: false }
    }

    /// Adds the `job` label: one series per job (unbounded on a daemon
    /// that runs job after job).
    pub const fn with_job(mut self, yes: bool) -> Options {
        self.job = yes;
        self
    }
}

/// A [`prometheus_client`] collector of heaptag's metrics: takes a
/// [`snapshot`](crate::snapshot) at each scrape.
#[derive(Clone, Copy, Debug, Default)]
pub struct Collector {
    options: Options,
}

impl Collector {
    /// A collector with these labels.
    pub const fn new(options: Options) -> Collector {
        Collector { options }
    }
}

/// Figures of one label set.
#[derive(Default)]
struct Group {
    live: u64,
    peak: u64,
    allocated: u64,
    allocations: u64,
}

type LabelSet = Vec<(&'static str, String)>;

fn groups(snap: &Snapshot, options: Options) -> BTreeMap<LabelSet, Group> {
    let mut out: BTreeMap<LabelSet, Group> = BTreeMap::new();
    for t in &snap.tags {
        let mut labels: LabelSet = Vec::new();
        if let (true, Some(j)) = (options.job, t.tag.job) {
            labels.push(("job", j.to_string()));
        }
        if let Some(s) = t.tag.stage {
            labels.push(("stage", s.to_string()));
        }
        if let Some(p) = t.tag.partition {
            labels.push(("partition", p.to_string()));
        }
        let g = out.entry(labels).or_default();
        g.live = g.live.saturating_add(t.live_bytes);
        g.peak = g.peak.max(t.peak_live_bytes);
        g.allocated = g.allocated.saturating_add(t.alloc_bytes);
        g.allocations = g.allocations.saturating_add(t.alloc_count);
    }
    out
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(v as i64);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn family(
    e: &mut DescriptorEncoder,
    groups: &BTreeMap<LabelSet, Group>,
    name: &str,
    help: &str,
    kind: MetricType,
    value: impl Fn(&Group) -> u64,
) -> Result<(), std::fmt::Error> {
    let mut m = e.encode_descriptor(name, help, None, kind)?;
    for (labels, g) in groups {
        let enc = m.encode_family(labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(value(g)).encode(enc)?,
            _ => ConstGauge::new(value(g) as i64).encode(enc)?,
        }
    }
    Ok(())
}

impl PromCollector for Collector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = crate::snapshot();
        let g = groups(&snap, self.options);
        let e = &mut e;
        family(
            e,
            &g,
            "heaptag_live_bytes",
            "Bytes alive now per tag (tracked blocks exact, small blocks estimated).",
            MetricType::Gauge,
            |g| g.live,
        )?;
        family(
            e,
            &g,
            "heaptag_peak_live_bytes",
            "Highest live bytes of one tag of the group so far.",
            MetricType::Gauge,
            |g| g.peak,
        )?;
        family(
            e,
            &g,
            "heaptag_allocated_bytes",
            "Bytes allocated per tag (exact).",
            MetricType::Counter,
            |g| g.allocated,
        )?;
        family(
            e,
            &g,
            "heaptag_allocations",
            "Blocks allocated per tag (exact).",
            MetricType::Counter,
            |g| g.allocations,
        )?;
        let h = &snap.health;
        gauge(
            e,
            "heaptag_process_live_bytes",
            "Bytes alive now, all tags (exact).",
            snap.totals.live_bytes,
        )?;
        gauge(
            e,
            "heaptag_overhead_bytes",
            "Bytes heaptag holds for its own bookkeeping.",
            snap.overhead_bytes,
        )?;
        gauge(e, "heaptag_tags", "Distinct tags in use so far.", h.tags)?;
        gauge(
            e,
            "heaptag_thread_slots",
            "Per-thread counter slots owned by live threads.",
            h.thread_slots_in_use,
        )?;
        counter(
            e,
            "heaptag_tag_overflow",
            "Tags that got no id (charged as untagged).",
            h.tag_overflow,
        )?;
        counter(
            e,
            "heaptag_dropped_events",
            "Log events dropped (ring full or write failures).",
            h.dropped_events,
        )?;
        counter(
            e,
            "heaptag_log_write_errors",
            "Writes to the log file that failed.",
            h.log_write_errors,
        )?;
        counter(
            e,
            "heaptag_alloc_failures",
            "Allocations the inner allocator refused.",
            h.alloc_failures,
        )?;
        counter(
            e,
            "heaptag_untracked_frees",
            "Frees of tracked-size blocks heaptag had no record of.",
            h.untracked_frees,
        )?;
        counter(
            e,
            "heaptag_table_insert_failures",
            "Blocks that could not be recorded (internal heap exhausted).",
            h.table_insert_failures,
        )?;
        counter(
            e,
            "heaptag_stacks_not_stored",
            "Call stacks that could not be stored.",
            h.stacks_not_stored,
        )?;
        counter(
            e,
            "heaptag_stacks_truncated",
            "Call stacks stored cut to their innermost frames (the stack table at its bound).",
            h.stacks_truncated,
        )?;
        Ok(())
    }
}

/// Appends heaptag's metrics, with the default labels (stage, partition),
/// to `out` in the Prometheus text format.
pub fn encode(out: &mut String) -> std::fmt::Result {
    encode_with(out, Options::new())
}

/// [`encode`] with the labels `options` asks for.
pub fn encode_with(out: &mut String, options: Options) -> std::fmt::Result {
    let mut r = Registry::default();
    r.register_collector(Box::new(Collector::new(options)));
    prometheus_client::encoding::prometheus_text::encode(out, &r)
}
