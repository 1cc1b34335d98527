#include "solver/solve.hpp"

#include <cmath>
#include <iostream>
#include <random>
#include <thread>
#include <string>

#include <gtest/gtest.h>

#include "solver_test_util.hpp"

namespace mist::solver {
namespace {

using testing_util::brute_force;
using testing_util::must_solve;
using testing_util::untimed;
using TR = TerminationReason;

const SolveOptions kBothBackends[] = {SolveOptions{}, SolveOptions{.backend = Backend::kBruteForce}};

// 0/1 knapsack P01 (J. Burkardt's KNAPSACK_01 data set): optimum 309, items 1-4 and 6.
MilpModel knapsack_p01(std::vector<Variable>* items = nullptr) {
  const double weight[] = {23, 31, 29, 44, 53, 38, 63, 85, 89, 82};
  const double profit[] = {92, 57, 49, 68, 60, 43, 67, 84, 87, 72};
  MilpModel m("knapsack");
  std::vector<Term> cap, obj;
  for (int i = 0; i < 10; ++i) {
    const Variable x = m.add_binary("take_" + std::to_string(i));
    if (items) items->push_back(x);
    cap.push_back({x, weight[i]});
    obj.push_back({x, -profit[i]});  // maximise profit = minimise −profit
  }
  m.add_constraint("capacity", cap, Sense::kLessEqual, 165);
  m.set_objective(obj);
  return m;
}

TEST(MilpSolve, KnapsackReachesTheKnownOptimumOnBothBackends) {
  for (const SolveOptions& o : kBothBackends) {
    std::vector<Variable> items;
    const MilpModel m = knapsack_p01(&items);
    const SolveResult r = must_solve(m, o);
    ASSERT_EQ(r.termination.reason, TR::kOptimal) << to_string(o.backend) << ": " << r.termination.to_string();
    EXPECT_EQ(r.termination.limit, Limit::kNone);
    EXPECT_DOUBLE_EQ(r.objective, -309);
    EXPECT_DOUBLE_EQ(r.best_bound, -309);
    const std::vector<double> expected = {1, 1, 1, 1, 0, 1, 0, 0, 0, 0};
    for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(r.value(items[i]), expected[i]) << "item " << i;
  }
}

// The 4×4 assignment problem of the Hungarian-method textbook example: optimum 13.
TEST(MilpSolve, AssignmentReachesTheKnownOptimum) {
  const double cost[4][4] = {{9, 2, 7, 8}, {6, 4, 3, 7}, {5, 8, 1, 8}, {7, 6, 9, 4}};
  for (const SolveOptions& o : kBothBackends) {
    MilpModel m("assignment");
    Variable x[4][4];
    std::vector<Term> obj;
    for (int w = 0; w < 4; ++w)
      for (int t = 0; t < 4; ++t) {
        x[w][t] = m.add_binary("x_" + std::to_string(w) + "_" + std::to_string(t));
        obj.push_back({x[w][t], cost[w][t]});
      }
    for (int i = 0; i < 4; ++i) {
      std::vector<Term> row, col;
      for (int j = 0; j < 4; ++j) {
        row.push_back({x[i][j], 1});
        col.push_back({x[j][i], 1});
      }
      m.add_constraint("worker_" + std::to_string(i), row, Sense::kEqual, 1);
      m.add_constraint("task_" + std::to_string(i), col, Sense::kEqual, 1);
    }
    m.set_objective(obj);
    const SolveResult r = must_solve(m, o);
    ASSERT_EQ(r.termination.reason, TR::kOptimal);
    EXPECT_DOUBLE_EQ(r.objective, 13);
    EXPECT_EQ(r.value(x[0][1]) + r.value(x[1][0]) + r.value(x[2][2]) + r.value(x[3][3]), 4);
  }
}

// max 5x + 8y, x + y ≤ 6, 5x + 9y ≤ 45, x, y ∈ ℤ≥0: LP optimum 41.25, integer optimum 40 at (0, 5).
TEST(MilpSolve, GeneralIntegersAreNotRoundedLpValues) {
  for (const SolveOptions& o : kBothBackends) {
    MilpModel m;
    const Variable x = m.add_integer("x", 0, 10), y = m.add_integer("y", 0, 10);
    m.add_constraint("a", {{x, 1}, {y, 1}}, Sense::kLessEqual, 6);
    m.add_constraint("b", {{x, 5}, {y, 9}}, Sense::kLessEqual, 45);
    m.set_objective({{x, -5}, {y, -8}});
    const SolveResult r = must_solve(m, o);
    ASSERT_EQ(r.termination.reason, TR::kOptimal);
    EXPECT_DOUBLE_EQ(r.objective, -40);
    EXPECT_EQ(r.value(x), 0);
    EXPECT_EQ(r.value(y), 5);
  }
}

// The Wyndor LP (Hillier & Lieberman): max 3x + 5y, x ≤ 4, 2y ≤ 12, 3x + 2y ≤ 18 → 36 at (2, 6).
TEST(MilpSolve, PureLpIsSolvedToo) {
  MilpModel m;
  const Variable x = m.add_continuous("x"), y = m.add_continuous("y");
  m.add_constraint("plant1", {{x, 1}}, Sense::kLessEqual, 4);
  m.add_constraint("plant2", {{y, 2}}, Sense::kLessEqual, 12);
  m.add_constraint("plant3", {{x, 3}, {y, 2}}, Sense::kLessEqual, 18);
  m.set_objective({{x, -3}, {y, -5}}, 1.5);
  const SolveResult r = must_solve(m);
  ASSERT_EQ(r.termination.reason, TR::kOptimal);
  EXPECT_NEAR(r.objective, -34.5, 1e-9);
  EXPECT_EQ(r.best_bound, r.objective);
  EXPECT_NEAR(r.value(x), 2, 1e-9);
  EXPECT_NEAR(r.value(y), 6, 1e-9);
}

TEST(MilpSolve, MixedModelWithOffset) {
  // min t + 10 with t ≥ 2.5·n, n ≥ 1.2, n integer: n = 2, t = 5.
  MilpModel m;
  const Variable n = m.add_integer("n", 0, 100), t = m.add_continuous("t");
  m.add_constraint("t_covers", {{t, 1}, {n, -2.5}}, Sense::kGreaterEqual, 0);
  m.add_constraint("n_min", {{n, 1}}, Sense::kGreaterEqual, 1.2);
  m.set_objective({{t, 1}}, 10);
  const SolveResult r = must_solve(m);
  ASSERT_EQ(r.termination.reason, TR::kOptimal);
  EXPECT_NEAR(r.objective, 15, 1e-9);
  EXPECT_EQ(r.value(n), 2);
}

TEST(MilpSolve, InfeasibleModelsAreAValueNotAnError) {
  {  // integer infeasible although the LP relaxation is feasible: 2a + 2b = 3
    for (const SolveOptions& o : kBothBackends) {
      MilpModel m;
      const Variable a = m.add_integer("a", 0, 3), b = m.add_integer("b", 0, 3);
      m.add_constraint("odd", {{a, 2}, {b, 2}}, Sense::kEqual, 3);
      const SolveResult r = must_solve(m, o);
      EXPECT_EQ(r.termination.reason, TR::kInfeasible) << r.termination.to_string();
      EXPECT_TRUE(r.values.empty());
      EXPECT_EQ(r.objective, kInfinity);
      EXPECT_EQ(r.best_bound, kInfinity);
    }
  }
  {  // an infeasible LP
    MilpModel m;
    const Variable a = m.add_continuous("a", 0, 1), b = m.add_continuous("b", 0, 1);
    m.add_constraint("too_much", {{a, 1}, {b, 1}}, Sense::kGreaterEqual, 3);
    const SolveResult r = must_solve(m);
    EXPECT_EQ(r.termination.reason, TR::kInfeasible) << r.termination.to_string();
  }
}

TEST(MilpSolve, UnboundedModelsAreAValueNotAnError) {
  {  // MILP: min −a, a ∈ ℤ≥0, a ≥ b
    MilpModel m;
    const Variable a = m.add_integer("a", 0, kInfinity), b = m.add_binary("b");
    m.add_constraint("r", {{a, 1}, {b, -1}}, Sense::kGreaterEqual, 0);
    m.set_objective({{a, -1}});
    const SolveResult r = must_solve(m);
    EXPECT_EQ(r.termination.reason, TR::kUnbounded) << r.termination.to_string();
    EXPECT_EQ(r.objective, -kInfinity);
    EXPECT_TRUE(r.values.empty());
  }
  {  // LP: min x, x free, x + y ≤ 0, y ∈ [0, 1]
    MilpModel m;
    const Variable x = m.add_continuous("x", -kInfinity, kInfinity), y = m.add_continuous("y", 0, 1);
    m.add_constraint("r", {{x, 1}, {y, 1}}, Sense::kLessEqual, 0);
    m.set_objective({{x, 1}});
    const SolveResult r = must_solve(m);
    EXPECT_EQ(r.termination.reason, TR::kUnbounded) << r.termination.to_string();
  }
}

// 60 items, 8 knapsack rows: CBC cannot close it at the root.
MilpModel hard_multi_knapsack() {
  std::mt19937 rng(7);
  MilpModel m("multi_knapsack");
  std::vector<Variable> x;
  std::vector<Term> obj;
  for (int i = 0; i < 60; ++i) {
    x.push_back(m.add_binary("x" + std::to_string(i)));
    obj.push_back({x.back(), -double(1000 + rng() % 1000)});
  }
  for (int r = 0; r < 8; ++r) {
    std::vector<Term> row;
    for (int i = 0; i < 60; ++i) row.push_back({x[static_cast<size_t>(i)], double(1000 + rng() % 1000)});
    m.add_constraint("knap" + std::to_string(r), row, Sense::kLessEqual, 15000);
  }
  m.set_objective(obj);
  return m;
}

TEST(MilpSolve, ZeroTimeLimitStopsCleanly) {
  const MilpModel m = hard_multi_knapsack();
  for (double limit : {0.0, 1e-3}) {
    const SolveResult r = must_solve(m, {.time_limit_s = limit});
    EXPECT_TRUE(r.termination.reason == TR::kFeasible || r.termination.reason == TR::kNoSolutionFound)
        << r.termination.to_string();
    EXPECT_EQ(r.termination.limit, Limit::kTime) << r.termination.to_string();
    EXPECT_LT(r.stats.seconds, 5.0);
  }
  // The brute-force backend refuses 2^60 points, but honours a zero limit on what it accepts.
  const SolveResult r = must_solve(knapsack_p01(), {.backend = Backend::kBruteForce, .time_limit_s = 0});
  EXPECT_EQ(r.termination.reason, TR::kNoSolutionFound);
  EXPECT_EQ(r.termination.limit, Limit::kTime);
}

// A time limit that ends inside CBC's preprocessing once came back as "CBC proved the model
// infeasible" (about one solve in five at these limits, by timing): the model is feasible (all
// zeros), so under any limit the answer is a solution or "none found", never infeasible.
TEST(MilpSolve, TinyTimeLimitsNeverReportAFeasibleModelInfeasible) {
  const MilpModel m = hard_multi_knapsack();
  int no_proof = 0;
  for (int round = 0; round < 40; ++round) {
    for (double limit : {0.0, 1e-6, 1e-3}) {
      const SolveResult r = must_solve(m, {.time_limit_s = limit});
      ASSERT_NE(r.termination.reason, TR::kInfeasible) << limit << " s: " << r.termination.to_string();
      ASSERT_TRUE(r.termination.reason == TR::kFeasible || r.termination.reason == TR::kNoSolutionFound)
          << limit << " s: " << r.termination.to_string();
      EXPECT_EQ(r.termination.limit, Limit::kTime) << limit << " s: " << r.termination.to_string();
      no_proof += r.termination.detail.find("no proof") != std::string::npos;
    }
  }
  std::cout << "time-outs CBC reported as infeasible: " << no_proof << " of 120 solves\n";
  // A real proof under a limit it needs only a fraction of stays a proof.
  MilpModel odd;
  const Variable a = odd.add_integer("a", 0, 3), b = odd.add_integer("b", 0, 3);
  odd.add_constraint("odd", {{a, 2}, {b, 2}}, Sense::kEqual, 3);
  EXPECT_EQ(must_solve(odd, {.time_limit_s = 60}).termination.reason, TR::kInfeasible);
}

TEST(MilpSolve, CutoffPrunesWhatCannotBeatTheIncumbent) {
  for (const SolveOptions& base : kBothBackends) {
    const MilpModel m = knapsack_p01();  // optimum −309
    SolveOptions o = base;
    o.cutoff = -300;  // a weaker incumbent: the optimum still comes back
    EXPECT_DOUBLE_EQ(must_solve(m, o).objective, -309);
    o.cutoff = -309;  // exactly the optimum: kept
    EXPECT_DOUBLE_EQ(must_solve(m, o).objective, -309);
    o.cutoff = -309.5;  // better than anything: pruned
    const SolveResult r = must_solve(m, o);
    EXPECT_EQ(r.termination.reason, TR::kNoSolutionFound) << r.termination.to_string();
    EXPECT_EQ(r.termination.limit, Limit::kCutoff);
    EXPECT_EQ(r.best_bound, -309.5);
    EXPECT_TRUE(r.values.empty());
  }
}

TEST(MilpSolve, CutoffCountsTheObjectiveOffset) {
  for (bool integer : {true, false}) {  // a MILP and a pure LP
    MilpModel m;
    const Variable x = integer ? m.add_integer("x", 1, 5) : m.add_continuous("x", 1, 5);
    m.set_objective({{x, 1}}, 100);  // optimum 101
    EXPECT_EQ(must_solve(m, {.cutoff = 101.5}).termination.reason, TR::kOptimal);
    EXPECT_EQ(must_solve(m, {.cutoff = 100.5}).termination.reason, TR::kNoSolutionFound);
  }
}

TEST(MilpSolve, RelativeGapStopsEarlyButKeepsTheBoundHonest) {
  const MilpModel m = hard_multi_knapsack();
  const SolveResult r = must_solve(m, {.relative_gap = 0.05});
  ASSERT_EQ(r.termination.reason, TR::kOptimal) << r.termination.to_string();
  EXPECT_LE(r.best_bound, r.objective);
  EXPECT_LE(r.objective - r.best_bound, 0.05 * std::abs(r.best_bound) + 1e-6);
}

TEST(MilpSolve, SameInputSameOutput) {
  const MilpModel m = hard_multi_knapsack();
  for (int threads : {1, 2}) {
    const SolveResult first = untimed(must_solve(m, {.threads = threads}));
    ASSERT_EQ(first.termination.reason, TR::kOptimal);
    for (int run = 0; run < 2; ++run) EXPECT_EQ(untimed(must_solve(m, {.threads = threads})), first) << threads;
  }
  EXPECT_EQ(must_solve(m, {.threads = 2}).objective, must_solve(m).objective);
}

TEST(MilpSolve, CbcPrintsNothingUnlessAsked) {
  const MilpModel mip = hard_multi_knapsack();
  MilpModel lp;
  lp.set_objective({{lp.add_continuous("x", 1, 2), 1}});
  testing::internal::CaptureStdout();
  must_solve(mip, {.time_limit_s = 0.05});
  must_solve(mip, {.cutoff = -1e9});
  must_solve(lp);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

TEST(MilpSolve, EmptyModelsAndEmptyRows) {
  for (const SolveOptions& o : kBothBackends) {
    MilpModel none;
    none.set_objective({}, 4);
    SolveResult r = must_solve(none, o);
    EXPECT_EQ(r.termination.reason, TR::kOptimal) << to_string(o.backend) << ": " << r.termination.to_string();
    EXPECT_EQ(r.objective, 4);

    MilpModel rows;
    const Variable x = rows.add_binary("x");
    rows.add_constraint("trivially_true", {}, Sense::kLessEqual, 1);
    rows.set_objective({{x, 1}});
    EXPECT_EQ(must_solve(rows, o).termination.reason, TR::kOptimal);
    rows.add_constraint("trivially_false", {}, Sense::kGreaterEqual, 1);
    EXPECT_EQ(must_solve(rows, o).termination.reason, TR::kInfeasible) << to_string(o.backend);
  }
}

TEST(MilpSolve, InvalidModelOrOptionsIsACallError) {
  MilpModel m;
  m.add_integer("layers", 3, 1);
  auto r = solve(m);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().to_string(), "model.variables[0]: variable 'layers': lower bound 3 exceeds upper bound 1");

  const MilpModel ok = knapsack_p01();
  const std::pair<SolveOptions, std::string> bad[] = {
      {{.time_limit_s = -1}, "options.time_limit_s"},
      {{.time_limit_s = std::nan("")}, "options.time_limit_s"},
      {{.relative_gap = -0.1}, "options.relative_gap"},
      {{.threads = 0}, "options.threads"},
      {{.threads = 65}, "options.threads"},
      {{.cutoff = kInfinity}, "options.cutoff"},
  };
  for (const auto& [options, path] : bad) {
    auto e = solve(ok, options);
    ASSERT_FALSE(e.has_value()) << path;
    EXPECT_EQ(e.error().path, path) << e.error().to_string();
  }
}

TEST(MilpSolve, ConcurrentCallsAgree) {
  const MilpModel m = knapsack_p01();
  std::vector<double> objectives(4);
  std::vector<std::thread> pool;
  for (size_t i = 0; i < objectives.size(); ++i)
    pool.emplace_back([&, i] {
      auto r = solve(m, {.backend = i % 2 ? Backend::kBruteForce : Backend::kCbc});
      objectives[i] = r ? r->objective : 0;
    });
  for (auto& t : pool) t.join();
  for (double f : objectives) EXPECT_DOUBLE_EQ(f, -309);
}

}  // namespace
}  // namespace mist::solver
