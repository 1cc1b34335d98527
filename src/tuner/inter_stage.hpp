// The inter-stage search: given each stage's candidate settings per layer count, choose one per
// stage, with layer counts summing to L, minimising the pipeline closed form of
// analysis::pipeline_time (analysis/time_model.hpp, where the rule lives).
// Three solvers over the same input: an exact dynamic programme (the default), Mist's MILP on
// CBC, and an exhaustive branch and bound (the oracle, on unsampled candidates).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "core/result.hpp"
#include "tuner/stage_costs.hpp"

namespace mist::tuner {

// fronts[i][l]: candidate settings of stage i with l blocks.
using StageFronts = std::vector<std::map<int64_t, std::vector<Point>>>;

struct StageChoice {
  std::vector<Point> stages;
  double objective = 0;  // the closed form's iteration time
};

// The objective of a pipeline with these Σ T, max T and exposed delta (analysis::pipeline_time).
double pipeline_objective(double sum_t, double max_t, double exposed, double G, int64_t v);
// The objective of these stage points, in order.
double plan_objective(const std::vector<Point>& stages, double G, int64_t v);

// The points no other point beats in the pipeline objective: a point with T ≤ T', T - B ≤ T' - B'
// and T + v·D ≤ T' + v·D' is never worse (docs/tuner.md), so the frontier is taken in those three,
// T ascending; at most `k` of them (k > 0), spread evenly and always including both ends.
std::vector<Point> pareto_sample(std::vector<Point> pts, int k, int64_t v = 1);

// Exact. States (Σ T, Σ B, max T, exposed D) per layers used; a state with no more Σ T, Σ (T - B),
// max T and exposed D than another is never worse, so the other is dropped; states that cannot
// finish under `cutoff` (their objective so far already above it) are dropped too.
std::optional<StageChoice> inter_stage_dp(const StageFronts& fronts, int64_t layers, double G, double cutoff,
                                          TuneStats& stats, int64_t v = 1);

// Mist's formulation on CBC: one binary per (stage, layer count, point). Solutions above
// `cutoff` are pruned. A time limit that ends the search with an incumbent returns it (counted in
// stats.milp_time_limits); without one, nothing.
Result<std::optional<StageChoice>> inter_stage_milp(const StageFronts& fronts, int64_t layers, double G,
                                                    double cutoff, double time_limit_s, TuneStats& stats,
                                                    int64_t v = 1);

// Every combination, branch and bound on Σ T + (G - 1)·max T (which later stages only raise).
// Sets `too_large` when it would visit more than `max_nodes` nodes.
std::optional<StageChoice> exhaustive_search(StageFronts all, int64_t layers, double G, double max_nodes,
                                             TuneStats& stats, bool* too_large, int64_t v = 1);

}  // namespace mist::tuner
