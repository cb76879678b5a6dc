//! Typed values of a policy, read from TOML values with errors that name
//! the key and say what was expected in the policy's own words (never a
//! Rust type name).

use std::ops::Range;

use toml::{Spanned, Value};

/// A value that is not what its key takes: where, which key, what is wrong.
#[derive(Debug)]
pub(super) struct Bad {
    pub(super) span: Range<usize>,
    pub(super) key: &'static str,
    pub(super) message: String,
}

/// The TOML name of a value's type, as a user would say it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "a whole number",
        Value::Float(_) => "a fractional number",
        Value::Boolean(_) => "true/false",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "a list",
        Value::Table(_) => "a table",
    }
}

fn bad(v: &Spanned<Value>, key: &'static str, message: String) -> Bad {
    Bad {
        span: v.span(),
        key,
        message,
    }
}

/// A true/false switch (`strict`, `allow_dropped_events`, `include_small`);
/// absent is false.
pub(super) fn flag(key: &'static str, v: &Option<Spanned<Value>>) -> Result<bool, Bad> {
    match v {
        None => Ok(false),
        Some(v) => match v.get_ref() {
            Value::Boolean(b) => Ok(*b),
            _ => Err(bad(v, key, "expected true or false".into())),
        },
    }
}

/// A string (`name`, `per`, globs on stage and site).
pub(super) fn string(key: &'static str, v: &Spanned<Value>) -> Result<String, Bad> {
    match v.get_ref() {
        Value::String(s) => Ok(s.clone()),
        other => Err(bad(
            v,
            key,
            format!("expected a string in quotes, found {}", kind(other)),
        )),
    }
}

/// A glob on job or partition: a string, or a whole number (`job = 7`).
pub(super) fn pattern(key: &'static str, v: &Spanned<Value>) -> Result<String, Bad> {
    match v.get_ref() {
        Value::String(s) => Ok(s.clone()),
        Value::Integer(n) => Ok(n.to_string()),
        other => Err(bad(
            v,
            key,
            format!("expected a glob (\"1*\") or a whole number, found {}", kind(other)),
        )),
    }
}

/// A count (`max_copies`, `max_dropped_events`): a whole number, 0 or more.
pub(super) fn count(key: &'static str, v: &Spanned<Value>) -> Result<u64, Bad> {
    match v.get_ref() {
        Value::Integer(n) => u64::try_from(*n).map_err(|_| bad(v, key, format!("{n}: must be 0 or more"))),
        other => Err(bad(v, key, format!("expected a whole number, found {}", kind(other)))),
    }
}

/// A size: a string with a binary unit (`"30 GiB"`) or a whole number of
/// bytes (`max_peak = 1073741824`).
pub(super) fn size(key: &'static str, v: &Spanned<Value>) -> Result<u64, Bad> {
    const HINT: &str = "use a number of bytes or KiB, MiB, GiB, TiB (e.g. \"30 GiB\")";
    match v.get_ref() {
        Value::String(s) => {
            heaptag_format::parse_size(s).ok_or_else(|| bad(v, key, format!("{s:?} is not a size: {HINT}")))
        }
        Value::Integer(n) => u64::try_from(*n).map_err(|_| bad(v, key, format!("{n} is not a size: {HINT}"))),
        other => Err(bad(v, key, format!("expected a size, found {}: {HINT}", kind(other)))),
    }
}

/// A percentage (`max_increase = "10%"`).
pub(super) fn percent(key: &'static str, v: &Spanned<Value>) -> Result<f64, Bad> {
    let Value::String(s) = v.get_ref() else {
        return Err(bad(
            v,
            key,
            format!("expected a percentage such as \"10%\", found {}", kind(v.get_ref())),
        ));
    };
    let t = s.trim();
    t.strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|p| p.is_finite() && *p >= 0.0)
        .ok_or_else(|| bad(v, key, format!("{t:?}: expected a percentage such as \"10%\"")))
}
