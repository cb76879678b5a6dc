//! `heaptag diff OLD NEW`: two runs' figures side by side, sorted by change.
//!
//! Four tables, each row a key with its figures before and after:
//!
//! - **run**: peak RSS, peak attributed, bytes allocated, waste at the
//!   worst moment (`heaptag dups`), extra copies then;
//! - **tags**, keyed by stage and partition, never by job id (job ids differ
//!   between runs), exactly as `heaptag check --baseline` keys them
//!   ([`baseline_key`]): peak live (the highest of any job's tag with that
//!   key, the figure baselines hold), bytes allocated (summed over jobs),
//!   copies (the most holders of one duplicated content alive at once
//!   while a tag of the key held one; 1 when it held none) and wasted bytes
//!   (the extra copies tags of the key held at each content's worst
//!   moment);
//! - **sites**, keyed by call site as `heaptag sites` names them: peak live
//!   and bytes allocated;
//! - **contents**, keyed by content hash (or, without fingerprints, site and
//!   size): copies and wasted bytes at the worst moment. Hashes match only
//!   between logs whose fingerprints are the same kind (sampled or full)
//!   with the same hash function (the header says which, `docs/FORMAT.md`):
//!   otherwise each side's hashes are shown with their kind and function
//!   and no content is in both ([`ContentHashes`]).
//!
//! Rows are sorted by their largest absolute change in bytes, largest first.
//!
//! `--fail-above P%` fails (exit 1) when any *gated* figure grows by more
//! than P percent of its old value and by at least `--fail-min-bytes`
//! (copies: by at least one copy). Gated: the run's peak RSS, peak
//! attributed and waste; each stage/partition's peak live, allocated,
//! copies and waste. Sites and contents are shown, not gated: their keys
//! (file:line, content hashes) change with the code and the data. A key
//! only in NEW grows from 0 (infinitely); a key only in OLD never fails.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::PathBuf;

use serde::Serialize;

use crate::check::{baseline_key, Baseline};
use crate::model::{Model, TagKey};
use crate::render::table::Table;
use crate::render::{heading, Format};
use crate::report::{self, SCHEMA_VERSION};
use crate::units::bytes;
use crate::{dups, Error};

/// A figure before and after.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Change {
    /// In OLD (0 when the key is not there).
    pub before: u64,
    /// In NEW (0 when the key is not there).
    pub after: u64,
}

impl Change {
    /// `after - before`.
    pub fn delta(&self) -> i128 {
        self.after as i128 - self.before as i128
    }

    /// Growth in percent of `before` (`None`: from 0 to more, infinite).
    pub fn pct(&self) -> Option<f64> {
        if self.before == 0 {
            return (self.after == 0).then_some(0.0);
        }
        Some(self.delta() as f64 * 100.0 / self.before as f64)
    }

    fn grows_above(&self, pct: f64, min: u64) -> bool {
        self.after > self.before && self.after - self.before >= min && self.pct().is_none_or(|p| p > pct)
    }
}

/// The run's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunDiff {
    /// Peak RSS (VmHWM, else the highest sample).
    pub peak_rss_bytes: Change,
    /// Highest attributed bytes (tracked + small estimate).
    pub peak_attributed_bytes: Change,
    /// Bytes allocated by every tag.
    pub allocated_bytes: Change,
    /// Bytes of extra copies alive at the worst moment.
    pub wasted_bytes: Change,
    /// Extra copies alive then.
    pub extra_copies: Change,
}

/// A stage and partition's figures.
#[derive(Clone, Debug, Serialize)]
pub struct TagDiff {
    /// `stage=x partition=2` (no job), as baselines key tags.
    pub key: String,
    /// Highest peak live of any job's tag with this key.
    pub peak_live_bytes: Change,
    /// Bytes allocated, summed over jobs.
    pub allocated_bytes: Change,
    /// Most holders of one duplicated content alive at once while a tag of
    /// the key held one (1: none duplicated).
    pub copies: Change,
    /// Bytes of the extra copies its tags held at each content's worst moment.
    pub wasted_bytes: Change,
    /// Present in OLD / in NEW.
    pub in_old: bool,
    /// Present in NEW.
    pub in_new: bool,
}

/// A call site's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SiteDiff {
    /// The call site.
    pub site: String,
    /// Highest peak live of one of its stacks.
    pub peak_live_bytes: Change,
    /// Bytes allocated from it.
    pub allocated_bytes: Change,
}

