//! Rendering `heaptag check`'s outcomes: text, Markdown, JSON, JUnit XML.

use std::io::{self, Write};

use super::CheckReport;
use crate::render::Format;

/// XML text: control characters (which XML 1.0 forbids even as character
/// references) made visible first, then the markup characters escaped.
fn xml(s: &str) -> String {
    crate::text::printable(s.to_owned())
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// Renders the outcomes.
pub fn render(r: &CheckReport, f: Format, junit: bool, out: &mut dyn Write) -> io::Result<()> {
    if junit {
        writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
        writeln!(
            out,
            r#"<testsuites name="heaptag check" tests="{}" failures="{}">"#,
            r.outcomes.len(),
            r.failures
        )?;
        writeln!(
            out,
            r#"  <testsuite name="{}" tests="{}" failures="{}">"#,
            xml(&r.policy),
            r.outcomes.len(),
            r.failures
        )?;
        for o in &r.outcomes {
            let name = format!("{} [{}] (line {})", o.rule, o.limit, o.line);
            write!(
                out,
                r#"    <testcase classname="{}" name="{}""#,
                xml(&o.log),
                xml(&name)
            )?;
            if o.passed {
                writeln!(out, "/>")?;
            } else {
                writeln!(out, ">")?;
                writeln!(
                    out,
                    r#"      <failure message="{}">{}</failure>"#,
                    xml(&format!("{}: allowed {}, found {}", o.limit, o.allowed, o.found)),
                    xml(&o.offenders.join("\n"))
                )?;
                writeln!(out, "    </testcase>")?;
            }
        }
        writeln!(out, "  </testsuite>")?;
        return writeln!(out, "</testsuites>");
    }
    match f {
        Format::Json => crate::render::json(r, out),
        Format::Markdown => {
            writeln!(
                out,
                "## heaptag check: {}\n",
                if r.failures == 0 { "passed" } else { "FAILED" }
            )?;
            writeln!(out, "| result | rule | limit | allowed | found | log |")?;
            writeln!(out, "| --- | --- | --- | ---: | ---: | --- |")?;
            for o in &r.outcomes {
                writeln!(
                    out,
                    "| {} | {} (line {}) | {} | {} | {} | {} |",
                    if o.passed { "pass" } else { "**FAIL**" },
                    o.rule.replace('|', "\\|"),
                    o.line,
                    o.limit,
                    o.allowed,
                    o.found,
                    o.log
                )?;
            }
            for o in r.outcomes.iter().filter(|o| !o.passed) {
                writeln!(out, "\n**{}** (`{}`, line {}):\n", o.rule, o.limit, o.line)?;
                for x in &o.offenders {
                    writeln!(out, "- {}", x.replace('|', "\\|"))?;
                }
            }
            Ok(())
        }
        Format::Text => {
            for o in &r.outcomes {
                writeln!(
                    out,
                    "{} {}:{} {} [{}]: allowed {}, found {} ({})",
                    if o.passed { "pass" } else { "FAIL" },
                    r.policy,
                    o.line,
                    o.rule,
                    o.limit,
                    o.allowed,
                    o.found,
                    o.log
                )?;
                for x in &o.offenders {
                    writeln!(out, "       {x}")?;
                }
            }
            writeln!(
                out,
                "{}: {} of {} checks failed",
                if r.failures == 0 { "passed" } else { "FAILED" },
                r.failures,
                r.outcomes.len()
            )
        }
    }
}
