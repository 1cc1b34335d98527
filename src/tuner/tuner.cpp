#include "tuner/tuner.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "analysis/memory_model.hpp"
#include "analysis/pipeline_job.hpp"
#include "analysis/time_model.hpp"
#include "export/capability.hpp"
#include "profile/op_source.hpp"
#include "tuner/inter_stage.hpp"
#include "tuner/stage_costs.hpp"
#include "tuner/uniform_search.hpp"

namespace mist::tuner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Layer counts stage `i` may take: with v interleaved chunks, multiples of v (whole chunks).
std::vector<int64_t> layer_choices(const SearchSpace& space, int64_t L, int64_t pp, int64_t v, int i) {
  if (space.uniform_split || pp == 1) return {L / pp + (i < L % pp ? 1 : 0)};
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

// The plan the engine runs in place of `p`, with its predicted time, or nothing when the engine
// cannot run any plan close to it within memory. When the engine keeps the layout (only stage
// settings change), the layout's own cost model prices it; otherwise `mist predict`'s functions.
std::optional<Candidate> engine_plan(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                                     engines::Engine e, const StageCosts& costs, const plan::Plan& p, double objective,
                                     TuneStats& stats) {
  if (engines::expressible(p, e, nullptr, &t)) return Candidate{p, objective, objective};
  plan::Plan near = engines::nearest_expressible(p, e, &t).plan;
  if (!engines::expressible(near, e, nullptr, &t) || !plan::validate_plan(near, m, c, t)) return std::nullopt;
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
    const double v = uniform_objective(pts, near);
    return Candidate{near, v, v};
  }
  auto mem = analysis::predict_memory(m, c, t, near);
  if (!mem || !mem->fits || mem->host_bytes_per_node > mem->host_capacity_bytes) return std::nullopt;
  auto time = analysis::predict_time(m, c, t, near);
  if (!time) return std::nullopt;
  return Candidate{near, time->iteration_time_s, time->iteration_time_s};
}

}  // namespace

