// Costing stage settings of one parallel layout: peak GPU memory and host memory from the compiled
// memory program (evaluated in batch), stable time T and first/last extra D from StageTimer.
#pragma once

#include <array>
#include <map>
#include <tuple>
#include <vector>

#include "analysis/memory_model.hpp"
#include "analysis/prepared_job.hpp"
#include "analysis/time_model.hpp"
#include "graph/lower.hpp"
#include "symbolic/program.hpp"
#include "tuner/space.hpp"
#include "tuner/tuner.hpp"

namespace mist::tuner {

// One costed setting of one stage.
struct Point {
  double T = 0, D = 0, peak = 0;
  plan::StagePlan st;
  double excess = 0;  // bytes over the GPU or the host share, whichever is worse (near misses)
  double B = 0;       // the backward share of T, which hides later stages' D (StageTimeParts::drain)
};

// The memory model compiled for batch evaluation, shared by all layouts of one search. The
// model's shapes and what a stage's position fixes (embedding, head, tied weights) are folded
// into constants, as Mist concretises shapes before its batched evaluation; the setting knobs,
// the in-flight count, micro-batch, data-parallel degree and NCCL buffers stay inputs, so one
// program serves every layout with the same tensor parallelism and recompute mode and every
// stage of the same kind (first, middle, last).
class MemoryPrograms {
 public:
  // Program inputs, in order: the knobs of a stage setting (analysis::kSettingKnobs).
  static constexpr const auto& kInputs = analysis::kSettingKnobs;
  // `job` must outlive the programs; its lowering (per sequence parallelism and recompute) is shared.
  explicit MemoryPrograms(const analysis::PreparedJob& job) : job_(&job) {}
  // Outputs: peak GPU bytes, host bytes.
  Result<const sym::Program*> get(const plan::Plan& layout, int index);
  int64_t compiled() const { return static_cast<int64_t>(programs_.size()); }

 private:
  const analysis::PreparedJob* job_;
  // Keyed by tp, cp, cp_comm, cp_a2a, ep, etp, sequence parallelism, recompute, and the stage's E, H, T, Q.
  std::map<std::tuple<int64_t, int64_t, int, int64_t, int64_t, int64_t, bool, int, bool, bool, bool, bool>, sym::Program>
      programs_;
};

// What StageCosts::candidates learnt about one stage at smaller layer counts: the settings that
// did not fit, with their excess over memory. A stage's peak GPU memory and host memory never fall
// as it takes more blocks at the same setting (tests/tuner/stage_costs_test.cpp checks it), so such
// a setting does not fit at a larger count either and is not evaluated again. One per stage of a
// layout, passed to candidates() with rising layer counts.
class Misfits {
 public:
  Misfits() = default;

 private:
  friend class StageCosts;
  // The row of settings (by slice index) of ZeRO level `zero` with `c` recomputed blocks; 0 where
  // nothing is known, else the excess (> 0) at the largest layer count evaluated.
  double* row(int zero, int64_t c, size_t slice);
  int64_t layers_ = 0;  // the layer count of the last call; a smaller one starts afresh
  std::vector<std::array<std::vector<double>, 4>> rows_;  // by c, then ZeRO level
};

class StageCosts {
 public:
  // `job`, `space` and `programs` must outlive the StageCosts.
  static Result<StageCosts> create(const analysis::PreparedJob& job, const SearchSpace& space,
                                   const plan::Plan& layout, MemoryPrograms& programs);

  // Every setting of `settings` (one layer count) that fits at stage `index`, costed. Tracks the
  // setting with the smallest excess over GPU or host memory in `least` (may be null).
  std::vector<Point> cost(const std::vector<plan::StagePlan>& settings, int index, TuneStats& stats,
                          Point* least) const;

  // The settings of the space for a stage of `layers` blocks at `index` that can be on an optimal
  // plan: those that fit and that no other fitting setting beats. Exact pruning, relying on two
  // properties of the time model (tests/tuner/stage_costs_test.cpp checks both):
  //  - raising the recomputed blocks or the weight, gradient or activation offload fraction never
  //    lowers T or T - B, and lowers D by at most 1/v of what it adds to T (D only shrinks
  //    because more compute in the last chunk's backward or the first chunk's forward hides more
  //    of the gradient reduction or the parameter all-gather);
  //  - the optimizer-offload fraction changes D and memory only, not T or B.
  // A setting with T ≤ T', T - B ≤ T' - B' and T + v·D ≤ T' + v·D' is never worse in the
  // pipeline objective (see docs/tuner.md), so among settings that differ upward in those four
  // knobs (same ZeRO level and optimizer-offload fraction) only the lowest fitting ones count, and
  // among settings that differ only in optimizer offload, the one with the smallest D.
  // `misfits` (may be null) carries what calls at smaller layer counts of this stage learnt; the
  // result is the same with or without it.
  std::vector<Point> candidates(int64_t layers, int index, TuneStats& stats, Point* least,
                                Misfits* misfits = nullptr) const;

  // Peak GPU bytes and host bytes of each of `settings` at stage `index`, written to peak[r], host[r].
  void memory(const std::vector<plan::StagePlan>& settings, int index, std::vector<double>& peak,
              std::vector<double>& host, TuneStats& stats) const;

  // The least T any setting of the space can give at `index` with `layers` blocks, memory aside
  // (a lower bound for pruning whole layouts).
  double fastest(int64_t layers, int index) const;

  const plan::Plan& layout() const { return layout_; }
  const analysis::StageTimer& timer() const { return timer_; }

 private:
  StageCosts(const spec::ClusterSpec& c, const SearchSpace& space, plan::Plan layout, analysis::StageTimer timer,
             std::vector<const sym::Program*> programs, double nccl, double usable, int64_t first_stage_min_layers)
      : c_(&c), space_(&space), layout_(std::move(layout)), timer_(std::move(timer)), programs_(std::move(programs)),
        nccl_(nccl), usable_(usable), first_stage_min_layers_(first_stage_min_layers) {}
  double excess(double peak, double host) const;

  const spec::ClusterSpec* c_;
  const SearchSpace* space_;
  plan::Plan layout_;
  analysis::StageTimer timer_;
  std::vector<const sym::Program*> programs_;  // per stage index
  double nccl_ = 0;
  double usable_ = 0;  // GPU memory a stage may use (PreparedJob::usable_memory_bytes)
  // Stage 0 holds a mixture of experts' first dense blocks in its first chunk (plan::holds_dense_blocks):
  // settings of fewer layers are not costed.
  int64_t first_stage_min_layers_ = 0;
};

}  // namespace mist::tuner
