// The shape of Mist's inter-stage MILP (docs/solver.md, Mist's inter_tuning_mip.py): choose a
// layer count and one (stable, delta) time point per stage to minimise the pipeline's closed form
//   Σ_i T_i + (G−1)·max_i T_i + max_i (D_i − Σ_{j<i} T_j),
// linearised with Max_t ≥ T_i and Max_d ≥ D_i − Σ_{j<i} T_j. CBC against plain enumeration.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "solver_test_util.hpp"

namespace mist::solver {
namespace {

using testing_util::must_solve;
using TR = TerminationReason;

struct Point {
  double stable = 0, delta = 0;  // t^s_ijk, t^d_ijk
};

struct Instance {
  int stages = 2, layers = 4;
  int64_t micro_batches = 1;                        // G
  std::vector<std::vector<std::vector<Point>>> points;  // [stage][layers − 1][policy]
};

Instance random_instance(uint32_t seed) {
  std::mt19937 rng(seed);
  auto real = [&](double lo, double hi) { return lo + (hi - lo) * (rng() % 10000) / 10000.0; };
  Instance in;
  in.stages = 2 + static_cast<int>(rng() % 2);
  in.layers = in.stages + static_cast<int>(rng() % 5);
  in.micro_batches = std::vector<int64_t>{1, 2, 4, 8}[rng() % 4];
  in.points.resize(static_cast<size_t>(in.stages));
  for (int i = 0; i < in.stages; ++i) {
    const double per_layer = real(0.8, 1.2) * (i == 0 || i == in.stages - 1 ? 1.1 : 1.0);
    for (int j = 1; j <= in.layers - in.stages + 1; ++j) {
      std::vector<Point> pareto;
      const int k = 1 + static_cast<int>(rng() % 3);
      for (int p = 0; p < k; ++p) {  // faster stable time costs more delta time
        pareto.push_back({.stable = j * per_layer * (1 + 0.15 * p) + real(0, 0.2),
                          .delta = j * per_layer * real(0.0, 0.6) / (1 + p)});
      }
      in.points[static_cast<size_t>(i)].push_back(pareto);
    }
  }
  return in;
}

// The closed form for one choice of (layers, policy) per stage.
double closed_form(const Instance& in, const std::vector<int>& layers, const std::vector<int>& policy) {
  double sum_t = 0, max_t = 0, max_d = 0;
  for (int i = 0; i < in.stages; ++i) {
    const Point& p = in.points[static_cast<size_t>(i)][static_cast<size_t>(layers[i] - 1)][static_cast<size_t>(policy[i])];
    max_d = std::max(max_d, p.delta - sum_t);
    sum_t += p.stable;
    max_t = std::max(max_t, p.stable);
  }
  return sum_t + static_cast<double>(in.micro_batches - 1) * max_t + max_d;
}

double enumerate_best(const Instance& in) {
  double best = kInfinity;
  std::vector<int> layers(static_cast<size_t>(in.stages)), policy(static_cast<size_t>(in.stages));
  std::function<void(int, int)> rec = [&](int i, int left) {
    if (i == in.stages) {
      if (left == 0) best = std::min(best, closed_form(in, layers, policy));
      return;
    }
    for (int j = 1; j <= left; ++j) {
      if (j - 1 >= static_cast<int>(in.points[static_cast<size_t>(i)].size())) break;
      layers[static_cast<size_t>(i)] = j;
      const auto& pareto = in.points[static_cast<size_t>(i)][static_cast<size_t>(j - 1)];
      for (int k = 0; k < static_cast<int>(pareto.size()); ++k) {
        policy[static_cast<size_t>(i)] = k;
        rec(i + 1, left - j);
      }
    }
  };
  rec(0, in.layers);
  return best;
}

struct Formulation {
  MilpModel model{"inter_stage"};
  std::vector<std::vector<Variable>> l;                // l[i][j−1]: stage i has j layers
  std::vector<std::vector<std::vector<Variable>>> z;  // z[i][j−1][k]: and uses point k
  Variable max_t, max_d;
};

Formulation formulate(const Instance& in, std::optional<double> best_cost_so_far = {}) {
  Formulation f;
  MilpModel& m = f.model;
  const double G = static_cast<double>(in.micro_batches);
  std::vector<Variable> T, D;
  std::vector<Term> total_layers, objective;
  for (int i = 0; i < in.stages; ++i) {
    const std::string s = std::to_string(i);
    T.push_back(m.add_continuous("T_" + s));
    D.push_back(m.add_continuous("D_" + s));
    std::vector<Term> one_l, one_z, t_def{{T.back(), -1}}, d_def{{D.back(), -1}};
    f.l.emplace_back();
    f.z.emplace_back();
    for (int j = 1; j <= static_cast<int>(in.points[static_cast<size_t>(i)].size()); ++j) {
      const std::string sj = s + "_" + std::to_string(j);
      const Variable l = m.add_binary("l_" + sj);
      f.l.back().push_back(l);
      one_l.push_back({l, 1});
      total_layers.push_back({l, double(j)});
      f.z.back().emplace_back();
      const auto& pareto = in.points[static_cast<size_t>(i)][static_cast<size_t>(j - 1)];
      for (size_t k = 0; k < pareto.size(); ++k) {
        const Variable z = m.add_binary("z_" + sj + "_" + std::to_string(k));
        f.z.back().back().push_back(z);
        one_z.push_back({z, 1});
        m.add_constraint("z_implies_l_" + sj + "_" + std::to_string(k), {{z, 1}, {l, -1}}, Sense::kLessEqual, 0);
        t_def.push_back({z, pareto[k].stable});
        d_def.push_back({z, pareto[k].delta});
      }
    }
    m.add_constraint("one_layer_count_" + s, one_l, Sense::kEqual, 1);
    m.add_constraint("one_policy_" + s, one_z, Sense::kEqual, 1);
    m.add_constraint("T_def_" + s, t_def, Sense::kEqual, 0);
    m.add_constraint("D_def_" + s, d_def, Sense::kEqual, 0);
    objective.push_back({T.back(), 1});
  }
  m.add_constraint("all_layers", total_layers, Sense::kEqual, in.layers);
  f.max_t = m.add_continuous("Max_t");
  f.max_d = m.add_continuous("Max_d");
  for (int i = 0; i < in.stages; ++i) {
    const std::string s = std::to_string(i);
    m.add_constraint("max_t_" + s, {{f.max_t, 1}, {T[static_cast<size_t>(i)], -1}}, Sense::kGreaterEqual, 0);
    std::vector<Term> md{{f.max_d, 1}, {D[static_cast<size_t>(i)], -1}};
    for (int j = 0; j < i; ++j) md.push_back({T[static_cast<size_t>(j)], 1});
    m.add_constraint("max_d_" + s, md, Sense::kGreaterEqual, 0);
  }
  if (best_cost_so_far)  // Mist's pruning row: (G−1)·Max_t ≤ best cost so far
    m.add_constraint("prune", {{f.max_t, G - 1}}, Sense::kLessEqual, *best_cost_so_far);
  objective.push_back({f.max_t, G - 1});
  objective.push_back({f.max_d, 1});
  m.set_objective(objective);
  return f;
}

// Reads the chosen plan back and prices it with the closed form.
double decoded_cost(const Instance& in, const Formulation& f, const SolveResult& r) {
  std::vector<int> layers(static_cast<size_t>(in.stages), -1), policy(static_cast<size_t>(in.stages), -1);
  for (int i = 0; i < in.stages; ++i)
    for (size_t j = 0; j < f.z[static_cast<size_t>(i)].size(); ++j)
      for (size_t k = 0; k < f.z[static_cast<size_t>(i)][j].size(); ++k)
        if (r.value(f.z[static_cast<size_t>(i)][j][k]) == 1) {
          layers[static_cast<size_t>(i)] = static_cast<int>(j) + 1;
          policy[static_cast<size_t>(i)] = static_cast<int>(k);
        }
  int total = 0;
  for (int j : layers) {
    EXPECT_GE(j, 1);
    total += j;
  }
  EXPECT_EQ(total, in.layers);
  return closed_form(in, layers, policy);
}

TEST(MilpMinMax, InterStageShapeMatchesEnumeration) {
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    const Instance in = random_instance(seed);
    const double best = enumerate_best(in);
    const Formulation f = formulate(in);
    const SolveResult r = must_solve(f.model);
    ASSERT_EQ(r.termination.reason, TR::kOptimal) << "seed " << seed << ": " << r.termination.to_string();
    EXPECT_NEAR(r.objective, best, 1e-6 * best) << "seed " << seed;
    EXPECT_NEAR(decoded_cost(in, f, r), best, 1e-6 * best) << "seed " << seed;
  }
}

TEST(MilpMinMax, PruningByTheBestCostSoFar) {
  for (uint32_t seed = 100; seed <= 120; ++seed) {
    const Instance in = random_instance(seed);
    const double best = enumerate_best(in);
    // A cutoff at or above the optimum keeps it; one below proves the stage count is not worth it.
    const Formulation f = formulate(in);
    EXPECT_NEAR(must_solve(f.model, {.cutoff = best * 1.01}).objective, best, 1e-6 * best) << seed;
    const SolveResult pruned = must_solve(f.model, {.cutoff = best * 0.99});
    EXPECT_EQ(pruned.termination.reason, TR::kNoSolutionFound) << seed << ": " << pruned.termination.to_string();
    EXPECT_EQ(pruned.termination.limit, Limit::kCutoff);
    // Mist's own pruning row, (G−1)·Max_t ≤ best so far, with a generous bound changes nothing.
    EXPECT_NEAR(must_solve(formulate(in, 2 * best).model).objective, best, 1e-6 * best) << seed;
  }
}

}  // namespace
}  // namespace mist::solver
