//! `heaptag html` as a person sees it: the page of a real run of the
//! prover-shaped example (`tests/fixtures/html/per_partition.htlog`: the
//! per-partition PCE bug, so there are duplicates to show), opened from
//! `file://` in headless Chromium driven over the DevTools protocol
//! (`headless_chrome`). The page loads with no
//! console error and no network request; the chart has one series per key
//! of `heaptag timeline` plus the RSS, VmHWM and resident lines; hovering
//! shows the timeline's figures at that sample; switching the grouping
//! changes the series; a duplicate's link and a click on its shaded
//! window tie table and chart together; the flame graphs search; the
//! tables' figures are `heaptag report --format json`'s; a screenshot is
//! written.
//!
//! Needs Chromium (`chromium` on PATH, or `HEAPTAG_CHROMIUM`). Without it
//! the test says so and passes, unless `HEAPTAG_REQUIRE_CHROMIUM=1` (set by
//! `.ci/run`), where it fails.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headless_chrome::browser::tab::point::Point;
use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::protocol::cdp::{Network, Page};
use headless_chrome::{Browser, LaunchOptions, Tab};
use heaptag_analyzer::{run, By, Command, Format};
use serde_json::Value;

/// Chromium's path, or `None` (with a message) when it is missing and not
/// required.
fn chromium() -> Option<PathBuf> {
    let required = std::env::var("HEAPTAG_REQUIRE_CHROMIUM").is_ok_and(|v| v == "1");
    let found = std::env::var_os("HEAPTAG_CHROMIUM").map(PathBuf::from).or_else(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .flat_map(|d| ["chromium", "chromium-browser", "google-chrome"].map(|n| d.join(n)))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => Some(p),
        None if required => panic!(
            "HEAPTAG_REQUIRE_CHROMIUM=1 but no chromium was found (PATH, HEAPTAG_CHROMIUM): \
             apt-get install -y chromium"
        ),
        None => {
            // Straight to stderr, past the test harness's capture: a skip
            // must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "html_browser: SKIPPED: no chromium on PATH (apt-get install chromium, or set HEAPTAG_CHROMIUM); \
                 CI sets HEAPTAG_REQUIRE_CHROMIUM=1 and fails instead"
            );
            None
        }
    }
}

