#!/usr/bin/env bash
# Installs the Debian 12 packages mist needs to build and test, skipping what is already there.
set -euo pipefail
# libtorch-dev: the LibTorch executor behind `mist validate`; libopenblas0-pthread: Debian's
# LibTorch calls the BLAS the alternatives system selects, and the reference BLAS makes fp32
# matmuls about 60x slower than OpenBLAS.
packages=(g++ cmake ninja-build pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev coinor-libcbc-dev libbenchmark-dev
  libtorch-dev libopenblas0-pthread libsqlite3-dev)
# python3-pybind11 and python3-dev: the Python module `import mist` (python/, docs/python.md), built
# when CMake finds them, for Debian's python3.
packages+=(python3 python3-dev python3-pybind11)
# clang-16 with its libFuzzer and sanitizer runtimes: the fuzz pass of scripts/test.sh
# (docs/hardening.md); Debian 12's default clang (14) cannot compile libstdc++ 12's <expected>.
packages+=(clang-16 libclang-rt-16-dev)
# chromium: the HTML report's browser test (ctest Html.Browser, docs/report.md) loads the reports
# headless; without it that test is skipped with a message.
packages+=(chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "Installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
