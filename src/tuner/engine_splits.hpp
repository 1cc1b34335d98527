// The layer splits an engine's search tries (SearchSpace::split_rule): the splits the engine's
// options can state, for searches that give every stage the same setting.
#pragma once

#include <cstdint>
#include <vector>

#include "tuner/space.hpp"

namespace mist::tuner {

// The splits of `L` blocks over `pp` stages with `v` model chunks per stage that `space.split_rule`
// allows, the engine's default first, without repeats:
//  - kEven: the even split;
//  - kMegatronFirstLast: the even split, then every split with equal middle stages and the first
//    and last stage each within round(L/pp) ± layer_slack, as Megatron-LM's uneven pipeline needs
//    (transformer_config.py / transformer_block.py get_num_layers_to_build): first and last at
//    least 1, the rest divisible by the pp - 2 middle stages and not empty when there are any, and
//    with v > 1 every stage's count divisible by v;
//  - kDeepSpeedPartition: with pp > 1 the one split of DeepSpeed's partition_method
//    'type:transformer' over Megatron-DeepSpeed's layer specs (engines::deepspeed_pipe_layers;
//    `mixed_precision` adds its trailing cast), none when that leaves a stage without a block;
//  - kTorchtitanGenerated: the splits torchtitan's generator makes (engines::torchtitan_stage_layers)
//    from first/last "less layers" weights 0..layer_slack + 1, its default (1, 1) first; with v > 1
//    the even split (the capability model finds the weights or the nearest generated split).
// Every split has pp entries, each at least 1, summing to L; with v > 1 each divisible by v.
std::vector<std::vector<int64_t>> engine_splits(const SearchSpace& space, int64_t L, int64_t pp, int64_t v = 1,
                                                bool mixed_precision = true);

}  // namespace mist::tuner
