//! `heaptag run` on a program that links heaptag: two logs (the sampler's
//! and the program's own), merged by `heaptag report` on one time line, with
//! the RSS peak per phase between the program's marks.

mod common;

use std::hint::black_box;
use std::time::Duration;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// In the child (started by `heaptag run`, which set HEAPTAG_LOG for it).
fn child() -> bool {
    if !std::env::var("HEAPTAG_LOG").is_ok_and(|p| p.contains(".app-")) {
        return false;
    }
    heaptag::mark("small phase");
    let a = black_box(vec![1u8; 64 << 20]);
    std::thread::sleep(Duration::from_millis(300));
    drop(a);
    heaptag::mark("big phase");
    let b = black_box(vec![2u8; 192 << 20]);
    std::thread::sleep(Duration::from_millis(300));
    drop(b);
    true
}

#[test]
fn a_linked_program_writes_its_own_log_and_the_report_merges_both() {
    if child() {
        return;
    }
    let dir = common::temp_log("merge").with_extension("d");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("sampler.htlog");
    let exe = std::env::current_exe().unwrap();
    let cmd: Vec<std::ffi::OsString> = vec![
        exe.into(),
        "a_linked_program_writes_its_own_log_and_the_report_merges_both".into(),
        "--exact".into(),
    ];
    let cfg = heaptag_analyzer::watch::WatchConfig {
        interval: Duration::from_millis(20),
        log: log.clone(),
        children: true,
    };
    let code = heaptag_analyzer::watch::run_command(&cfg, &cmd).unwrap();
    assert_eq!(code, 0);
    let app: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("sampler.app-"))
        .collect();
    assert_eq!(
        app.len(),
        1,
        "the program wrote its own log beside the sampler's: {app:?}"
    );

    let mut out = Vec::new();
    heaptag_analyzer::run(
        &heaptag_analyzer::Command::Report {
            logs: vec![log, app[0].clone()],
            format: heaptag_analyzer::Format::Json,
        },
        &mut out,
    )
    .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let phases = r["phases"].as_array().unwrap();
    let peak = |label: &str| {
        phases
            .iter()
            .find(|p| p["phase"] == label)
            .unwrap_or_else(|| panic!("phase {label}: {r}"))["peak_rss"]["bytes"]
            .as_u64()
            .unwrap()
    };
    let (small, big) = (peak("small phase"), peak("big phase"));
    assert!(((60 << 20)..(160 << 20)).contains(&small), "small phase peak {small}");
    assert!(big >= 190 << 20, "big phase peak {big}");
    assert!(big > small + (100 << 20));
}
