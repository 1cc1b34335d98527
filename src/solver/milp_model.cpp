#include "solver/milp_model.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

namespace mist::solver {
namespace {

// Sorted by variable index, repeats summed: the stored form of a term list is canonical, and
// CBC's row builder (CoinPackedMatrix) must never see one column twice in a row.
std::vector<Term> canonical_terms(std::vector<Term> terms) {
  std::stable_sort(terms.begin(), terms.end(),
                   [](const Term& a, const Term& b) { return a.var.index < b.var.index; });
  std::vector<Term> out;
  out.reserve(terms.size());
  for (const Term& t : terms) {
    if (!out.empty() && out.back().var == t.var)
      out.back().coef += t.coef;
    else
      out.push_back(t);
  }
  return out;
}

std::string quoted(const std::string& name) { return "'" + name + "'"; }

// Checks one term list (a constraint's or the objective's); `owner` names it in messages.
Result<void> validate_terms(const MilpModel& model, const std::vector<Term>& terms,
                            const std::string& path, const std::string& owner) {
  for (size_t k = 0; k < terms.size(); ++k) {
    const Term& t = terms[k];
    const std::string at = fmt::format("{}.terms[{}]", path, k);
    if (t.var.index < 0 || t.var.index >= model.num_variables())
      return fail(at, fmt::format("{}: variable index {} is not a variable of this model ({} variables)",
                                  owner, t.var.index, model.num_variables()));
    if (!std::isfinite(t.coef))
      return fail(at, fmt::format("{}: coefficient of {} is {}", owner,
                                  quoted(model.variable(t.var).name), t.coef));
  }
  return {};
}

}  // namespace

const char* to_string(VarType t) {
  switch (t) {
    case VarType::kContinuous: return "continuous";
    case VarType::kInteger: return "integer";
    case VarType::kBinary: return "binary";
  }
  return "?";
}

const char* to_string(Sense s) {
  switch (s) {
    case Sense::kLessEqual: return "<=";
    case Sense::kGreaterEqual: return ">=";
    case Sense::kEqual: return "=";
  }
  return "?";
}

Variable MilpModel::add_variable(std::string name, VarType type, double lower, double upper) {
  variables_.push_back(VariableData{.name = std::move(name), .type = type, .lower = lower, .upper = upper});
  return Variable{num_variables() - 1};
}

Constraint MilpModel::add_constraint(std::string name, std::vector<Term> terms, Sense sense, double rhs) {
  constraints_.push_back(ConstraintData{
      .name = std::move(name), .terms = canonical_terms(std::move(terms)), .sense = sense, .rhs = rhs});
  return Constraint{num_constraints() - 1};
}

void MilpModel::set_objective(std::vector<Term> terms, double offset) {
  objective_ = Objective{.terms = canonical_terms(std::move(terms)), .offset = offset};
}

bool MilpModel::has_integer_variables() const {
  return std::any_of(variables_.begin(), variables_.end(),
                     [](const VariableData& v) { return v.type != VarType::kContinuous; });
}

Result<void> validate_model(const MilpModel& model) {
  std::unordered_map<std::string, size_t> seen;
  const auto& vars = model.variables();
  for (size_t i = 0; i < vars.size(); ++i) {
    const VariableData& v = vars[i];
    const std::string at = fmt::format("model.variables[{}]", i);
    if (v.name.empty()) return fail(at, "variable name is empty");
    if (auto [it, fresh] = seen.emplace(v.name, i); !fresh)
      return fail(at, fmt::format("variable name {} is already used by variables[{}]", quoted(v.name), it->second));
    const std::string who = "variable " + quoted(v.name);
    if (std::isnan(v.lower) || std::isnan(v.upper))
      return fail(at, fmt::format("{}: bounds [{}, {}] contain NaN", who, v.lower, v.upper));
    if (v.lower == kInfinity || v.upper == -kInfinity)
      return fail(at, fmt::format("{}: bounds [{}, {}] leave no finite value", who, v.lower, v.upper));
    if (v.lower > v.upper)
      return fail(at, fmt::format("{}: lower bound {} exceeds upper bound {}", who, v.lower, v.upper));
    if (v.type == VarType::kBinary && (v.lower < 0.0 || v.upper > 1.0))
      return fail(at, fmt::format("{}: binary bounds [{}, {}] must lie within [0, 1]", who, v.lower, v.upper));
  }

  seen.clear();
  const auto& cons = model.constraints();
  for (size_t i = 0; i < cons.size(); ++i) {
    const ConstraintData& c = cons[i];
    const std::string at = fmt::format("model.constraints[{}]", i);
    if (c.name.empty()) return fail(at, "constraint name is empty");
    if (auto [it, fresh] = seen.emplace(c.name, i); !fresh)
      return fail(at, fmt::format("constraint name {} is already used by constraints[{}]", quoted(c.name), it->second));
    const std::string who = "constraint " + quoted(c.name);
    if (!std::isfinite(c.rhs)) return fail(at + ".rhs", fmt::format("{}: right-hand side is {}", who, c.rhs));
    MIST_CHECK(validate_terms(model, c.terms, at, who));
  }

  const Objective& obj = model.objective();
  if (!std::isfinite(obj.offset)) return fail("model.objective.offset", fmt::format("objective offset is {}", obj.offset));
  MIST_CHECK(validate_terms(model, obj.terms, "model.objective", "objective"));
  return {};
}

double evaluate(const std::vector<Term>& terms, const std::vector<double>& values) {
  double sum = 0.0;
  for (const Term& t : terms) sum += t.coef * values[static_cast<size_t>(t.var.index)];
  return sum;
}

double objective_value(const MilpModel& model, const std::vector<double>& values) {
  return evaluate(model.objective().terms, values) + model.objective().offset;
}

}  // namespace mist::solver