/// A duplicated content's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ContentDiff {
    /// Its hash, or `site, size (suspected)` without fingerprints.
    pub content: String,
    /// Size of one copy.
    pub size_bytes: u64,
    /// Call site of the original (the newer run's when in both).
    pub site: String,
    /// Holders alive at once at the worst moment (0: not duplicated in that run).
    pub copies: Change,
    /// Extra copies' bytes then.
    pub wasted_bytes: Change,
}

/// Which fingerprints each side's content hashes are.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ContentHashes {
    /// OLD's: `sampled, XXH3-64`, `full, four-lane`, ...
    pub old: String,
    /// NEW's.
    pub new: String,
    /// The same kind and function: a hash in both is the same content.
    /// When false, every content row is in one run only.
    pub comparable: bool,
}

/// A gated figure that grew more than allowed.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// `run`, or the stage/partition key.
    pub key: String,
    /// The figure (`peak_live_bytes`, ...).
    pub figure: String,
    /// Before and after.
    pub change: Change,
    /// Growth in percent (`None`: from 0).
    pub pct: Option<f64>,
}

/// `heaptag diff`.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    /// JSON schema version.
    pub schema_version: u32,
    /// The old log.
    pub old: String,
    /// The new log.
    pub new: String,
    /// Whole-run figures.
    pub run: RunDiff,
    /// Per stage and partition, largest change first.
    pub tags: Vec<TagDiff>,
    /// Per call site, largest change first.
    pub sites: Vec<SiteDiff>,
    /// Per duplicated content, largest change first.
    pub contents: Vec<ContentDiff>,
    /// Whether the two sides' content hashes compare.
    pub content_hashes: ContentHashes,
    /// `--fail-above`, percent.
    pub fail_above_pct: Option<f64>,
    /// `--fail-min-bytes`.
    pub fail_min_bytes: u64,
    /// Gated figures that grew more than allowed.
    pub failures: Vec<Failure>,
}

/// What `heaptag diff` is asked.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffOptions {
    /// Fail when a gated figure grows more than this percentage.
    pub fail_above_pct: Option<f64>,
    /// ... and by at least this many bytes.
    pub fail_min_bytes: u64,
}

// The percentage is never NaN (`parse_pct` refuses it), so equality is total.
impl Eq for DiffOptions {}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            fail_above_pct: None,
            fail_min_bytes: DEFAULT_MIN_BYTES,
        }
    }
}

/// Default `--fail-min-bytes`: 1 MiB (smaller changes are noise of the
/// small-block estimate).
pub const DEFAULT_MIN_BYTES: u64 = 1 << 20;

/// Parses `--fail-above`: `10%` or `10`.
pub fn parse_pct(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?}: expected a percentage such as 10%")),
    }
}

/// One side's figures.
#[derive(Default)]
struct Side {
    run: (u64, u64, u64, u64, u64),
    tags: BTreeMap<String, (u64, u64, u64, u64)>,
    sites: BTreeMap<String, (u64, u64)>,
    contents: BTreeMap<String, (u64, String, u64, u64)>,
    /// The kind and function of the log's fingerprints (see [`fp_kind`]).
    fp: String,
}

/// The kind (sampled or full, from the header) and hash function of a
/// log's fingerprints: `sampled, XXH3-64`. Every fingerprint of a log is of
/// the kind its header names.
fn fp_kind(m: &Model) -> String {
    let s = &m.header.settings;
    let kind = if s.fingerprint_full { "full" } else { "sampled" };
    format!("{kind}, {}", s.fingerprint_hash(s.fingerprint_full).name())
}

