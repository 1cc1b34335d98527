#!/usr/bin/env bash
# Startup cost of the mist command (docs/benchmarks.md, "Startup"): wall time (hyperfine) and
# maximum resident set size (/usr/bin/time -f %M) of `mist --version` and of one `mist predict` of
# a catalog model (GPT-3 13B, examples/plan_gpt13b_2x8.json on 2x8 A100).
#   scripts/bench-startup.sh [BINARY...]   default build/mist; several binaries: one after another
# RUNS (default 50) timed runs per command, after 5 warm-up runs; RSS is the largest of 10 runs.
# Needs hyperfine, GNU time (/usr/bin/time) and jq. Builds nothing: build the binary first.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-50}"
[ $# -gt 0 ] || set -- build/mist
predict=(predict --model gpt3-13b --cluster examples/cluster_2x8_a100.json --training examples/training_gpt.json
         --plan examples/plan_gpt13b_2x8.json)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(nproc) cores, $(uname -m); load average: $(cat /proc/loadavg)"
for bin in "$@"; do
  echo "== $bin: $(ldd "$bin" | wc -l) lines of ldd"
  for name in version predict; do
    if [ "$name" = version ]; then args=(--version); else args=("${predict[@]}"); fi
    "$bin" "${args[@]}" >/dev/null  # fails here, not inside hyperfine, when the command fails
    hyperfine -N --warmup 5 --runs "$runs" --export-json "$tmp/$name.json" "$bin ${args[*]}" >/dev/null 2>&1
    rss=0
    for _ in $(seq 10); do
      kib="$(/usr/bin/time -f %M "$bin" "${args[@]}" 2>&1 >/dev/null | tail -1)"
      if ((kib > rss)); then rss="$kib"; fi
    done
    jq -r --arg name "$name" --arg rss "$rss" '.results[0] |
      "\($name): wall mean \(.mean * 1e3 | . * 10 | round / 10) ms ± \(.stddev * 1e3 | . * 10 | round / 10), " +
      "median \(.median * 1e3 | . * 10 | round / 10) ms, min \(.min * 1e3 | . * 10 | round / 10) ms, " +
      "CPU (user + sys) \((.user + .system) * 1e3 | . * 10 | round / 10) ms; " +
      "max RSS \($rss | tonumber / 1024 | . * 10 | round / 10) MiB"' "$tmp/$name.json"
  done
done
echo "load average after: $(cat /proc/loadavg)"
