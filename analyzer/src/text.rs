//! Text that comes from a log is untrusted: a stage name, a mark label, a
//! symbol or an executable path may hold control characters or terminal
//! escapes. Everything read from a log passes through [`printable`] once,
//! when the model takes it in, so no renderer (text, Markdown, JSON, JUnit
//! XML, CSV) can be made to move the cursor, colour the terminal, forge a
//! "WARNING:" line or emit invalid XML.

use heaptag_format::Header;

/// `s` with every control character (C0 but for none, DEL, C1) and every
/// Unicode bidirectional control replaced by a visible escape (`\u{1b}`).
/// Returns `s` itself, without allocating, when there is nothing to escape.
pub fn printable(s: String) -> String {
    if !s.chars().any(unsafe_char) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// The header with its texts made printable (the module map's paths stay
/// as they are: they name files to open, and are never printed).
pub fn printable_header(mut h: Header) -> Header {
    h.exe = printable(h.exe);
    h.heaptag_version = printable(h.heaptag_version);
    h.cmdline = h.cmdline.into_iter().map(printable).collect();
    h
}

/// Characters that change how a terminal or a document shows what follows.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c,
            // Bidirectional embeddings, overrides and isolates (Trojan Source).
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
            // Line and paragraph separators end a line in some viewers.
            | '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn clean_text_is_returned_as_is() {
        let s = String::from("synthesize_partition (job 7) — ok");
        let p = s.as_ptr();
        let out = printable(s);
        assert_eq!(out.as_ptr(), p, "no copy");
    }

    #[test]
    fn escapes_newlines_ansi_and_bidi() {
        assert_eq!(printable("a\nWARNING: b".into()), "a\\u{a}WARNING: b");
        assert_eq!(printable("\x1b[31mred\x1b[0m".into()), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(printable("x\u{202e}y\u{7f}\u{85}".into()), "x\\u{202e}y\\u{7f}\\u{85}");
        assert_eq!(printable("tab\there".into()), "tab\\u{9}here");
    }
}
