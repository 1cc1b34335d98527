#include "tuner/tuner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "analysis/pipeline_job.hpp"
#include "export/capability.hpp"
#include "tuner/inter_stage.hpp"
#include "tuner/stage_costs.hpp"
#include "tuner/uniform_search.hpp"

namespace mist::tuner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Layer counts stage `i` may take: with v interleaved chunks, multiples of v (whole chunks).
std::vector<int64_t> layer_choices(const SearchSpace& space, int64_t L, int64_t pp, int64_t v, int i) {
  if (space.uniform_split || pp == 1) return {plan::even_split_layers(L, pp, i)};
  const int64_t mid = std::llround(double(L) / double(pp));
  std::vector<int64_t> out;
  for (int64_t l = std::max<int64_t>(v, mid - space.layer_slack * v);
       l <= std::min<int64_t>(L - (pp - 1) * v, mid + space.layer_slack * v); ++l)
    if (l % v == 0) out.push_back(l);
  return out;
}

// A lower bound on the best iteration time of a layout: every stage at its fastest setting,
// memory aside, with the layer split chosen as well as it can be.
double lower_bound(const StageCosts& costs, const SearchSpace& space, int64_t L) {
  const plan::Plan& p = costs.layout();
  StageFronts fronts(static_cast<size_t>(p.pp));
  for (int i = 0; i < p.pp; ++i)
    for (int64_t l : layer_choices(space, L, p.pp, p.virtual_pipeline_stages, i))
      fronts[static_cast<size_t>(i)][l] = {Point{costs.fastest(l, i), 0, 0, {}, 0}};
  TuneStats scratch;
  auto best = inter_stage_dp(fronts, L, static_cast<double>(p.grad_accum_steps), kInf, scratch, p.virtual_pipeline_stages);
  return best ? best->objective : kInf;
}

plan::Plan with_stages(plan::Plan layout, const std::vector<Point>& pts) {
  layout.stages.clear();
  for (const auto& p : pts) layout.stages.push_back(p.st);
  return layout;
}

// `peak`: the worst stage's peak as the search estimates it (predict_best replaces it by the
// prediction's).
Candidate searched(plan::Plan p, double objective, double peak = 0) {
  Candidate c;
  c.plan = std::move(p);
  c.iteration_time_s = c.search_objective_s = objective;
  c.peak_memory_bytes = peak;
  return c;
}

double worst_peak(const std::vector<Point>& pts) {
  double worst = 0;
  for (const auto& p : pts) worst = std::max(worst, p.peak);
  return worst;
}

// What no plan can change (e.g. fp16 on an engine without it) ends the search before it starts.
Result<void> check_engine_training(const analysis::PreparedJob& job, const TuneOptions& options) {
  if (!options.engine) return {};
  const auto any = plan::uniform_plan(job.model(), 1, 1, 1, 1, 1, {});
  for (const auto& why : engines::inexpressible_reasons(any, *options.engine, &job.training()))
    if (why.path.starts_with("training")) return fail(why.path, why.message);
  return {};
}

// One layout's cost model and the bound that orders the visits.
struct Work {
  StageCosts costs;
  double bound;
};

// Cost models of every layout, in order of their lower bounds so that good plans come early and
// the bound can skip layouts that cannot enter the top list.
Result<std::vector<Work>> cost_layouts(const analysis::PreparedJob& job, const TuneOptions& options,
                                       MemoryPrograms& programs) {
  const SearchSpace& space = options.space;
  const auto& m = job.model();
  const auto all = layouts(space, m, job.cluster(), job.training());
  if (all.empty())
    return fail("cluster", fmt::format("no parallel layout of {} GPUs divides the global batch {} and the model's "
                                       "heads; check training.global_batch_size and the GPU count",
                                       job.cluster().num_gpus(), job.training().global_batch_size));
  std::vector<Work> work;
  for (const auto& given : all) {
    // The stack's own setting: the runs its calibration was fitted on overlapped TP communication.
    plan::Plan layout = given;
    if (analysis::stack_overlaps_tp_comm(job, layout)) layout.overlap_tp_comm = true;
    MIST_TRY(auto costs, StageCosts::create(job, space, layout, programs));
    const double lb = options.exhaustive              ? 0
                      : space.uniform_stage_settings ? uniform_lower_bound(costs, space, job.training(), m.num_layers)
                                                     : lower_bound(costs, space, m.num_layers);
    work.push_back(Work{std::move(costs), lb});
  }
  std::stable_sort(work.begin(), work.end(), [](const Work& a, const Work& b) { return a.bound < b.bound; });
  return work;
}

