#!/usr/bin/env bash
# Makes docs/report.png, the README's picture: the quick start's first
# command (`cargo run --release --example pce_pipeline`, extra arguments
# passed on) run in a scratch directory, and the report.html it writes
# photographed by headless Chromium.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/docs/report.png"
command -v chromium >/dev/null || { echo "report-screenshot: chromium not found (apt-get install chromium)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
cargo run --release --quiet --manifest-path "$repo/Cargo.toml" --example pce_pipeline -- "$@" > run.txt
grep "^html report: " run.txt
# --no-sandbox: CI containers run as root, where Chromium's sandbox cannot start.
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1100 \
  --screenshot="$out" "file://$dir/report.html" 2>/dev/null
echo "report-screenshot: wrote $out"
