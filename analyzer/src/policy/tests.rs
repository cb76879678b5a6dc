//! Policy parsing: values, errors, limits on what is read.
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

/// Issue 13: every wrong type names its key and says what the key takes,
/// in the policy's words (no Rust type or serde enum names).
#[test]
fn type_errors_name_the_key_in_plain_words() {
    for (rule, key, says) in [
        (
            "max_copies = \"one\"",
            "max_copies",
            "expected a whole number, found a string",
        ),
        ("job = 1.5\nmax_copies = 1", "job", "expected a glob"),
        ("partition = true\nmax_copies = 1", "partition", "found true/false"),
        (
            "max_dropped_events = true",
            "max_dropped_events",
            "expected a whole number",
        ),
        ("stage = 5\nmax_copies = 1", "stage", "expected a string in quotes"),
        ("site = [1]\nmax_copies = 1", "site", "found a list"),
        ("per = 3\nmax_peak = \"1 GiB\"", "per", "expected a string in quotes"),
        ("max_rss = [\"x\"]", "max_rss", "expected a size, found a list"),
        ("name = 3\nmax_copies = 1", "name", "expected a string in quotes"),
        ("max_increase = 10", "max_increase", "expected a percentage"),
        ("max_peak = -5", "max_peak", "-5 is not a size"),
    ] {
        let e = parse(&format!("[[rule]]\n{rule}\n")).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (2, Some(key)), "{rule}: {e}");
        assert!(e.message.contains(says), "{rule}: {e}");
        for leak in ["i64", "enum", "variant", "String", "invalid type"] {
            assert!(!e.message.contains(leak), "{rule}: {e}");
        }
    }
}

#[test]
fn sizes_may_be_plain_byte_counts_up_to_u64_max() {
    let p = parse("[[rule]]\nmax_peak = 1073741824\n").unwrap();
    assert_eq!(p.rules[0].limits, vec![Limit::MaxPeak(1 << 30, Per::Tag)]);
    let p = parse("[[rule]]\nmax_outside_jemalloc = \"18446744073709551615\"\n").unwrap();
    assert_eq!(p.rules[0].limits, vec![Limit::MaxOutsideJemalloc(u64::MAX)]);
}

#[test]
fn devices_fifos_and_huge_files_are_not_policies() {
    let e = Policy::load(Path::new("/dev/zero")).unwrap_err();
    assert!(e.message.contains("not a regular file"), "{e}");
    let dir = std::env::temp_dir().join(format!("heaptag-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = Policy::load(&fifo).unwrap_err();
    assert!(e.message.contains("not a regular file"), "{e}");
    let big = dir.join("big.toml");
    std::fs::write(&big, vec![b'#'; (MAX_POLICY_BYTES + 1) as usize]).unwrap();
    let e = Policy::load(&big).unwrap_err();
    assert!(e.message.contains("a policy is at most"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// toml's own errors (a number TOML cannot hold, a table written as a
/// value) name the key and say what to write instead.
#[test]
fn toml_errors_name_the_key_too() {
    let e = parse("[[rule]]\nmax_peak = 9223372036854775808\n").unwrap_err();
    assert_eq!((e.line, e.key.as_deref()), (2, Some("max_peak")), "{e}");
    assert!(e.message.contains("write it as a string"), "{e}");
    for (text, key) in [
        ("rule = 3\n", "rule"),
        ("[rule]\nmax_copies = 1\n", "rule"),
        ("allow_identical = 3\n[[rule]]\nmax_copies = 1\n", "allow_identical"),
    ] {
        let e = parse(text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{text}: {e}");
        assert!(e.message.contains(&format!("write [[{key}]] sections")), "{text}: {e}");
        assert!(
            !e.message.contains("sequence") && !e.message.contains("invalid type"),
            "{e}"
        );
    }
}
