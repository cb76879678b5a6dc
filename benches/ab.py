#!/usr/bin/env python3
"""Two builds of the heaptag bench against bare jemalloc, interleaved.

    python3 benches/ab.py JEMALLOC_BIN OLD_BIN NEW_BIN [--rounds N] [--modes off,on,log] [FILTER]

JEMALLOC_BIN is a built `alloc_jemalloc` bench binary, OLD_BIN and NEW_BIN
two builds of `alloc_heaptag` (copy each out of target/release/deps after
building it). Every round runs jemalloc, then old and new in each mode
(`off`: HEAPTAG=off, `on`, `log`: HEAPTAG_LOG in a temp dir), in alternating
order, and prints for each `pairs` row the median of the per-round ratios to
jemalloc, and for each logging variant the events written and dropped.
The runs are `--bench` runs of FILTER (default `pairs`).
BENCH_SIZE in the environment limits them to one size.
"""
import argparse
import collections
import os
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("jemalloc")
ap.add_argument("old")
ap.add_argument("new")
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--modes", default="off,on")
ap.add_argument("filter", nargs="?", default="pairs")
a = ap.parse_args()

logs = tempfile.mkdtemp(prefix="heaptag-ab-")
mode_env = {"off": {"HEAPTAG": "off"}, "on": {}, "log": {"HEAPTAG_LOG": os.path.join(logs, "ab-%p.htlog")}}
variants = [("jemalloc", a.jemalloc, {})]
for m in a.modes.split(","):
    if m not in mode_env:
        ap.error(f"unknown mode {m!r} (off, on or log)")
    variants += [(f"old-{m}", a.old, mode_env[m]), (f"new-{m}", a.new, mode_env[m])]

res = collections.defaultdict(list)  # (workload, size, variant) -> [ns]
logged = collections.defaultdict(lambda: [0, 0])  # variant -> [events written, events dropped]
for r in range(a.rounds):
    for name, exe, env in variants if r % 2 == 0 else variants[::-1]:
        out = subprocess.run([exe, "--bench", a.filter], env={**os.environ, **env},
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        for f in os.listdir(logs):
            os.remove(os.path.join(logs, f))
        for line in out.splitlines():
            p = line.split("\t")
            if len(p) == 5 and p[1].startswith("pairs"):
                res[(p[1], int(p[2]), name)].append(float(p[3]))
            elif len(p) == 5 and p[1] == "log_bytes_per_event":
                logged[name][0] += int(p[2])
                logged[name][1] += int(float(p[4]))
os.rmdir(logs)

names = [v[0] for v in variants[1:]]
print("| workload | size | jemalloc ns | " + " | ".join(names) + " |")
print("| --- | --- | ---: | " + " | ".join("---:" for _ in names) + " |")
for w, s in sorted({(w, s) for (w, s, _) in res}):
    je = res[(w, s, "jemalloc")]
    ratios = [statistics.median(x / y for x, y in zip(res[(w, s, n)], je)) for n in names]
    print(f"| {w} | {s} | {statistics.median(je):.2f} | " + " | ".join(f"{x:.3f}" for x in ratios) + " |")
for n in names:
    if n in logged:
        w, d = logged[n]
        print(f"{n}: {w} events written, {d} dropped at the full queue ({100 * d / max(w + d, 1):.2f}%), all rounds")