fn side(m: &Model) -> Side {
    let mut s = Side {
        fp: fp_kind(m),
        ..Side::default()
    };
    let one = std::slice::from_ref(m);
    // Peaks exactly as baselines hold them, so diff and check agree.
    let b = Baseline::of(one);
    let r = report::report(one);
    let d = dups::analyze(m);
    let mut allocated_total = 0u64;
    if let Some(sec) = r.sources.first() {
        for row in &sec.tags {
            let k = TagKey {
                job: row.job,
                stage: row.stage.clone(),
                partition: row.partition,
                undefined: row.undefined,
                folded: row.folded_tags.is_some(),
            };
            let e = s.tags.entry(baseline_key(&k)).or_insert((0, 0, 1, 0));
            e.1 = e.1.saturating_add(row.allocated_bytes);
            allocated_total = allocated_total.saturating_add(row.allocated_bytes);
        }
    }
    for (key, peak) in &b.peak_live_bytes {
        s.tags.entry(key.clone()).or_insert((0, 0, 1, 0)).0 = *peak;
    }
    // Tag ids and tag names to keys, for the duplicate figures.
    let mut id_key: BTreeMap<u32, String> = BTreeMap::new();
    let mut name_key: BTreeMap<String, String> = BTreeMap::new();
    for (id, _) in m.tags_used() {
        let k = m.tag(id);
        id_key.insert(id, baseline_key(&k));
        name_key.insert(k.to_string(), baseline_key(&k));
    }
    for g in &d.duplicated {
        for (id, copies) in &g.copies_by_tag {
            if let Some(e) = id_key.get(id).and_then(|k| s.tags.get_mut(k)) {
                e.2 = e.2.max(*copies);
            }
        }
        for c in &g.extra_copies {
            if let Some(e) = name_key.get(&c.tag).and_then(|k| s.tags.get_mut(k)) {
                e.3 = e.3.saturating_add(g.size_bytes);
            }
        }
        let content = g
            .hash
            .clone()
            .unwrap_or_else(|| format!("{}, {} (suspected)", g.site, bytes(g.size_bytes)));
        s.contents
            .insert(content, (g.size_bytes, g.site.clone(), g.copies, g.wasted_bytes));
    }
    let sites = report::sites(one, usize::MAX);
    if let Some(sec) = sites.sources.first() {
        for row in &sec.by_peak {
            s.sites
                .insert(row.site.clone(), (row.peak_live.bytes, row.allocated_bytes));
        }
    }
    s.run = (
        m.peak_rss().map_or(0, |p| p.0),
        m.attributed_peak.0,
        allocated_total,
        d.worst.wasted_bytes,
        d.worst.extra_copies,
    );
    s
}

fn ch(before: u64, after: u64) -> Change {
    Change { before, after }
}

fn biggest(cs: &[Change]) -> u128 {
    cs.iter().map(|c| c.delta().unsigned_abs()).max().unwrap_or(0)
}

