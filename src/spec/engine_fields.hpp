// Training fields that one engine alone runs: Megatron-LM's recompute modules, loss kernels, FP8
// parameters and multi-token prediction, torchtitan's torch.compile. The one home of their refusals
// for the other engines, used by a prediction for an engine (analysis::PreparedJob: the whole job,
// before any plan) and by an export (engines::inexpressible_reasons: the plan at hand).
#pragma once

#include <optional>
#include <vector>

#include "core/result.hpp"
#include "spec/engine.hpp"
#include "spec/training.hpp"

namespace mist::spec {

// Why engine `e` cannot run the fields of `t` that belong to another engine, one error per field,
// naming it. `selective`: whether the plan recomputes selectively (recompute_modules only matters
// then); nullopt before a plan is known, where any plan a search tries may recompute selectively.
std::vector<Error> engine_training_refusals(const TrainingSpec& t, Engine e, std::optional<bool> selective = std::nullopt);

}  // namespace mist::spec
