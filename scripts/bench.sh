#!/usr/bin/env bash
# Builds and runs the Google Benchmark suite (bench/, docs/benchmarks.md) and prints the results.
#   scripts/bench.sh              closed-form stage evaluations, tuner jobs and their sweeps
#   scripts/bench.sh --large      also Llama-2-70B on 8x8 H100 and GPT-3 175B on 128x8 A100 (minutes)
#   scripts/bench.sh --only RE    only the benchmarks whose name matches RE
# BUILD_DIR (default build) is the build directory; other arguments go to the benchmark binary.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
filter="-Large/"  # a leading '-' excludes the matches
args=()
while (($#)); do
  case "$1" in
    --large) filter="." ;;
    --only) filter="$2"; shift ;;
    *) args+=("$1") ;;
  esac
  shift
done
scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DMIST_BUILD_BENCH=ON \
      ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target mist_bench
echo "machine: $(nproc) cores, $(uname -m); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/mist_bench" --benchmark_filter="$filter" --benchmark_counters_tabular=true "${args[@]}"
