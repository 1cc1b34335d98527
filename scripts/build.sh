#!/usr/bin/env bash
# Configures and builds mist into build/ (build/mist is the command line).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" ${CMAKE_ARGS:-} >/dev/null
cmake --build build -j "${JOBS:-2}"
