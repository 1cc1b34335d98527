#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite; then run it again under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, without the optional LibTorch parts).
# SANITIZE=0 skips the sanitizer pass.
# Last, every libFuzzer harness of fuzz/ runs for FUZZ_SECONDS (default 30), two at a time
# (scripts/fuzz-run.sh, build-fuzz/, clang-16); a crash fails the script. FUZZ=0 skips it.
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
if [ "${FUZZ:-1}" != 0 ]; then
  scripts/fuzz-run.sh "${FUZZ_SECONDS:-30}"
fi
