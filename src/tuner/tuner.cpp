#include "tuner/tuner.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "analysis/memory_model.hpp"
#include "analysis/overheads.hpp"
#include "analysis/time_model.hpp"
#include "graph/lower.hpp"

namespace mist::tuner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One costed setting of one stage.
struct Point {
  double T = 0, D = 0, peak = 0;
  plan::StagePlan st;
  double excess = 0;  // bytes over the GPU or the host share, whichever is worse (near misses)
};

// Everything needed to cost stages of one parallel layout.
struct LayoutCosts {
  const spec::ModelSpec& m;
  const spec::ClusterSpec& c;
  const SearchSpace& space;
  plan::Plan layout;
  graph::LoweredModel lm;
  analysis::StageMemoryModel memory;
  analysis::StageTimer timer;
  double nccl = 0;
  // The knobs a stage setting changes, in the order of the specialised programs' inputs.
  static constexpr std::array<const char*, 13> kSettingKnobs = {"l",  "c",  "zw", "zg", "zo", "wo", "go",
                                                                "oo", "ao", "W",  "G",  "O",  "A"};
  // Per stage position: peak and host bytes with everything but the setting knobs bound, so the
  // compiled tape folds the model's shapes and the layout into constants (as Mist concretises b
  // and tp before its batched evaluation).
  mutable std::map<int, sym::Program> programs;

  const sym::Program& program(int index, const plan::StagePlan& any) const {
    auto it = programs.find(index);
    if (it != programs.end()) return it->second;
    sym::Bindings fixed = analysis::stage_knobs(lm, m, c, layout, any, index, nccl);
    for (const char* k : kSettingKnobs) fixed.erase(k);
    std::vector<std::string> inputs(kSettingKnobs.begin(), kSettingKnobs.end());
    auto prog = sym::Program::compile({sym::substitute(memory.peak, fixed), sym::substitute(memory.host_bytes, fixed)},
                                      inputs);
    // Every symbol but the setting knobs is bound above, so compilation cannot fail.
    return programs.emplace(index, std::move(*prog)).first->second;
  }

  // Costs `settings` at stage `index`; returns the feasible ones, and tracks the setting with the
  // smallest excess over GPU or host memory (for the near-miss report) in `least`.
  std::vector<Point> cost(const std::vector<plan::StagePlan>& settings, int index, TuneStats& stats,
                          Point* least) const {
    const size_t rows = settings.size();
    const sym::Program& prog = program(index, settings.front());
    std::vector<double> in(kSettingKnobs.size() * rows), out(2 * rows);
    const double dp = static_cast<double>(layout.dp);
    for (size_t r = 0; r < rows; ++r) {
      const auto& s = settings[r];
      const double v[] = {static_cast<double>(s.num_layers),
                          static_cast<double>(s.ckpt_layers),
                          s.zero >= 3 ? dp : 1.0,
                          s.zero >= 2 ? dp : 1.0,
                          s.zero >= 1 ? dp : 1.0,
                          s.offload.weights,
                          s.offload.gradients,
                          s.offload.optimizer_states,
                          s.offload.activations,
                          (s.zero >= 3 && layout.dp > 1) || s.offload.weights > 0 ? 1.0 : 0.0,
                          (s.zero >= 2 && layout.dp > 1) || s.offload.gradients > 0 ? 1.0 : 0.0,
                          s.offload.optimizer_states > 0 ? 1.0 : 0.0,
                          s.offload.activations > 0 ? 1.0 : 0.0};
      for (size_t k = 0; k < kSettingKnobs.size(); ++k) in[k * rows + r] = v[k];
    }
    prog.evaluate(in, rows, out);
    stats.stage_settings_evaluated += static_cast<int64_t>(rows);
    std::vector<Point> feasible;
    const double host_cap = c.host_memory_bytes / static_cast<double>(c.gpus_per_node);
    for (size_t r = 0; r < rows; ++r) {
      const double peak = out[r], host = out[rows + r];
      const double excess = std::max(peak - c.gpu.memory_bytes, host - host_cap);
      if (least && excess < least->excess) *least = Point{0, 0, peak, settings[r], excess};
      if (excess > 0) continue;
      const auto t = timer.parts(settings[r], index);
      feasible.push_back(Point{t.stable(), t.delta(), peak, settings[r]});
    }
    stats.stage_settings_feasible += static_cast<int64_t>(feasible.size());
    return feasible;
  }
};

