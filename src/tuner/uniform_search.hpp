// The search of one parallel layout when every stage takes the same setting: an engine's flags
// (`mist tune --engine`) or a baseline's hand sweep (`--space megatron|deepspeed`). Every setting
// of the space is tried on every split the space's SplitRule allows (engine_splits.hpp).
#pragma once

#include <optional>
#include <vector>

#include "spec/training.hpp"
#include "tuner/inter_stage.hpp"
#include "tuner/stage_costs.hpp"

namespace mist::tuner {

// The pipeline's closed form over one point per stage of `layout`: the one place where the
// uniform search turns stage points into its objective.
double uniform_objective(const std::vector<Point>& pts, const plan::Plan& layout);

// The fastest fitting plan of `costs.layout()` with one setting for all stages, or nothing when no
// setting fits on any split. Each stage's costs are computed once per (stage, layer count) and
// shared by the splits that use them. least[i] tracks the most memory-frugal setting of stage i on
// the engine's default split (the first one), for the near-miss report.
std::optional<StageChoice> uniform_search(const StageCosts& costs, const SearchSpace& space,
                                          const spec::TrainingSpec& t, int64_t L, TuneStats& stats,
                                          std::vector<Point>& least);

// A lower bound on uniform_search's objective: the best split with every stage at its fastest
// setting, memory and first/last extras aside.
double uniform_lower_bound(const StageCosts& costs, const SearchSpace& space, const spec::TrainingSpec& t, int64_t L);

}  // namespace mist::tuner
