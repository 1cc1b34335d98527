// A mixed-integer linear program, minimised: variables (continuous, integer, binary) with bounds
// and names, named linear constraints (≤, ≥, =) over sparse term lists, and a linear objective.
// Building never fails; validate_model() says what is wrong, naming the variable or constraint.
// solve() (solver/solve.hpp) validates before it runs anything. docs/solver.md has the tour.
//
//   MilpModel m;
//   Variable x = m.add_binary("x"), y = m.add_binary("y");
//   m.add_constraint("cap", {{x, 2}, {y, 3}}, Sense::kLessEqual, 4);
//   m.set_objective({{x, -5}, {y, -4}});  // minimise −5x − 4y
#pragma once

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/result.hpp"

namespace mist::solver {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

enum class VarType { kContinuous, kInteger, kBinary };
enum class Sense { kLessEqual, kGreaterEqual, kEqual };

const char* to_string(VarType t);  // "continuous", "integer", "binary"
const char* to_string(Sense s);    // "<=", ">=", "="

// Handles into one MilpModel: the index of the variable / constraint, in order of addition.
struct Variable {
  int index = -1;
  bool operator==(const Variable&) const = default;
};
struct Constraint {
  int index = -1;
  bool operator==(const Constraint&) const = default;
};

// coef · var.
struct Term {
  Variable var{};
  double coef = 0.0;
  bool operator==(const Term&) const = default;
};

struct VariableData {
  std::string name{};
  VarType type = VarType::kContinuous;
  double lower = 0.0;  // may be −kInfinity (continuous and integer only)
  double upper = kInfinity;
  bool operator==(const VariableData&) const = default;
};

// Σ terms  sense  rhs. Terms hold each variable at most once (add_constraint merges repeats).
struct ConstraintData {
  std::string name{};
  std::vector<Term> terms{};
  Sense sense = Sense::kLessEqual;
  double rhs = 0.0;
  bool operator==(const ConstraintData&) const = default;
};

// Minimised: Σ terms + offset. Terms hold each variable at most once.
struct Objective {
  std::vector<Term> terms{};
  double offset = 0.0;
  bool operator==(const Objective&) const = default;
};

// Owns the model's data; handles are plain indices, valid for the model that returned them.
// Adding never fails and never throws on bad numbers: validate_model() reports them, so a
// builder can add everything and check once. Not thread-safe for concurrent modification.
class MilpModel {
 public:
  explicit MilpModel(std::string name = "milp") : name_(std::move(name)) {}

  Variable add_variable(std::string name, VarType type, double lower, double upper);
  Variable add_continuous(std::string name, double lower = 0.0, double upper = kInfinity) {
    return add_variable(std::move(name), VarType::kContinuous, lower, upper);
  }
  Variable add_integer(std::string name, double lower, double upper) {
    return add_variable(std::move(name), VarType::kInteger, lower, upper);
  }
  Variable add_binary(std::string name) {  // bounds [0, 1]
    return add_variable(std::move(name), VarType::kBinary, 0.0, 1.0);
  }

  // Repeated variables in `terms` are merged (coefficients summed); terms are kept sorted by
  // variable index, so the stored form does not depend on the order they were listed in.
  Constraint add_constraint(std::string name, std::vector<Term> terms, Sense sense, double rhs);
  // Replaces the objective (minimised). The default objective is 0: any feasible point is optimal.
  void set_objective(std::vector<Term> terms, double offset = 0.0);

  const std::string& name() const { return name_; }
  int num_variables() const { return static_cast<int>(variables_.size()); }
  int num_constraints() const { return static_cast<int>(constraints_.size()); }
  const std::vector<VariableData>& variables() const { return variables_; }
  const std::vector<ConstraintData>& constraints() const { return constraints_; }
  const VariableData& variable(Variable v) const { return variables_.at(static_cast<size_t>(v.index)); }
  const ConstraintData& constraint(Constraint c) const {
    return constraints_.at(static_cast<size_t>(c.index));
  }
  const Objective& objective() const { return objective_; }
  // Whether some variable is integer or binary (a pure LP otherwise).
  bool has_integer_variables() const;

  bool operator==(const MilpModel&) const = default;

 private:
  std::string name_;
  std::vector<VariableData> variables_;
  std::vector<ConstraintData> constraints_;
  Objective objective_;
};

// Checks what a solver needs, naming the first offender by path and name, e.g.
// "model.constraints[1].terms[0]: constraint 'cap': coefficient of 'x' is nan". Rejected:
// empty or repeated names; NaN bounds, lower > upper, lower = +inf or upper = −inf, binary bounds
// outside [0, 1]; non-finite coefficients, right-hand sides and objective offset; terms that
// refer to no variable of this model. Linear in the model's size.
Result<void> validate_model(const MilpModel& model);

// Σ coef · values[var], summed in term order (deterministic). Precondition: every term's
// variable indexes `values`.
double evaluate(const std::vector<Term>& terms, const std::vector<double>& values);
// The objective (offset included) at `values`.
double objective_value(const MilpModel& model, const std::vector<double>& values);

}  // namespace mist::solver