// The best plan of one layout under `cutoff`, or nothing. `least[i]` tracks stage i's most
// memory-frugal setting on the even split (the near-miss report).
Result<std::optional<StageChoice>> search_layout(const StageCosts& costs, const analysis::PreparedJob& job,
                                                 const TuneOptions& options, double cutoff, TuneStats& stats,
                                                 std::vector<Point>& least) {
  const SearchSpace& space = options.space;
  const plan::Plan& layout = costs.layout();
  const int64_t L = job.model().num_layers;
  const double G = static_cast<double>(layout.grad_accum_steps);
  const int64_t v = layout.virtual_pipeline_stages;
  // One setting for every stage (Megatron's flags, DeepSpeed's config) on the engine's splits.
  if (space.uniform_stage_settings) return uniform_search(costs, space, job.training(), L, stats, least);
  StageFronts fronts(static_cast<size_t>(layout.pp));
  for (int i = 0; i < layout.pp; ++i) {
    Misfits misfits;  // layer_choices rise
    for (int64_t l : layer_choices(space, L, layout.pp, v, i)) {
      Point* near = l == plan::even_split_layers(L, layout.pp, i) ? &least[static_cast<size_t>(i)] : nullptr;
      // The oracle costs every fitting setting; the search only those that can be optimal.
      auto pts = options.exhaustive ? costs.cost(stage_settings(space, l, plan::grad_dp(layout)), i, stats, near)
                                    : costs.candidates(l, i, stats, near, &misfits);
      if (pts.empty()) continue;
      fronts[static_cast<size_t>(i)][l] =
          options.exhaustive ? std::move(pts) : pareto_sample(std::move(pts), space.pareto_points, v);
    }
  }
  if (options.exhaustive) {
    bool too_large = false;
    auto best = exhaustive_search(fronts, L, G, options.max_combinations, stats, &too_large, v);
    if (too_large)
      return fail("--exhaustive", fmt::format("the layout dp {} tp {} pp {} needs more than {:g} search nodes; "
                                              "use the hierarchical search or a smaller space",
                                              layout.dp, layout.tp, layout.pp, options.max_combinations));
    return best;
  }
  if (options.solver == InterStageSolver::kMilp)
    return inter_stage_milp(fronts, L, G, cutoff, options.milp_time_limit_s, stats, v);
  return inter_stage_dp(fronts, L, G, cutoff, stats, v);
}

// The plan the engine runs in place of `p`, with its predicted time, or nothing when the engine
// cannot run any plan close to it within memory. When the engine keeps the layout (only stage
// settings change), the layout's own cost model prices it; otherwise analysis::predict.
std::optional<Candidate> engine_plan(const analysis::PreparedJob& job, engines::Engine e, const StageCosts& costs,
                                     const plan::Plan& p, double objective, double peak, TuneStats& stats) {
  const auto& t = job.training();
  const auto& m = job.model();
  if (engines::expressible(p, e, nullptr, &t, &m)) return searched(p, objective, peak);
  plan::Plan near = engines::nearest_expressible(p, e, &t, &m).plan;
  if (!engines::expressible(near, e, nullptr, &t, &m) || !plan::validate_plan(near, m, job.cluster(), t))
    return std::nullopt;
  ++stats.engine_adjusted;
  plan::Plan same_layout = near;
  same_layout.stages = costs.layout().stages;
  if (same_layout == costs.layout()) {
    std::vector<Point> pts;
    for (int i = 0; i < near.pp; ++i) {
      auto f = costs.cost({near.stages[static_cast<size_t>(i)]}, i, stats, nullptr);
      if (f.empty()) return std::nullopt;
      pts.push_back(f.front());
    }
    return searched(near, uniform_objective(pts, near), worst_peak(pts));
  }
  auto pred = analysis::predict(job, near);
  if (!pred || !pred->memory.fits || pred->memory.host_bytes_per_node > pred->memory.host_capacity_bytes)
    return std::nullopt;
  double worst = 0;
  for (const auto& s : pred->memory.stages) worst = std::max(worst, s.estimated_peak_bytes);
  return searched(near, pred->time.iteration_time_s, worst);
}

