#include "tuner/inter_stage.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <fmt/format.h>

#include "analysis/time_model.hpp"
#include "solver/solve.hpp"

namespace mist::tuner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct State {
  double sum_t = 0, sum_b = 0, max_t = 0, exposed = -kInf;
  int64_t layers = 0;
  int prev = -1;  // index in the previous stage's state list
  const Point* point = nullptr;  // the choice made at this stage
};

// The states of one layer count, with the four quantities dominance compares kept in arrays of
// their own (Σ T, Σ (T − B), max T, exposed D) so that a check of a new state against thousands
// of kept ones is a vectorised scan. State a dominates b when all four of a are no larger: a
// larger Σ B hides more of later stages' D but costs at least as much Σ T (docs/tuner.md).
class Bucket {
 public:
  // Whether a kept state is no larger than `n` in all four. The last state found is tried first:
  // the candidates come in runs (one state's successors) that the same kept state beats.
  bool dominated(const State& n) {
    const double t = n.sum_t, tb = n.sum_t - n.sum_b, mx = n.max_t, ex = n.exposed;
    const size_t h = hint_;
    if (h < size() && t_[h] <= t && tb_[h] <= tb && mx_[h] <= mx && ex_[h] <= ex) return true;
    hint_ = find<kLe>(t, tb, mx, ex);
    return hint_ < size();
  }
  // Adds `n`, dropping the kept states it dominates (the others keep their order).
  void insert(const State& n) {
    const double t = n.sum_t, tb = n.sum_t - n.sum_b, mx = n.max_t, ex = n.exposed;
    size_t k = find<kGe>(t, tb, mx, ex);
    if (k < size()) {
      for (size_t i = k + 1; i < size(); ++i) {
        if (t <= t_[i] && tb <= tb_[i] && mx <= mx_[i] && ex <= ex_[i]) continue;
        states_[k] = states_[i], t_[k] = t_[i], tb_[k] = tb_[i], mx_[k] = mx_[i], ex_[k] = ex_[i];
        ++k;
      }
      states_.resize(k), t_.resize(k), tb_.resize(k), mx_.resize(k), ex_.resize(k);
    }
    states_.push_back(n), t_.push_back(t), tb_.push_back(tb), mx_.push_back(mx), ex_.push_back(ex);
  }
  std::vector<State>& states() { return states_; }

 private:
  size_t size() const { return states_.size(); }

  // The first kept state no larger (kLe) or no smaller (kGe) than (t, tb, mx, ex) in all four, or
  // size(). The scan is the DP's hot loop: with SSE2 (every x86-64) blocks of 4 are tested
  // without branches, 2 states per compare, and the block that may hold the match is rescanned
  // one by one, with the same comparisons.
  enum Sense { kLe, kGe };
  template <Sense s>
  size_t find(double t, double tb, double mx, double ex) const {
    const size_t n = size();
    size_t i = 0;
#ifdef __SSE2__
    const __m128d vt = _mm_set1_pd(t), vtb = _mm_set1_pd(tb), vmx = _mm_set1_pd(mx), vex = _mm_set1_pd(ex);
    auto le = [](__m128d x, __m128d y) { return s == kLe ? _mm_cmple_pd(x, y) : _mm_cmple_pd(y, x); };
    for (; i + 4 <= n; i += 4) {
      __m128d any = _mm_setzero_pd();
      for (size_t j = i; j < i + 4; j += 2)
        any = _mm_or_pd(any, _mm_and_pd(_mm_and_pd(le(_mm_loadu_pd(&t_[j]), vt), le(_mm_loadu_pd(&tb_[j]), vtb)),
                                        _mm_and_pd(le(_mm_loadu_pd(&mx_[j]), vmx), le(_mm_loadu_pd(&ex_[j]), vex))));
      if (_mm_movemask_pd(any) != 0) break;
    }
#endif
    for (; i < n; ++i)
      if (s == kLe ? (t_[i] <= t && tb_[i] <= tb && mx_[i] <= mx && ex_[i] <= ex)
                   : (t <= t_[i] && tb <= tb_[i] && mx <= mx_[i] && ex <= ex_[i]))
        return i;
    return n;
  }

