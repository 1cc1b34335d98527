// `mist tune`: the fastest plan that fits, found the way Mist does (reference/mist.md §8-9):
// per parallel layout, an intra-stage search evaluates every per-stage setting (ZeRO level,
// recomputed blocks, offload fractions) for each stage position and layer count, keeps the
// memory-feasible ones and samples their Pareto frontier of (stable time T, first/last extra D);
// an inter-stage search then picks layer counts and one frontier point per stage minimising the
// pipeline closed form (analysis::pipeline_time)
//   fill + (G - 1)·max T_i + max_i(D_i - Σ_{j<i} B_j / v),   fill = Σ T_i (v = 1).
// The inter-stage search is an exact dynamic programme over stages whose states are
// (Σ T, max T, exposed D) triples with dominated ones pruned (docs/tuner.md proves the pruning
// safe), or Mist's MILP on CBC; `exhaustive` enumerates whole plans without any frontier, as the
// oracle. Layouts are visited fastest-first by a lower bound, and skipped once the bound cannot
// beat the `top`-th plan found.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analysis/prediction.hpp"
#include "export/engine.hpp"
#include "plan/plan.hpp"
#include "tuner/space.hpp"

namespace mist::tuner {

enum class InterStageSolver {
  kDp,    // exact dynamic programme (default)
  kMilp,  // Mist's MILP on CBC, with a time limit per layout
};

// How far a search has got, for a progress display.
struct Progress {
  double fraction = 0;               // layouts visited, of all the layouts (1 at the end)
  const plan::Plan* best = nullptr;  // the fastest plan found so far (valid during the call), or null
  double best_time_s = 0;            // its iteration time as the search computed it
  // 0, then 1, 2 when the allocator's replay rejected plans and the search runs again with more
  // memory left free (tune): each round goes from fraction 0 to 1.
  int round = 0;
};

struct TuneOptions {
  SearchSpace space;
  bool exhaustive = false;     // the oracle: no frontier sampling, every combination (small jobs)
  InterStageSolver solver = InterStageSolver::kDp;
  double milp_time_limit_s = 10;  // per layout
  // Only plans this engine can run (export/capability.hpp): a layout's best plan that the engine
  // cannot express is replaced by its nearest expressible plan, re-predicted, and dropped if that
  // does not fit. Empty: mist's full plan space.
  std::optional<engines::Engine> engine;
  bool rerank_by_simulation = true;  // order the top plans by the event simulation's iteration time
  int top = 5;                 // plans to return
  double max_combinations = 5e7;  // refuse an exhaustive search visiting more nodes than this
  std::function<void(const Progress&)> progress;  // called as layouts complete (may be empty)
};

struct Candidate {
  plan::Plan plan;
  // What analysis::predict says of the plan (for the plans tune() returns; the closest plan's
  // memory only when nothing fits).
  analysis::Prediction prediction;
  double iteration_time_s = 0;    // as `mist predict` computes it
  double search_objective_s = 0;  // what the search computed for it (equal, unless a bug)
  double simulated_time_s = 0;    // the event simulation's iteration time (0 when not simulated)
  double peak_memory_bytes = 0;   // worst stage
  double shortfall_bytes = 0;     // how much the worst stage exceeds its GPU (0 when it fits)
  double host_shortfall_bytes = 0;  // how much offloaded state exceeds a node's host memory
};

struct TuneStats {
  int64_t layouts = 0;
  int64_t stage_settings_evaluated = 0;
  int64_t stage_settings_feasible = 0;
  int64_t stage_settings_timed = 0;  // fitting settings that could be optimal, given to StageTimer
  int64_t layouts_pruned = 0;        // skipped: their lower bound could not beat the plans found
  int64_t plans_evaluated = 0;    // complete plans costed (exhaustive), DP states kept, or MILP nodes
  int64_t milp_solves = 0;
  int64_t milp_time_limits = 0;   // MILP solves stopped by their time limit
  int64_t engine_adjusted = 0;    // layout bests moved to the engine's nearest expressible plan
  int64_t programs_compiled = 0;  // memory programs compiled (shared across layouts)
  // Plans the search found fitting that the replay of PyTorch's caching allocator did not (their
  // reserved peak, analysis/reserved_memory.hpp, is above the estimate the search uses).
  int64_t rejected_by_allocator = 0;
  double seconds = 0;
};

// A plan the search completed, by the search's own figures: the best plan of one layout (after the
// engine's adjustment), its closed-form iteration time and the worst stage's peak as the memory
// model's allocator estimate (what the search judges fit on; the returned plans' predictions replay
// the allocator, analysis/reserved_memory.hpp). Recording it costs one plan copy per layout searched.
struct Explored {
  plan::Plan plan;
  double iteration_time_s = 0;
  double peak_memory_bytes = 0;
};
inline constexpr size_t kMaxExplored = 4096;  // the first layouts searched, fastest bounds first

struct TuneResult {
  std::vector<Candidate> best;          // fitting plans, fastest first (by simulation when re-ranked)
  // One entry per layout the last search round completed with a fitting plan, in the order
  // searched; layouts skipped by their lower bound, or whose best could not beat the plans found
  // so far, have none. At most kMaxExplored.
  std::vector<Explored> explored;
  std::optional<Candidate> closest;     // when nothing fits: the plan that misses by the least
  TuneStats stats;
};

// `job` is the prepared job (job::prepare): its calibration and lowering serve every layout.
Result<TuneResult> tune(const analysis::PreparedJob& job, const TuneOptions& options);

}  // namespace mist::tuner
