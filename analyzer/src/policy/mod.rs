//! `heaptag.toml`: the rules `heaptag check` enforces, parsed with every
//! error naming the file, the line and the key.
//!
//! ```toml
//! strict = true                 # a rule that selects nothing is an error
//!
//! [[rule]]
//! name = "PCE is shared once"
//! stage = "pce_*"               # globs on stage, job, partition, call site
//! max_copies = 1
//!
//! [[rule]]
//! stage = "synthesize_partition"
//! max_peak = "30 GiB"           # per selected tag; per = "group" sums them
//!
//! [[rule]]
//! max_rss = "400 GiB"
//! max_dropped_events = 0
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::{Spanned, Value};

mod value;

/// A policy that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyError {
    /// The policy file.
    pub file: PathBuf,
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// The key at fault, when known.
    pub key: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if let Some(k) = &self.key {
            write!(f, ": {k}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for PolicyError {}

/// A rule as written: every value is read as TOML first and typed by
/// `value.rs`, so a wrong type gets a message that names its key.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    name: Option<Spanned<Value>>,
    job: Option<Spanned<Value>>,
    stage: Option<Spanned<Value>>,
    partition: Option<Spanned<Value>>,
    site: Option<Spanned<Value>>,
    max_copies: Option<Spanned<Value>>,
    max_peak: Option<Spanned<Value>>,
    per: Option<Spanned<Value>>,
    max_rss: Option<Spanned<Value>>,
    max_outside_jemalloc: Option<Spanned<Value>>,
    max_unattributed: Option<Spanned<Value>>,
    max_dropped_events: Option<Spanned<Value>>,
    max_tags_without_id: Option<Spanned<Value>>,
    max_increase: Option<Spanned<Value>>,
    include_small: Option<Spanned<Value>>,
}

/// An `[[allow_identical]]` entry as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct AllowSpec {
    stage: Option<Spanned<Value>>,
    site: Option<Spanned<Value>>,
    reason: Option<Spanned<Value>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct PolicySpec {
    strict: Option<Spanned<Value>>,
    allow_dropped_events: Option<Spanned<Value>>,
    #[serde(default)]
    allow_identical: Vec<Spanned<AllowSpec>>,
    #[serde(default)]
    rule: Vec<Spanned<RuleSpec>>,
}

/// Largest policy file read: a policy is a few dozen lines; anything much
/// larger (or endless, such as `/dev/zero`) is not one.
const MAX_POLICY_BYTES: u64 = 1 << 20;

/// Which tags (and call sites) a rule is about. A missing pattern selects
/// everything; a pattern never matches a tag that lacks that dimension,
/// except `*`.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    /// Glob on the job id.
    pub job: Option<glob::Pattern>,
    /// Glob on the stage name.
    pub stage: Option<glob::Pattern>,
    /// Glob on the partition number.
    pub partition: Option<glob::Pattern>,
    /// Glob on the call site (`function (file:line)`).
    pub site: Option<glob::Pattern>,
}

impl Selector {
    /// True when the selector has no pattern at all.
    pub fn is_all(&self) -> bool {
        self.job.is_none() && self.stage.is_none() && self.partition.is_none() && self.site.is_none()
    }

    fn dim(p: &Option<glob::Pattern>, v: Option<String>) -> bool {
        match (p, v) {
            (None, _) => true,
            (Some(p), Some(v)) => p.matches(&v),
            (Some(p), None) => p.as_str() == "*",
        }
    }

    /// Whether a tag matches the job, stage and partition patterns.
    pub fn matches_tag(&self, k: &crate::model::TagKey) -> bool {
        Self::dim(&self.job, k.job.map(|j| j.to_string()))
            && Self::dim(&self.stage, k.stage.clone())
            && Self::dim(&self.partition, k.partition.map(|p| p.to_string()))
    }

    /// Whether a call site matches the site pattern.
    pub fn matches_site(&self, site: &str) -> bool {
        self.site.as_ref().is_none_or(|p| p.matches(site))
    }
}

/// How `max_peak` combines the selected tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// Each selected tag on its own.
    Tag,
    /// The selected tags together, at each sample.
    Group,
}

