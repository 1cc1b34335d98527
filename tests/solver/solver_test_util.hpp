// Helpers shared by the solver tests.
#pragma once

#include <gtest/gtest.h>

#include "solver/solve.hpp"

namespace mist::solver::testing_util {

// Solves and fails the test on a call error; the result is also checked by validate_result.
inline SolveResult must_solve(const MilpModel& m, const SolveOptions& o = {}) {
  auto r = solve(m, o);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().to_string());
  if (!r) return SolveResult{};
  auto ok = validate_result(m, *r);
  EXPECT_TRUE(ok.has_value()) << (ok ? "" : ok.error().to_string());
  return *r;
}

inline SolveOptions brute_force() { return SolveOptions{.backend = Backend::kBruteForce}; }

// The result with its timing removed, for comparing two runs.
inline SolveResult untimed(SolveResult r) {
  r.stats.seconds = 0;
  return r;
}

}  // namespace mist::solver::testing_util