// The non-dominated points (smaller T and smaller D are better), T ascending; at most `k` of them,
// spread evenly along the frontier and always including both ends.
std::vector<Point> pareto_sample(std::vector<Point> pts, int k) {
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.T != b.T ? a.T < b.T : a.D < b.D; });
  std::vector<Point> front;
  double best_d = kInf;
  for (auto& p : pts)
    if (p.D < best_d) {
      best_d = p.D;
      front.push_back(std::move(p));
    }
  if (k <= 0 || static_cast<int>(front.size()) <= k) return front;
  std::vector<Point> out;
  for (int i = 0; i < k; ++i) {
    const size_t j = static_cast<size_t>(std::llround(double(i) * double(front.size() - 1) / double(k - 1)));
    if (out.empty() || &front[j] != &out.back()) out.push_back(front[j]);
  }
  return out;
}

struct State {
  double sum_t = 0, max_t = 0, exposed = -kInf;
  int64_t layers = 0;
  int prev = -1;        // index in the previous stage's state list
  Point point;          // the choice made at this stage
};

bool dominates(const State& a, const State& b) {
  return a.sum_t <= b.sum_t && a.max_t <= b.max_t && a.exposed <= b.exposed;
}

double objective(const State& s, double G) { return s.sum_t + (G - 1) * s.max_t + std::max(0.0, s.exposed); }

// Layer counts stage `i` may take.
std::vector<int64_t> layer_choices(const SearchSpace& space, int64_t L, int64_t pp, int i) {
  if (space.uniform_split) return {L / pp + (i < L % pp ? 1 : 0)};
  const int64_t mid = std::llround(double(L) / double(pp));
  std::vector<int64_t> out;
  for (int64_t l = std::max<int64_t>(1, mid - space.layer_slack);
       l <= std::min<int64_t>(L - (pp - 1), mid + space.layer_slack); ++l)
    out.push_back(l);
  return out;
}

// Exact inter-stage search over stage fronts: states (Σ T, max T, exposed) per layers used, with
// dominated states dropped. Returns the best complete plan's stages and its closed-form time.
std::optional<std::pair<std::vector<Point>, double>> inter_stage(
    const std::vector<std::map<int64_t, std::vector<Point>>>& fronts, int64_t L, double G, TuneStats& stats) {
  const size_t pp = fronts.size();
  std::vector<std::vector<State>> levels(pp + 1);
  levels[0].push_back(State{});
  for (size_t i = 0; i < pp; ++i) {
    std::map<int64_t, std::vector<State>> by_layers;
    const int64_t left_after = static_cast<int64_t>(pp - i - 1);
    for (size_t si = 0; si < levels[i].size(); ++si) {
      const State& s = levels[i][si];
      for (const auto& [l, pts] : fronts[i]) {
        const int64_t used = s.layers + l;
        if (used + left_after > L) continue;
        if (i + 1 == pp && used != L) continue;
        for (const auto& p : pts) {
          State n;
          n.sum_t = s.sum_t + p.T;
          n.max_t = std::max(s.max_t, p.T);
          n.exposed = std::max(s.exposed, p.D - s.sum_t);
          n.layers = used;
          n.prev = static_cast<int>(si);
          n.point = p;
          auto& bucket = by_layers[used];
          bool dominated = false;
          for (const auto& o : bucket)
            if (dominates(o, n)) {
              dominated = true;
              break;
            }
          if (dominated) continue;
          std::erase_if(bucket, [&](const State& o) { return dominates(n, o); });
          bucket.push_back(std::move(n));
        }
      }
    }
    for (auto& [l, b] : by_layers)
      for (auto& s : b) levels[i + 1].push_back(std::move(s));
    stats.plans_evaluated += static_cast<int64_t>(levels[i + 1].size());
    if (levels[i + 1].empty()) return std::nullopt;
  }
  int best = -1;
  for (size_t j = 0; j < levels[pp].size(); ++j)
    if (best < 0 || objective(levels[pp][j], G) < objective(levels[pp][static_cast<size_t>(best)], G))
      best = static_cast<int>(j);
  if (best < 0) return std::nullopt;
  std::vector<Point> chosen(pp);
  int k = best;
  for (size_t i = pp; i-- > 0;) {
    const State& s = levels[i + 1][static_cast<size_t>(k)];
    chosen[i] = s.point;
    k = s.prev;
  }
  return std::make_pair(chosen, objective(levels[pp][static_cast<size_t>(best)], G));
}