/// One limit of a rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Limit {
    /// Identical copies alive at once.
    MaxCopies(u64),
    /// Peak live bytes.
    MaxPeak(u64, Per),
    /// Peak RSS.
    MaxRss(u64),
    /// RSS outside jemalloc at the RSS peak.
    MaxOutsideJemalloc(u64),
    /// Bytes held by the untagged tag at the RSS peak.
    MaxUnattributed(u64),
    /// Events the writer dropped.
    MaxDroppedEvents(u64),
    /// Tags the writer could give no id (`tag_overflow` records).
    MaxTagsWithoutId(u64),
    /// Growth of peak live bytes over the baseline, in percent.
    MaxIncrease(f64),
}

impl Limit {
    /// The key that sets this limit.
    pub fn key(&self) -> &'static str {
        match self {
            Limit::MaxCopies(_) => "max_copies",
            Limit::MaxPeak(..) => "max_peak",
            Limit::MaxRss(_) => "max_rss",
            Limit::MaxOutsideJemalloc(_) => "max_outside_jemalloc",
            Limit::MaxUnattributed(_) => "max_unattributed",
            Limit::MaxDroppedEvents(_) => "max_dropped_events",
            Limit::MaxTagsWithoutId(_) => "max_tags_without_id",
            Limit::MaxIncrease(_) => "max_increase",
        }
    }
}

/// One rule, checked.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Its name (or a description made from its keys).
    pub name: String,
    /// Line of its `[[rule]]` header in the policy file.
    pub line: usize,
    /// What it selects.
    pub selector: Selector,
    /// Its limits (at least one).
    pub limits: Vec<Limit>,
    /// `max_peak` per tag counts the small-block estimate too (judged with
    /// its error: a tag fails only when it is over by more than 2 standard
    /// errors). Off: the exact tracked peak, which does not change from run
    /// to run with the sampling.
    pub include_small: bool,
}

/// A parsed policy.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Policy {
    /// The file it came from.
    pub file: PathBuf,
    /// Rules that select nothing are errors.
    pub strict: bool,
    /// `max_copies` is judged on logs with dropped events, cut short or
    /// damaged (otherwise such a log fails it as unverifiable).
    pub allow_dropped_events: bool,
    /// Contents meant to be identical: left out of `max_copies`.
    pub allow_identical: Vec<AllowIdentical>,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
}

/// Contents a program keeps identical on purpose (lookup tables, per-thread
/// constants): a content whose every holder matches is no duplicate.
#[derive(Debug, Clone)]
pub struct AllowIdentical {
    /// Glob on the holder's stage.
    pub stage: Option<glob::Pattern>,
    /// Glob on the holder's call site.
    pub site: Option<glob::Pattern>,
    /// Why (shown nowhere but the policy; for its readers).
    pub reason: Option<String>,
    /// Line in the policy.
    pub line: usize,
}

impl Policy {
    /// Whether a holder of `stage`, allocated at `site`, may hold a content
    /// other blocks hold too.
    pub fn allows_identical(&self, stage: &str, site: &str) -> bool {
        self.allow_identical.iter().any(|a| {
            a.stage.as_ref().is_none_or(|p| p.matches(stage)) && a.site.as_ref().is_none_or(|p| p.matches(site))
        })
    }
}

