// When nothing fits: how many nodes of the same GPUs would give a plan that fits (issue 15: an
// infeasible job says what would make it fit).
#pragma once

#include <optional>

#include "tuner/tuner.hpp"

namespace mist::tuner {

// The fewest nodes, doubling from the job's up to `max_factor` times them, on which tune() finds a
// plan that fits; nullopt when even that many do not. Each try is a whole search (the doubling keeps
// the count to log2(max_factor)).
// Never an error: a count no layout can use counts as one that does not fit.
Result<std::optional<int64_t>> nodes_to_fit(const analysis::PreparedJob& job, const TuneOptions& options,
                                            int64_t max_factor = 16);

}  // namespace mist::tuner
