#include "solver/solve_result.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace mist::solver {
namespace {

bool within(double violation, double magnitude, double tolerance) {
  return violation <= tolerance * std::max(1.0, magnitude);
}

Result<void> validate_termination(const SolveResult& r) {
  const Termination& t = r.termination;
  const bool limited = t.reason == TerminationReason::kFeasible || t.reason == TerminationReason::kNoSolutionFound;
  if (limited != (t.limit != Limit::kNone))
    return fail("result.termination.limit", fmt::format("limit '{}' does not fit reason '{}'",
                                                         to_string(t.limit), to_string(t.reason)));
  if (std::isnan(r.objective) || std::isnan(r.best_bound))
    return fail("result", fmt::format("objective {} or best_bound {} is NaN", r.objective, r.best_bound));
  switch (t.reason) {
    case TerminationReason::kOptimal:
    case TerminationReason::kFeasible:
      if (!std::isfinite(r.objective))
        return fail("result.objective", fmt::format("is {} although a solution is present", r.objective));
      if (!within(r.best_bound - r.objective, std::abs(r.objective), kFeasibilityTolerance))
        return fail("result.best_bound", fmt::format("{} exceeds the objective {} of the solution found",
                                                     r.best_bound, r.objective));
      break;
    case TerminationReason::kInfeasible:
      if (r.objective != kInfinity || r.best_bound != kInfinity)
        return fail("result", fmt::format("infeasible needs objective and best_bound +inf, got {} and {}",
                                          r.objective, r.best_bound));
      break;
    case TerminationReason::kUnbounded:
      if (r.objective != -kInfinity || r.best_bound != -kInfinity)
        return fail("result", fmt::format("unbounded needs objective and best_bound -inf, got {} and {}",
                                          r.objective, r.best_bound));
      break;
    case TerminationReason::kNoSolutionFound:
    case TerminationReason::kNumericalError:
      if (r.objective != kInfinity)
        return fail("result.objective", fmt::format("is {} although no solution is present", r.objective));
      break;
  }
  return {};
}

}  // namespace

const char* to_string(TerminationReason r) {
  switch (r) {
    case TerminationReason::kOptimal: return "optimal";
    case TerminationReason::kFeasible: return "feasible";
    case TerminationReason::kInfeasible: return "infeasible";
    case TerminationReason::kUnbounded: return "unbounded";
    case TerminationReason::kNoSolutionFound: return "no solution found";
    case TerminationReason::kNumericalError: return "numerical error";
  }
  return "?";
}

const char* to_string(Limit l) {
  switch (l) {
    case Limit::kNone: return "none";
    case Limit::kTime: return "time";
    case Limit::kCutoff: return "cutoff";
    case Limit::kOther: return "other";
  }
  return "?";
}

std::string Termination::to_string() const {
  std::string s = solver::to_string(reason);
  if (limit != Limit::kNone) s += fmt::format(" ({} limit)", solver::to_string(limit));
  if (!detail.empty()) s += ": " + detail;
  return s;
}

Result<void> validate_result(const MilpModel& model, const SolveResult& result) {
  MIST_CHECK(validate_termination(result));
  const bool has_solution = result.termination.has_solution();
  if (!has_solution) {
    if (!result.values.empty())
      return fail("result.values", fmt::format("{} values although the termination is '{}'",
                                               result.values.size(), to_string(result.termination.reason)));
    return {};
  }
  const auto n = static_cast<size_t>(model.num_variables());
  if (result.values.size() != n)
    return fail("result.values", fmt::format("{} values for {} variables", result.values.size(), n));

  for (size_t i = 0; i < n; ++i) {
    const VariableData& v = model.variables()[i];
    const double x = result.values[i];
    const std::string at = fmt::format("result.values[{}]", i);
    const std::string who = fmt::format("variable '{}'", v.name);
    if (!std::isfinite(x)) return fail(at, fmt::format("{}: value {} is not finite", who, x));
    const double out_of_bounds = std::max({v.lower - x, x - v.upper, 0.0});
    if (!within(out_of_bounds, std::abs(x), kFeasibilityTolerance))
      return fail(at, fmt::format("{}: value {} is outside its bounds [{}, {}]", who, x, v.lower, v.upper));
    if (v.type != VarType::kContinuous && !within(std::abs(x - std::round(x)), 0.0, kIntegralityTolerance))
      return fail(at, fmt::format("{}: value {} is not integral", who, x));
  }

  for (size_t i = 0; i < model.constraints().size(); ++i) {
    const ConstraintData& c = model.constraints()[i];
    double activity = 0.0, magnitude = std::abs(c.rhs);
    for (const Term& t : c.terms) {
      const double term = t.coef * result.values[static_cast<size_t>(t.var.index)];
      activity += term;
      magnitude += std::abs(term);
    }
    double violation = 0.0;
    if (c.sense != Sense::kGreaterEqual) violation = std::max(violation, activity - c.rhs);
    if (c.sense != Sense::kLessEqual) violation = std::max(violation, c.rhs - activity);
    if (!within(violation, magnitude, kFeasibilityTolerance))
      return fail(fmt::format("result.constraints[{}]", i),
                  fmt::format("constraint '{}' is violated by {}: activity {} {} {}", c.name, violation,
                              activity, to_string(c.sense), c.rhs));
  }

  double magnitude = std::abs(model.objective().offset);
  for (const Term& t : model.objective().terms)
    magnitude += std::abs(t.coef * result.values[static_cast<size_t>(t.var.index)]);
  const double expected = objective_value(model, result.values);
  if (!within(std::abs(result.objective - expected), magnitude, kFeasibilityTolerance))
    return fail("result.objective", fmt::format("{} does not match the objective {} of the values",
                                                result.objective, expected));
  return {};
}

}  // namespace mist::solver