/// Parses `30 GiB`, `512MiB`, `64K`, `1.5 GiB`, `1000` (bytes). Binary units
/// only: `GB` is refused rather than guessed (heaptag-format's one rule,
/// shared with the allocator's settings).
pub fn parse_size(s: &str) -> Option<u64> {
    heaptag_format::parse_size(s)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

impl Policy {
    /// Whether checking it needs names for call sites (a `site` pattern, or
    /// `max_copies`, whose offenders name where copies were allocated).
    pub fn names_sites(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.selector.site.is_some() || r.limits.iter().any(|l| matches!(l, Limit::MaxCopies(_))))
    }

    /// Reads and checks the policy at `path`.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let fail = |message: String| PolicyError {
            file: path.to_path_buf(),
            line: 0,
            key: None,
            message,
        };
        let text = read_bounded(path).map_err(|e| fail(format!("cannot read the policy: {e}")))?;
        Policy::parse(path, &text)
    }

    /// Parses policy `text` (from `path`, for messages).
    pub fn parse(path: &Path, text: &str) -> Result<Policy, PolicyError> {
        let err = |span: Option<std::ops::Range<usize>>, key: Option<&str>, message: String| PolicyError {
            file: path.to_path_buf(),
            line: span.map_or(0, |s| line_of(text, s.start)),
            key: key.map(str::to_owned),
            message,
        };
        let spec: PolicySpec = toml::from_str(text).map_err(|e| {
            let msg = e.message().trim().to_string();
            // toml names unknown keys in the message: pull the key out;
            // otherwise the key is the one written on the faulty line.
            let key = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.starts_with("unknown field"))
                .map(str::to_owned)
                .or_else(|| e.span().and_then(|sp| key_on_line(text, sp.start)));
            err(e.span(), key.as_deref(), plain_toml_message(&msg, key.as_deref()))
        })?;
        // A value of the wrong type or range, as a policy error.
        let typed = |b: value::Bad| err(Some(b.span), Some(b.key), b.message);
        let strict = value::flag("strict", &spec.strict).map_err(typed)?;
        let allow_dropped_events = value::flag("allow_dropped_events", &spec.allow_dropped_events).map_err(typed)?;
        let mut allow_identical = Vec::new();
        for a in &spec.allow_identical {
            let line = line_of(text, a.span().start);
            let a = a.get_ref();
            let pat = |key: &'static str, v: &Option<Spanned<Value>>| -> Result<Option<glob::Pattern>, PolicyError> {
                let Some(v) = v else { return Ok(None) };
                let text = value::string(key, v).map_err(typed)?;
                glob::Pattern::new(&text)
                    .map(Some)
                    .map_err(|e| err(Some(v.span()), Some(key), format!("bad glob {text:?}: {e}")))
            };
            let (stage, site) = (pat("stage", &a.stage)?, pat("site", &a.site)?);
            if stage.is_none() && site.is_none() {
                return Err(err(
                    Some(line_span(text, line)),
                    None,
                    "an [[allow_identical]] entry needs a stage or a site glob".into(),
                ));
            }
            let reason = a
                .reason
                .as_ref()
                .map(|v| value::string("reason", v).map_err(typed))
                .transpose()?;
            allow_identical.push(AllowIdentical {
                stage,
                site,
                reason,
                line,
            });
        }
        let mut rules = Vec::new();
        for r in spec.rule {
            let line = line_of(text, r.span().start);
            let r = r.into_inner();
            // An optional string-like value with its span.
            let opt = |key: &'static str,
                       v: &Option<Spanned<Value>>,
                       f: fn(&'static str, &Spanned<Value>) -> Result<String, value::Bad>|
             -> Result<Option<(String, std::ops::Range<usize>)>, PolicyError> {
                v.as_ref()
                    .map(|v| f(key, v).map(|s| (s, v.span())).map_err(typed))
                    .transpose()
            };
            let glob = |key: &'static str, v: Option<(String, std::ops::Range<usize>)>| {
                v.map(|(text, span)| {
                    glob::Pattern::new(&text).map_err(|e| err(Some(span), Some(key), format!("bad glob {text:?}: {e}")))
                })
                .transpose()
            };
            let selector = Selector {
                job: glob("job", opt("job", &r.job, value::pattern)?)?,
                stage: glob("stage", opt("stage", &r.stage, value::string)?)?,
                partition: glob("partition", opt("partition", &r.partition, value::pattern)?)?,
                site: glob("site", opt("site", &r.site, value::string)?)?,
            };
            let size = |key: &'static str, v: &Option<Spanned<Value>>| {
                v.as_ref().map(|v| value::size(key, v)).transpose().map_err(typed)
            };
            let count = |key: &'static str, v: &Option<Spanned<Value>>| {
                v.as_ref().map(|v| value::count(key, v)).transpose().map_err(typed)
            };
            let mut limits = Vec::new();
            if let Some(n) = count("max_copies", &r.max_copies)? {
                if n == 0 {
                    return Err(err(
                        r.max_copies.as_ref().map(|s| s.span()),
                        Some("max_copies"),
                        "must be at least 1".into(),
                    ));
                }
                limits.push(Limit::MaxCopies(n));
            }
            let per = match opt("per", &r.per, value::string)? {
                None => Per::Tag,
                Some((p, span)) => match p.as_str() {
                    "tag" => Per::Tag,
                    "group" => Per::Group,
                    other => {
                        return Err(err(
                            Some(span),
                            Some("per"),
                            format!("{other:?}: expected \"tag\" or \"group\""),
                        ))
                    }
                },
            };
            if r.per.is_some() && r.max_peak.is_none() {
                return Err(err(
                    r.per.as_ref().map(|s| s.span()),
                    Some("per"),
                    "only applies to max_peak".into(),
                ));
            }
            if let Some(b) = size("max_peak", &r.max_peak)? {
                limits.push(Limit::MaxPeak(b, per));
            }
            if let Some(b) = size("max_rss", &r.max_rss)? {
                limits.push(Limit::MaxRss(b));
            }
            if let Some(b) = size("max_outside_jemalloc", &r.max_outside_jemalloc)? {
                limits.push(Limit::MaxOutsideJemalloc(b));
            }
            if let Some(b) = size("max_unattributed", &r.max_unattributed)? {
                limits.push(Limit::MaxUnattributed(b));
            }
            if let Some(n) = count("max_dropped_events", &r.max_dropped_events)? {
                limits.push(Limit::MaxDroppedEvents(n));
            }
            if let Some(n) = count("max_tags_without_id", &r.max_tags_without_id)? {
                limits.push(Limit::MaxTagsWithoutId(n));
            }
            if let Some(v) = &r.max_increase {
                limits.push(Limit::MaxIncrease(value::percent("max_increase", v).map_err(typed)?));
            }
            if limits.is_empty() {
                return Err(err(
                    Some(line_span(text, line)),
                    None,
                    "the rule sets no limit (max_copies, max_peak, max_rss, max_outside_jemalloc, max_unattributed, \
                     max_dropped_events, max_tags_without_id or max_increase)"
                        .into(),
                ));
            }
            let name = opt("name", &r.name, value::string)?.map(|(n, _)| n).unwrap_or_else(|| {
                let keys: Vec<&str> = limits.iter().map(Limit::key).collect();
                format!("rule at line {line} ({})", keys.join(", "))
            });
            let include_small = value::flag("include_small", &r.include_small).map_err(typed)?;
            if include_small && r.max_peak.is_none() {
                return Err(err(
                    r.include_small.as_ref().map(|s| s.span()),
                    Some("include_small"),
                    "only applies to max_peak".into(),
                ));
            }
            rules.push(Rule {
                name,
                line,
                selector,
                limits,
                include_small,
            });
        }
        if rules.is_empty() {
            return Err(err(None, None, "no [[rule]] in the policy: nothing to check".into()));
        }
        Ok(Policy {
            file: path.to_path_buf(),
            strict,
            allow_dropped_events,
            allow_identical,
            rules,
        })
    }
}

