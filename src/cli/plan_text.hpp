// A plan as text: the compact one-line form the tables list, its legend, and the plan in words.
#pragma once

#include <span>
#include <string>

#include "export/engine.hpp"
#include "plan/plan.hpp"

namespace mist::cli {

// "dp 8 tp 2 pp 2 v 2 mb 1 G 32 sel zero 11 ckpt 4/20,0/20 offload s0:w0.75/g0.5/o0/a0.5"
std::string plan_compact(const plan::Plan& p);
// What each part of plan_compact means, and the "runs on" column (one paragraph, ends in "\n").
std::string plan_legend();
// The plan in words: one line for the layout, then one per stage ("  stage 0: layers 0-19, ZeRO-3,
// 4 of 20 layers recomputed, offload to host memory: weights 75%, ..."), each ending in "\n".
// `t`: the training, whose recompute modules a selective plan names when they are not the default.
std::string plan_in_words(const plan::Plan& p, const spec::TrainingSpec* t = nullptr);
// "megatron,torchtitan"; "-" for none.
std::string engine_list(std::span<const engines::Engine> engines);

}  // namespace mist::cli
