// What a solve says about a model: why it stopped (Termination), the best solution found, the
// proven bound on the optimum, and statistics. These are model statuses, values that callers
// branch on; whether the solver could run at all is the Result around them (solver/solve.hpp).
// The shape follows OR-Tools MathOpt's SolveResult (docs/solver.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "solver/milp_model.hpp"

namespace mist::solver {

enum class TerminationReason {
  kOptimal,          // a solution proven optimal (within SolveOptions::relative_gap)
  kFeasible,         // a limit stopped the search after it found a solution; not proven optimal
  kInfeasible,       // proven: no point satisfies the bounds, integrality and constraints
  kUnbounded,        // the objective decreases without bound (for CBC: the LP relaxation is
                     // unbounded, so the model is unbounded or, rarely, integer-infeasible)
  kNoSolutionFound,  // a limit (time, or the cutoff) stopped the search before any solution
  kNumericalError,   // the solver gave up on numerical grounds, or returned a solution that
                     // failed validate_result(); nothing it returned is trusted
};

// Which limit ended a kFeasible or kNoSolutionFound search; kNone for every other reason.
enum class Limit {
  kNone,
  kTime,    // SolveOptions::time_limit_s
  kCutoff,  // no solution with objective ≤ SolveOptions::cutoff exists (or none was found)
  kOther,   // a limit of the solver's own (nodes, solutions, an interrupt)
};

const char* to_string(TerminationReason r);  // "optimal", "feasible", ...
const char* to_string(Limit l);              // "none", "time", "cutoff", "other"

struct Termination {
  TerminationReason reason = TerminationReason::kNumericalError;
  Limit limit = Limit::kNone;  // kNone unless reason is kFeasible or kNoSolutionFound
  std::string detail{};  // what the solver said, in words, for messages and logs

  // A solution is present: reason is kOptimal or kFeasible.
  bool has_solution() const {
    return reason == TerminationReason::kOptimal || reason == TerminationReason::kFeasible;
  }
  std::string to_string() const;  // "feasible (time limit): CBC stopped on its time limit ..."
  bool operator==(const Termination&) const = default;
};

struct SolveStats {
  double seconds = 0.0;  // wall-clock time of the backend call, ≥ 0; the one field that varies run to run
  int64_t nodes = 0;     // branch-and-bound nodes (CBC) or points enumerated (brute force), ≥ 0
  bool operator==(const SolveStats&) const = default;
};

struct SolveResult {
  Termination termination{};
  // With a solution: the objective at `values`, offset included, recomputed by mist from the
  // values (not copied from the solver). Without: +inf for kInfeasible, kNoSolutionFound and
  // kNumericalError, −inf for kUnbounded.
  double objective = kInfinity;
  // A proven lower bound on the optimum (minimisation): best_bound ≤ every feasible objective,
  // and best_bound ≤ objective when a solution is present. kOptimal: objective − best_bound is
  // within the requested gap (0 when the search completed). kInfeasible: +inf. kUnbounded: −inf.
  // kNoSolutionFound: the cutoff (Limit::kCutoff), else what the solver proved, −inf if nothing.
  double best_bound = -kInfinity;
  // One value per model variable, in variable order, when termination.has_solution(); empty
  // otherwise. Integer and binary variables hold exact integers (mist rounds the solver's
  // 0.9999999 to 1 within the integrality tolerance); no value is −0.
  std::vector<double> values{};
  SolveStats stats{};

  double value(Variable v) const { return values.at(static_cast<size_t>(v.index)); }
  bool operator==(const SolveResult&) const = default;
};

// Tolerances of validate_result: absolute, scaled by max(1, magnitude of the quantity checked).
inline constexpr double kFeasibilityTolerance = 1e-6;
inline constexpr double kIntegralityTolerance = 1e-6;

// Checks a result against its model before anyone trusts it: the termination and the presence
// of values agree; every value is finite, within its bounds and, for integer and binary
// variables, integral; every constraint holds; `objective` matches the values; best_bound and
// objective keep the invariants above. The error names the variable or constraint at fault,
// e.g. "result.values[3]: variable 'z_1_2': value 0.5 is not integral". Linear in the model's
// size. Precondition: validate_model(model) succeeded.
Result<void> validate_result(const MilpModel& model, const SolveResult& result);

}  // namespace mist::solver