/// The key written on the line holding byte `at` (`max_peak = ...`,
/// `[[rule]]`), if any.
fn key_on_line(text: &str, at: usize) -> Option<String> {
    let start = text[..at.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?.trim();
    let key = line
        .trim_start_matches('[')
        .split(['=', ']'])
        .next()?
        .trim()
        .trim_matches('"');
    (!key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then(|| key.to_owned())
}

/// toml's messages in the policy's words (no Rust or serde type names).
fn plain_toml_message(msg: &str, key: Option<&str>) -> String {
    if msg.contains("expected a sequence") {
        let table = key.unwrap_or("rule");
        return format!("`{table}` is a list of tables: write [[{table}]] sections, one per entry");
    }
    if msg.contains("value was too large") || msg.contains("number too large") {
        return "the number is too large for TOML (at most 9223372036854775807): write it as a string, \
                e.g. \"9223372036854775808\""
            .into();
    }
    if let Some(rest) = msg.strip_prefix("invalid type: ") {
        return format!(
            "wrong type: {}",
            rest.replace("i64", "a whole number").replace("a sequence", "a list")
        );
    }
    msg.to_owned()
}

/// Reads a regular file of at most [`MAX_POLICY_BYTES`], without blocking on
/// a FIFO or reading a device forever.
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() > MAX_POLICY_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("{} bytes; a policy is at most {MAX_POLICY_BYTES} bytes", meta.len()),
        ));
    }
    let mut text = String::new();
    file.take(MAX_POLICY_BYTES + 1).read_to_string(&mut text)?;
    Ok(text)
}

fn line_span(text: &str, line: usize) -> std::ops::Range<usize> {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    start..start
}

#[cfg(test)]
mod tests;