// The most memory-frugal plan of a layout where nothing fits, when it beats `least_shortfall`.
std::optional<Candidate> near_miss(const plan::Plan& layout, const std::vector<Point>& least, double& least_shortfall) {
  std::vector<Point> pts;
  for (const Point& p : least) {
    if (!std::isfinite(p.excess)) return std::nullopt;
    pts.push_back(p);
  }
  double worst = 0;
  for (const auto& p : pts) worst = std::max(worst, p.excess);
  if (worst >= least_shortfall) return std::nullopt;
  least_shortfall = worst;
  return searched(with_stages(layout, pts), 0);
}

// Every returned plan carries exactly what `mist predict` says of it; the closed form is exact for
// most pipelines but not all (docs/simulation.md), so the simulation settles the order of the few best.
// The search judges memory on the memory model's allocator estimate, the prediction on the
// allocator's replay (analysis/reserved_memory.hpp): a plan the replay finds too large is set aside
// (`rejected`) and the next one taken, up to `top` plans.
constexpr size_t kMaxRejected = 8;
Result<void> predict_best(const analysis::PreparedJob& job, const TuneOptions& options, size_t top,
                          std::vector<Candidate>& found, std::vector<Candidate>& rejected) {
  std::vector<Candidate> best;
  for (auto& cand : found) {
    // Past a few rejections the estimate is off for the whole job: the closest of them is reported.
    if (best.size() >= top || rejected.size() >= kMaxRejected) break;
    MIST_TRY(cand.prediction, analysis::predict(job, cand.plan));
    cand.iteration_time_s = cand.prediction.time.iteration_time_s;
    cand.peak_memory_bytes = 0;  // the search's estimate, replaced by the prediction's
    for (const auto& s : cand.prediction.memory.stages)
      cand.peak_memory_bytes = std::max(cand.peak_memory_bytes, s.peak_bytes);
    (cand.prediction.memory.fits ? best : rejected).push_back(std::move(cand));
  }
  found = std::move(best);
  if (!options.rerank_by_simulation) return {};
  for (auto& cand : found) {
    const auto& pred = cand.prediction;
    MIST_TRY(auto sim, sim::simulate(analysis::pipeline_job(cand.plan, pred.time, pred.memory)));
    cand.simulated_time_s = sim.makespan;
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const Candidate& a, const Candidate& b) { return a.simulated_time_s < b.simulated_time_s; });
  return {};
}

// The closest plan's memory and what it lacks.
void describe_closest(const analysis::PreparedJob& job, Candidate& closest) {
  auto pred = analysis::predict(job, closest.plan);
  if (!pred) return;
  const auto& mem = pred->memory;
  double worst = 0;
  for (const auto& s : mem.stages) worst = std::max(worst, s.peak_bytes);
  closest.peak_memory_bytes = worst;
  closest.shortfall_bytes = std::max(0.0, worst - job.usable_memory_bytes());
  closest.host_shortfall_bytes = std::max(0.0, mem.host_bytes_per_node - mem.host_capacity_bytes);
  closest.prediction = std::move(*pred);
}

void report_progress(const TuneOptions& options, double fraction, const std::vector<Candidate>& found) {
  Progress at{.fraction = fraction};
  auto best = std::min_element(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    return a.search_objective_s < b.search_objective_s;
  });
  if (best != found.end()) at.best = &best->plan, at.best_time_s = best->search_objective_s;
  options.progress(at);
}

