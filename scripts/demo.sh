#!/usr/bin/env bash
# Quick start: install what is missing, build the command alone, and run the main job on a built-in
# example. `mist tune` finds the fastest plan that fits GPT-3 13B on 2 nodes of 8 A100-80GB and prints
# it with its prediction; `mist export` gives the Megatron-LM launch flags; the report (memory bars,
# pipeline timeline, the candidates searched) is written to build/mist-report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh mist
job=(--model gpt3-13b --cluster examples/cluster_2x8_a100.json --training examples/training_gpt.json)
report=build/mist-report.html
plan="$(mktemp --suffix=.json)"
runnable="$(mktemp --suffix=.json)"
trap 'rm -f "$plan" "$runnable"' EXIT
build/mist tune "${job[@]}" --out "$plan" --html "$report"
echo
echo "== Megatron-LM flags"
if build/mist export "${job[@]}" --plan "$plan" --to megatron >"$runnable"; then
  cat "$runnable"
else
  # Refused (stderr says why): stdout holds the fastest plan Megatron-LM runs that fits.
  if [ ! -s "$runnable" ]; then
    echo "no plan Megatron-LM runs fits this job" >&2
    exit 1
  fi
  build/mist export "${job[@]}" --plan "$runnable" --to megatron
fi
echo
echo "report: $report (open it in a browser; it needs no network)"
echo "term by term: build/mist explain ${job[*]} --plan PLAN (examples/plan_gpt13b_2x8.json is a hand-written plan)"
