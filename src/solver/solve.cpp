#include "solver/solve.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "solver/backends.hpp"

namespace mist::solver {

const char* to_string(Backend b) {
  switch (b) {
    case Backend::kCbc: return "cbc";
    case Backend::kBruteForce: return "brute-force";
  }
  return "?";
}

Result<void> validate_options(const SolveOptions& o) {
  if (std::isnan(o.time_limit_s) || o.time_limit_s < 0)
    return fail("options.time_limit_s", fmt::format("must be ≥ 0 seconds (inf for none), got {}", o.time_limit_s));
  if (!std::isfinite(o.relative_gap) || o.relative_gap < 0)
    return fail("options.relative_gap", fmt::format("must be a finite number ≥ 0, got {}", o.relative_gap));
  if (o.threads < 1 || o.threads > 64)
    return fail("options.threads", fmt::format("must be between 1 and 64, got {}", o.threads));
  if (o.cutoff && !std::isfinite(*o.cutoff))
    return fail("options.cutoff", fmt::format("must be finite when set, got {}", *o.cutoff));
  if (o.backend != Backend::kCbc && o.backend != Backend::kBruteForce)
    return fail("options.backend", fmt::format("unknown backend {}", static_cast<int>(o.backend)));
  return {};
}

Result<SolveResult> solve(const MilpModel& model, const SolveOptions& options) {
  MIST_CHECK(validate_model(model));
  MIST_CHECK(validate_options(options));
  const auto start = std::chrono::steady_clock::now();
  Result<SolveResult> result = options.backend == Backend::kCbc ? detail::solve_cbc(model, options)
                                                                : detail::solve_brute_force(model, options);
  if (!result) return result;
  // Trust nothing a backend says until it has been checked against the model.
  if (auto ok = validate_result(model, *result); !ok) {
    const int64_t nodes = result->stats.nodes;
    *result = detail::without_solution(
        Termination{.reason = TerminationReason::kNumericalError,
                    .detail = fmt::format("{} returned a result that fails validation ({}; it said: {})",
                                          to_string(options.backend), ok.error().to_string(),
                                          result->termination.to_string())},
        -kInfinity, nodes);
  }
  result->stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

namespace detail {

SolveResult with_solution(const MilpModel& model, Termination termination, std::vector<double> values,
                          double best_bound, int64_t nodes) {
  SolveResult r{.termination = std::move(termination), .values = std::move(values), .stats = {.nodes = nodes}};
  r.objective = objective_value(model, r.values);
  // A bound above the incumbent only reflects the solver's tolerances; the incumbent is the
  // tighter truth.
  r.best_bound = std::isnan(best_bound) ? -kInfinity : std::min(best_bound, r.objective);
  return r;
}

SolveResult without_solution(Termination termination, double best_bound, int64_t nodes) {
  SolveResult r;
  r.termination = std::move(termination);
  r.stats.nodes = nodes;
  switch (r.termination.reason) {
    case TerminationReason::kInfeasible: r.best_bound = kInfinity; break;
    case TerminationReason::kUnbounded: r.objective = r.best_bound = -kInfinity; break;
    case TerminationReason::kNoSolutionFound: r.best_bound = std::isnan(best_bound) ? -kInfinity : best_bound; break;
    default: r.best_bound = -kInfinity; break;
  }
  return r;
}

}  // namespace detail
}  // namespace mist::solver
