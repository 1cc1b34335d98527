#include "tuner/nodes_to_fit.hpp"

namespace mist::tuner {

Result<std::optional<int64_t>> nodes_to_fit(const analysis::PreparedJob& job, const TuneOptions& options,
                                            int64_t max_factor) {
  const int64_t nodes = job.cluster().nodes;
  for (int64_t n = 2 * nodes; n <= max_factor * nodes; n *= 2) {
    // A count the job cannot use (no layout divides it) is one that does not fit.
    auto r = tune(job.with_nodes(n), options);
    if (r && !r->best.empty()) return std::optional<int64_t>(n);
  }
  return std::optional<int64_t>();
}

}  // namespace mist::tuner