/// Compares two loaded logs (NEW against OLD).
pub fn diff(old: &Model, new: &Model, opts: &DiffOptions) -> Diff {
    let (mut a, mut b) = (side(old), side(new));
    let content_hashes = ContentHashes {
        old: a.fp.clone(),
        new: b.fp.clone(),
        comparable: a.fp == b.fp,
    };
    if !content_hashes.comparable {
        // Hashes of different functions (or of different bytes: sampled
        // against full) say nothing about each other: each side's are
        // named with what they are, so none is taken for the other's.
        for x in [&mut a, &mut b] {
            let fp = x.fp.clone();
            x.contents = std::mem::take(&mut x.contents)
                .into_iter()
                .map(|(k, v)| {
                    if k.ends_with("(suspected)") {
                        (k, v)
                    } else {
                        (format!("{k} ({fp})"), v)
                    }
                })
                .collect();
        }
    }
    let run = RunDiff {
        peak_rss_bytes: ch(a.run.0, b.run.0),
        peak_attributed_bytes: ch(a.run.1, b.run.1),
        allocated_bytes: ch(a.run.2, b.run.2),
        wasted_bytes: ch(a.run.3, b.run.3),
        extra_copies: ch(a.run.4, b.run.4),
    };
    let keys: BTreeSet<&String> = a.tags.keys().chain(b.tags.keys()).collect();
    let mut tags: Vec<TagDiff> = keys
        .into_iter()
        .map(|k| {
            let x = a.tags.get(k);
            let y = b.tags.get(k);
            let (x0, y0) = (x.copied().unwrap_or((0, 0, 1, 0)), y.copied().unwrap_or((0, 0, 1, 0)));
            TagDiff {
                key: k.clone(),
                peak_live_bytes: ch(x0.0, y0.0),
                allocated_bytes: ch(x0.1, y0.1),
                copies: ch(x0.2, y0.2),
                wasted_bytes: ch(x0.3, y0.3),
                in_old: x.is_some(),
                in_new: y.is_some(),
            }
        })
        .filter(|t: &TagDiff| {
            // A tag that held and allocated nothing on either side says nothing.
            [t.peak_live_bytes, t.allocated_bytes, t.wasted_bytes]
                .iter()
                .any(|c| c.before > 0 || c.after > 0)
                || t.copies.before > 1
                || t.copies.after > 1
        })
        .collect();
    tags.sort_by(|p, q| {
        let f = |t: &TagDiff| biggest(&[t.peak_live_bytes, t.allocated_bytes, t.wasted_bytes]);
        f(q).cmp(&f(p)).then_with(|| p.key.cmp(&q.key))
    });
    let keys: BTreeSet<&String> = a.sites.keys().chain(b.sites.keys()).collect();
    let mut sites: Vec<SiteDiff> = keys
        .into_iter()
        .map(|k| {
            let x = a.sites.get(k).copied().unwrap_or_default();
            let y = b.sites.get(k).copied().unwrap_or_default();
            SiteDiff {
                site: k.clone(),
                peak_live_bytes: ch(x.0, y.0),
                allocated_bytes: ch(x.1, y.1),
            }
        })
        .collect();
    sites.sort_by(|p, q| {
        let f = |s: &SiteDiff| biggest(&[s.peak_live_bytes, s.allocated_bytes]);
        f(q).cmp(&f(p)).then_with(|| p.site.cmp(&q.site))
    });
    let keys: BTreeSet<&String> = a.contents.keys().chain(b.contents.keys()).collect();
    let mut contents: Vec<ContentDiff> = keys
        .into_iter()
        .map(|k| {
            let x = a.contents.get(k);
            let y = b.contents.get(k);
            let (size, site) = y.or(x).map(|v| (v.0, v.1.clone())).unwrap_or_default();
            ContentDiff {
                content: k.clone(),
                size_bytes: size,
                site,
                copies: ch(x.map_or(0, |v| v.2), y.map_or(0, |v| v.2)),
                wasted_bytes: ch(x.map_or(0, |v| v.3), y.map_or(0, |v| v.3)),
            }
        })
        .collect();
    contents.sort_by(|p, q| {
        q.wasted_bytes
            .delta()
            .unsigned_abs()
            .cmp(&p.wasted_bytes.delta().unsigned_abs())
            .then_with(|| p.content.cmp(&q.content))
    });
    let mut failures = Vec::new();
    if let Some(pct) = opts.fail_above_pct {
        let min = opts.fail_min_bytes;
        let mut gate = |key: &str, figure: &str, c: Change, min: u64| {
            if c.grows_above(pct, min) {
                failures.push(Failure {
                    key: key.into(),
                    figure: figure.into(),
                    change: c,
                    pct: c.pct(),
                });
            }
        };
        gate("run", "peak_rss_bytes", run.peak_rss_bytes, min);
        gate("run", "peak_attributed_bytes", run.peak_attributed_bytes, min);
        gate("run", "wasted_bytes", run.wasted_bytes, min);
        for t in &tags {
            gate(&t.key, "peak_live_bytes", t.peak_live_bytes, min);
            gate(&t.key, "allocated_bytes", t.allocated_bytes, min);
            gate(&t.key, "copies", t.copies, 1);
            gate(&t.key, "wasted_bytes", t.wasted_bytes, min);
        }
    }
    Diff {
        schema_version: SCHEMA_VERSION,
        old: old.path.display().to_string(),
        new: new.path.display().to_string(),
        run,
        tags,
        sites,
        contents,
        content_hashes,
        fail_above_pct: opts.fail_above_pct,
        fail_min_bytes: opts.fail_min_bytes,
        failures,
    }
}

/// Loads both logs and compares them (names needed for call sites).
pub fn diff_logs(old: &PathBuf, new: &PathBuf, opts: &DiffOptions) -> Result<(Diff, Vec<Model>), Error> {
    let mut models = Vec::new();
    for p in [old, new] {
        models.push(crate::export::load_one(p, true)?);
    }
    let d = diff(&models[0], &models[1], opts);
    Ok((d, models))
}

fn pct_text(c: &Change) -> String {
    match c.pct() {
        _ if c.before == c.after => "=".into(),
        Some(p) => format!("{p:+.1}%"),
        None => "new".into(),
    }
}

fn bytes_change(c: &Change) -> [String; 3] {
    let d = c.delta();
    let delta = if d < 0 {
        format!("-{}", bytes(d.unsigned_abs() as u64))
    } else {
        format!("+{}", bytes(d as u64))
    };
    [bytes(c.before), bytes(c.after), format!("{delta} ({})", pct_text(c))]
}

