//! Issue 16: `HEAPTAG_LOG` is removed from the environment once read, so a
//! program the logging process execs (here: this test binary again, which
//! links heaptag) neither logs into nor over its parent's log;
//! `HEAPTAG_LOG_INHERIT=1` keeps it (each process then logs to its own `%p`
//! file, which is what `heaptag run` asks for).

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

const TEST: &str = "an_execd_child_does_not_inherit_the_log_unless_asked";

/// What a process of the chain reports about itself.
fn report(role: &str) {
    println!(
        "{role} env={} logging={} pid={}",
        std::env::var_os("HEAPTAG_LOG").is_some(),
        heaptag::log_path().is_some(),
        std::process::id()
    );
    drop(black_box(vec![1u8; 1 << 20]));
}

/// The parent: logs (from HEAPTAG_LOG), execs the child, passes its output on.
fn parent() {
    report("parent");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env("ROLE", "child")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    print!("{}", String::from_utf8_lossy(&out.stdout));
}

/// Runs the chain with `env`; the lines the parent and the child printed,
/// and the logs in `dir`.
fn chain(dir: &Path, env: &[(&str, &str)]) -> (String, String, Vec<PathBuf>) {
    let mut env = env.to_vec();
    env.push(("ROLE", "parent"));
    let out = common::child(TEST, &env).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let line = |role: &str| {
        stdout
            .lines()
            .find_map(|l| l.find(role).map(|i| l[i..].to_owned()))
            .unwrap_or_else(|| panic!("no {role} line in {stdout}"))
    };
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    logs.sort();
    (line("parent "), line("child "), logs)
}

fn pid(line: &str) -> u32 {
    line.rsplit("pid=").next().unwrap().trim().parse().unwrap()
}

#[test]
fn an_execd_child_does_not_inherit_the_log_unless_asked() {
    match std::env::var("ROLE").as_deref() {
        Ok("parent") => return parent(),
        Ok("child") => return report("child"),
        _ => {}
    }
    let base = common::temp_log("children").with_extension("d");
    let _ = std::fs::remove_dir_all(&base);

    // Default: the parent logs; the variable is gone from its environment
    // and from its child's, which does not log.
    let dir = base.join("default");
    std::fs::create_dir_all(&dir).unwrap();
    let pattern = dir.join("run-%p.htlog");
    let (p, c, logs) = chain(&dir, &[("HEAPTAG_LOG", pattern.to_str().unwrap())]);
    assert!(p.starts_with("parent env=false logging=true"), "{p}");
    assert!(c.starts_with("child env=false logging=false"), "{c}");
    assert_eq!(logs, [dir.join(format!("run-{}.htlog", pid(&p)))]);

    // A fixed path with overwrite on: before, the child truncated the
    // parent's live log; now the parent's log is whole.
    let dir = base.join("fixed");
    std::fs::create_dir_all(&dir).unwrap();
    let fixed = dir.join("fixed.htlog");
    let (p, c, logs) = chain(
        &dir,
        &[("HEAPTAG_LOG", fixed.to_str().unwrap()), ("HEAPTAG_LOG_OVERWRITE", "1")],
    );
    assert!(c.starts_with("child env=false logging=false"), "{c}");
    assert_eq!(logs, std::slice::from_ref(&fixed));
    let (_, r) = common::read_all(&fixed);
    assert!(r.ended() && r.problems().is_empty(), "{:?}", r.problems());
    assert_eq!(r.header().pid, pid(&p), "the parent's log");

    // HEAPTAG_LOG_INHERIT=1: both keep it, and each logs to its own file.
    let dir = base.join("inherit");
    std::fs::create_dir_all(&dir).unwrap();
    let pattern = dir.join("run-%p.htlog");
    let (p, c, logs) = chain(
        &dir,
        &[("HEAPTAG_LOG", pattern.to_str().unwrap()), ("HEAPTAG_LOG_INHERIT", "1")],
    );
    assert!(p.starts_with("parent env=true logging=true"), "{p}");
    assert!(c.starts_with("child env=true logging=true"), "{c}");
    let mut want = vec![
        dir.join(format!("run-{}.htlog", pid(&p))),
        dir.join(format!("run-{}.htlog", pid(&c))),
    ];
    want.sort();
    assert_eq!(logs, want);
    for l in &logs {
        let (_, r) = common::read_all(l);
        assert!(r.ended(), "{}", l.display());
    }
    let _ = std::fs::remove_dir_all(&base);
}
