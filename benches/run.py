#!/usr/bin/env python3
"""Runs heaptag's bench binaries interleaved and reports ratios to bare jemalloc.

Usage: python3 benches/run.py [--rounds N] [--quick] [--write docs/PERFORMANCE.md]

Builds `cargo bench --no-run`, then for each round runs, in turn:
  alloc_jemalloc            (bare tikv-jemallocator)
  alloc_heaptag             (heaptag on)
  alloc_heaptag HEAPTAG=off (compiled in, switched off at run time)
and prints, per workload, the median ns/op of each variant and its ratio to
the jemalloc median of the same run. Peak RSS of each variant comes from
getrusage of the child. With --write, the table replaces the part of the file
between the markers `<!-- bench:begin -->` and `<!-- bench:end -->`.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import shutil
import sys
import tempfile
from collections import defaultdict

LOG_DIR = tempfile.mkdtemp(prefix="heaptag-bench-")
VARIANTS = [
    ("jemalloc", "alloc_jemalloc", {}),
    ("heaptag-on", "alloc_heaptag", {}),
    ("heaptag-off", "alloc_heaptag", {"HEAPTAG": "off"}),
    ("heaptag-log", "alloc_heaptag", {"HEAPTAG_LOG": os.path.join(LOG_DIR, "bench-%p.htlog")}),
]


def build():
    out = subprocess.run(
        ["cargo", "bench", "--no-run", "--message-format=json", "--bench", "alloc_jemalloc", "--bench", "alloc_heaptag"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    exes = {}
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            exes[msg["target"]["name"]] = msg["executable"]
    missing = {b for _, b, _ in VARIANTS} - exes.keys()
    if missing:
        sys.exit(f"run.py: cargo did not report bench executables for {sorted(missing)}")
    return exes


def run_once(exe, env, args):
    """Runs one bench binary; returns its result rows and its peak RSS (KiB)."""
    proc = subprocess.Popen([exe, *args], env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"run.py: {exe} {' '.join(args)} exited with {proc.returncode}")
    rows = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 5:
            variant, workload, param, ns, _wall = parts
            rows.append((variant, workload, param, float(ns)))
    return rows, usage.ru_maxrss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1/20th of the work, 1 round")
    ap.add_argument("--write", metavar="FILE", help="replace the marked table in FILE")
    ap.add_argument("filter", nargs="?", default="", help="only workloads whose name contains this")
    a = ap.parse_args()
    rounds = 1 if a.quick else a.rounds
    args = ([] if a.quick else ["--bench"]) + ([a.filter] if a.filter else [])
    exes = build()

    results = defaultdict(list)  # (workload, param, variant) -> [ns]
    rss = defaultdict(list)  # variant -> [peak RSS KiB of a whole run]
    own = []  # heaptag's own memory at the end of a run, bytes
    per_event = []  # log bytes per event, events, dropped
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else list(reversed(VARIANTS))
        for name, bench, env in order:
            rows, maxrss = run_once(exes[bench], env, args)
            for f in os.listdir(LOG_DIR):
                os.remove(os.path.join(LOG_DIR, f))
            rss[name].append(maxrss)
            for variant, workload, param, ns in rows:
                if workload == "own_memory":
                    if name == "heaptag-on":
                        own.append(ns)
                    continue
                if workload == "log_bytes_per_event":
                    per_event.append((ns, int(param)))
                    continue
                results[(workload, param, name)].append(ns)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)

    def order(key):
        digits = "".join(c for c in key[1] if c.isdigit())
        return (key[0], int(digits or 0))

    keys = sorted({(w, p) for (w, p, _) in results}, key=order)
    lines = [
        f"Command: `python3 benches/run.py --rounds {rounds}{' --quick' if a.quick else ''}` "
        f"({platform.machine()}, {os.cpu_count()} cores; medians of {rounds} interleaved rounds).",
        "",
        "| workload | size | jemalloc ns/op | heaptag off | heaptag on | heaptag + log | off / jemalloc | on / jemalloc | log / jemalloc |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w, p in keys:
        med = {v: statistics.median(results[(w, p, v)]) for v, _, _ in VARIANTS if results[(w, p, v)]}
        base = med.get("jemalloc")
        if not base:
            continue
        unit = "ms" if w in ("pipeline", "big") else "ns"
        def fmt(x):
            return f"{x / 1e6:.1f} ms" if unit == "ms" else f"{x:.2f}"
        lines.append(
            f"| {w} | {p} | {fmt(base)} | {fmt(med['heaptag-off'])} | {fmt(med['heaptag-on'])} | {fmt(med['heaptag-log'])} "
            f"| {med['heaptag-off'] / base:.3f}x | {med['heaptag-on'] / base:.3f}x | {med['heaptag-log'] / base:.3f}x |"
        )
    base_rss = statistics.median(rss["jemalloc"])
    lines.append("")
    lines.append(
        "Peak RSS of a whole bench run: "
        + ", ".join(f"{v} {statistics.median(rss[v]) / 1024:.0f} MiB ({statistics.median(rss[v]) / base_rss:.3f}x)" for v, _, _ in VARIANTS)
        + "."
    )
    if per_event:
        lines.append(
            f"Event log: {statistics.median(p for p, _ in per_event):.1f} bytes per allocator event, all records "
            f"(header, definitions, samples, fingerprints, symbols) included; "
            f"{statistics.median(e for _, e in per_event):.0f} events per run."
        )
    if own:
        lines.append(
            f"heaptag's own memory (tables, counter pages) at the end of a run: {statistics.median(own) / 2**20:.2f} MiB."
        )
    table = "\n".join(lines)
    print(table)
    if a.write:
        with open(a.write) as f:
            text = f.read()
        begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
        if begin not in text or end not in text:
            sys.exit(f"run.py: {a.write} has no {begin} ... {end} markers")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        with open(a.write, "w") as f:
            f.write(f"{head}{begin}\n{table}\n{end}{tail}")


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(LOG_DIR, ignore_errors=True)