// Every combination of layer counts and feasible settings (the oracle), with no frontier and no
// decomposition. Branch and bound keeps it tractable without losing exactness: a partial plan
// whose Σ T + (G - 1)·max T already reaches the best complete plan cannot improve on it, since
// later stages only add to both. Returns the best; sets `too_large` past `max_nodes`.
std::optional<std::pair<std::vector<Point>, double>> exhaustive(
    std::vector<std::map<int64_t, std::vector<Point>>> all, int64_t L, double G, double max_nodes,
    TuneStats& stats, bool* too_large) {
  for (auto& m : all)
    for (auto& [l, pts] : m)
      std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.T < b.T; });
  const size_t pp = all.size();
  std::vector<Point> cur(pp), best_plan;
  double best = kInf, nodes = 0;
  std::function<void(size_t, int64_t, double, double, double)> rec = [&](size_t i, int64_t used, double sum,
                                                                         double mx, double exposed) {
    if (*too_large || sum + (G - 1) * mx >= best) return;
    if (++nodes > max_nodes) {
      *too_large = true;
      return;
    }
    if (i == pp) {
      if (used != L) return;
      ++stats.plans_evaluated;
      const double v = sum + (G - 1) * mx + std::max(0.0, exposed);
      if (v < best) {
        best = v;
        best_plan = cur;
      }
      return;
    }
    for (const auto& [l, pts] : all[i]) {
      const int64_t left = static_cast<int64_t>(pp - i - 1);
      if (used + l + left > L) continue;
      if (i + 1 == pp && used + l != L) continue;
      for (const auto& p : pts) {
        cur[i] = p;
        rec(i + 1, used + l, sum + p.T, std::max(mx, p.T), std::max(exposed, p.D - sum));
      }
    }
  };
  rec(0, 0, 0, 0, -kInf);
  if (*too_large || best_plan.empty()) return std::nullopt;
  return std::make_pair(best_plan, best);
}

plan::Plan with_stages(plan::Plan layout, const std::vector<Point>& pts) {
  layout.stages.clear();
  for (const auto& p : pts) layout.stages.push_back(p.st);
  return layout;
}

}  // namespace

