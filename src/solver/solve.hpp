// Solving a MilpModel: one entry point, two backends.
//
//   MIST_TRY(SolveResult r, solve(model, {.time_limit_s = 10}));
//   if (!r.termination.has_solution()) return ...;   // kInfeasible, kNoSolutionFound, ...
//   double layers = r.value(l_2_3);
//
// Contract, in three parts (as OR-Tools MathOpt's Solve):
// - The Result is the call status. It is an error only when no answer about the model exists:
//   the model or the options are invalid (the error names the field, e.g.
//   "model.variables[3]: variable 'T_0': lower bound 2 exceeds upper bound 1"), the brute-force
//   backend refuses the model (continuous variables, infinite bounds, too many points), or CBC
//   threw or reported a status mist does not know.
// - Otherwise read SolveResult::termination.reason: infeasible, unbounded, a time limit hit with
//   or without an incumbent, and numerical trouble are values, not errors. Every returned
//   solution has passed validate_result() (bounds, integrality, constraints, objective); one
//   that fails is reported as kNumericalError, never handed on.
// - Deterministic: the same model and options give the same termination, objective, bound and
//   values, run after run (CBC runs serially, or in its deterministic parallel mode when
//   threads > 1). Only stats.seconds varies; with a time limit, where the search stops varies too.
//
// Thread-safety: solve() may be called from several threads on different or the same (const)
// models. CBC calls are serialised by one process-wide lock, because CBC's command-line driver
// (CbcMain1, behind its C API) keeps global parser state; the brute-force backend runs in parallel.
// Memory: the CBC backend holds one copy of the model inside CBC during the call, released before
// it returns (also on every error path).
#pragma once

#include <cstdint>
#include <optional>

#include "core/result.hpp"
#include "solver/milp_model.hpp"
#include "solver/solve_result.hpp"

namespace mist::solver {

enum class Backend {
  kCbc,         // COIN-OR CBC 2.10 through its C API (Cbc_C_Interface.h)
  kBruteForce,  // enumerates every point of a small pure-integer model: the oracle for tests
};
const char* to_string(Backend b);  // "cbc", "brute-force"

// The brute-force backend refuses models whose integer points number more than this.
inline constexpr int64_t kBruteForceMaxPoints = int64_t{1} << 24;

struct SolveOptions {
  Backend backend = Backend::kCbc;
  // Wall-clock seconds, ≥ 0; kInfinity for none. 0 stops at the first check (CBC: after its root
  // LP), giving kFeasible or kNoSolutionFound, never an error.
  double time_limit_s = kInfinity;
  // ≥ 0. Stop as soon as objective − bound ≤ relative_gap · max(|objective|, |bound|) (CBC's
  // ratioGap) and report kOptimal; 0 proves optimality. The brute-force backend is always exact.
  double relative_gap = 0.0;
  // CBC threads, 1..64. More than one runs CBC's deterministic parallel search (threads 100+n).
  int threads = 1;
  // CBC's own log on stdout (off: CBC prints nothing).
  bool log = false;
  // Prune every solution whose objective (offset included) exceeds this; finite. A known
  // incumbent's cost lets the tuner skip stage counts that cannot beat it. When no solution
  // with objective ≤ cutoff exists the result is kNoSolutionFound with Limit::kCutoff and
  // best_bound = cutoff; this is also what an infeasible model gives under a cutoff (neither
  // backend tells the two apart). A solution exactly at the cutoff is kept.
  std::optional<double> cutoff{};
};

// Checks the options, naming the field: "options.relative_gap: must be ≥ 0, got -1".
Result<void> validate_options(const SolveOptions& options);

// Validates model and options, runs the chosen backend, validates what it returns. See above.
Result<SolveResult> solve(const MilpModel& model, const SolveOptions& options = {});

}  // namespace mist::solver
