#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ (build-fuzz/, clang-16, ASan+UBSan) and runs each for
# SECONDS (default 45), JOBS (default 2) at a time. Any crash, sanitizer report, timeout or broken
# invariant fails the run (exit 1) and leaves the input in build-fuzz/artifacts/<target>/.
#   scripts/fuzz-run.sh [SECONDS] [TARGET...]     targets: model cluster training plan megatron
#                                                 deepspeed torchtitan predict profile_csv published_runs
#                                                 time_constants (default: all)
# The corpus grows in build-fuzz/corpus/<target>/ across runs; it starts from fuzz/seeds/, the
# examples, the catalogs and fuzz/regressions/ (inputs that once failed: replayed on every run).
# Final libFuzzer stats per target: build-fuzz/logs/<target>.log; one summary line each on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-45}"
shift || true
all=(model cluster training plan megatron deepspeed torchtitan predict profile_csv published_runs time_constants)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
B="${FUZZ_BUILD_DIR:-build-fuzz}"
CXX_FUZZ="${CXX_FUZZ:-clang++-16}"

if [ "${FUZZ_BUILD:-1}" != 0 ]; then  # FUZZ_BUILD=0: use the harnesses already built
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
      -DMIST_FUZZ=ON -DMIST_BUILD_TESTS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >/dev/null
cmake --build "$B" -j "${JOBS:-2}" --target mist_fuzzers
fi

# Seeds: one directory per target under $B/seeds (rebuilt each run; the corpus is kept).
seeds="$B/seeds"
rm -rf "$seeds"
for t in "${all[@]}"; do
  mkdir -p "$seeds/$t" "$B/corpus/$t" "$B/artifacts/$t" "$B/logs"
  cp fuzz/seeds/"$t"/* "$seeds/$t/" 2>/dev/null || true
  [ -d fuzz/regressions/"$t" ] && cp fuzz/regressions/"$t"/* "$seeds/$t/" 2>/dev/null || true
done
cp examples/cluster_*.json "$seeds/cluster/"
cp examples/training_*.json "$seeds/training/"
cp examples/plan_*.json "$seeds/plan/"
cp data/published/*_a100.json "$seeds/published_runs/"
cp data/published/*.time_constants.json "$seeds/time_constants/"
if command -v jq >/dev/null; then  # every catalog entry as a model seed
  i=0
  while IFS= read -r entry; do
    printf '%s' "$entry" > "$seeds/model/catalog_$((i++)).json"
  done < <(jq -c '.[]' data/models.json)
fi

run_one() {
  local t="$1" dict=fuzz/json.dict
  [[ "$t" == megatron || "$t" == torchtitan ]] && dict=fuzz/flags.dict
  [[ "$t" == profile_csv ]] && dict=fuzz/csv.dict
  # -timeout: an input running longer is a finding (a loop over a size the parser let by). One
  # predict of GPT-3 13B takes about 0.4 s of CPU under ASan, so 30 s leaves room for a busy machine.
  # -seed: CI's short runs follow the same mutation sequence every time (FUZZ_SEED=0: random, as
  # the long runs use), so a red CI is reproducible and not a matter of luck.
  if "$B/fuzz/fuzz_$t" -seed="${FUZZ_SEED:-1}" -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-30}" -rss_limit_mb=2048 -max_len=8192 \
       -dict="$dict" -print_final_stats=1 -artifact_prefix="$B/artifacts/$t/" \
       "$B/corpus/$t" "$seeds/$t" >"$B/logs/$t.log" 2>&1; then
    status=ok
  else
    status=FAILED
  fi
  local done_line execs
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$B/logs/$t.log" | tail -1 || true)
  execs=$(grep -oE 'number_of_executed_units: [0-9]+' "$B/logs/$t.log" | grep -oE '[0-9]+' || echo '?')
  echo "fuzz $t: $status, $execs executions, $(echo "$done_line" | grep -oE 'cov: [0-9]+ ft: [0-9]+' || echo 'no stats')"
  if [[ $status != ok ]]; then
    grep -E 'ERROR|invariant|runtime error|Test unit written' "$B/logs/$t.log" | head -5 | sed 's/^/  /'
    return 1
  fi
}
export -f run_one
export B seeds seconds
printf '%s\n' "${targets[@]}" | xargs -P "${JOBS:-2}" -I{} bash -c 'run_one {}'
