#!/bin/bash
# The log writer's instructions per logged event, counted by callgrind (deterministic,
# unlike timings on a shared machine): `pairs/1t` at BENCH_SIZE (default 65536) with
# BENCH_DIV=10 and the log on, each thread profiled apart (--separate-threads); the
# writer thread's total Ir (the thread whose profile holds Writer::cycle), and that
# total less the time-driven sampling (jemalloc_stats, procfs::status: their count
# follows valgrind's wall time, not the events), divided by the events the log wrote
# (the `log_bytes_per_event` line; its last column is the events dropped, 0 here).
#
# usage: benches/callgrind_writer.sh HEAPTAG_BENCH_BIN [LABEL]
#   e.g. benches/callgrind_writer.sh target/release/deps/alloc_heaptag-HASH new
set -eu
BIN=$1; TAG=${2:-run}
DIR=$(mktemp -d /tmp/cgw.XXXXXX)
out=$(BENCH_DIV=10 BENCH_SIZE=${BENCH_SIZE:-65536} HEAPTAG_LOG=$DIR/x-%p.htlog \
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=$DIR/cg.%p \
  "$BIN" --bench pairs/1t 2>/dev/null)
ev=$(echo "$out" | awk '/log_bytes_per_event/{print $3}')
dropped=$(echo "$out" | awk '/log_bytes_per_event/{print $5}')
for f in "$DIR"/cg.*-*; do
  if grep -q "Writer.*cycle" "$f"; then
    ir=$(grep "^summary" "$f" | awk '{print $2}')
    samp=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null \
      | grep -E "jemalloc::jemalloc_stats \[|log::procfs::status \[" \
      | awk '{gsub(",","",$1); s+=$1} END{print s+0}')
    echo "$TAG events $ev dropped $dropped writer_Ir $ir sampling_Ir $samp" \
      "Ir/event $(echo "scale=1; $ir/$ev" | bc) less_sampling/event $(echo "scale=1; ($ir-$samp)/$ev" | bc)"
  fi
done
rm -rf "$DIR"
