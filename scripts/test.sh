#!/usr/bin/env bash
# Install what is missing, build, and run the whole test suite; then run it again under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, without the optional LibTorch parts).
# SANITIZE=0 skips the sanitizer pass.
# Last, every libFuzzer harness of fuzz/ runs for FUZZ_SECONDS (default 10), two at a time
# (scripts/fuzz-run.sh, build-fuzz/, clang-16); a crash fails the script. FUZZ=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
phase() { echo "== test.sh: $1 at ${SECONDS} s" >&2; }  # where CI's time goes
scripts/install-deps.sh
phase "build"
scripts/build.sh
phase "tests"
ctest --test-dir build --output-on-failure -j "${JOBS:-2}"
if [ "${SANITIZE:-1}" != 0 ]; then
  phase "sanitizer build and tests"
  # -O1 -g1: assertions on, line-numbered reports, and tests 3x faster than at -O0 for the same
  # compile time (docs/hardening.md).
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" -DMIST_SANITIZE=ON \
        -DMIST_BUILD_BENCH=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >/dev/null
  cmake --build build-asan -j "${JOBS:-2}"
  # Not sanitized again: the published runs swept through the default path (GroundTruth.*) and the
  # 1,024-GPU DeepSeek-V3 search, whose code the other tests run sanitized (docs/hardening.md).
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "${JOBS:-2}" -E '^GroundTruth\.|DeepSeekV3On1024H100'
fi
if [ "${FUZZ:-1}" != 0 ]; then
  phase "fuzzing"
  scripts/fuzz-run.sh "${FUZZ_SECONDS:-10}"  # 11 harnesses: 6 rounds
fi
phase "done"
