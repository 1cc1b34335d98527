#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite; then run it again under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, without the optional LibTorch parts).
# SANITIZE=0 skips the sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "${JOBS:-2}"
if [ "${SANITIZE:-1}" != 0 ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMIST_SANITIZE=ON \
        -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >/dev/null
  cmake --build build-asan -j "${JOBS:-2}"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "${JOBS:-2}"
fi
