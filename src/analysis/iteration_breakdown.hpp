// An iteration time as the sum of what it is spent on, to say why one plan is faster than another
// (`mist tune`'s "decided by"). With k the slowest stage (T_k = max T_i) and G micro-batches,
//   iteration = G·T_k + bubble + exposed,   bubble = fill + (G − 1)·T_k − G·T_k = fill − T_k,
// G·T_k split by stage k's terms (compute, recompute, tensor-parallel collectives, pipeline sends),
// the bubble the pipeline's fill and drain beyond the slowest stage, exposed the first and last
// micro-batch's extra not hidden (gradient sync, parameter gather, optimizer step). The terms add
// up to the iteration time exactly (the bubble takes the rounding).
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/time_model.hpp"

namespace mist::analysis {

// The terms of `t` (a plan with `grad_accum_steps` micro-batches) in a fixed order: compute,
// recompute, tp_communication, pipeline_p2p, pipeline_bubble, exposed_sync.
std::vector<TimeTerm> iteration_breakdown(const TimePrediction& t, int64_t grad_accum_steps);

}  // namespace mist::analysis
