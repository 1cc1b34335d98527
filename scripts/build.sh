#!/usr/bin/env bash
# Configures and builds mist into build/ (build/mist is the command line).
# With arguments, builds only those targets (scripts/demo.sh builds just `mist`).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" ${CMAKE_ARGS:-} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "${JOBS:-2}" "${targets[@]}"
