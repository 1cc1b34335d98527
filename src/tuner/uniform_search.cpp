#include "tuner/uniform_search.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "tuner/engine_splits.hpp"

namespace mist::tuner {

namespace {

// Setting `s` (chosen for the largest stage) on a stage of `layers` blocks: the recompute count
// is the engine's one count, capped by the stage's blocks (Megatron's --recompute-num-layers), or
// every block when the space recomputes all or nothing.
plan::StagePlan at_layers(plan::StagePlan s, int64_t layers, const SearchSpace& space) {
  const bool all = space.ckpt_all_or_nothing && s.ckpt_layers > 0;
  s.num_layers = layers;
  s.ckpt_layers = all ? layers : std::min(s.ckpt_layers, layers);
  return s;
}

}  // namespace

double uniform_objective(const std::vector<Point>& pts, const plan::Plan& layout) {
  return plan_objective(pts, static_cast<double>(layout.grad_accum_steps), layout.virtual_pipeline_stages);
}

std::optional<StageChoice> uniform_search(const StageCosts& costs, const SearchSpace& space,
                                          const spec::TrainingSpec& t, int64_t L, TuneStats& stats,
                                          std::vector<Point>& least) {
  const plan::Plan& layout = costs.layout();
  const auto splits = engine_splits(space, L, layout.pp, layout.virtual_pipeline_stages, t.mixed_precision());
  if (splits.empty()) return std::nullopt;
  int64_t lmax = 0;
  for (const auto& split : splits) lmax = std::max(lmax, *std::max_element(split.begin(), split.end()));
  const auto settings = stage_settings(space, lmax, plan::grad_dp(layout), layout.pp);

  // costed[{i, l}][k]: setting k on stage i with l blocks, empty when it does not fit.
  using Column = std::vector<std::optional<Point>>;
  std::map<std::pair<int, int64_t>, Column> costed;
  auto column = [&](int i, int64_t l, Point* near) -> const Column& {
    auto [it, fresh] = costed.try_emplace({i, l});
    if (fresh) {
      std::vector<plan::StagePlan> batch;
      for (const auto& s : settings) batch.push_back(at_layers(s, l, space));
      const auto fit = costs.cost(batch, i, stats, near);  // the fitting ones, in order
      it->second.assign(batch.size(), std::nullopt);
      for (size_t k = 0, j = 0; k < batch.size() && j < fit.size(); ++k)
        if (fit[j].st == batch[k]) it->second[k] = fit[j++];
    }
    return it->second;
  };

  std::optional<StageChoice> best;
  std::vector<Point> pts;
  for (size_t si = 0; si < splits.size(); ++si) {
    const auto& split = splits[si];
    std::vector<const Column*> columns;
    for (int i = 0; i < layout.pp; ++i)
      columns.push_back(&column(i, split[static_cast<size_t>(i)], si == 0 ? &least[static_cast<size_t>(i)] : nullptr));
    const int64_t top = *std::max_element(split.begin(), split.end());
    for (size_t k = 0; k < settings.size(); ++k) {
      // A recompute count above every stage's blocks repeats the count equal to the largest.
      if (!space.ckpt_all_or_nothing && settings[k].ckpt_layers > top) continue;
      pts.clear();
      for (const Column* c : columns) {
        if (!(*c)[k]) break;
        pts.push_back(*(*c)[k]);
      }
      if (static_cast<int64_t>(pts.size()) != layout.pp) continue;
      const double v = uniform_objective(pts, layout);
      ++stats.plans_evaluated;
      if (!best || v < best->objective) best = StageChoice{pts, v};  // ties keep the default split
    }
  }
  return best;
}

double uniform_lower_bound(const StageCosts& costs, const SearchSpace& space, const spec::TrainingSpec& t, int64_t L) {
  const plan::Plan& layout = costs.layout();
  std::map<std::pair<int, int64_t>, double> fastest;
  double best = std::numeric_limits<double>::infinity();
  std::vector<Point> pts;
  for (const auto& split : engine_splits(space, L, layout.pp, layout.virtual_pipeline_stages, t.mixed_precision())) {
    pts.clear();
    for (int i = 0; i < layout.pp; ++i) {
      const int64_t l = split[static_cast<size_t>(i)];
      auto [it, fresh] = fastest.try_emplace({i, l}, 0.0);
      if (fresh) it->second = costs.fastest(l, i);
      pts.push_back(Point{it->second, 0, 0, {}, 0});
    }
    best = std::min(best, uniform_objective(pts, layout));
  }
  return best;
}

}  // namespace mist::tuner
