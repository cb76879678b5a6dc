//! The example daemon (`examples/pprof_server.rs`) end to end: started in a
//! child process with heaptag's log on (so stacks are captured), its
//! `/metrics` and `/debug/pprof/heap` scraped after one round of work and
//! again after more, checked with the real consumers (`promtool check
//! metrics`, `go tool pprof`; required when HEAPTAG_REQUIRE_TOOLS=1, skipped
//! with a message otherwise) and against each other.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/pprof_server.rs"]
mod server;

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use heaptag_analyzer::export::pprof::At;
use heaptag_pprof::proto::Profile;

const MIB: i64 = 1 << 20;

/// Whether `tool ARGS` runs here; a missing tool fails the test when
/// HEAPTAG_REQUIRE_TOOLS=1 (CI), else skips its check with a message.
fn have(tool: &str, args: &[&str]) -> bool {
    let ok = Command::new(tool).args(args).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("HEAPTAG_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "{tool} is required (HEAPTAG_REQUIRE_TOOLS=1) but does not run here"
        );
        eprintln!("skipped: {tool} not found here");
    }
    ok
}

/// `GET path` from the server: the body (HTTP/1.0, so the server closes the
/// connection after the response). Socket timeouts keep a stuck server from
/// hanging the test; nothing is asserted on time.
fn get(addr: &str, path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP response");
    let head = String::from_utf8_lossy(&all[..split]).to_string();
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{path}: {head}"
    );
    all[split + 4..].to_vec()
}