Result<TuneResult> tune(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                        const TuneOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MIST_CHECK(plan::validate_precision(c, t));
  const SearchSpace& space = options.space;
  TuneResult result;
  const auto all_layouts = layouts(space, m, c, t);
  if (all_layouts.empty())
    return fail("cluster", fmt::format("no parallel layout of {} GPUs divides the global batch {} and the model's "
                                       "heads; check training.global_batch_size and the GPU count",
                                       c.num_gpus(), t.global_batch_size));
  std::vector<Candidate> found;
  double least_shortfall = kInf;
  for (size_t li = 0; li < all_layouts.size(); ++li) {
    const plan::Plan& layout = all_layouts[li];
    ++result.stats.layouts;
    const auto lm = graph::lower(m, t.seq_length, graph::lowering_options(t, layout.sequence_parallel && layout.tp > 1));
    MIST_TRY(auto memory, analysis::build_stage_memory_model(lm, t, layout.recompute));
    LayoutCosts costs{m, c, space, layout, lm, std::move(memory), analysis::StageTimer::create(m, c, t, layout),
                      analysis::nccl_buffer_bytes(layout, c)};
    const double G = static_cast<double>(layout.grad_accum_steps);

    std::optional<std::pair<std::vector<Point>, double>> best;
    // The most memory-frugal setting of each stage under the even split, for the near-miss report.
    std::vector<Point> least(static_cast<size_t>(layout.pp), Point{0, 0, kInf, {}, kInf});
    auto even = [&](int i) { return m.num_layers / layout.pp + (i < m.num_layers % layout.pp ? 1 : 0); };
    if (space.uniform_stage_settings) {
      // One setting for every stage (Megatron's flags, DeepSpeed's config), uniform split.
      const int64_t lmax = m.num_layers / layout.pp + (m.num_layers % layout.pp ? 1 : 0);
      for (const auto& s : stage_settings(space, lmax, layout.dp)) {
        std::vector<Point> pts;
        bool ok = true;
        for (int i = 0; i < layout.pp && ok; ++i) {
          plan::StagePlan st = s;
          st.num_layers = even(i);
          st.ckpt_layers = std::min(s.ckpt_layers, st.num_layers);
          if (space.ckpt_all_or_nothing && s.ckpt_layers > 0) st.ckpt_layers = st.num_layers;
          auto f = costs.cost({st}, i, result.stats, &least[static_cast<size_t>(i)]);
          ok = !f.empty();
          if (ok) pts.push_back(f.front());
        }
        if (!ok) continue;
        std::vector<double> T, D;
        for (const auto& p : pts) T.push_back(p.T), D.push_back(p.D);
        const double v = analysis::pipeline_iteration_time(T, D, layout.grad_accum_steps, 1);
        ++result.stats.plans_evaluated;
        if (!best || v < best->second) best = std::make_pair(pts, v);
      }
    } else {
      std::vector<std::map<int64_t, std::vector<Point>>> fronts(static_cast<size_t>(layout.pp));
      for (int i = 0; i < layout.pp; ++i)
        for (int64_t l : layer_choices(space, m.num_layers, layout.pp, i)) {
          auto pts = costs.cost(stage_settings(space, l, layout.dp), i, result.stats,
                                l == even(i) ? &least[static_cast<size_t>(i)] : nullptr);
          if (pts.empty()) continue;
          fronts[static_cast<size_t>(i)][l] = options.exhaustive ? std::move(pts) : pareto_sample(std::move(pts), space.pareto_points);
        }
      if (options.exhaustive) {
        bool too_large = false;
        best = exhaustive(fronts, m.num_layers, G, options.max_combinations, result.stats, &too_large);
        if (too_large)
          return fail("--exhaustive", fmt::format("the layout dp {} tp {} pp {} needs more than {:g} search nodes; "
                                                  "use the hierarchical search or a smaller space",
                                                  layout.dp, layout.tp, layout.pp, options.max_combinations));
      } else {
        best = inter_stage(fronts, m.num_layers, G, result.stats);
      }
    }
    if (best) {
      found.push_back(Candidate{with_stages(layout, best->first), best->second, best->second, 0, 0});
    } else {
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
    if (options.progress) options.progress(double(li + 1) / double(all_layouts.size()));
  }

  std::sort(found.begin(), found.end(),
            [](const Candidate& a, const Candidate& b) { return a.iteration_time_s < b.iteration_time_s; });
  if (static_cast<int>(found.size()) > options.top) found.resize(static_cast<size_t>(options.top));
  for (auto& cand : found) {
    // Report exactly what `mist predict` says about the plan.
    MIST_TRY(auto mem, analysis::predict_memory(m, c, t, cand.plan));
    MIST_TRY(auto time, analysis::predict_time(m, c, t, cand.plan));
    cand.iteration_time_s = time.iteration_time_s;
    for (const auto& s : mem.stages) cand.peak_memory_bytes = std::max(cand.peak_memory_bytes, s.peak_bytes);
  }
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
  result.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace mist::tuner
