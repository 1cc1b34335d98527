// `mist tune`: the fastest plan that fits, found the way Mist does (reference/mist.md §8-9):
// per parallel layout, an intra-stage search evaluates every per-stage setting (ZeRO level,
// recomputed blocks, offload fractions) for each stage position and layer count, keeps the
// memory-feasible ones and samples their Pareto frontier of (stable time T, first/last extra D);
// an inter-stage search then picks layer counts and one frontier point per stage minimising
//   Σ T_i + (G - 1)·max T_i + max_i(D_i - Σ_{j<i} T_j).
// The inter-stage search here is an exact dynamic programme over stages whose states are
// (Σ T, max T, exposed D) triples with dominated ones pruned (docs/tuner.md proves the pruning
// safe); `exhaustive` enumerates whole plans without any frontier, as the oracle.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "plan/plan.hpp"
#include "tuner/space.hpp"

namespace mist::tuner {

struct TuneOptions {
  SearchSpace space;
  bool exhaustive = false;     // the oracle: no frontier sampling, every combination (small jobs)
  int top = 5;                 // plans to return
  double max_combinations = 5e7;  // refuse an exhaustive search visiting more nodes than this
  std::function<void(double fraction)> progress;  // called as layouts complete (may be empty)
};

struct Candidate {
  plan::Plan plan;
  double iteration_time_s = 0;    // as `mist predict` computes it
  double search_objective_s = 0;  // what the search computed for it (equal, unless a bug)
  double peak_memory_bytes = 0;   // worst stage
  double shortfall_bytes = 0;     // how much the worst stage exceeds its GPU (0 when it fits)
  double host_shortfall_bytes = 0;  // how much offloaded state exceeds a node's host memory
};

struct TuneStats {
  int64_t layouts = 0;
  int64_t stage_settings_evaluated = 0;
  int64_t stage_settings_feasible = 0;
  int64_t plans_evaluated = 0;    // complete plans costed (exhaustive) or DP states kept
  double seconds = 0;
};

struct TuneResult {
  std::vector<Candidate> best;          // fitting plans, fastest first
  std::optional<Candidate> closest;     // when nothing fits: the plan that misses by the least
  TuneStats stats;
};

Result<TuneResult> tune(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                        const TuneOptions& options);

}  // namespace mist::tuner
