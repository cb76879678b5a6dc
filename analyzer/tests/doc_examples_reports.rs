//! The shell examples of docs/REPORTS.md's sections on big runs, `diff`,
//! `export folded` and `export perfetto`, run as written (with `heaptag`
//! this build and the logs made here); a line piping into
//! `inferno-flamegraph` runs when that program is installed
//! (`cargo install inferno`).

mod common;

use std::process::Command;

const SECTIONS: [&str; 4] = [
    "## Big runs: `report --by --filter --sort --top`",
    "## Comparing runs: `heaptag diff`",
    "## Folded stacks: `export folded`",
    "## Perfetto traces: `export perfetto`",
];

/// The `sh` blocks of one section.
fn examples(doc: &str, heading: &str) -> Vec<String> {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("{heading} not in REPORTS.md"));
    let body = &doc[start + heading.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find("```sh\n") {
        let block = &rest[i + 6..];
        let end = block.find("```").unwrap();
        out.extend(block[..end].lines().filter(|l| !l.trim().is_empty()).map(str::to_owned));
        rest = &block[end + 3..];
    }
    out
}

#[test]
fn the_documented_commands_run() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/REPORTS.md")).unwrap();
    let dir = common::temp("doc-examples").with_extension("d");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["run", "main", "branch"] {
        common::prover_log(&dir.join(format!("{name}.htlog")));
    }
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_heaptag"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let has_inferno = Command::new("inferno-flamegraph").arg("--help").output().is_ok();
    let mut ran = 0;
    for heading in SECTIONS {
        let lines = examples(&doc, heading);
        assert!(!lines.is_empty(), "{heading} has no example");
        for line in lines {
            if line.contains("inferno-flamegraph") && !has_inferno {
                eprintln!("inferno-flamegraph is not installed: not run: {line}");
                continue;
            }
            let out = Command::new("bash")
                .arg("-c")
                .arg(format!("set -eo pipefail; {line}"))
                .current_dir(&dir)
                .env("PATH", &path)
                .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{line}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 7, "{ran} examples ran");
    // What they wrote is there.
    for f in ["alloc.folded", "run.json", "summary.md"] {
        assert!(std::fs::metadata(dir.join(f)).unwrap().len() > 0, "{f}");
    }
}
