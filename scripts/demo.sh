#!/usr/bin/env bash
# Quick start: install what is missing, build, and predict the memory of a built-in example
# (GPT-3 13B on 2 nodes of 8 A100-80GB, TP 4 + sequence parallel, PP 2, DP 2).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
job=(--model gpt3-13b --cluster examples/cluster_2x8_a100.json
     --training examples/training_gpt.json --plan examples/plan_gpt13b_2x8.json)
build/mist predict "${job[@]}"
echo
build/mist explain "${job[@]}" | sed -n '1,40p'
echo "... (build/mist explain ${job[*]} for all of it)"