// One search of every layout with `job`'s memory budget; the plans found are predicted, and judged,
// with `judge` (the same job, perhaps with less headroom: see tune).
Result<TuneResult> search(const analysis::PreparedJob& judge, const analysis::PreparedJob& job,
                          const TuneOptions& options, std::vector<Candidate>& rejected) {
  MemoryPrograms programs(job);
  MIST_TRY(auto work, cost_layouts(job, options, programs));

  TuneResult result;
  std::vector<Candidate> found;
  std::vector<double> found_times;  // ascending
  double least_shortfall = kInf;
  const size_t top = static_cast<size_t>(std::max(1, options.top));
  for (size_t li = 0; li < work.size(); ++li) {
    const StageCosts& costs = work[li].costs;
    const plan::Plan& layout = costs.layout();
    ++result.stats.layouts;
    if (options.progress) report_progress(options, double(li) / double(work.size()), found);
    const double cutoff = found_times.size() >= top ? found_times[top - 1] : kInf;
    if (work[li].bound > cutoff) {
      ++result.stats.layouts_pruned;
      continue;
    }
    std::vector<Point> least(static_cast<size_t>(layout.pp), Point{0, 0, kInf, {}, kInf});
    MIST_TRY(auto best, search_layout(costs, job, options, cutoff, result.stats, least));
    std::optional<Candidate> cand;
    if (best) {
      cand = searched(with_stages(layout, best->stages), best->objective, worst_peak(best->stages));
      if (options.engine)
        cand = engine_plan(job, *options.engine, costs, cand->plan, best->objective, cand->peak_memory_bytes,
                           result.stats);
    }
    // Two layouts can lead to the same engine plan (e.g. torchtitan runs selective recompute as
    // none): the list keeps it once.
    const bool seen = cand && std::any_of(found.begin(), found.end(), [&](const Candidate& f) { return f.plan == cand->plan; });
    if (cand && !seen) {
      if (result.explored.size() < kMaxExplored)
        result.explored.push_back(Explored{cand->plan, cand->search_objective_s, cand->peak_memory_bytes});
      found_times.insert(std::upper_bound(found_times.begin(), found_times.end(), cand->search_objective_s),
                         cand->search_objective_s);
      found.push_back(std::move(*cand));
    } else if (found.empty() && !best) {
      if (auto miss = near_miss(layout, least, least_shortfall)) result.closest = std::move(miss);
    }
  }
  if (options.progress) report_progress(options, 1.0, found);

  std::stable_sort(found.begin(), found.end(),
                   [](const Candidate& a, const Candidate& b) { return a.iteration_time_s < b.iteration_time_s; });
  MIST_CHECK(predict_best(judge, options, top, found, rejected));
  result.stats.rejected_by_allocator = static_cast<int64_t>(rejected.size());
  if (found.empty() && !rejected.empty()) {
    result.closest = *std::min_element(rejected.begin(), rejected.end(), [](const Candidate& a, const Candidate& b) {
      return a.peak_memory_bytes < b.peak_memory_bytes;
    });
  }
  if (result.closest && found.empty()) describe_closest(judge, *result.closest);
  result.best = std::move(found);
  result.stats.programs_compiled = programs.compiled();
  return result;
}

}  // namespace

Result<TuneResult> tune(const analysis::PreparedJob& job, const TuneOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MIST_CHECK(check_engine_training(job, options));
  // The search prices memory with the memory model's allocator estimate; the plans it returns are
  // judged on the allocator's replay (analysis/reserved_memory.hpp). When the replay rejects plans
  // and fewer than `top` remain, the search runs again with the largest gap it saw between estimate
  // and replay left free (up to kRounds searches), and the fitting plans of every round are merged.
  constexpr int kRounds = 3;
  const size_t top = static_cast<size_t>(std::max(1, options.top));
  analysis::PreparedJob searched = job;
  TuneResult result;
  std::vector<Candidate> kept;
  int64_t rejected_total = 0;
  for (int round = 0;; ++round) {
    std::vector<Candidate> rejected;
    TuneOptions this_round = options;
    if (options.progress)
      this_round.progress = [&options, round](const Progress& at) {
        Progress p = at;
        p.round = round;
        options.progress(p);
      };
    MIST_TRY(result, search(job, searched, this_round, rejected));
    rejected_total += static_cast<int64_t>(rejected.size());
    for (auto& c : result.best)
      if (std::none_of(kept.begin(), kept.end(), [&](const Candidate& k) { return k.plan == c.plan; }))
        kept.push_back(std::move(c));
    if (kept.size() >= top || rejected.empty() || round + 1 == kRounds) break;
    // The budget that would have kept each rejected plan's replayed peak within the usable memory.
    double gap = 0;
    for (const auto& c : rejected)
      for (const auto& s : c.prediction.memory.stages)
        if (!s.fits) gap = std::max(gap, s.peak_bytes - s.estimated_peak_bytes);
    const double capacity = job.cluster().gpu.memory_bytes;
    const double budget = std::min(searched.usable_memory_bytes(), job.usable_memory_bytes() - gap);
    searched = searched.with_memory_headroom(std::min(0.9, 1 - budget / capacity + 0.001));
  }
  const bool by_simulation = options.rerank_by_simulation;
  std::stable_sort(kept.begin(), kept.end(), [&](const Candidate& a, const Candidate& b) {
    return by_simulation ? a.simulated_time_s < b.simulated_time_s : a.iteration_time_s < b.iteration_time_s;
  });
  if (kept.size() > top) kept.resize(top);
  if (!kept.empty()) result.closest.reset();
  result.best = std::move(kept);
  result.stats.rejected_by_allocator = rejected_total;
  result.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace mist::tuner
