#!/usr/bin/env python3
"""Runs heaptag's bench binaries and its peers interleaved; reports ratios to bare jemalloc.

Usage: python3 benches/run.py [--rounds N] [--quick] [--external] [--baseline DIR] [--write docs/PERFORMANCE.md] [FILTER]

Builds `cargo bench --no-run`, then each round runs every variant once, in an
order that alternates (A B C ..., ... C B A):

  jemalloc     bare tikv-jemallocator                      (benches/alloc_jemalloc.rs)
  heaptag-off  heaptag compiled in, HEAPTAG=off            (benches/alloc_heaptag.rs)
  heaptag-on   heaptag counters, tags set                  (same binary)
  heaptag-log  heaptag with the event log on (HEAPTAG_LOG) (same binary)
  system       glibc malloc                                (benches/alloc_system.rs)
  tracking     tobz/tracking-allocator + per-group tracker (benches/alloc_tracking.rs)
  dhat         dhat-rs heap profiler (1/50th of the micro iterations: ~us per call)
  heaptag-log-full  the log with HEAPTAG_FINGERPRINT_FULL=1, on the `big` workload only
  heaptag-native      heaptag built with the `native` feature (benches/alloc_heaptag_native.rs,
  heaptag-native-off  a second `cargo bench --features native` build); HEAPTAG=off

The `native/*` workloads are C's malloc/free pairs (through glibc in every
binary but the native one, where heaptag's shim serves them), `native-je/*`
the same pairs on tikv-jemalloc-sys's prefixed functions called directly
(bare jemalloc, no shim) in the same processes; they get their own table.

and prints, per workload, medians and ratios to the jemalloc median of the
same rounds, peak RSS per variant (getrusage of each child), heaptag's own
memory, log bytes per event, dhat's profile size, and the analyzer's events
per second on a synthetic log. With --external (tools found on PATH),
heaptrack and valgrind massif also run once on the system-malloc variant's
pipeline workload. With --baseline DIR (another checkout of heaptag, e.g. a
`git worktree add DIR <rev>` of an older commit), that build's heaptag runs
interleaved with this one as base-off / base-on / base-log (the peers are left
out), and the analyzer's rate is measured for both builds, so a change is
judged before and after in the same run. The output ends with issue 20's
targets, each marked met or missed from the run's own figures. With --write, the output replaces the
part of FILE between `<!-- bench:begin -->` and `<!-- bench:end -->`.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

LOG_DIR = tempfile.mkdtemp(prefix="heaptag-bench-")
VARIANTS = [
    ("jemalloc", "alloc_jemalloc", {}),
    ("heaptag-off", "alloc_heaptag", {"HEAPTAG": "off"}),
    ("heaptag-on", "alloc_heaptag", {}),
    ("heaptag-log", "alloc_heaptag", {"HEAPTAG_LOG": os.path.join(LOG_DIR, "bench-%p.htlog")}),
    ("system", "alloc_system", {}),
    ("tracking", "alloc_tracking", {}),
    ("dhat", "alloc_dhat", {"BENCH_DIV": "50", "DHAT_OUT": os.path.join(LOG_DIR, "dhat.json")}),
]
BENCHES = sorted({b for _, b, _ in VARIANTS})
# The event log with full-content fingerprints (HEAPTAG_FINGERPRINT_FULL=1),
# run on the `big` workload only: its difference to heaptag-log is the hash.
FULL_VARIANT = ("heaptag-log-full", "alloc_heaptag",
                {"HEAPTAG_LOG": os.path.join(LOG_DIR, "bench-full-%p.htlog"), "HEAPTAG_FINGERPRINT_FULL": "1"})
# Issue 20's targets, each checked from the run's own figures by `targets`.
LOG_SIZES = ("65536", "262144", "1048576")
SMALL_SIZES = ("16", "64", "256", "1024", "4096")
# Full fingerprints: 3x faster than the 0.17 s/GiB measured before issue 20
# as the `big` workload's log with full fingerprints minus without (whole rounds,
# on session 36's machine); now measured on the free alone, round by round.
FULL_FP_BEFORE_S_PER_GIB = 0.17
# The `big` workload's block, in GiB.
BIG_GIB = 64 / 1024


def targets(results, med, rounds, rate):
    """Issue 20's targets, each marked met or missed from this run's figures."""
    rows = []

    def ratio(w, p, n):
        x, base = med.get((w, p, n)), med.get((w, p, "jemalloc"))
        return x / base if x and base else None

    def per_round(w, p, n):
        """The median of the per-round ratios (each round's variant against
        the same round's jemalloc run): a round slowed by the machine slows
        both, where a ratio of medians can pair a quiet median with a noisy one."""
        xs, base = results.get((w, p, n), []), results.get((w, p, "jemalloc"), [])
        if not base or len(xs) != len(base):
            return None
        return statistics.median(x / b for x, b in zip(xs, base))

    def worst(pairs, n, limit, what, by_round=False):
        got = [((per_round if by_round else ratio)(w, p, n), w, p) for w, p in pairs]
        got = [g for g in got if g[0] is not None]
        if not got:
            return
        hi = max(got)
        lo = min(got)
        status = "met" if hi[0] <= limit else "missed"
        how = ", median of per-round ratios" if by_round else ""
        rows.append(f"| {what}{how} <= {limit:.2f}x | {lo[0]:.3f}x-{hi[0]:.3f}x (worst: {hi[1]} {hi[2]}) | {status} |")

    threads = ("pairs/1t", "pairs/2t")
    worst([(w, p) for w in threads for p in LOG_SIZES], "heaptag-log", 1.5,
          "log on, pairs 64 KiB-1 MiB, 1 and 2 threads")
    worst([(w, p) for w in threads for p in SMALL_SIZES], "heaptag-on", 1.5,
          "tracking on, pairs 16 B-4 KiB, 1 and 2 threads", by_round=True)
    worst([(w, p) for w in threads for p in SMALL_SIZES], "heaptag-off", 1.05,
          "HEAPTAG=off, pairs 16 B-4 KiB, 1 and 2 threads", by_round=True)
    pipe = next((p for (w, p, _) in results if w == "pipeline"), None)
    base = results.get(("pipeline", pipe, "jemalloc"), [])
    for n, limit in (("heaptag-on", 1.05), ("heaptag-log", 1.10)):
        xs = results.get(("pipeline", pipe, n), [])
        if base and len(xs) == len(base):
            r = statistics.median(x / b for x, b in zip(xs, base))
            status = ("met" if r <= limit else "missed") + ("" if rounds >= 7 else f" (only {rounds} rounds; 7 asked)")
            rows.append(f"| pipeline, {n}, median of per-round ratios <= {limit:.2f}x | {r:.3f}x over {len(xs)} rounds | {status} |")
    rows.append(f"| analyzer `report` >= 20 M events/s on one core | {rate / 1e6:.1f} M events/s"
                f"{' (not pinned: no taskset)' if not shutil.which('taskset') else ''} | "
                f"{'met' if rate >= 20e6 else 'missed'} |")
    full, log = results.get(("big", "64MiB free", "heaptag-log-full"), []), results.get(("big", "64MiB free", "heaptag-log"), [])
    if full and len(full) == len(log):
        # Per round, the full variant's free minus heaptag-log's, run right
        # after it: the hash's cost, paired as the per-round ratios are.
        per_gib = statistics.median((f - l) / 1e9 / BIG_GIB for f, l in zip(full, log))
        reads = results.get(("big", "64MiB read", "jemalloc"), [])
        floor = statistics.median(reads) / 1e9 / BIG_GIB if reads else None
        what = (f"| full fingerprints >= 3x faster than {FULL_FP_BEFORE_S_PER_GIB} s/GiB (`big`: the free of a "
                f"64 MiB block, log with `HEAPTAG_FINGERPRINT_FULL=1` minus log, median of per-round differences) |")
        floor_note = (f"; a plain read of the same freshly written block takes {floor:.3f} s/GiB on this machine, "
                      f"the floor of any full-content hash (so at most {FULL_FP_BEFORE_S_PER_GIB / floor:.1f}x "
                      f"faster than {FULL_FP_BEFORE_S_PER_GIB} s/GiB here)"
                      if floor else "")
        if per_gib <= 0:
            # Within the noise: the run cannot tell the hash's cost.
            rows.append(f"{what} {per_gib:.3f} s/GiB{floor_note} | inconclusive |")
        else:
            speedup = FULL_FP_BEFORE_S_PER_GIB / per_gib
            rows.append(f"{what} {per_gib:.3f} s/GiB, {speedup:.1f}x{floor_note} | "
                        f"{'met' if speedup >= 3 else 'missed'} |")
    if not rows:
        return []
    note = " A --quick run is a smoke test: 1 round of 1/20th of the work, too little to judge them." if rounds < 2 else ""
    return ["", f"Issue 20's targets, marked from this run's figures (ratios to bare jemalloc, medians).{note}", "",
            "| target | measured | status |", "| --- | --- | --- |", *rows]
NATIVE_VARIANTS = [
    ("heaptag-native", "alloc_heaptag_native", {}),
    ("heaptag-native-off", "alloc_heaptag_native", {"HEAPTAG": "off"}),
]


def cargo_json(args, cwd=None):
    out = subprocess.run(["cargo", *args, "--message-format=json"], check=True, stdout=subprocess.PIPE, text=True,
                         cwd=cwd).stdout
    exes = {}
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            exes[msg["target"]["name"]] = msg["executable"]
    return exes


def build(benches=BENCHES, cwd=None, tools=("heaptag", "synth_log", "fuzz")):
    """Builds the benches and the analyzer's tools in one cargo invocation.

    One invocation means one feature resolution: the analyzer's dependencies
    are compiled once, not again for a `-p heaptag-analyzer` build of their own
    (which resolves other features). CI's fuzz step builds `fuzz` with the same
    packages and finds it fresh."""
    args = ["build", "--release", "-p", "heaptag", "-p", "heaptag-analyzer"]
    for b in benches:
        args += ["--bench", b]
    for t in tools:
        args += ["--bin" if t == "heaptag" else "--example", t]
    built = cargo_json(args, cwd)
    missing = (set(benches) | set(tools)) - built.keys()
    if missing:
        sys.exit(f"run.py: cargo did not report executables for {sorted(missing)}")
    return {b: built[b] for b in benches}, {t: built[t] for t in tools}


def run_once(cmd, env, ok=(0,)):
    """Runs one command; returns its result rows and its peak RSS (KiB).
    An exit code outside `ok` ends the run."""
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        sys.exit(f"run.py: {' '.join(cmd)} exited with {code}")
    rows = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 5:
            variant, workload, param, ns, last = parts
            if workload == "log_bytes_per_event":
                # (events written, bytes per event, events dropped)
                rows.append((variant, workload, param, (float(ns), int(float(last)))))
            else:
                rows.append((variant, workload, param, float(ns)))
    return rows, usage.ru_maxrss


def external_tools(exe, quick):
    """heaptrack and massif on the system-malloc pipeline, against a plain run."""
    lines = []
    args = [exe, "pipeline"] + ([] if quick else ["--bench"])
    t0 = time.monotonic()
    run_once(args, {})
    plain = time.monotonic() - t0
    if shutil.which("heaptrack"):
        out = os.path.join(LOG_DIR, "heaptrack")
        t0 = time.monotonic()
        subprocess.run(["heaptrack", "-o", out, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        took = time.monotonic() - t0
        size = sum(os.path.getsize(os.path.join(LOG_DIR, f)) for f in os.listdir(LOG_DIR) if f.startswith("heaptrack"))
        lines.append(f"| heaptrack | {took:.2f} s | {took / plain:.1f}x | {size / 2**10:.0f} KiB (compressed) |")
    if shutil.which("valgrind"):
        out = os.path.join(LOG_DIR, "massif.out")
        t0 = time.monotonic()
        subprocess.run(["valgrind", "--tool=massif", f"--massif-out-file={out}", *args], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        took = time.monotonic() - t0
        lines.append(f"| valgrind massif | {took:.2f} s | {took / plain:.1f}x | {os.path.getsize(out) / 2**10:.0f} KiB |")
    if not lines:
        return []
    return ["", f"External profilers on the system-malloc `pipeline` workload (plain run {plain:.2f} s, one run each):",
            "", "| tool | wall | vs plain | output |", "| --- | ---: | ---: | ---: |", *lines]


def analyzer_rate(tools, quick, label=""):
    """`report`, `dups` and `check` on one synthetic log, each pinned to one
    core: their events/s and peak RSS (what `dups` and `check` hold is the
    live set's lifetimes, not the log). Returns report's rate and the line."""
    events = 1_000_000 if quick else 20_000_000
    log = os.path.join(LOG_DIR, "synth.htlog")
    policy = os.path.join(LOG_DIR, "policy.toml")
    with open(policy, "w") as f:
        f.write('[[rule]]\nmax_copies = 1\n\n[[rule]]\nmax_peak = "1 TiB"\n')
    # The target is per core: the analyzer is single-threaded, pinned so
    # the kernel cannot spread it.
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    subprocess.run([tools["synth_log"], log, str(events)], check=True, stderr=subprocess.DEVNULL)
    figures = []
    for cmd, runs in (("report", 3), ("dups", 2), ("check", 2)):
        argv = [tools["heaptag"], cmd] + (["--policy", policy] if cmd == "check" else []) + [log]
        best, maxrss = None, 0
        for _ in range(1 if quick else runs):
            t0 = time.monotonic()
            # (check: 1 is a broken rule, a verdict; anything else failed)
            _, rss = run_once(pin + argv, {}, ok=(0, 1) if cmd == "check" else (0,))
            took = time.monotonic() - t0
            best = min(best or took, took)
            maxrss = max(maxrss, rss)
        figures.append((cmd, best, events / best, maxrss))
    size = os.path.getsize(log)
    os.remove(log)
    os.remove(policy)
    parts = [f"`{cmd}` {took:.2f} s, {rate / 1e6:.1f} M events/s, peak RSS {rss / 1024:.1f} MiB"
             for cmd, took, rate, rss in figures]
    return figures[0][2], (f"Analyzer{label} on a {events / 1e6:.0f} M-event synthetic log (`synth_log`, "
                           f"{size / 2**20:.0f} MiB){', pinned to one core (taskset -c 0)' if pin else ''}, "
                           f"{'one run each' if quick else 'best of 3 runs (report) or 2'}: " + "; ".join(parts) + ".")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1/20th of the work, 1 round")
    ap.add_argument("--external", action="store_true", help="also run heaptrack and valgrind massif, if installed")
    ap.add_argument("--write", metavar="FILE", help="replace the marked part of FILE")
    ap.add_argument("--baseline", metavar="DIR", help="another heaptag checkout to run interleaved with this one")
    ap.add_argument("filter", nargs="?", default="", help="only workloads whose name contains this")
    a = ap.parse_args()
    rounds = 1 if a.quick else a.rounds
    args = ([] if a.quick else ["--bench"]) + ([a.filter] if a.filter else [])
    exes, tools = build()
    # A second build with the `native` feature (it changes heaptag-alloc).
    exes.update(cargo_json(["bench", "--no-run", "--features", "native", "--bench", "alloc_heaptag_native"]))
    if "alloc_heaptag_native" not in exes:
        sys.exit("run.py: cargo did not report the alloc_heaptag_native bench executable")
    variants = VARIANTS + NATIVE_VARIANTS
    if a.baseline:
        base_exes, base_tools = build(["alloc_heaptag"], a.baseline, ("heaptag", "synth_log"))
        exes["base:alloc_heaptag"] = base_exes["alloc_heaptag"]
        variants = [v for v in VARIANTS if v[0] == "jemalloc" or v[0].startswith("heaptag")]
        variants += [("base" + n[len("heaptag"):], "base:" + b, e) for n, b, e in VARIANTS if n.startswith("heaptag")]

    results = defaultdict(list)  # (workload, param, variant) -> [ns]
    rss = defaultdict(list)  # variant -> [peak RSS KiB of a whole run]
    own, per_event, dhat_bytes = [], [], []
    for r in range(rounds):
        order = variants if r % 2 == 0 else list(reversed(variants))
        if not a.baseline and (not a.filter or a.filter in "big"):
            # Full-content fingerprints, on the one workload that frees big
            # blocks (the others would only repeat heaptag-log); run right
            # after heaptag-log, whose `big` figure it is compared with, so
            # both see the same moment of the machine in every round.
            at = next((i + 1 for i, v in enumerate(order) if v[0] == "heaptag-log"), len(order))
            order = order[:at] + [FULL_VARIANT] + order[at:]
        for name, bench, env in order:
            run_args = args if name != FULL_VARIANT[0] else ([] if a.quick else ["--bench"]) + ["big"]
            rows, maxrss = run_once([exes[bench], *run_args], env)
            for f in os.listdir(LOG_DIR):
                os.remove(os.path.join(LOG_DIR, f))
            rss[name].append(maxrss)
            for _variant, workload, param, ns in rows:
                if workload == "own_memory":
                    if name == "heaptag-on":
                        own.append(ns)
                elif workload == "log_bytes_per_event":
                    if name == "heaptag-log":
                        per_event.append((ns[0], int(param), ns[1]))
                elif workload == "profile_bytes":
                    dhat_bytes.append(ns)
                else:
                    results[(workload, param, name)].append(ns)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)

    def order(key):
        digits = "".join(c for c in key[1] if c.isdigit())
        return (key[0], int(digits or 0), key[1])

    native_keys = sorted({(w, p) for (w, p, _) in results if w.startswith("native")}, key=order)
    keys = sorted({(w, p) for (w, p, _) in results if not w.startswith("native")}, key=order)
    med = {k: statistics.median(v) for k, v in results.items()}

    def fmt(w, x):
        if w in ("pipeline", "big", "realloc"):
            # (a free or a read alone: a few ms, two decimals)
            return f"{x / 1e6:.2f} ms" if x < 10e6 else f"{x / 1e6:.1f} ms"
        return f"{x:.2f}"

    lines = [
        f"Command: `python3 benches/run.py --rounds {rounds}{' --quick' if a.quick else ''}"
        f"{' --external' if a.external else ''}{' --baseline ' + a.baseline if a.baseline else ''}"
        f"{' ' + a.filter if a.filter else ''}` ({platform.machine()}, {os.cpu_count()} cores; "
        f"medians of {rounds} interleaved rounds). Times are ns per operation (ms for pipeline, big, realloc).",
        "",
        "heaptag against bare jemalloc:",
        "",
        "| workload | size | jemalloc | heaptag off | heaptag on | heaptag + log | off / jemalloc | on / jemalloc | log / jemalloc |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w, p in keys:
        base = med.get((w, p, "jemalloc"))
        if not base:
            continue
        v = {n: med.get((w, p, n)) for n, _, _ in variants}
        lines.append(
            f"| {w} | {p} | {fmt(w, base)} | {fmt(w, v['heaptag-off'])} | {fmt(w, v['heaptag-on'])} | {fmt(w, v['heaptag-log'])} "
            f"| {v['heaptag-off'] / base:.3f}x | {v['heaptag-on'] / base:.3f}x | {v['heaptag-log'] / base:.3f}x |"
        )
    if a.baseline:
        lines += ["", f"This build against the baseline `{a.baseline}`, same rounds (ratios to bare jemalloc; "
                  "after / before below 1 means faster now):", "",
                  "| workload | size | base on | on | on after / before | base log | log | log after / before |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for w, p in keys:
            base = med.get((w, p, "jemalloc"))
            if not base:
                continue
            g = {n: med.get((w, p, n)) for n in ("base-on", "heaptag-on", "base-log", "heaptag-log")}
            lines.append(
                f"| {w} | {p} | {g['base-on'] / base:.3f}x | {g['heaptag-on'] / base:.3f}x | "
                f"{g['heaptag-on'] / g['base-on']:.3f} | {g['base-log'] / base:.3f}x | {g['heaptag-log'] / base:.3f}x | "
                f"{g['heaptag-log'] / g['base-log']:.3f} |")
    peers = [n for n in ["heaptag-on", "heaptag-log", "system", "tracking", "dhat"] if n in {v[0] for v in variants}]
    lines += ["", "Peers, as ratios to bare jemalloc (lower is better):", "",
              "| workload | size | " + " | ".join(peers) + " |",
              "| --- | --- | " + " | ".join("---:" for _ in peers) + " |"]
    for w, p in keys:
        base = med.get((w, p, "jemalloc"))
        if not base:
            continue
        cells = []
        for n in peers:
            x = med.get((w, p, n))
            cells.append(f"{x / base:.2f}x" if x else "-")
        lines.append(f"| {w} | {p} | " + " | ".join(cells) + " |")
    if native_keys:
        lines += ["", "C's malloc/free pairs (the `native` feature), ns per pair: glibc (C's malloc in the bare "
                  "jemalloc binary), bare jemalloc (tikv-jemalloc-sys's prefixed malloc/free called directly, same "
                  "process), heaptag's shim (binary built with `--features native`, tag set), and ratios to bare "
                  "jemalloc:", "",
                  "| workload | size | bare jemalloc | glibc | heaptag native on | heaptag native off "
                  "| glibc / jemalloc | native on / jemalloc | native off / jemalloc |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for w, p in native_keys:
            if not w.startswith("native/"):
                continue
            je = med.get(("native-je/" + w.split("/", 1)[1], p, "jemalloc"))
            g = med.get((w, p, "jemalloc"))
            on = med.get((w, p, "heaptag-native"))
            off = med.get((w, p, "heaptag-native-off"))
            if not (je and g and on and off):
                continue
            lines.append(f"| {w} | {p} | {je:.2f} | {g:.2f} | {on:.2f} | {off:.2f} | {g / je:.2f}x | {on / je:.2f}x "
                         f"| {off / je:.2f}x |")
    base_rss = statistics.median(rss["jemalloc"])
    lines += ["", "Peak RSS of a whole bench run: " + ", ".join(
        f"{v} {statistics.median(rss[v]) / 1024:.0f} MiB ({statistics.median(rss[v]) / base_rss:.2f}x)" for v, _, _ in variants) + "."]
    if per_event:
        lines.append(
            f"Event log: {statistics.median(p for p, _, _ in per_event):.1f} bytes per allocator event, all records "
            f"(header, definitions, samples, fingerprints, symbols) included; "
            f"{statistics.median(e for _, e, _ in per_event):.0f} events written per run; events dropped at the "
            f"full queue per run (median, most): {statistics.median(d for _, _, d in per_event):.0f}, "
            f"{max(d for _, _, d in per_event)} "
            f"({100 * max(d / max(d + e, 1) for _, e, d in per_event):.2f}% of a run's events at most)."
        )
    if dhat_bytes:
        lines.append(f"dhat's profile (dhat-heap.json): {statistics.median(dhat_bytes) / 2**20:.1f} MiB per run (at 1/50th of the micro iterations).")
    if own:
        lines.append(f"heaptag's own memory (tables, counter pages) at the end of a run: {statistics.median(own) / 2**20:.2f} MiB.")
    rate, line = analyzer_rate(tools, a.quick)
    lines.append(line)
    if a.baseline:
        lines.append(analyzer_rate(base_tools, a.quick, " (baseline)")[1])
    lines += targets(results, med, rounds, rate)
    if a.external:
        lines += external_tools(exes["alloc_system"], a.quick)
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
