//! `heaptag html`: the page's figures are the JSON reports' figures, its
//! chart keeps every peak, log text cannot inject markup, and bad input
//! gets a clear error. (What a person sees, in a real browser, is checked
//! by the root crate's `tests/html_report.rs`.)

mod common;

use std::path::{Path, PathBuf};

use heaptag_analyzer::report::SitesOptions;
use heaptag_analyzer::{run, Command, Format};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/v1")
        .join(name)
}

fn json(cmd: Command) -> Value {
    let mut out = Vec::new();
    run(&cmd, &mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// Writes the page of `logs` and returns it with its embedded data.
fn page(logs: &[PathBuf], name: &str) -> (String, Value) {
    let out = common::temp(name).with_extension("html");
    let mut said = Vec::new();
    run(
        &Command::Html {
            logs: logs.to_vec(),
            out: out.clone(),
        },
        &mut said,
    )
    .unwrap();
    let said = String::from_utf8(said).unwrap();
    assert!(
        said.starts_with(&format!("heaptag: report written to {}", out.display())),
        "{said}"
    );
    let html = std::fs::read_to_string(&out).unwrap();
    (html.clone(), data_of(&html))
}

fn data_of(html: &str) -> Value {
    let start = html
        .find("<script type=\"application/json\" id=\"heaptag-data\">")
        .unwrap();
    let rest = &html[start..];
    let body = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
    serde_json::from_str(body).unwrap()
}

/// Every report in the page is exactly what `--format json` prints.
#[test]
fn the_page_holds_the_json_reports() {
    for name in ["per_partition.htlog", "race_baseline.htlog", "shared.htlog"] {
        let logs = vec![fixture(name)];
        let (html, d) = page(&logs, &format!("page-{name}"));
        let fmt = Format::Json;
        assert_eq!(
            d["report"],
            json(Command::Report {
                logs: logs.clone(),
                format: fmt
            }),
            "{name}"
        );
        assert_eq!(
            d["peak"],
            json(Command::Peak {
                logs: logs.clone(),
                format: fmt,
                top: 15
            }),
            "{name}"
        );
        assert_eq!(
            d["dups"],
            json(Command::Dups {
                logs: logs.clone(),
                format: fmt
            }),
            "{name}"
        );
        assert_eq!(
            d["sites"],
            json(Command::Sites {
                logs: logs.clone(),
                format: fmt,
                top: 15,
                options: SitesOptions::default(),
            }),
            "{name}"
        );
        // The tables show those figures, formatted as the text reports do.
        let r = &d["report"]["sources"][0];
        let pa = r["peak_attributed"]["bytes"].as_u64().unwrap();
        assert!(
            html.contains(&format!(
                "class=\"peak-attributed\"><span class=\"b\" data-bytes=\"{pa}\">{}</span>",
                heaptag_analyzer::render::bytes(pa)
            )),
            "{name}"
        );
        for row in r["tags"].as_array().unwrap() {
            let peak = row["peak_live"]["bytes"].as_u64().unwrap();
            assert!(
                html.contains(&format!(
                    "<td class=\"num peak\"><span class=\"b\" data-bytes=\"{peak}\">{}</span>",
                    heaptag_analyzer::render::bytes(peak)
                )),
                "{name}: {row}"
            );
        }
        // Self-contained: no external script, style, image or frame source.
        for bad in ["src=\"http", "href=\"http", "src=\"//", "@import", "url(http"] {
            assert!(!html.contains(bad), "{name}: {bad}");
        }
    }
}

/// The chart's series are the timeline's, and its flame graphs weigh what
/// the reports say: live bytes at the attributed peak, and every byte
/// allocated.
#[test]
fn chart_and_flame_graphs_match_the_reports() {
    let logs = vec![fixture("per_partition.htlog")];
    let (_, d) = page(&logs, "chart");
    let view = &d["logs"][0];
    let groups = view["chart"]["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 4);
    for g in groups {
        let by = g["by"].as_str().unwrap();
        let t = json(Command::Timeline {
            logs: logs.clone(),
            format: Format::Json,
            by: match by {
                "stage" => heaptag_analyzer::By::Stage,
                "partition" => heaptag_analyzer::By::Partition,
                "job" => heaptag_analyzer::By::Job,
                _ => heaptag_analyzer::By::Tag,
            },
            csv: false,
        });
        let tl = &t["sources"][0]["series"];
        let chart = g["series"].as_array().unwrap();
        assert_eq!(
            chart.len(),
            tl.as_array().unwrap().len().min(heaptag_analyzer::html::MAX_SERIES),
            "{by}"
        );
        for (c, s) in chart.iter().zip(tl.as_array().unwrap()) {
            if !c["key"].as_str().unwrap().ends_with(" others)") {
                assert_eq!(c["key"], s["key"], "{by}");
                assert_eq!(c["peak_bytes"], s["peak_bytes"], "{by}");
            }
        }
        // The log is short (fewer samples than buckets): every sample is a
        // point, so the stack's top is the timeline's total at each.
        let times = t["sources"][0]["times_s"].as_array().unwrap();
        assert_eq!(view["chart"]["times_s"].as_array().unwrap(), times, "{by}");
    }
    let r = &d["report"]["sources"][0];
    let flames = view["flames"].as_array().unwrap();
    assert_eq!(flames[0]["total_bytes"], r["peak_attributed"]["bytes"]);
    let allocated: u64 = r["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["allocated_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(flames[1]["total_bytes"].as_u64().unwrap(), allocated);
    for f in flames {
        let svg = f["svg"].as_str().unwrap();
        if let Err(e) = roxmltree::Document::parse(svg) {
            panic!("{e}: {}", &svg[..svg.len().min(600)]);
        }
        assert!(svg.contains("stage=pce_load"), "the tag is the root frame");
    }
}

/// The RSS, VmHWM and jemalloc-resident lines carry the log's own
/// readings: here written by hand, so their peaks are known.
#[test]
fn lines_carry_the_logs_readings() {
    let path = common::temp("html-prover");
    common::prover_log(&path);
    let (_, d) = page(std::slice::from_ref(&path), "html-prover");
    let recs: Vec<heaptag_format::Record> = heaptag_format::LogReader::open(&path).unwrap().collect();
    let mut rss = 0;
    let mut resident = 0;
    for r in &recs {
        match r {
            heaptag_format::Record::Rss { vm_rss, .. } => rss = rss.max(*vm_rss),
            heaptag_format::Record::Jemalloc { resident: x, .. } => resident = resident.max(*x),
            _ => {}
        }
    }
    let lines = d["logs"][0]["chart"]["lines"].as_array().unwrap();
    let peak = |name: &str| {
        lines
            .iter()
            .find(|l| l["name"] == name)
            .map(|l| l["peak_bytes"].as_u64().unwrap())
    };
    assert_eq!(peak("RSS (VmRSS)"), Some(rss));
    assert_eq!(peak("VmHWM"), Some(rss)); // the builder writes VmHWM = VmRSS
    assert_eq!(peak("jemalloc resident"), Some(resident));
    assert!(rss > 0 && resident > 0);
}

/// A `heaptag run` log has no tags: its chart shows the sampled process.
#[test]
fn a_run_log_charts_its_processes() {
    let (html, d) = page(&[fixture("run_sleep.htlog")], "run-sleep");
    let lines = d["logs"][0]["chart"]["lines"].as_array().unwrap();
    let procs = d["report"]["sources"][0]["processes"].as_array().unwrap();
    assert!(!procs.is_empty());
    for p in procs {
        let name = format!("RSS of pid {}", p["pid"]);
        let l = lines.iter().find(|l| l["name"] == name.as_str()).unwrap();
        assert_eq!(l["peak_bytes"], p["peak_rss"]["bytes"]);
    }
    assert!(html.contains("id=\"chart-0\""));
}

/// Several logs: one section each, in order; damage in plain sight.
#[test]
fn several_logs_and_damage() {
    let logs = vec![fixture("shared.htlog"), fixture("corrupt.htlog")];
    let (html, d) = page(&logs, "two");
    assert_eq!(d["logs"].as_array().unwrap().len(), 2);
    assert!(html.contains("id=\"chart-0\"") && html.contains("id=\"chart-1\""));
    let problems = d["report"]["sources"][1]["source"]["problems"].as_array().unwrap();
    assert!(!problems.is_empty());
    let warn = &html[html.find("id=\"run-1\"").unwrap()..];
    let warn = &warn[..warn.find("</div>\n").unwrap()];
    assert!(warn.contains("class=\"warnings\""), "{warn}");
    let first = problems[0].as_str().unwrap();
    assert!(
        warn.contains(&first.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")),
        "{warn}"
    );
}

const EVIL: &str = "</script><script>alert(1)</script><img src=x onerror=alert(2)>";

/// Stage names, sites and marks are text on the page, never markup, and
/// cannot end the data block.
#[test]
fn log_text_cannot_inject_markup() {
    use common::{LogBuilder, MIB, MS};
    use heaptag_format::Record;
    let path = common::temp("html-evil");
    let mut b = LogBuilder::new();
    b.tag(0, None, None, None)
        .tag(1, Some(1), Some(EVIL), Some(0))
        .rec(Record::StackDef {
            id: 1,
            frames: vec![0x5500_0100],
        })
        .rec(Record::Symbol {
            addr: 0x5500_00ff,
            function: EVIL.into(),
            file: "src/<b>.rs".into(),
            line: 3,
        })
        .sample(0, 40 * MIB, 2 * MIB, 8 * MIB, 2 * MIB, 0)
        .flush();
    b.alloc(10 * MS, 1, 1, 0x1000_0000, 8 * MIB)
        .rec(Record::Mark {
            time_ns: 20 * MS,
            label: EVIL.into(),
        })
        .sample(100 * MS, 60 * MIB, 18 * MIB, 30 * MIB, 16 * MIB, 8 * MIB)
        .rec(Record::End {
            time_ns: 300 * MS,
            dropped: 0,
        })
        .flush();
    b.write(&path);
    let (html, d) = page(&[path], "html-evil");
    assert!(!html.contains("<script>alert"), "raw markup from the log");
    assert!(!html.contains("<img src=x"), "raw markup from the log");
    assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(1)"));
    // The data block was not ended early: it parses whole and holds the
    // names as they are.
    assert_eq!(d["report"]["sources"][0]["marks"][0][1], EVIL);
    assert!(
        d["report"]["sources"][0]["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["stage"] == EVIL),
        "{}",
        d["report"]
    );
}

#[test]
fn bad_input_gets_a_clear_error() {
    let missing = common::temp("html-missing");
    let (code, out, err) = common::heaptag(&["html", missing.to_str().unwrap(), "-o", "/tmp/never.html"], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(missing.to_str().unwrap()), "{err}");
    assert!(!Path::new("/tmp/never.html").exists());
    // An output in a directory that does not exist: named, exit 2.
    let out_path = "/nonexistent-dir-heaptag/report.html";
    let (code, _, err) = common::heaptag(
        &["html", fixture("shared.htlog").to_str().unwrap(), "-o", out_path],
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains(out_path) && err.contains("cannot write the page"), "{err}");
    let (code, _, err) = common::heaptag(&["html"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("LOG"), "{err}");
}