fn count_change(c: &Change) -> String {
    if c.before == c.after {
        format!("{}", c.after)
    } else {
        format!("{} -> {}", c.before, c.after)
    }
}

/// Renders a diff.
pub fn render(d: &Diff, f: Format, out: &mut dyn Write) -> io::Result<()> {
    if f == Format::Json {
        return crate::render::json(d, out);
    }
    heading(f, out, 1, "heaptag diff")?;
    let line = |out: &mut dyn Write, text: String| match f {
        Format::Markdown => writeln!(out, "- {text}"),
        _ => writeln!(out, "{text}"),
    };
    line(out, format!("old: {}", d.old))?;
    line(out, format!("new: {}", d.new))?;

    heading(f, out, 2, "Run")?;
    let mut t = Table::new(&["figure", "old", "new", "change"]);
    for (name, c) in [
        ("peak RSS", &d.run.peak_rss_bytes),
        ("peak attributed", &d.run.peak_attributed_bytes),
        ("allocated", &d.run.allocated_bytes),
        ("wasted at the worst moment", &d.run.wasted_bytes),
    ] {
        let [a, b, c] = bytes_change(c);
        t.row(vec![name.into(), a, b, c]);
    }
    t.row(vec![
        "extra copies then".into(),
        d.run.extra_copies.before.to_string(),
        d.run.extra_copies.after.to_string(),
        format!("{:+}", d.run.extra_copies.delta()),
    ]);
    t.write(f, out)?;

    heading(f, out, 2, "Per stage and partition (jobs merged), largest change first")?;
    let mut t = Table::new(&[
        "tag",
        "peak old",
        "peak new",
        "peak change",
        "allocated change",
        "copies",
        "wasted change",
    ]);
    for r in &d.tags {
        let [a, b, c] = bytes_change(&r.peak_live_bytes);
        let mut key = r.key.clone();
        if !r.in_old {
            key.push_str(" (new)");
        } else if !r.in_new {
            key.push_str(" (gone)");
        }
        t.row(vec![
            key,
            a,
            b,
            c,
            bytes_change(&r.allocated_bytes)[2].clone(),
            count_change(&r.copies),
            bytes_change(&r.wasted_bytes)[2].clone(),
        ]);
    }
    t.write(f, out)?;

    heading(f, out, 2, "Per call site, largest change first")?;
    let mut t = Table::new(&[
        "site",
        "peak old",
        "peak new",
        "peak change",
        "allocated old",
        "allocated new",
        "allocated change",
    ]);
    for r in &d.sites {
        let [a, b, c] = bytes_change(&r.peak_live_bytes);
        let [x, y, z] = bytes_change(&r.allocated_bytes);
        t.row(vec![r.site.clone(), a, b, c, x, y, z]);
    }
    t.write(f, out)?;

    heading(f, out, 2, "Per duplicated content, largest change first")?;
    if !d.content_hashes.comparable && !d.contents.is_empty() {
        line(
            out,
            format!(
                "Content hashes do not compare: OLD's fingerprints are ({}), NEW's ({}); no content is matched across the runs.",
                d.content_hashes.old, d.content_hashes.new
            ),
        )?;
    }
    let mut t = Table::new(&[
        "content",
        "size",
        "copies",
        "wasted old",
        "wasted new",
        "change",
        "<site",
    ]);
    for r in &d.contents {
        let [a, b, c] = bytes_change(&r.wasted_bytes);
        t.row(vec![
            r.content.clone(),
            bytes(r.size_bytes),
            count_change(&r.copies),
            a,
            b,
            c,
            r.site.clone(),
        ]);
    }
    t.write(f, out)?;

    if let Some(p) = d.fail_above_pct {
        heading(
            f,
            out,
            2,
            &format!(
                "Gate: no figure may grow more than {p}% (and {})",
                bytes(d.fail_min_bytes)
            ),
        )?;
        if d.failures.is_empty() {
            line(out, "PASSED".into())?;
        }
        for x in &d.failures {
            let grew = match x.pct {
                Some(p) => format!("+{p:.1}%"),
                None => "from 0".into(),
            };
            let (a, b) = if x.figure == "copies" {
                (x.change.before.to_string(), x.change.after.to_string())
            } else {
                (bytes(x.change.before), bytes(x.change.after))
            };
            line(out, format!("FAILED: {} {}: {a} -> {b} ({grew})", x.key, x.figure))?;
        }
    }
    Ok(())
}
