#!/usr/bin/env bash
# Quick start: install what is missing, build, and run the main job on a built-in example: `mist tune`
# finds the fastest plan that fits GPT-3 13B on 2 nodes of 8 A100-80GB, then `mist predict` and
# `mist explain` show that plan's memory and time term by term.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
job=(--model gpt3-13b --cluster examples/cluster_2x8_a100.json --training examples/training_gpt.json)
plan="$(mktemp --suffix=.json)"
trap 'rm -f "$plan"' EXIT
build/mist tune "${job[@]}" --out "$plan"
echo
build/mist predict "${job[@]}" --plan "$plan"
echo
build/mist explain "${job[@]}" --plan "$plan" | sed -n '1,40p'
echo "... (build/mist explain ${job[*]} --plan PLAN for all of it; examples/plan_gpt13b_2x8.json is a hand-written plan)"
