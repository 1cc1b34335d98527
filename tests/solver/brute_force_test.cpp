// CBC against the brute-force oracle on a few hundred small random models, and the oracle's
// refusals.
#include <cmath>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "solver_test_util.hpp"

namespace mist::solver {
namespace {

using testing_util::brute_force;
using testing_util::must_solve;
using TR = TerminationReason;

// 2..12 binary or small-integer variables, 1..5 rows of every sense. Right-hand sides are set
// around a random point so most models are feasible; about one in six is shifted so it may not be.
MilpModel random_model(uint32_t seed) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1)); };
  MilpModel m("random_" + std::to_string(seed));
  const int n = uniform(2, 12);
  std::vector<double> point;
  for (int i = 0; i < n; ++i) {
    const std::string name = "v" + std::to_string(i);
    if (uniform(0, 3) == 0) {
      const int lo = uniform(-2, 0), hi = lo + uniform(1, 3);
      m.add_integer(name, lo, hi);
      point.push_back(uniform(lo, hi));
    } else {
      m.add_binary(name);
      point.push_back(uniform(0, 1));
    }
  }
  const bool fractional = uniform(0, 2) == 0;  // quarter-integral coefficients
  auto coef = [&] {
    int c = 0;
    while (c == 0) c = uniform(-9, 9);
    return fractional ? c / 4.0 : double(c);
  };
  const int rows = uniform(1, 5);
  for (int r = 0; r < rows; ++r) {
    std::vector<Term> terms;
    for (int i = 0; i < n; ++i)
      if (uniform(0, 9) < 6) terms.push_back({Variable{i}, coef()});
    double activity = 0;
    for (const Term& t : terms) activity += t.coef * point[static_cast<size_t>(t.var.index)];
    const Sense sense = static_cast<Sense>(uniform(0, 2));
    double rhs = activity + (sense == Sense::kLessEqual ? uniform(0, 4) : sense == Sense::kGreaterEqual ? -uniform(0, 4) : 0);
    if (uniform(0, 5) == 0) rhs += uniform(-6, 6) + 0.5;
    m.add_constraint("c" + std::to_string(r), terms, sense, rhs);
  }
  std::vector<Term> obj;
  for (int i = 0; i < n; ++i) obj.push_back({Variable{i}, double(uniform(-20, 20))});
  m.set_objective(obj, uniform(0, 1) ? 0.0 : double(uniform(-50, 50)));
  return m;
}

void expect_same(const SolveResult& cbc, const SolveResult& oracle, uint32_t seed) {
  ASSERT_EQ(cbc.termination.reason, oracle.termination.reason)
      << "seed " << seed << ": CBC " << cbc.termination.to_string() << " vs " << oracle.termination.to_string();
  EXPECT_EQ(cbc.termination.limit, oracle.termination.limit) << "seed " << seed;
  if (oracle.termination.has_solution())
    EXPECT_NEAR(cbc.objective, oracle.objective, 1e-6 * std::max(1.0, std::abs(oracle.objective))) << "seed " << seed;
  else
    EXPECT_EQ(cbc.best_bound, oracle.best_bound) << "seed " << seed;
}

TEST(MilpBruteForce, CbcMatchesEnumerationOnRandomModels) {
  int optimal = 0, infeasible = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    const MilpModel m = random_model(seed);
    const SolveResult oracle = must_solve(m, brute_force());
    expect_same(must_solve(m), oracle, seed);
    (oracle.termination.reason == TR::kOptimal ? optimal : infeasible)++;
  }
  // The generator covers both outcomes.
  RecordProperty("optimal", optimal);
  RecordProperty("infeasible", infeasible);
  EXPECT_GT(optimal, 200);
  EXPECT_GT(infeasible, 10);
}

TEST(MilpBruteForce, CbcMatchesEnumerationUnderACutoff) {
  int pruned = 0;
  for (uint32_t seed = 1001; seed <= 1150; ++seed) {
    const MilpModel m = random_model(seed);
    const SolveResult plain = must_solve(m, brute_force());
    if (plain.termination.reason != TR::kOptimal) continue;
    // Half above the optimum (the optimum survives), half below (everything is pruned).
    const double cutoff = plain.objective + (seed % 2 ? 0.5 : -0.5);
    SolveOptions o{.cutoff = cutoff}, oracle = brute_force();
    oracle.cutoff = cutoff;
    const SolveResult expected = must_solve(m, oracle);
    expect_same(must_solve(m, o), expected, seed);
    pruned += expected.termination.reason == TR::kNoSolutionFound;
  }
  RecordProperty("pruned", pruned);
  EXPECT_GT(pruned, 30);
}

TEST(MilpBruteForce, RefusesWhatItCannotEnumerate) {
  {
    MilpModel m;
    m.add_binary("x");
    m.add_continuous("T_0");
    auto r = solve(m, brute_force());
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().path, "model.variables[1]");
    EXPECT_NE(r.error().message.find("'T_0' is continuous"), std::string::npos) << r.error().to_string();
  }
  {
    MilpModel m;
    m.add_integer("n", 0, kInfinity);
    auto r = solve(m, brute_force());
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().message.find("'n' has unbounded domain"), std::string::npos) << r.error().to_string();
  }
  {
    MilpModel m;
    for (int i = 0; i < 30; ++i) m.add_binary("b" + std::to_string(i));
    auto r = solve(m, brute_force());
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().message.find("more than 16777216 integer points"), std::string::npos) << r.error().to_string();
  }
}

TEST(MilpBruteForce, EmptyIntegerDomainIsInfeasible) {
  MilpModel m;
  m.add_integer("n", 0.2, 0.8);
  EXPECT_EQ(must_solve(m, brute_force()).termination.reason, TR::kInfeasible);
  EXPECT_EQ(must_solve(m).termination.reason, TR::kInfeasible);
}

TEST(MilpBruteForce, KeepsTheFirstOptimumInLexicographicOrder) {
  MilpModel m;
  const Variable a = m.add_binary("a"), b = m.add_binary("b");
  m.add_constraint("one", {{a, 1}, {b, 1}}, Sense::kEqual, 1);
  const SolveResult r = must_solve(m, brute_force());
  EXPECT_EQ(r.values, (std::vector<double>{0, 1}));
  EXPECT_EQ(r.stats.nodes, 4);
}

}  // namespace
}  // namespace mist::solver
