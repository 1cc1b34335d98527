#include "solver/milp_model.hpp"

#include <cmath>
#include <ostream>

#include <gtest/gtest.h>

namespace mist::solver {
namespace {

TEST(MilpModel, BuildsVariablesConstraintsAndObjective) {
  MilpModel m("demo");
  const Variable x = m.add_binary("x");
  const Variable n = m.add_integer("n", -2, 5);
  const Variable t = m.add_continuous("t");
  const Constraint c = m.add_constraint("cap", {{x, 2}, {n, 1}, {t, -1}}, Sense::kLessEqual, 4);
  m.set_objective({{t, 1}, {x, -3}}, 0.5);

  EXPECT_EQ(m.name(), "demo");
  ASSERT_EQ(m.num_variables(), 3);
  ASSERT_EQ(m.num_constraints(), 1);
  EXPECT_EQ(m.variable(x), (VariableData{.name = "x", .type = VarType::kBinary, .lower = 0, .upper = 1}));
  EXPECT_EQ(m.variable(n).lower, -2);
  EXPECT_EQ(m.variable(t).upper, kInfinity);
  EXPECT_EQ(m.constraint(c).sense, Sense::kLessEqual);
  EXPECT_EQ(m.constraint(c).rhs, 4);
  // Objective terms are stored sorted by variable.
  EXPECT_EQ(m.objective().terms, (std::vector<Term>{{x, -3}, {t, 1}}));
  EXPECT_EQ(m.objective().offset, 0.5);
  EXPECT_TRUE(m.has_integer_variables());
  EXPECT_TRUE(validate_model(m).has_value());
}

TEST(MilpModel, MergesRepeatedTermsWhateverTheirOrder) {
  MilpModel a, b;
  for (MilpModel* m : {&a, &b}) {
    m->add_binary("x");
    m->add_binary("y");
  }
  const Variable x{0}, y{1};
  a.add_constraint("r", {{y, 1}, {x, 2}, {y, 3}}, Sense::kEqual, 1);
  b.add_constraint("r", {{x, 2}, {y, 4}}, Sense::kEqual, 1);
  EXPECT_EQ(a.constraints()[0].terms, (std::vector<Term>{{x, 2}, {y, 4}}));
  EXPECT_EQ(a, b);
}

TEST(MilpModel, PureLpHasNoIntegerVariables) {
  MilpModel m;
  m.add_continuous("a", -kInfinity, kInfinity);
  EXPECT_FALSE(m.has_integer_variables());
}

TEST(MilpModel, EvaluatesTermsAndObjective) {
  MilpModel m;
  const Variable x = m.add_integer("x", 0, 9), y = m.add_continuous("y");
  m.set_objective({{x, 2}, {y, -1}}, 10);
  EXPECT_DOUBLE_EQ(evaluate(m.objective().terms, {3, 4}), 2.0);
  EXPECT_DOUBLE_EQ(objective_value(m, {3, 4}), 12.0);
}

// Each invalid model must be rejected with the field path and the offender's name.
struct BadCase {
  const char* what;
  void (*build)(MilpModel&);
  const char* path;
  const char* message_part;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.what; }

class MilpModelInvalid : public testing::TestWithParam<BadCase> {};

TEST_P(MilpModelInvalid, IsRejectedNamingTheOffender) {
  MilpModel m;
  GetParam().build(m);
  auto r = validate_model(m);
  ASSERT_FALSE(r.has_value()) << GetParam().what;
  EXPECT_EQ(r.error().path, GetParam().path) << r.error().to_string();
  EXPECT_NE(r.error().message.find(GetParam().message_part), std::string::npos) << r.error().to_string();
}

const double kNan = std::nan("");

INSTANTIATE_TEST_SUITE_P(
    Cases, MilpModelInvalid,
    testing::Values(
        BadCase{"empty variable name", [](MilpModel& m) { m.add_binary("a"); m.add_binary(""); },
                "model.variables[1]", "variable name is empty"},
        BadCase{"duplicate variable name", [](MilpModel& m) { m.add_binary("a"); m.add_binary("a"); },
                "model.variables[1]", "'a' is already used by variables[0]"},
        BadCase{"lb > ub", [](MilpModel& m) { m.add_integer("layers", 5, 2); },
                "model.variables[0]", "variable 'layers': lower bound 5 exceeds upper bound 2"},
        BadCase{"NaN bound", [](MilpModel& m) { m.add_continuous("t", kNan, 1); },
                "model.variables[0]", "variable 't': bounds [nan, 1] contain NaN"},
        BadCase{"lb = +inf", [](MilpModel& m) { m.add_continuous("t", kInfinity, kInfinity); },
                "model.variables[0]", "variable 't': bounds [inf, inf] leave no finite value"},
        BadCase{"binary out of [0,1]", [](MilpModel& m) { m.add_variable("z", VarType::kBinary, 0, 2); },
                "model.variables[0]", "variable 'z': binary bounds [0, 2]"},
        BadCase{"empty constraint name",
                [](MilpModel& m) { m.add_constraint("", {{m.add_binary("a"), 1}}, Sense::kEqual, 1); },
                "model.constraints[0]", "constraint name is empty"},
        BadCase{"duplicate constraint name",
                [](MilpModel& m) {
                  const Variable a = m.add_binary("a");
                  m.add_constraint("c", {{a, 1}}, Sense::kEqual, 1);
                  m.add_constraint("c", {{a, 1}}, Sense::kEqual, 1);
                },
                "model.constraints[1]", "constraint name 'c' is already used by constraints[0]"},
        BadCase{"NaN coefficient",
                [](MilpModel& m) {
                  const Variable a = m.add_binary("a"), b = m.add_binary("b");
                  m.add_constraint("ok", {{a, 1}}, Sense::kEqual, 1);
                  m.add_constraint("cap", {{a, 1}, {b, kNan}}, Sense::kLessEqual, 1);
                },
                "model.constraints[1].terms[1]", "constraint 'cap': coefficient of 'b' is nan"},
        BadCase{"infinite rhs",
                [](MilpModel& m) { m.add_constraint("cap", {{m.add_binary("a"), 1}}, Sense::kLessEqual, kInfinity); },
                "model.constraints[0].rhs", "constraint 'cap': right-hand side is inf"},
        BadCase{"foreign variable",
                [](MilpModel& m) { m.add_constraint("cap", {{Variable{7}, 1}}, Sense::kLessEqual, 1); },
                "model.constraints[0].terms[0]", "constraint 'cap': variable index 7 is not a variable"},
        BadCase{"infinite objective coefficient",
                [](MilpModel& m) { m.set_objective({{m.add_binary("x"), -kInfinity}}); },
                "model.objective.terms[0]", "objective: coefficient of 'x' is -inf"},
        BadCase{"NaN objective offset", [](MilpModel& m) { m.set_objective({}, kNan); },
                "model.objective.offset", "objective offset is nan"}),
    [](const testing::TestParamInfo<BadCase>& info) { return "Case" + std::to_string(info.index); });

}  // namespace
}  // namespace mist::solver
