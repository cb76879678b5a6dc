//! Issue 15 item 7: memory of a process-wide tag (no job, no partition, as
//! `heaptag::shared` enters) is its own key in `timeline --by partition` and
//! `--by job`, `shared (no partition)` / `shared (no job)`, never merged into
//! a partition or job.

mod common;

use common::{LogBuilder, MIB, MS};
use heaptag_analyzer::{run, By, Command, Format};
use heaptag_format::Record;
use serde_json::Value;

/// A cache under (no job, "pce_load", no partition) built while partitions
/// 0 and 1 of job 1 work; returns the log.
fn log() -> std::path::PathBuf {
    let path = common::temp("timeline-shared");
    let mut b = LogBuilder::new();
    b.tag(0, None, None, None)
        .tag(1, None, Some("pce_load"), None)
        .tag(2, Some(1), Some("synthesize_partition"), Some(0))
        .tag(3, Some(1), Some("synthesize_partition"), Some(1))
        .sample(0, 40 * MIB, 2 * MIB, 8 * MIB, 2 * MIB, 0)
        .flush();
    b.alloc(10 * MS, 1, 0, 0x1000_0000, 32 * MIB)
        .alloc(11 * MS, 2, 0, 0x2000_0000, 2 * MIB)
        .alloc(12 * MS, 3, 0, 0x3000_0000, 3 * MIB)
        .sample(100 * MS, 80 * MIB, 40 * MIB, 45 * MIB, 37 * MIB, 37 * MIB)
        .flush();
    b.rec(Record::End {
        time_ns: 150 * MS,
        dropped: 0,
    })
    .flush();
    b.write(&path);
    path
}

/// `timeline --by BY --format json`: (key, peak bytes) per series.
fn series(log: &std::path::Path, by: By) -> Vec<(String, u64)> {
    let cmd = Command::Timeline {
        logs: vec![log.to_path_buf()],
        format: Format::Json,
        by,
        csv: false,
    };
    let mut out = Vec::new();
    run(&cmd, &mut out).unwrap();
    let doc: Value = serde_json::from_slice(&out).unwrap();
    doc["sources"][0]["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["key"].as_str().unwrap().to_string(),
                s["peak_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_shared_tag_is_its_own_key_by_partition_and_by_job() {
    let log = log();
    assert_eq!(
        series(&log, By::Partition),
        vec![
            ("shared (no partition)".to_string(), 32 * MIB),
            ("partition 1".to_string(), 3 * MIB),
            ("partition 0".to_string(), 2 * MIB),
        ]
    );
    assert_eq!(
        series(&log, By::Job),
        vec![
            ("shared (no job)".to_string(), 32 * MIB),
            ("job 1".to_string(), 5 * MIB)
        ]
    );
}
