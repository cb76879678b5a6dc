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
use toml::Spanned;

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

/// A glob, or a number for job and partition.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
enum PatternValue {
    Text(String),
    Number(i64),
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    name: Option<String>,
    job: Option<Spanned<PatternValue>>,
    stage: Option<Spanned<String>>,
    partition: Option<Spanned<PatternValue>>,
    site: Option<Spanned<String>>,
    max_copies: Option<Spanned<i64>>,
    max_peak: Option<Spanned<String>>,
    per: Option<Spanned<String>>,
    max_rss: Option<Spanned<String>>,
    max_outside_jemalloc: Option<Spanned<String>>,
    max_unattributed: Option<Spanned<String>>,
    max_dropped_events: Option<Spanned<i64>>,
    max_increase: Option<Spanned<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct PolicySpec {
    #[serde(default)]
    strict: bool,
    #[serde(default)]
    rule: Vec<Spanned<RuleSpec>>,
}

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
}

/// A parsed policy.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Policy {
    /// The file it came from.
    pub file: PathBuf,
    /// Rules that select nothing are errors.
    pub strict: bool,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
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
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
            file: path.to_path_buf(),
            line: 0,
            key: None,
            message: format!("cannot read the policy: {e}"),
        })?;
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
            // toml names unknown keys in the message: pull the key out.
            let key = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.starts_with("unknown field"))
                .map(str::to_owned);
            err(e.span(), key.as_deref(), msg)
        })?;
        let mut rules = Vec::new();
        for r in spec.rule {
            let line = line_of(text, r.span().start);
            let r = r.into_inner();
            let glob = |key: &str, v: &Option<Spanned<String>>| -> Result<Option<glob::Pattern>, PolicyError> {
                match v {
                    None => Ok(None),
                    Some(s) => glob::Pattern::new(s.get_ref())
                        .map(Some)
                        .map_err(|e| err(Some(s.span()), Some(key), format!("bad glob {:?}: {e}", s.get_ref()))),
                }
            };
            let glob_num =
                |key: &str, v: &Option<Spanned<PatternValue>>| -> Result<Option<glob::Pattern>, PolicyError> {
                    match v {
                        None => Ok(None),
                        Some(s) => {
                            let text = match s.get_ref() {
                                PatternValue::Text(t) => t.clone(),
                                PatternValue::Number(n) => n.to_string(),
                            };
                            glob::Pattern::new(&text)
                                .map(Some)
                                .map_err(|e| err(Some(s.span()), Some(key), format!("bad glob {text:?}: {e}")))
                        }
                    }
                };
            let selector = Selector {
                job: glob_num("job", &r.job)?,
                stage: glob("stage", &r.stage)?,
                partition: glob_num("partition", &r.partition)?,
                site: glob("site", &r.site)?,
            };
            let size = |key: &str, v: &Option<Spanned<String>>| -> Result<Option<u64>, PolicyError> {
                match v {
                    None => Ok(None),
                    Some(s) => parse_size(s.get_ref()).map(Some).ok_or_else(|| {
                        err(
                            Some(s.span()),
                            Some(key),
                            format!(
                                "{:?} is not a size: use a number of bytes or KiB, MiB, GiB, TiB (e.g. \"30 GiB\")",
                                s.get_ref()
                            ),
                        )
                    }),
                }
            };
            let count = |key: &str, v: &Option<Spanned<i64>>| -> Result<Option<u64>, PolicyError> {
                match v {
                    None => Ok(None),
                    Some(s) => u64::try_from(*s.get_ref())
                        .map(Some)
                        .map_err(|_| err(Some(s.span()), Some(key), "must be 0 or more".into())),
                }
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
            let per = match &r.per {
                None => Per::Tag,
                Some(s) => match s.get_ref().as_str() {
                    "tag" => Per::Tag,
                    "group" => Per::Group,
                    other => {
                        return Err(err(
                            Some(s.span()),
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
            if let Some(s) = &r.max_increase {
                let t = s.get_ref().trim();
                let pct = t
                    .strip_suffix('%')
                    .and_then(|n| n.trim().parse::<f64>().ok())
                    .filter(|p| p.is_finite() && *p >= 0.0)
                    .ok_or_else(|| {
                        err(
                            Some(s.span()),
                            Some("max_increase"),
                            format!("{t:?}: expected a percentage such as \"10%\""),
                        )
                    })?;
                limits.push(Limit::MaxIncrease(pct));
            }
            if limits.is_empty() {
                return Err(err(
                    Some(line_span(text, line)),
                    None,
                    "the rule sets no limit (max_copies, max_peak, max_rss, max_outside_jemalloc, max_unattributed, \
                     max_dropped_events or max_increase)"
                        .into(),
                ));
            }
            let name = r.name.unwrap_or_else(|| {
                let keys: Vec<&str> = limits.iter().map(Limit::key).collect();
                format!("rule at line {line} ({})", keys.join(", "))
            });
            rules.push(Rule {
                name,
                line,
                selector,
                limits,
            });
        }
        if rules.is_empty() {
            return Err(err(None, None, "no [[rule]] in the policy: nothing to check".into()));
        }
        Ok(Policy {
            file: path.to_path_buf(),
            strict: spec.strict,
            rules,
        })
    }
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
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::parse(Path::new("heaptag.toml"), text)
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("30 GiB"), Some(30 << 30));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("1000"), Some(1000));
        assert_eq!(parse_size("30 GB"), None);
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("-1 GiB"), None);
    }

    #[test]
    fn a_policy_parses_with_lines() {
        let p = parse(
            "strict = true\n\n[[rule]]\nname = \"shared\"\nstage = \"pce_*\"\nmax_copies = 1\n\n[[rule]]\njob = 7\nmax_peak = \"30 GiB\"\nper = \"group\"\n",
        )
        .unwrap();
        assert!(p.strict);
        assert_eq!(p.rules.len(), 2);
        assert_eq!((p.rules[0].name.as_str(), p.rules[0].line), ("shared", 3));
        assert_eq!(p.rules[0].limits, vec![Limit::MaxCopies(1)]);
        assert_eq!(p.rules[1].line, 8);
        assert_eq!(p.rules[1].limits, vec![Limit::MaxPeak(30 << 30, Per::Group)]);
        assert_eq!(p.rules[1].selector.job.as_ref().unwrap().as_str(), "7");
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = parse("[[rule]]\nstage = \"x\"\nmax_peek = \"1 GiB\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (3, Some("max_peek")), "{e}");
        assert!(
            e.to_string().starts_with("heaptag.toml:3: max_peek: unknown field"),
            "{e}"
        );

        let e = parse("[[rule]]\nmax_peak = \"30 GB\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (2, Some("max_peak")), "{e}");
        assert!(e.message.contains("not a size"), "{e}");

        let e = parse("[[rule]]\n\nstage = \"[oops\"\nmax_copies = 1\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (3, Some("stage")), "{e}");
        assert!(e.message.contains("bad glob"), "{e}");

        let e = parse("[[rule]]\nstage = \"x\"\n").unwrap_err();
        assert_eq!(e.line, 1, "{e}");
        assert!(e.message.contains("sets no limit"), "{e}");

        let e = parse("[[rule]]\nmax_increase = \"ten\"\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("max_increase"), "{e}");

        let e = parse("strict = \"yes\"\n").unwrap_err();
        assert_eq!(e.line, 1, "{e}");
    }
}