  std::vector<State> states_;
  std::vector<double> t_, tb_, mx_, ex_;
  size_t hint_ = 0;  // where dominated() last found a match (any index: it is checked before use)
};

}  // namespace

double pipeline_objective(double sum_t, double max_t, double exposed, double G, int64_t v) {
  return analysis::pipeline_time(sum_t, max_t, exposed, G, v).total();
}

double plan_objective(const std::vector<Point>& stages, double G, int64_t v) {
  double sum = 0, mx = 0, before = 0, exposed = -kInf;
  for (const auto& p : stages) {
    exposed = std::max(exposed, p.D - before / static_cast<double>(v));
    sum += p.T;
    before += p.B;
    mx = std::max(mx, p.T);
  }
  return pipeline_objective(sum, mx, exposed, G, v);
}

std::vector<Point> pareto_sample(std::vector<Point> pts, int k, int64_t v) {
  const double vd = static_cast<double>(v);
  auto td = [vd](const Point& p) { return p.T + vd * p.D; };
  std::sort(pts.begin(), pts.end(), [&](const Point& a, const Point& b) {
    if (a.T != b.T) return a.T < b.T;
    if (td(a) != td(b)) return td(a) < td(b);
    return a.T - a.B < b.T - b.B;
  });
  // Every kept point has T no larger than the next candidate's, so the candidate is beaten when a
  // kept one is no worse in T + v·D and T - B.
  std::vector<Point> front;
  for (auto& p : pts)
    if (std::none_of(front.begin(), front.end(),
                     [&](const Point& q) { return td(q) <= td(p) && q.T - q.B <= p.T - p.B; }))
      front.push_back(std::move(p));
  if (k <= 0 || static_cast<int>(front.size()) <= k) return front;
  std::vector<Point> out;
  size_t last = front.size();
  for (int i = 0; i < k; ++i) {
    const size_t j = static_cast<size_t>(std::llround(double(i) * double(front.size() - 1) / double(k - 1)));
    if (j != last) out.push_back(front[j]);
    last = j;
  }
  return out;
}

namespace {

// Lower bounds on what the stages from `i` on add when they take exactly r blocks between them:
// sum[i][r] on their Σ T and max[i][r] on their max T, each the least over every split of the r
// blocks of what the stages' fastest settings at those counts give (infinite where no split
// exists). They are tighter than every stage at its fastest count because the split must use the
// blocks: a deep pipeline's states whose every completion is too slow are dropped early.
struct Rest {
  std::vector<std::vector<double>> sum, max;
};

Rest rest_bounds(const StageFronts& fronts, int64_t L) {
  const size_t pp = fronts.size();
  const auto n = static_cast<size_t>(L) + 1;
  Rest r{std::vector<std::vector<double>>(pp + 1, std::vector<double>(n, kInf)),
         std::vector<std::vector<double>>(pp + 1, std::vector<double>(n, kInf))};
  r.sum[pp][0] = r.max[pp][0] = 0;
  for (size_t i = pp; i-- > 0;)
    for (const auto& [l, pts] : fronts[i]) {
      if (pts.empty() || l < 0 || l > L) continue;
      double fastest = kInf;
      for (const auto& p : pts) fastest = std::min(fastest, p.T);
      for (size_t k = static_cast<size_t>(l); k < n; ++k) {
        const size_t before = k - static_cast<size_t>(l);
        if (!std::isfinite(r.sum[i + 1][before])) continue;
        r.sum[i][k] = std::min(r.sum[i][k], fastest + r.sum[i + 1][before]);
        r.max[i][k] = std::min(r.max[i][k], std::max(fastest, r.max[i + 1][before]));
      }
    }
  return r;
}

}  // namespace