/// The value of the series `name{labels}` (labels exactly as written).
fn metric(text: &str, series: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Sum of one value (0 alloc_objects, 1 alloc_space, 2 inuse_objects,
/// 3 inuse_space) over the samples whose labels include all of `want`.
fn sum(p: &Profile, index: usize, want: &[(&str, &str)]) -> i64 {
    let s = |i: i64| p.string_table[i as usize].as_str();
    p.sample
        .iter()
        .filter(|x| {
            want.iter()
                .all(|(k, v)| x.label.iter().any(|l| s(l.key) == *k && s(l.str) == *v))
        })
        .map(|x| x.value[index])
        .sum()
}

/// In-use bytes of the samples whose stack names `function` (any frame,
/// inlined ones included), for one partition of the stage.
fn inuse_at(p: &Profile, function: &str, partition: &str) -> i64 {
    let s = |i: i64| p.string_table[i as usize].as_str();
    let names = |loc: u64| -> Vec<&str> {
        let l = p.location.iter().find(|l| l.id == loc).unwrap();
        l.line
            .iter()
            .map(|ln| s(p.function.iter().find(|f| f.id == ln.function_id).unwrap().name))
            .collect()
    };
    p.sample
        .iter()
        .filter(|x| x.label.iter().any(|l| s(l.key) == "partition" && s(l.str) == partition))
        .filter(|x| {
            x.location_id
                .iter()
                .any(|&l| names(l).iter().any(|n| n.contains(function)))
        })
        .map(|x| x.value[3])
        .sum()
}

fn promtool(text: &str, dir: &Path) {
    if !have("promtool", &["--version"]) {
        return;
    }
    let f = dir.join("metrics.txt");
    std::fs::write(&f, text).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("promtool check metrics < {}", f.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `go tool pprof -top` of the profile: what it shows for the focused tag.
fn go_pprof_shown(profile: &Path, index: &str, focus: &str) -> Option<i64> {
    if !have("go", &["version"]) {
        return None;
    }
    let home = std::env::temp_dir().join("heaptag-go-home");
    let out = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-unit=B",
            "-nodefraction=0",
            "-nodecount=100000",
        ])
        .arg(format!("-sample_index={index}"))
        .args(["-tagfocus", focus])
        .arg(profile)
        .env("HOME", &home)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The allocating code is shown, not cut off by drop_frames (a pattern
    // matching a frame in the middle of the stack drops all it called).
    assert!(
        text.contains("build_witness"),
        "go tool pprof shows the allocating function:\n{text}"
    );
    let line = text.lines().find(|l| l.starts_with("Showing nodes accounting for"))?;
    let n = line["Showing nodes accounting for".len()..].trim_start();
    Some(n.split([',', ' ']).next()?.trim_end_matches('B').parse().unwrap())
}

#[test]
fn the_daemon_serves_a_changing_heap_profile_and_metrics() {
    if common::in_child() {
        let args: Vec<String> = ["--addr", "127.0.0.1:0", "--manual"].map(String::from).to_vec();
        assert_eq!(server::run(&args), 0);
        return;
    }
    let log = common::temp_log("pprof-server");
    let dir = log.parent().unwrap().to_path_buf();
    let mut child = common::child(
        "the_daemon_serves_a_changing_heap_profile_and_metrics",
        &[("HEAPTAG_LOG", log.to_str().unwrap())],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The harness prints a few lines first, and `test NAME ... ` on the
    // line the server's first line continues.
    let addr = (0..50)
        .find_map(|_| {
            let l = lines.next()?.ok()?;
            let at = l.find("listening on http://")?;
            Some(l[at + "listening on http://".len()..].trim().to_owned())
        })
        .expect("the server says where it listens");
    // Keep draining the child's output so it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));

    assert_eq!(get(&addr, "/step"), b"round 1\n");
    let m1 = String::from_utf8(get(&addr, "/metrics")).unwrap();
    let p1_gz = get(&addr, "/debug/pprof/heap");
    assert_eq!(get(&addr, "/step"), b"round 2\n");
    let m2 = String::from_utf8(get(&addr, "/metrics")).unwrap();
    let m2_jobs = String::from_utf8(get(&addr, "/metrics?job=1")).unwrap();
    let p2_gz = get(&addr, "/debug/pprof/heap");
    for _ in 0..2 {
        get(&addr, "/step");
    }
    let p4_gz = get(&addr, "/debug/pprof/heap");
    let m4 = String::from_utf8(get(&addr, "/metrics")).unwrap();
    assert_eq!(get(&addr, "/quit"), b"bye\n");
    assert!(child.wait().unwrap().success());

    // The metrics: valid exposition format, and the change between scrapes.
    promtool(&m1, &dir);
    promtool(&m2_jobs, &dir);
    let p0 = r#"{stage="synthesize_partition",partition="0"}"#;
    let alloc = |m: &str| metric(m, &format!("heaptag_allocated_bytes_total{p0}"));
    assert!(
        alloc(&m2) - alloc(&m1) >= MIB,
        "round 2 allocated a 1 MiB witness:\n{m1}\n{m2}"
    );
    assert!(!m2.contains("job=\""), "no job label by default:\n{m2}");
    assert!(m2_jobs.contains(r#"heaptag_live_bytes{job="2",stage="synthesize_partition",partition="0"}"#));
    assert_eq!(metric(&m2, "heaptag_dropped_events_total"), 0);
    assert!(
        metric(&m2, "heaptag_tags") >= 9,
        "untagged, 2 jobs x (stage + 4 partitions):\n{m2}"
    );

    // The profiles: the witnesses at their stack, exactly; 3 rounds cached.
    let p1 = heaptag_pprof::decode(&p1_gz).unwrap();
    let p2 = heaptag_pprof::decode(&p2_gz).unwrap();
    let p4 = heaptag_pprof::decode(&p4_gz).unwrap();
    assert_eq!(inuse_at(&p1, "build_witness", "0"), MIB);
    assert_eq!(inuse_at(&p2, "build_witness", "0"), 2 * MIB);
    assert_eq!(
        inuse_at(&p4, "build_witness", "0"),
        3 * MIB,
        "round 1's witnesses were freed"
    );
    // Per tag, the profile and the metrics agree (nothing tagged ran between
    // the two requests): in use = live bytes, allocated = allocated bytes,
    // also in the runs (9 of HEAPTAG_SEED=1..150; 3 live rounds, each
    // sampling some of partition 0's 7,000 small bytes with p = 1.3%) where
    // a sample stands for some 525 KB, far more than the partition allocated
    // small (`pprof_live.rs` makes that case happen every time).
    let tag = [("stage", "synthesize_partition"), ("partition", "0")];
    assert_eq!(sum(&p4, 3, &tag), metric(&m4, &format!("heaptag_live_bytes{p0}")));
    assert_eq!(sum(&p4, 1, &tag), alloc(&m4));
    assert_eq!(
        sum(&p4, 0, &tag),
        metric(&m4, &format!("heaptag_allocations_total{p0}"))
    );

    // go tool pprof reads it the same way.
    let f = dir.join("live4.pb.gz");
    std::fs::write(&f, &p4_gz).unwrap();
    if let Some(shown) = go_pprof_shown(&f, "inuse_space", "partition=^0$") {
        let all0: i64 = p4
            .sample
            .iter()
            .filter(|x| {
                x.label
                    .iter()
                    .any(|l| p4.string_table[l.key as usize] == "partition" && p4.string_table[l.str as usize] == "0")
            })
            .map(|x| x.value[3])
            .sum();
        assert_eq!(shown, all0);
        assert_eq!(shown, metric(&m4, &format!("heaptag_live_bytes{p0}")));
    }

    // The daemon's own log (finished at its exit), exported offline, agrees
    // with `heaptag report` of the same log: allocated per stage, and in
    // use at the attributed peak.
    let json = |cmd: heaptag_analyzer::Command| -> serde_json::Value {
        let mut out = Vec::new();
        heaptag_analyzer::run(&cmd, &mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    };
    let r = json(heaptag_analyzer::Command::Report {
        logs: vec![log.clone()],
        format: heaptag_analyzer::Format::Json,
    });
    let src = &r["sources"][0];
    let export = |at: At, name: &str| -> Profile {
        let out = dir.join(name);
        let cmd = heaptag_analyzer::Command::Export(heaptag_analyzer::export::ExportCmd::Pprof {
            log: log.clone(),
            at,
            output: Some(out.clone()),
        });
        heaptag_analyzer::run(&cmd, &mut Vec::new()).unwrap();
        heaptag_pprof::decode(&std::fs::read(&out).unwrap()).unwrap()
    };
    let end = export(At::End, "daemon-end.pb.gz");
    let allocated: u64 = src["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["stage"] == "synthesize_partition")
        .map(|t| t["allocated_bytes"].as_u64().unwrap())
        .sum();
    assert!(allocated >= 16 * MIB as u64, "4 rounds of 4 witnesses");
    assert_eq!(sum(&end, 1, &[("stage", "synthesize_partition")]) as u64, allocated);
    let shown = go_pprof_shown(
        &dir.join("daemon-end.pb.gz"),
        "alloc_space",
        "stage=^synthesize_partition$",
    );
    if let Some(shown) = shown {
        assert_eq!(shown as u64, allocated, "go tool pprof on the exported log");
    }
    let peak = export(At::Peak, "daemon-peak.pb.gz");
    let inuse: i64 = peak.sample.iter().map(|x| x.value[3]).sum();
    assert_eq!(inuse as u64, src["peak_attributed"]["bytes"].as_u64().unwrap());
    let _ = std::fs::remove_file(&log);
}