fn json(cmd: Command) -> Value {
    let mut out = Vec::new();
    run(&cmd, &mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// Evaluates `expr` (which must yield a JSON-serializable value) in the page.
fn eval(tab: &Tab, expr: &str) -> Value {
    let r = tab
        .evaluate(&format!("JSON.stringify((() => {{ return {expr}; }})())"), false)
        .unwrap_or_else(|e| panic!("{expr}: {e}"));
    match r.value {
        Some(Value::String(s)) => serde_json::from_str(&s).unwrap(),
        other => panic!("{expr}: {other:?} ({:?})", r.description),
    }
}

/// Polls `expr` until it is true: a bounded count of polls, not a time limit.
fn wait_for(tab: &Tab, expr: &str) {
    for _ in 0..600 {
        if eval(tab, expr) == Value::Bool(true) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("never true after 600 polls: {expr}");
}

fn keys_of(series: &Value) -> Vec<String> {
    series
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_page_in_chromium() {
    let Some(chrome) = chromium() else { return };
    // `pce_pipeline --pce per-partition --jobs 2 --partitions 3 --pce-mib 8`
    // (fixtures/html/README.md).
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/html/per_partition.htlog");
    let html = common::temp("browser").with_extension("html");
    run(
        &Command::Html {
            logs: vec![log.clone()],
            out: html.clone(),
        },
        &mut Vec::new(),
    )
    .unwrap();
    let html = std::fs::canonicalize(&html).unwrap();
    let logs = vec![log.clone()];
    let report = json(Command::Report {
        logs: logs.clone(),
        format: Format::Json,
    });
    let src = &report["sources"][0];
    let timeline = |by: By| {
        json(Command::Timeline {
            logs: logs.clone(),
            format: Format::Json,
            by,
            csv: false,
        })["sources"][0]
            .clone()
    };
    let by_stage = timeline(By::Stage);
    let by_partition = timeline(By::Partition);
    let dups = json(Command::Dups {
        logs: logs.clone(),
        format: Format::Json,
    })["sources"][0]
        .clone();
    assert!(
        !dups["duplicated"].as_array().unwrap().is_empty(),
        "the bug makes duplicates"
    );

    let browser = Browser::new(LaunchOptions {
        headless: true,
        sandbox: false,
        path: Some(chrome),
        window_size: Some((1280, 1000)),
        // A hang detector for a loaded machine, not a timing assertion.
        idle_browser_timeout: Duration::from_secs(600),
        ..LaunchOptions::default()
    })
    .expect("chromium starts");
    let tab = browser.new_tab().unwrap();
    tab.set_default_timeout(Duration::from_secs(300));
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let requests: Arc<Mutex<Vec<String>>> = Arc::default();
    {
        let errors = errors.clone();
        let requests = requests.clone();
        tab.add_event_listener(Arc::new(move |e: &Event| match e {
            Event::RuntimeConsoleAPICalled(c) => {
                let t = format!("{:?}", c.params.Type);
                if t == "Error" || t == "Assert" || t == "Warning" {
                    errors.lock().unwrap().push(format!("console.{t}: {:?}", c.params.args));
                }
            }
            Event::RuntimeExceptionThrown(x) => {
                let d = &x.params.exception_details;
                errors.lock().unwrap().push(format!(
                    "exception: {} {:?} line {}",
                    d.text,
                    d.exception.as_ref().and_then(|o| o.description.clone()),
                    d.line_number
                ));
            }
            Event::LogEntryAdded(l) => {
                let level = format!("{:?}", l.params.entry.level);
                if level == "Error" || level == "Warning" {
                    errors
                        .lock()
                        .unwrap()
                        .push(format!("log {level}: {}", l.params.entry.text));
                }
            }
            Event::NetworkRequestWillBeSent(r) => requests.lock().unwrap().push(r.params.request.url.clone()),
            _ => {}
        }))
        .unwrap();
    }
    tab.enable_log().unwrap();
    tab.enable_runtime().unwrap();
    tab.call_method(serde_json::from_value::<Network::Enable>(serde_json::json!({})).unwrap())
        .unwrap();
    let url = format!("file://{}", html.display());
    tab.navigate_to(&url).unwrap().wait_until_navigated().unwrap();
    wait_for(&tab, "document.body.dataset.ready === '1'");

    // The header: who ran, for how long, what was lost.
    assert_eq!(
        eval(&tab, "document.querySelector('#run-0 .exe').textContent"),
        src["source"]["exe"]
    );
    assert_eq!(
        eval(&tab, "+document.querySelector('#run-0 .dropped').dataset.count"),
        src["source"]["dropped_events"]
    );
    assert_eq!(
        eval(
            &tab,
            "+document.querySelector('#run-0 .peak-attributed .b').dataset.bytes"
        ),
        src["peak_attributed"]["bytes"]
    );
    // Per tag: each row's tag and peak are the report's, as the text report prints them.
    let rows = eval(
        &tab,
        "[...document.querySelectorAll('#tags-0 tbody tr')].map(r => [r.querySelector('.tag').textContent, \
         +r.querySelector('.peak .b').dataset.bytes, r.querySelector('.peak .b').textContent])",
    );
    let tags = src["tags"].as_array().unwrap();
    assert_eq!(rows.as_array().unwrap().len(), tags.len());
    for (row, tag) in rows.as_array().unwrap().iter().zip(tags) {
        assert_eq!(row[0], tag["tag"]);
        assert_eq!(row[1], tag["peak_live"]["bytes"]);
        assert_eq!(
            row[2].as_str().unwrap(),
            heaptag_analyzer::render::bytes(tag["peak_live"]["bytes"].as_u64().unwrap())
        );
    }
    // The verdict of the duplicated stage.
    let verdicts = eval(
        &tab,
        "[...document.querySelectorAll('#dups-0 .verdicts tbody tr')].map(r => [r.cells[0].textContent, r.cells[1].textContent])",
    );
    for v in dups["verdicts"].as_array().unwrap() {
        let shown = verdicts
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r[0] == v["stage"])
            .unwrap_or_else(|| panic!("{v}"));
        assert!(
            shown[1].as_str().unwrap().starts_with(v["verdict"].as_str().unwrap()),
            "{shown}"
        );
    }

    // The chart: one series per key of the timeline (at most 16), plus lines.
    let lines = ["RSS (VmRSS)", "VmHWM", "jemalloc resident"];
    let stage_keys = keys_of(&by_stage["series"]);
    assert_eq!(
        eval(&tab, "heaptag.charts.map(c => c.u.series.length - 1)"),
        serde_json::json!([stage_keys.len().min(16) + lines.len()])
    );
    assert!(eval(&tab, "document.querySelectorAll('#chart-0 canvas').length").as_u64() >= Some(1));
    let legend = "[...document.querySelectorAll('#legend-0 .key[data-key]')].map(e => e.dataset.key)";
    let mut want: Vec<String> = stage_keys.clone();
    want.extend(lines.iter().map(|s| s.to_string()));
    assert_eq!(eval(&tab, legend), serde_json::json!(want));

    // Hover: the figures at the sample under the mouse are the timeline's.
    let over = eval(
        &tab,
        "(() => { const r = document.querySelector('#chart-0 .u-over').getBoundingClientRect(); \
         return [r.left, r.top, r.height]; })()",
    );
    let (left, top, height) = (
        over[0].as_f64().unwrap(),
        over[1].as_f64().unwrap(),
        over[2].as_f64().unwrap(),
    );
    // Hovers the chart over its point `k` (clearing the box first, so
    // what is read is what this move showed).
    let hovered = |k: usize| -> (f64, Vec<(String, u64)>) {
        tab.evaluate("document.getElementById('hover-0').textContent = ''", false)
            .unwrap();
        let x = eval(
            &tab,
            &format!("heaptag.charts[0].u.valToPos(heaptag.data.logs[0].chart.times_s[{k}], 'x')"),
        )
        .as_f64()
        .unwrap();
        tab.move_mouse_to_point(Point {
            x: left + x,
            y: top + height / 2.0,
        })
        .unwrap();
        wait_for(&tab, "!!document.querySelector('#hover-0 .at')");
        let v = eval(
            &tab,
            "[+document.querySelector('#hover-0 .at').dataset.time, [...document.querySelectorAll('#hover-0 tr:not(.line)')]\
             .map(r => [r.dataset.key, +r.querySelector('[data-bytes]').dataset.bytes])]",
        );
        let rows = v[1]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_u64().unwrap()))
            .collect();
        (v[0].as_f64().unwrap(), rows)
    };
    let check_at = |t: f64, rows: &[(String, u64)], tl: &Value| {
        let times = tl["times_s"].as_array().unwrap();
        let k = times
            .iter()
            .position(|x| x.as_f64() == Some(t))
            .unwrap_or_else(|| panic!("{t} is not a sample time"));
        let series = tl["series"].as_array().unwrap();
        assert_eq!(rows.len(), series.len().min(16));
        for ((key, bytes), s) in rows.iter().zip(series) {
            assert_eq!(key, s["key"].as_str().unwrap());
            assert_eq!(*bytes, s["bytes"][k].as_u64().unwrap(), "{key} at {t} s");
        }
    };
    let points = eval(&tab, "heaptag.data.logs[0].chart.times_s");
    let points: Vec<f64> = points.as_array().unwrap().iter().map(|t| t.as_f64().unwrap()).collect();
    assert!(points.len() >= 3, "{points:?}");
    let (k1, k2) = (points.len() / 3, points.len() * 2 / 3);
    assert!(k1 < k2);
    let (t1, rows1) = hovered(k1);
    assert_eq!(t1, points[k1]);
    check_at(t1, &rows1, &by_stage);
    let (t2, rows2) = hovered(k2);
    assert_eq!(t2, points[k2], "moving right shows a later moment");
    check_at(t2, &rows2, &by_stage);

    // Switching the grouping redraws with the partition timeline's keys.
    tab.find_element("#timeline button[data-by=partition]")
        .unwrap()
        .click()
        .unwrap();
    wait_for(&tab, "heaptag.grouping() === 'partition'");
    let part_keys = keys_of(&by_partition["series"]);
    assert!(part_keys.iter().any(|k| k == "shared (no partition)") || !part_keys.is_empty());
    let mut want: Vec<String> = part_keys.clone();
    want.extend(lines.iter().map(|s| s.to_string()));
    assert_eq!(eval(&tab, legend), serde_json::json!(want));
    assert_eq!(
        eval(&tab, "heaptag.charts.map(c => c.u.series.length - 1)"),
        serde_json::json!([part_keys.len().min(16) + lines.len()])
    );
    assert_ne!(part_keys, stage_keys);
    let (t3, rows3) = hovered(k1);
    check_at(t3, &rows3, &by_partition);

    // A duplicate's link zooms the chart to its window and marks its row.
    tab.find_element("a.show[data-log='0'][data-group='0']")
        .unwrap()
        .click()
        .unwrap();
    wait_for(&tab, "document.getElementById('dup-0-0').classList.contains('sel')");
    let g = &dups["duplicated"][0];
    let from = g["from_s"].as_f64().unwrap();
    let until = g["until_s"]
        .as_f64()
        .unwrap_or(src["source"]["duration_s"].as_f64().unwrap());
    let scale = eval(
        &tab,
        "[heaptag.charts[0].u.scales.x.min, heaptag.charts[0].u.scales.x.max]",
    );
    let duration = src["source"]["duration_s"].as_f64().unwrap();
    let (lo, hi) = (scale[0].as_f64().unwrap(), scale[1].as_f64().unwrap());
    assert!(lo <= from && hi >= until, "{scale} vs {from}..{until}");
    assert!(hi - lo < duration, "zoomed in: {scale} of a {duration} s run");
    // Back to the whole run, then a click inside a shaded window selects a duplicate that was alive then.
    tab.find_element("#timeline button.reset").unwrap().click().unwrap();
    let scale = eval(
        &tab,
        "[heaptag.charts[0].u.scales.x.min, heaptag.charts[0].u.scales.x.max]",
    );
    assert_eq!(
        (scale[0].as_f64(), scale[1].as_f64()),
        (Some(0.0), Some(duration)),
        "the whole run again"
    );
    let mid = (from + until) / 2.0;
    let x = eval(&tab, &format!("heaptag.charts[0].u.valToPos({mid}, 'x')"))
        .as_f64()
        .unwrap();
    tab.evaluate(
        "document.querySelectorAll('tr.group.sel').forEach(r => r.classList.remove('sel'))",
        false,
    )
    .unwrap();
    tab.click_point(Point {
        x: left + x,
        y: top + height / 2.0,
    })
    .unwrap();
    wait_for(&tab, "!!document.querySelector('tr.group.sel')");
    let sel = eval(&tab, "+document.querySelector('tr.group.sel').dataset.group");
    let chosen = &dups["duplicated"][sel.as_u64().unwrap() as usize];
    let c_until = chosen["until_s"].as_f64().unwrap_or(f64::MAX);
    assert!(chosen["from_s"].as_f64().unwrap() <= mid && mid <= c_until, "{chosen}");

    // Flame graphs: drawn, and searchable.
    wait_for(
        &tab,
        "[...document.querySelectorAll('iframe.flame')].length === 2 && [...document.querySelectorAll('iframe.flame')]\
         .every(f => f.contentWindow && typeof f.contentWindow.search === 'function' && \
         f.contentDocument.querySelectorAll('#frames > g').length > 0)",
    );
    tab.find_element("#flame-search").unwrap().click().unwrap();
    tab.type_str("build_pce").unwrap();
    wait_for(
        &tab,
        "document.getElementById('flame-matched').textContent.split('|').length === 2",
    );
    let matched = eval(&tab, "document.getElementById('flame-matched').textContent");
    let matched = matched.as_str().unwrap();
    assert!(
        !matched.contains("Matched: 0%") && matched.matches("Matched: ").count() == 2,
        "{matched}"
    );
    let highlighted = eval(
        &tab,
        "[...document.querySelectorAll('iframe.flame')].map(f => [...f.contentDocument.querySelectorAll('#frames rect')]\
         .filter(r => r.getAttribute('fill') === 'rgb(230,0,230)').length)",
    );
    assert!(
        highlighted.as_array().unwrap().iter().all(|n| n.as_u64() > Some(0)),
        "{highlighted}"
    );

    // A screenshot of what a person sees first.
    tab.evaluate("window.scrollTo(0, 0)", false).unwrap();
    let png = tab
        .capture_screenshot(Page::CaptureScreenshotFormatOption::Png, None, None, true)
        .unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{} bytes", png.len());
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html_browser.png");
    std::fs::write(&shot, &png).unwrap();
    eprintln!("html_browser: screenshot written to {}", shot.display());

    // Nothing went wrong, and nothing was fetched but the page itself.
    let errors = errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "{errors:#?}");
    let requests = requests.lock().unwrap().clone();
    assert!(!requests.is_empty(), "the Network domain saw the page load");
    assert!(requests.iter().all(|u| *u == url), "{requests:#?}");
}