std::optional<StageChoice> inter_stage_dp(const StageFronts& fronts, int64_t L, double G, double cutoff,
                                          TuneStats& stats, int64_t v) {
  const size_t pp = fronts.size();
  const Rest rest = rest_bounds(fronts, L);
  if (pp == 0 || L < 0 || !std::isfinite(rest.sum[0][static_cast<size_t>(L)])) return std::nullopt;  // no split
  // The bound adds the later minima in another order than a completion adds its own T: the slack
  // keeps a completion that ties the cutoff from being dropped by a rounding of the bound.
  const double bound_cutoff = cutoff * (1 + 1e-9);
  std::vector<std::vector<State>> levels(pp + 1);
  levels[0].push_back(State{});
  for (size_t i = 0; i < pp; ++i) {
    std::map<int64_t, Bucket> by_layers;
    for (size_t si = 0; si < levels[i].size(); ++si) {
      const State& s = levels[i][si];
      for (const auto& [l, pts] : fronts[i]) {
        const int64_t used = s.layers + l;
        if (used > L) continue;
        // What the later stages add to Σ T and max T at the least, on the blocks left.
        const double later_sum = rest.sum[i + 1][static_cast<size_t>(L - used)];
        const double later_max = rest.max[i + 1][static_cast<size_t>(L - used)];
        if (!std::isfinite(later_sum)) continue;  // the blocks left cannot be split among them
        for (const auto& p : pts) {
          State n;
          n.sum_t = s.sum_t + p.T;
          n.sum_b = s.sum_b + p.B;
          n.max_t = std::max(s.max_t, p.T);
          n.exposed = std::max(s.exposed, p.D - s.sum_b / static_cast<double>(v));
          if (pipeline_objective(n.sum_t + later_sum, std::max(n.max_t, later_max), -kInf, G, v) > bound_cutoff)
            continue;
          n.layers = used;
          n.prev = static_cast<int>(si);
          n.point = &p;
          auto& bucket = by_layers[used];
          if (!bucket.dominated(n)) bucket.insert(n);
        }
      }
    }
    for (auto& [l, b] : by_layers)
      for (auto& s : b.states()) levels[i + 1].push_back(s);
    stats.plans_evaluated += static_cast<int64_t>(levels[i + 1].size());
    if (levels[i + 1].empty()) return std::nullopt;
  }
  int best = -1;
  double best_v = kInf;
  for (size_t j = 0; j < levels[pp].size(); ++j) {
    const State& s = levels[pp][j];
    const double o = pipeline_objective(s.sum_t, s.max_t, s.exposed, G, v);
    if (o <= cutoff && o < best_v) best = static_cast<int>(j), best_v = o;
  }
  if (best < 0) return std::nullopt;
  StageChoice out;
  out.stages.resize(pp);
  out.objective = best_v;
  int k = best;
  for (size_t i = pp; i-- > 0;) {
    const State& s = levels[i + 1][static_cast<size_t>(k)];
    out.stages[i] = *s.point;
    k = s.prev;
  }
  return out;
}

