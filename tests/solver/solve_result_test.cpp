#include "solver/solve_result.hpp"

#include <cmath>

#include <gtest/gtest.h>

namespace mist::solver {
namespace {

using TR = TerminationReason;

// x binary, y ∈ [0, 10], x + y ≤ 5, minimise y − x + 1.
struct Fixture {
  MilpModel m;
  Variable x = m.add_binary("x");
  Variable y = m.add_continuous("y", 0, 10);
  Fixture() {
    m.add_constraint("cap", {{x, 1}, {y, 1}}, Sense::kLessEqual, 5);
    m.set_objective({{y, 1}, {x, -1}}, 1);
  }
  SolveResult good() const {
    return SolveResult{.termination = {.reason = TR::kOptimal}, .objective = 0.0, .best_bound = 0.0, .values = {1, 0}};
  }
};

void expect_rejected(const MilpModel& m, const SolveResult& r, const std::string& path, const std::string& part) {
  auto v = validate_result(m, r);
  ASSERT_FALSE(v.has_value()) << path;
  EXPECT_EQ(v.error().path, path) << v.error().to_string();
  EXPECT_NE(v.error().message.find(part), std::string::npos) << v.error().to_string();
}

TEST(MilpResult, AcceptsAConsistentResult) {
  Fixture f;
  EXPECT_TRUE(validate_result(f.m, f.good()).has_value());
  // Within tolerance: a binary at 1 − 1e-9, a row over by 1e-9.
  SolveResult r = f.good();
  r.values = {1 - 1e-9, 4 + 1e-9};
  r.objective = 4;
  r.best_bound = -kInfinity;
  EXPECT_TRUE(validate_result(f.m, r).has_value());
}

TEST(MilpResult, RejectsEachBrokenInvariant) {
  Fixture f;
  SolveResult r = f.good();
  r.values = {1};
  expect_rejected(f.m, r, "result.values", "1 values for 2 variables");

  r = f.good();
  r.values = {1, -0.5};
  r.objective = r.best_bound = -0.5;
  expect_rejected(f.m, r, "result.values[1]", "variable 'y': value -0.5 is outside its bounds [0, 10]");

  r = f.good();
  r.values = {0.5, 0};
  r.objective = 0.5;
  expect_rejected(f.m, r, "result.values[0]", "variable 'x': value 0.5 is not integral");

  r = f.good();
  r.values = {1, 7};
  r.objective = 7;
  expect_rejected(f.m, r, "result.constraints[0]", "constraint 'cap' is violated by 3");

  r = f.good();
  r.objective = 2;
  expect_rejected(f.m, r, "result.objective", "does not match the objective 0 of the values");

  r = f.good();
  r.best_bound = 1;
  expect_rejected(f.m, r, "result.best_bound", "exceeds the objective");

  r = f.good();
  r.values = {std::nan(""), 0};
  expect_rejected(f.m, r, "result.values[0]", "is not finite");

  r = f.good();
  r.termination = {.reason = TR::kInfeasible};
  r.objective = r.best_bound = kInfinity;
  expect_rejected(f.m, r, "result.values", "2 values although the termination is 'infeasible'");

  r = SolveResult{.termination = {.reason = TR::kInfeasible}, .objective = kInfinity, .best_bound = 3};
  expect_rejected(f.m, r, "result", "infeasible needs objective and best_bound +inf");

  r = f.good();
  r.termination = {.reason = TR::kFeasible};  // a limit must say which
  expect_rejected(f.m, r, "result.termination.limit", "limit 'none' does not fit reason 'feasible'");

  r = SolveResult{.termination = {.reason = TR::kNoSolutionFound, .limit = Limit::kTime}, .objective = 3};
  expect_rejected(f.m, r, "result.objective", "is 3 although no solution is present");
}

TEST(MilpResult, TerminationPrintsReasonLimitAndDetail) {
  EXPECT_EQ((Termination{.reason = TR::kOptimal}).to_string(), "optimal");
  EXPECT_EQ((Termination{.reason = TR::kFeasible, .limit = Limit::kTime, .detail = "CBC stopped"}).to_string(),
            "feasible (time limit): CBC stopped");
  EXPECT_EQ((Termination{.reason = TR::kNoSolutionFound, .limit = Limit::kCutoff}).to_string(),
            "no solution found (cutoff limit)");
  EXPECT_STREQ(to_string(TR::kNumericalError), "numerical error");
  EXPECT_TRUE((Termination{.reason = TR::kFeasible, .limit = Limit::kTime}).has_solution());
  EXPECT_FALSE((Termination{.reason = TR::kUnbounded}).has_solution());
}

}  // namespace
}  // namespace mist::solver
