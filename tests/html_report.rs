//! The quick start's page: the prover-shaped example writes its run as one
//! HTML page (`--html PATH`, default `report.html`) and says where; the
//! page holds the run's own `heaptag report --format json`. (The page in a
//! real browser: `analyzer/tests/html_browser.rs`.)

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/pce_pipeline.rs"]
mod pipeline;

mod common;

/// In the child: run the example instead of the test.
fn child_runs_pipeline() -> bool {
    common::child_runs_example(pipeline::run)
}

#[test]
fn the_example_writes_its_page_and_says_where() {
    if child_runs_pipeline() {
        return;
    }
    let log = common::temp_log("html-example");
    let html = log.with_extension("html");
    let args = format!(
        "--pce per-partition --jobs 2 --partitions 3 --pce-mib 8 --log {} --html {} --quiet",
        log.display(),
        html.display()
    );
    let out = common::child("the_example_writes_its_page_and_says_where", &[("PCE_ARGS", &args)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::canonicalize(&html).unwrap();
    assert!(stdout.contains(&format!("html report: {}", html.display())), "{stdout}");
    let page = std::fs::read_to_string(&html).unwrap();
    let start = page.find("id=\"heaptag-data\">").unwrap() + "id=\"heaptag-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&page[start..end]).unwrap();
    assert_eq!(data["report"], common::report_json(&log));
    let stages: Vec<&str> = data["dups"]["sources"][0]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["verdict"] == "DUPLICATED")
        .map(|v| v["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["pce_load"], "the per-partition bug is on the page");
    // `--no-html` writes none.
    let log2 = common::temp_log("html-example-none");
    let none = log2.with_extension("html");
    let args = format!(
        "--jobs 1 --partitions 1 --pce-mib 1 --log {} --no-html --quiet",
        log2.display()
    );
    let out = common::child("the_example_writes_its_page_and_says_where", &[("PCE_ARGS", &args)])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("html report:"));
    assert!(!none.exists());
}