Result<std::optional<StageChoice>> inter_stage_milp(const StageFronts& fronts, int64_t L, double G, double cutoff,
                                                    double time_limit_s, TuneStats& stats, int64_t v) {
  using namespace solver;
  const size_t pp = fronts.size();
  MilpModel model("inter_stage");
  struct Pick {
    size_t stage;
    int64_t layers;
    const Point* point;
    Variable x;
  };
  std::vector<Pick> picks;
  std::vector<Variable> T(pp), B(pp);
  const Variable M = model.add_continuous("max_T");
  const Variable E = model.add_continuous("exposed_D");
  std::vector<Term> layer_sum, obj;
  for (size_t i = 0; i < pp; ++i) {
    T[i] = model.add_continuous(fmt::format("T_{}", i));
    B[i] = model.add_continuous(fmt::format("B_{}", i));
    std::vector<Term> one, t_def{{T[i], 1.0}}, b_def{{B[i], 1.0}};
    for (const auto& [l, pts] : fronts[i])
      for (size_t k = 0; k < pts.size(); ++k) {
        const Variable x = model.add_binary(fmt::format("x_{}_{}_{}", i, l, k));
        picks.push_back({i, l, &pts[k], x});
        one.push_back({x, 1.0});
        layer_sum.push_back({x, static_cast<double>(l)});
        t_def.push_back({x, -pts[k].T});
        b_def.push_back({x, -pts[k].B});
      }
    if (one.empty()) return std::optional<StageChoice>{};
    model.add_constraint(fmt::format("one_setting_{}", i), one, Sense::kEqual, 1);
    model.add_constraint(fmt::format("T_def_{}", i), t_def, Sense::kEqual, 0);
    model.add_constraint(fmt::format("B_def_{}", i), b_def, Sense::kEqual, 0);
    model.add_constraint(fmt::format("max_T_{}", i), {{M, 1.0}, {T[i], -1.0}}, Sense::kGreaterEqual, 0);
    obj.push_back({T[i], 1.0 / static_cast<double>(v)});  // fill = max T + (Σ T − max T)/v
  }
  model.add_constraint("layers", layer_sum, Sense::kEqual, static_cast<double>(L));
  // E ≥ D_i − Σ_{j<i} B_j / v for every stage (and E ≥ 0 from its bound).
  for (size_t i = 0; i < pp; ++i) {
    std::vector<Term> terms{{E, 1.0}};
    for (const auto& pk : picks)
      if (pk.stage == i) terms.push_back({pk.x, -pk.point->D});
    for (size_t j = 0; j < i; ++j) terms.push_back({B[j], 1.0 / static_cast<double>(v)});
    model.add_constraint(fmt::format("exposed_{}", i), terms, Sense::kGreaterEqual, 0);
  }
  obj.push_back({M, G - 1 + (v > 1 ? 1 - 1.0 / static_cast<double>(v) : 0.0)});
  obj.push_back({E, 1.0});
  model.set_objective(obj);

  SolveOptions so;
  so.time_limit_s = time_limit_s;
  if (std::isfinite(cutoff)) so.cutoff = cutoff;
  MIST_TRY(auto r, solve(model, so));
  ++stats.milp_solves;
  if (r.termination.limit == Limit::kTime) ++stats.milp_time_limits;
  if (!r.termination.has_solution()) {
    if (r.termination.reason == TerminationReason::kNumericalError || r.termination.reason == TerminationReason::kUnbounded)
      return fail("tuner.inter_stage", "the inter-stage MILP failed: " + r.termination.to_string());
    return std::optional<StageChoice>{};  // infeasible, pruned by the cutoff, or out of time
  }
  StageChoice out;
  out.stages.resize(pp);
  for (const auto& pk : picks)
    if (r.value(pk.x) > 0.5) out.stages[pk.stage] = *pk.point;
  // The objective as the closed form computes it from the chosen points (the MILP's own value
  // equals it up to the solver's tolerances).
  out.objective = plan_objective(out.stages, G, v);
  stats.plans_evaluated += static_cast<int64_t>(r.stats.nodes);
  return std::optional<StageChoice>{std::move(out)};
}

std::optional<StageChoice> exhaustive_search(StageFronts all, int64_t L, double G, double max_nodes,
                                             TuneStats& stats, bool* too_large, int64_t v) {
  for (auto& m : all)
    for (auto& [l, pts] : m)
      std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.T < b.T; });
  const size_t pp = all.size();
  std::vector<Point> cur(pp), best_plan;
  double best = kInf, nodes = 0;
  std::function<void(size_t, int64_t, double, double, double, double)> rec =
      [&](size_t i, int64_t used, double sum, double drain, double mx, double exposed) {
    if (*too_large || pipeline_objective(sum, mx, -kInf, G, v) >= best) return;
    if (++nodes > max_nodes) {
      *too_large = true;
      return;
    }
    if (i == pp) {
      if (used != L) return;
      ++stats.plans_evaluated;
      const double o = pipeline_objective(sum, mx, exposed, G, v);
      if (o < best) {
        best = o;
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
        rec(i + 1, used + l, sum + p.T, drain + p.B, std::max(mx, p.T),
            std::max(exposed, p.D - drain / static_cast<double>(v)));
      }
    }
  };
  rec(0, 0, 0, 0, 0, -kInf);
  if (*too_large || best_plan.empty()) return std::nullopt;
  return StageChoice{best_plan, best};
}

}  // namespace mist::tuner
