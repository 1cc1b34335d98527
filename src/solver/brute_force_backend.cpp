// The brute-force backend: visits every integer point of a small pure-integer model in
// lexicographic order (the last variable moves fastest) and keeps the first point with the
// smallest objective. Deliberately naive, evaluating each point from scratch, because it is the
// oracle CBC is tested against: its correctness must be evident by reading it.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "solver/backends.hpp"

namespace mist::solver::detail {
namespace {

// Tighter than validate_result's: the oracle should not accept what CBC may not.
constexpr double kTolerance = 1e-9;
constexpr int64_t kPointsPerClockCheck = 1024;

struct Domain {
  int64_t lo = 0, hi = -1;  // inclusive; empty when hi < lo
};

bool satisfied(const ConstraintData& c, const std::vector<double>& x) {
  double activity = 0.0, magnitude = std::abs(c.rhs);
  for (const Term& t : c.terms) {
    const double term = t.coef * x[static_cast<size_t>(t.var.index)];
    activity += term;
    magnitude += std::abs(term);
  }
  const double slack = kTolerance * std::max(1.0, magnitude);
  switch (c.sense) {
    case Sense::kLessEqual: return activity <= c.rhs + slack;
    case Sense::kGreaterEqual: return activity >= c.rhs - slack;
    case Sense::kEqual: return std::abs(activity - c.rhs) <= slack;
  }
  return false;
}

// The integer domain of every variable, or why the model cannot be enumerated.
Result<std::vector<Domain>> domains(const MilpModel& model, int64_t& points) {
  std::vector<Domain> out;
  points = 1;
  for (int i = 0; i < model.num_variables(); ++i) {
    const VariableData& v = model.variables()[static_cast<size_t>(i)];
    const std::string at = fmt::format("model.variables[{}]", i);
    if (v.type == VarType::kContinuous)
      return fail(at, fmt::format("variable '{}' is continuous; the brute-force backend enumerates "
                                  "integer and binary variables only (use the CBC backend)", v.name));
    if (!std::isfinite(v.lower) || !std::isfinite(v.upper) || std::abs(v.lower) > 1e15 || std::abs(v.upper) > 1e15)
      return fail(at, fmt::format("variable '{}' has unbounded domain [{}, {}]; the brute-force "
                                  "backend needs finite bounds", v.name, v.lower, v.upper));
    const Domain d{static_cast<int64_t>(std::ceil(v.lower - kTolerance)),
                   static_cast<int64_t>(std::floor(v.upper + kTolerance))};
    out.push_back(d);
    const int64_t size = d.hi < d.lo ? 0 : d.hi - d.lo + 1;
    if (size == 0) {
      points = 0;
    } else if (points > 0) {
      if (size > kBruteForceMaxPoints || points > kBruteForceMaxPoints / size)
        return fail("model", fmt::format("{} variables span more than {} integer points (at variable '{}'); "
                                         "the brute-force backend is for tiny models (use the CBC backend)",
                                         model.num_variables(), kBruteForceMaxPoints, v.name));
      points *= size;
    }
  }
  return out;
}

}  // namespace

Result<SolveResult> solve_brute_force(const MilpModel& model, const SolveOptions& options) {
  int64_t points = 0;
  MIST_TRY(const std::vector<Domain> dom, domains(model, points));
  const auto deadline_s = options.time_limit_s;
  const auto start = std::chrono::steady_clock::now();

  std::vector<double> x(dom.size()), best;
  double best_objective = kInfinity;
  int64_t visited = 0;
  bool stopped_on_time = false;
  const double cutoff_slack = options.cutoff ? kTolerance * std::max(1.0, std::abs(*options.cutoff)) : 0.0;
  if (points > 0) {
    for (size_t i = 0; i < dom.size(); ++i) x[i] = static_cast<double>(dom[i].lo);
    for (;;) {
      if (visited % kPointsPerClockCheck == 0 && std::isfinite(deadline_s) &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= deadline_s) {
        stopped_on_time = true;
        break;
      }
      ++visited;
      bool feasible = true;
      for (const ConstraintData& c : model.constraints()) {
        if (!satisfied(c, x)) {
          feasible = false;
          break;
        }
      }
      if (feasible) {
        const double f = objective_value(model, x);
        if (f < best_objective && (!options.cutoff || f <= *options.cutoff + cutoff_slack)) {
          best_objective = f;
          best = x;
        }
      }
      // Odometer step: the last variable moves fastest.
      size_t i = dom.size();
      while (i > 0 && x[i - 1] == static_cast<double>(dom[i - 1].hi)) {
        x[i - 1] = static_cast<double>(dom[i - 1].lo);
        --i;
      }
      if (i == 0) break;
      x[i - 1] += 1.0;
    }
  }

  const std::string counted = fmt::format("{} of {} integer points enumerated", visited, points);
  if (stopped_on_time) {
    const std::string detail = fmt::format("brute force stopped on its time limit ({} s); {}", deadline_s, counted);
    if (best_objective < kInfinity)
      return with_solution(model, {.reason = TerminationReason::kFeasible, .limit = Limit::kTime, .detail = detail},
                           std::move(best), -kInfinity, visited);
    return without_solution({.reason = TerminationReason::kNoSolutionFound, .limit = Limit::kTime, .detail = detail},
                            -kInfinity, visited);
  }
  if (best_objective < kInfinity)
    return with_solution(model, {.reason = TerminationReason::kOptimal, .detail = "brute force: " + counted},
                         std::move(best), best_objective, visited);
  if (options.cutoff)
    return without_solution({.reason = TerminationReason::kNoSolutionFound, .limit = Limit::kCutoff,
                             .detail = fmt::format("brute force: no solution with objective ≤ cutoff {}; {}",
                                                   *options.cutoff, counted)},
                            *options.cutoff, visited);
  return without_solution({.reason = TerminationReason::kInfeasible,
                           .detail = "brute force: no integer point satisfies every constraint; " + counted},
                          kInfinity, visited);
}

}  // namespace mist::solver::detail
