#include "analysis/iteration_breakdown.hpp"

#include <algorithm>
#include <string_view>

namespace mist::analysis {

namespace {

double term(const StageTime& s, std::string_view name) {
  for (const auto& t : s.stable_terms)
    if (t.name == name) return t.seconds;
  return 0;
}

}  // namespace

std::vector<TimeTerm> iteration_breakdown(const TimePrediction& t, int64_t grad_accum_steps) {
  if (t.stages.empty()) return {};
  const auto& k = *std::max_element(t.stages.begin(), t.stages.end(),
                                    [](const StageTime& a, const StageTime& b) { return a.stable_s < b.stable_s; });
  const double G = static_cast<double>(grad_accum_steps);
  const double recompute = term(k, "recompute"), tp = term(k, "tp_communication"), p2p = term(k, "pipeline_p2p");
  const double compute = k.fwd_s + k.bwd_s - recompute - tp;
  const double bubble = t.iteration_time_s - t.exposed_delta_s - G * (compute + recompute + tp + p2p);
  return {
      {"compute", "forward and backward of the slowest stage's micro-batches, with what overlaps them (ZeRO-3 "
                  "gathers, offload copies)", G * compute},
      {"recompute", "forward recomputation of fully recomputed blocks / selectively recomputed modules on the slowest stage",
       G * recompute},
      {"tp_communication", "tensor-parallel collectives on the slowest stage", G * tp},
      {"pipeline_p2p", "activations and gradients sent between stages, on the slowest stage", G * p2p},
      {"pipeline_bubble", "the pipeline's fill and drain beyond the slowest stage", bubble},
      {"exposed_sync", "gradient sync, parameter gather and optimizer step not hidden by the first and last "
                       "micro-batch", t.exposed_delta_s},
  };
}

}  // namespace mist::analysis
