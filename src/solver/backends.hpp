// Internal to mist_solver: the backends behind solve() and helpers they share. Each backend
// receives a validated model and options and returns a result that solve() then validates.
#pragma once

#include <string>
#include <vector>

#include "core/result.hpp"
#include "solver/milp_model.hpp"
#include "solver/solve.hpp"
#include "solver/solve_result.hpp"

namespace mist::solver::detail {

Result<SolveResult> solve_cbc(const MilpModel& model, const SolveOptions& options);
Result<SolveResult> solve_brute_force(const MilpModel& model, const SolveOptions& options);

// A result carrying a solution: objective recomputed from `values`.
SolveResult with_solution(const MilpModel& model, Termination termination, std::vector<double> values,
                          double best_bound, int64_t nodes);
// A result without one; objective and best_bound follow the invariants of SolveResult
// (best_bound is used only for kNoSolutionFound).
SolveResult without_solution(Termination termination, double best_bound, int64_t nodes);

}  // namespace mist::solver::detail