Result<TuneResult> tune(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                        const TuneOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MIST_CHECK(plan::validate_precision(c, t));
  const SearchSpace& space = options.space;
  TuneResult result;
  // An unreadable profile database would otherwise only surface at the final prediction, after a
  // search on analytical op times.
  if (!c.profile_db.empty()) {
    auto table = profile::OpTable::load(c.profile_db);
    if (!table) return fail("cluster." + table.error().path, table.error().message);
  }
  if (options.engine) {
    // What no plan can change (e.g. fp16 on an engine without it) ends the search here.
    for (const auto& why : engines::inexpressible_reasons(plan::uniform_plan(m, 1, 1, 1, 1, 1, {}), *options.engine, &t))
      if (why.path.starts_with("training")) return fail(why.path, why.message);
  }
  const auto all_layouts = layouts(space, m, c, t);
  if (all_layouts.empty())
    return fail("cluster", fmt::format("no parallel layout of {} GPUs divides the global batch {} and the model's "
                                       "heads; check training.global_batch_size and the GPU count",
                                       c.num_gpus(), t.global_batch_size));
  // Cost models of every layout, visited in order of their lower bounds so that good plans come
  // early and the bound can skip layouts that cannot enter the top list.
  struct Work {
    StageCosts costs;
    double bound;
  };
  std::vector<Work> work;
  MemoryPrograms programs(m, c, t);
  for (const auto& layout : all_layouts) {
    MIST_TRY(auto costs, StageCosts::create(m, c, t, space, layout, programs));
    const double lb = options.exhaustive              ? 0
                      : space.uniform_stage_settings ? uniform_lower_bound(costs, space, t, m.num_layers)
                                                     : lower_bound(costs, space, m.num_layers);
    work.push_back(Work{std::move(costs), lb});
  }
  std::stable_sort(work.begin(), work.end(), [](const Work& a, const Work& b) { return a.bound < b.bound; });

  std::vector<Candidate> found;
  std::vector<double> found_times;  // ascending
  double least_shortfall = kInf;
  const size_t top = static_cast<size_t>(std::max(1, options.top));
  for (size_t li = 0; li < work.size(); ++li) {
    const StageCosts& costs = work[li].costs;
    const plan::Plan& layout = costs.layout();
    ++result.stats.layouts;
    if (options.progress) options.progress(double(li) / double(work.size()));
    const double cutoff = found_times.size() >= top ? found_times[top - 1] : kInf;
    if (work[li].bound > cutoff) {
      ++result.stats.layouts_pruned;
      continue;
    }
    const double G = static_cast<double>(layout.grad_accum_steps);

    std::optional<StageChoice> best;
    // The most memory-frugal setting of each stage under the even split, for the near-miss report.
    std::vector<Point> least(static_cast<size_t>(layout.pp), Point{0, 0, kInf, {}, kInf});
    auto even = [&](int i) { return m.num_layers / layout.pp + (i < m.num_layers % layout.pp ? 1 : 0); };
    if (space.uniform_stage_settings) {
      // One setting for every stage (Megatron's flags, DeepSpeed's config) on the engine's splits.
      best = uniform_search(costs, space, t, m.num_layers, result.stats, least);
    } else {
      StageFronts fronts(static_cast<size_t>(layout.pp));
      for (int i = 0; i < layout.pp; ++i)
        for (int64_t l : layer_choices(space, m.num_layers, layout.pp, layout.virtual_pipeline_stages, i)) {
          Point* near = l == even(i) ? &least[static_cast<size_t>(i)] : nullptr;
          // The oracle costs every fitting setting; the search only those that can be optimal.
          auto pts = options.exhaustive ? costs.cost(stage_settings(space, l, layout.dp), i, result.stats, near)
                                        : costs.candidates(l, i, result.stats, near);
          if (pts.empty()) continue;
          fronts[static_cast<size_t>(i)][l] =
              options.exhaustive ? std::move(pts) : pareto_sample(std::move(pts), space.pareto_points, layout.virtual_pipeline_stages);
        }
      if (options.exhaustive) {
        bool too_large = false;
        best = exhaustive_search(fronts, m.num_layers, G, options.max_combinations, result.stats, &too_large,
                                 layout.virtual_pipeline_stages);
        if (too_large)
          return fail("--exhaustive", fmt::format("the layout dp {} tp {} pp {} needs more than {:g} search nodes; "
                                                  "use the hierarchical search or a smaller space",
                                                  layout.dp, layout.tp, layout.pp, options.max_combinations));
      } else if (options.solver == InterStageSolver::kMilp) {
        MIST_TRY(best, inter_stage_milp(fronts, m.num_layers, G, cutoff, options.milp_time_limit_s, result.stats,
                                        layout.virtual_pipeline_stages));
      } else {
        best = inter_stage_dp(fronts, m.num_layers, G, cutoff, result.stats, layout.virtual_pipeline_stages);
      }
    }
    std::optional<Candidate> cand;
    if (best) {
      cand = Candidate{with_stages(layout, best->stages), best->objective, best->objective};
      if (options.engine)
        cand = engine_plan(m, c, t, *options.engine, costs, cand->plan, best->objective, result.stats);
    }
    // Two layouts can lead to the same engine plan (e.g. torchtitan runs selective recompute as
    // none): the list keeps it once.
    const bool seen = cand && std::any_of(found.begin(), found.end(), [&](const Candidate& f) { return f.plan == cand->plan; });
    if (cand && !seen) {
      found_times.insert(std::upper_bound(found_times.begin(), found_times.end(), cand->search_objective_s),
                         cand->search_objective_s);
      found.push_back(std::move(*cand));
    } else if (found.empty() && !best) {
      // Nothing fits in this layout: remember the most memory-frugal plan as a near miss.
      std::vector<Point> pts;
      for (int i = 0; i < layout.pp; ++i) {
        Point p = least[static_cast<size_t>(i)];
        if (!std::isfinite(p.excess)) break;
        pts.push_back(p);
      }
      if (static_cast<int64_t>(pts.size()) == layout.pp) {
        double worst = 0;
        for (const auto& p : pts) worst = std::max(worst, p.excess);
        if (worst < least_shortfall) {
          least_shortfall = worst;
          result.closest = Candidate{with_stages(layout, pts), 0, 0, 0, 0, 0};
        }
      }
    }
  }
  if (options.progress) options.progress(1.0);

  std::stable_sort(found.begin(), found.end(),
                   [](const Candidate& a, const Candidate& b) { return a.iteration_time_s < b.iteration_time_s; });
  if (found.size() > top) found.resize(top);
  for (auto& cand : found) {
    // Report exactly what `mist predict` says about the plan.
    MIST_TRY(auto mem, analysis::predict_memory(m, c, t, cand.plan));
    MIST_TRY(auto time, analysis::predict_time(m, c, t, cand.plan));
    cand.iteration_time_s = time.iteration_time_s;
    for (const auto& s : mem.stages) cand.peak_memory_bytes = std::max(cand.peak_memory_bytes, s.peak_bytes);
    if (options.rerank_by_simulation) {
      MIST_TRY(auto sim, sim::simulate(analysis::pipeline_job(cand.plan, time, mem)));
      cand.simulated_time_s = sim.makespan;
    }
  }
  // The closed form is exact for most pipelines but not all (docs/simulation.md); the simulation
  // settles the order of the few best.
  if (options.rerank_by_simulation)
    std::stable_sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
      return a.simulated_time_s < b.simulated_time_s;
    });
  if (result.closest && found.empty()) {
    auto mem = analysis::predict_memory(m, c, t, result.closest->plan);
    if (mem) {
      double worst = 0;
      for (const auto& s : mem->stages) worst = std::max(worst, s.peak_bytes);
      result.closest->peak_memory_bytes = worst;
      result.closest->shortfall_bytes = std::max(0.0, worst - c.gpu.memory_bytes);
      result.closest->host_shortfall_bytes = std::max(0.0, mem->host_bytes_per_node - mem->host_capacity_bytes);
    }
  }
  result.best = std::move(found);
  result.stats.programs_compiled = programs.compiled();
  result.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace mist::tuner
