//! The log file is never written through a symlink, never overwrites an
//! existing file unless told to, expands %p, and bad settings are reported
//! without stopping the program.

mod common;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

#[test]
fn existing_files_and_symlinks_are_left_alone() {
    // Every start below fails before logging begins, so they can share a process.
    let existing = common::temp_log("existing");
    std::fs::write(&existing, b"precious").unwrap();
    let e = heaptag::LogConfig::new(&existing).start().unwrap_err();
    assert!(matches!(e, heaptag::LogError::Exists(_)), "{e}");
    assert!(e.to_string().contains("does not overwrite"), "{e}");
    assert_eq!(std::fs::read(&existing).unwrap(), b"precious");

    let target = common::temp_log("target");
    std::fs::write(&target, b"target").unwrap();
    let link = common::temp_log("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for overwrite in [false, true] {
        let e = heaptag::LogConfig::new(&link).overwrite(overwrite).start().unwrap_err();
        assert!(matches!(e, heaptag::LogError::Symlink(_)), "{e}");
    }
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"target",
        "the link's target is untouched"
    );

    let dangling = common::temp_log("dangling");
    std::os::unix::fs::symlink("/nonexistent/heaptag-target", &dangling).unwrap();
    let e = heaptag::LogConfig::new(&dangling).start().unwrap_err();
    assert!(matches!(e, heaptag::LogError::Symlink(_)), "{e}");

    let e = heaptag::LogConfig::new("/nonexistent-dir/x.htlog").start().unwrap_err();
    assert!(matches!(e, heaptag::LogError::Io(..)), "{e}");
    assert!(
        e.to_string().starts_with("cannot write /nonexistent-dir/x.htlog"),
        "{e}"
    );
}

#[test]
fn env_started_log_expands_pid_and_bad_values_are_reported() {
    if std::env::var_os("HEAPTAG_CHILD").is_some() {
        drop(std::hint::black_box(vec![1u8; 1 << 20]));
        println!("CHILD_PID {}", std::process::id());
        return;
    }
    let dir = common::temp_log("envdir").with_extension("d");
    std::fs::create_dir_all(&dir).unwrap();
    let pattern = dir.join("run-%p.htlog");
    let out = common::child(
        "env_started_log_expands_pid_and_bad_values_are_reported",
        &[("HEAPTAG_LOG", pattern.to_str().unwrap())],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let pid: u32 = stdout[stdout.find("CHILD_PID ").unwrap() + 10..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let log = dir.join(format!("run-{pid}.htlog"));
    let (_, r) = common::read_all(&log);
    assert!(r.ended(), "finished at exit");
    assert_eq!(r.header().pid, pid);

    let out = common::child(
        "env_started_log_expands_pid_and_bad_values_are_reported",
        &[
            ("HEAPTAG_LOG", dir.join("bad.htlog").to_str().unwrap()),
            ("HEAPTAG_INTERVAL", "fast"),
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the program runs anyway: {stderr}");
    assert!(
        stderr.contains("heaptag: not logging: HEAPTAG_INTERVAL=fast: expected a duration"),
        "{stderr}"
    );
    assert!(!dir.join("bad.htlog").exists());

    // Issue 16's variables: each bad value named, and no log.
    for (name, value, expected) in [
        (
            "HEAPTAG_LOG_MAX",
            "10MB",
            "expected a size such as 256MiB or a duration such as 1h",
        ),
        (
            "HEAPTAG_LOG_MAX",
            "0",
            "expected a size such as 256MiB or a duration such as 1h",
        ),
        (
            "HEAPTAG_FINISH_TIMEOUT",
            "soon",
            "expected a duration such as 100ms or 1s",
        ),
        ("HEAPTAG_FSYNC", "always", "expected 0 or 1"),
        ("HEAPTAG_LOG_KEEP", "0", "expected a number of segments, at least 1"),
    ] {
        let out = common::child(
            "env_started_log_expands_pid_and_bad_values_are_reported",
            &[("HEAPTAG_LOG", dir.join("bad.htlog").to_str().unwrap()), (name, value)],
        )
        .output()
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the program runs anyway: {stderr}");
        let want = format!("heaptag: not logging: {name}={value}: {expected}");
        assert!(stderr.contains(&want), "{want} in {stderr}");
        assert!(!dir.join("bad.htlog").exists());
    }
}
