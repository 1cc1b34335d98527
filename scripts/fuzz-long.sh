#!/usr/bin/env bash
# A long fuzzing session: every harness for MINUTES (default 8) each, one at a time, niced so
# that it can run next to other work. The corpus in build-fuzz/corpus/ carries over between runs.
#   nohup scripts/fuzz-long.sh 8 > fuzz-long.log 2>&1 &
# Record the summary lines (executions, cov, ft) in docs/hardening.md.
set -uo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-8}"
shift || true
all=(model cluster training plan megatron deepspeed torchtitan predict profile_csv)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
# Build once, then run on that build: edits to the tree during the session do not change it.
JOBS=1 nice -n 19 scripts/fuzz-run.sh 1 model >/dev/null || exit 1
failed=0
for t in "${targets[@]}"; do
  date -u +"%H:%M:%S start $t"
  FUZZ_SEED="${FUZZ_SEED:-0}" FUZZ_BUILD=0 JOBS=1 nice -n 19 scripts/fuzz-run.sh $((minutes * 60)) "$t" | grep -E '^fuzz |^  ' || failed=1
done
exit $failed
