#!/bin/bash
# Instructions per alloc+free pair of `pairs/1t`, counted by callgrind (deterministic,
# unlike timings on a shared machine): for each size, the difference of a run at
# BENCH_DIV=20 and one at BENCH_DIV=40 (start-up and thread creation cancel), divided by
# the pairs that difference holds (500,000 with the current benches/common/mod.rs:
# 5 runs of 4 M / 20 minus 5 runs of 4 M / 40).
#
# usage: benches/callgrind_pairs.sh JEMALLOC_BIN HEAPTAG_BIN PAIRS_JE PAIRS_HT SIZE...
#   e.g. benches/callgrind_pairs.sh target/release/deps/alloc_jemalloc-HASH \
#        target/release/deps/alloc_heaptag-HASH 500000 500000 16 64 256 1024 4096
# Prints size, jemalloc, heaptag on (HEAPTAG_SEED=1), heaptag HEAPTAG=off.
set -eu
JE=$1; HT=$2; NJ=$3; NH=$4; shift 4
ir() { # env... command: the instructions callgrind collected
  env "$@" --bench pairs/1t 2>&1 >/dev/null | grep -o "Collected : [0-9]*" | awk '{print $3}'
}
run() { # pairs binary
  local n=$1 a b; shift
  a=$(ir BENCH_DIV=20 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@")
  b=$(ir BENCH_DIV=40 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@")
  echo "scale=1; ($a - $b) / $n" | bc
}
printf "size\tjemalloc\ton\toff\n"
for s in "$@"; do
  j=$(BENCH_SIZE=$s run "$NJ" "$JE")
  on=$(BENCH_SIZE=$s HEAPTAG_SEED=1 run "$NH" "$HT")
  off=$(BENCH_SIZE=$s HEAPTAG=off run "$NH" "$HT")
  printf "%s\t%s\t%s\t%s\n" "$s" "$j" "$on" "$off"
done
