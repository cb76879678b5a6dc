//! Regression test for issue 15 item 6, "call sites a user can act on": a
//! small real program, built in release with full debug info, with
//! `debug = "line-tables-only"` and with none, allocates through a
//! `.clone()` inside a rayon `par_iter().map(...).collect()` and through a
//! `.clone()` inlined into its caller; `heaptag sites` must name the user's
//! function and the line of the `.clone()` (not `special_extend`, not the
//! unwinder's `trace`), and without debug info at least the user's function.
//!
//! The program is built once per mode into a target directory under
//! `CARGO_TARGET_TMPDIR` (offline, with this workspace's lock file); without
//! cargo, or when the build fails for want of the crates offline, the test
//! says so and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

const MAIN: &str = r#"
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: heaptag_alloc::Alloc = heaptag_alloc::Alloc::new();

const ROW: usize = 32 * 1024; // 256 KiB rows: tracked exactly

#[inline(never)]
fn dup_row(r: &Vec<u64>) -> Vec<u64> {
    r.clone() // PAR_CLONE
}

#[inline(always)]
fn copy_pce(p: &Vec<u64>) -> Vec<u64> {
    p.clone() // DIRECT_CLONE
}

#[inline(never)]
fn build_copies(p: &Vec<u64>) -> Vec<Vec<u64>> {
    (0..4).map(|_| copy_pce(p)).collect()
}

fn main() {
    let rows: Vec<Vec<u64>> = (0..16u64).map(|i| vec![i + 1; ROW]).collect();
    let copies: Vec<Vec<u64>> = rows.par_iter().map(|r| dup_row(r)).collect();
    let pce = vec![7u64; 4 * ROW];
    let more = build_copies(&pce);
    std::hint::black_box((&copies, &more));
    heaptag_alloc::finish().expect("finish");
    drop((rows, copies, pce, more));
}
"#;

fn line_of(marker: &str) -> usize {
    MAIN.lines().position(|l| l.contains(marker)).expect("marker") + 1
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Writes the fixture crate (once per process) and returns its directory.
fn fixture(root: &Path) -> PathBuf {
    let dir = root.join("sites-fixture");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"sites-fixture\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nheaptag-alloc = {{ path = {:?} }}\nrayon = \"1\"\n\n[workspace]\n",
        workspace().join("allocator")
    );
    write_if_changed(&dir.join("Cargo.toml"), &manifest);
    write_if_changed(&dir.join("src/main.rs"), MAIN);
    if !dir.join("Cargo.lock").exists() {
        // The workspace's lock: the same crate versions, already downloaded.
        let _ = std::fs::copy(workspace().join("Cargo.lock"), dir.join("Cargo.lock"));
    }
    dir
}

fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap();
    }
}

/// Builds the fixture with `debug` for the release profile; `None` when
/// cargo cannot build it here.
fn build(debug: &str) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sites-debuginfo");
    let dir = fixture(&root);
    let target = root.join(format!("target-{debug}"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(["build", "--release", "--offline", "--quiet"])
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env("CARGO_PROFILE_RELEASE_DEBUG", debug)
        // The C build of jemalloc does not depend on the mode.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .output();
    match out {
        Ok(o) if o.status.success() => Some(target.join("release/sites-fixture")),
        Ok(o) => {
            eprintln!(
                "SKIPPED (debug = {debug}): cargo could not build the fixture here:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            None
        }
        Err(e) => {
            eprintln!("SKIPPED (debug = {debug}): no cargo ({cargo}): {e}");
            None
        }
    }
}

/// Runs the fixture under a log and returns `heaptag sites --stacks`.
fn sites_of(exe: &Path, debug: &str) -> String {
    let log = std::env::temp_dir().join(format!("heaptag-sites-{debug}-{}.htlog", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let status = Command::new(exe)
        .env("HEAPTAG_LOG", &log)
        .env("HEAPTAG_LOG_OVERWRITE", "1")
        .status()
        .expect("run the fixture");
    assert!(status.success(), "fixture failed: {status}");
    let mut out = Vec::new();
    heaptag_analyzer::run(
        &heaptag_analyzer::Command::Sites {
            logs: vec![log.clone()],
            format: heaptag_analyzer::Format::Text,
            top: 20,
            options: heaptag_analyzer::report::SitesOptions {
                stacks: true,
                ..Default::default()
            },
        },
        &mut out,
    )
    .expect("heaptag sites");
    let _ = std::fs::remove_file(&log);
    String::from_utf8(out).unwrap()
}

/// The call-site column of the rows of both tables.
fn site_names(report: &str) -> Vec<String> {
    report
        .lines()
        .take_while(|l| !l.ends_with(':'))
        .filter(|l| l.contains(" B ") || l.contains("iB "))
        .map(|l| l.split("  ").next().unwrap_or("").trim().to_string())
        .collect()
}

fn check(debug: &str, with_lines: bool) {
    let Some(exe) = build(debug) else { return };
    let report = sites_of(&exe, debug);
    eprintln!("debug = {debug}:\n{report}");
    let names = site_names(&report);
    assert!(!names.is_empty(), "no sites in:\n{report}");
    for n in &names {
        for bad in [
            "special_extend",
            "trace",
            "libunwind",
            "heaptag_alloc",
            "rayon",
            "alloc::",
            "core::",
            "std::",
        ] {
            assert!(
                !n.contains(bad),
                "debug = {debug}: site {n:?} is a {bad} frame:\n{report}"
            );
        }
    }
    if with_lines {
        let par = format!("dup_row (main.rs:{})", line_of("PAR_CLONE"));
        let direct = format!("copy_pce (main.rs:{})", line_of("DIRECT_CLONE"));
        for want in [&par, &direct] {
            assert!(
                names.iter().any(|n| n.ends_with(want.as_str())),
                "debug = {debug}: no site {want:?} in:\n{report}"
            );
        }
    } else {
        for want in ["dup_row", "build_copies"] {
            assert!(
                names.iter().any(|n| n.contains(want)),
                "debug = {debug}: no site naming {want} in:\n{report}"
            );
        }
    }
}

#[test]
fn issue_15_sites_name_the_users_clone_with_full_debug_info() {
    check("true", true);
}

#[test]
fn issue_15_sites_name_the_users_clone_with_line_tables_only() {
    check("line-tables-only", true);
}

#[test]
fn issue_15_sites_name_the_users_function_without_debug_info() {
    check("false", false);
}
