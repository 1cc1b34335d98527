#include "symbolic/expr.hpp"

#include <gtest/gtest.h>

#include "symbolic/program.hpp"

namespace mist::sym {
namespace {

const Expr s = Expr::symbol("s"), b = Expr::symbol("b"), h = Expr::symbol("h"),
           a = Expr::symbol("a"), t = Expr::symbol("t");

TEST(Expr, LikeTermsCollect) {
  Expr e = 2 * s * b * h + 4 * s * b * h + 5 * a * s * s * b;
  Expr f = s * b * h * 6 + b * 5 * s * a * s;
  EXPECT_EQ(e, f);
  EXPECT_EQ(e.str(), "s·b·(6·h + 5·s·a)");
}

TEST(Expr, KorthikantiFormulaPrints) {
  Expr e = s * b * h * (34 + 5 * a * s / h);
  EXPECT_EQ(e.str(), "s·b·(34·h + 5·s·a)");
  Expr tp = (10 * s * b * h) + (24 * s * b * h) / t;
  EXPECT_EQ(tp.str(), "s·b·h·(10 + 24/t)");
}

TEST(Expr, DivisionCancels) {
  EXPECT_EQ((s * b) / s, b);
  EXPECT_EQ((2 * h) / (4 * h), Expr(0.5));
  EXPECT_TRUE(((s * b) / (s * b)).is_constant());
  EXPECT_EQ((h / t).str(), "h/t");
  EXPECT_EQ((h / (2 * t)).str(), "h/(2·t)");
}

TEST(Expr, SumDenominatorStaysAtom) {
  Expr e = s / (1 + t);
  EXPECT_DOUBLE_EQ(*evaluate(e, {{"s", 6}, {"t", 2}}), 2.0);
  EXPECT_EQ(e.str(), "s/(1 + t)");
}

TEST(Expr, MaxDropsDominatedArguments) {
  EXPECT_EQ(max(s * b * 3, s * b * 2), 3 * s * b);
  EXPECT_EQ(max(s * b + h, s * b), s * b + h);
  Expr m = max(s, h);
  EXPECT_EQ(m.kind(), Kind::kMax);
  EXPECT_EQ(max(max(s, h), s), m);
  EXPECT_EQ(max(Expr(3), Expr(5)), Expr(5));
  EXPECT_EQ(min(s, s + 1), s);
}

TEST(Expr, SubstituteAndEvaluateAgree) {
  Expr e = max(s * b * h * (34 + 5 * a * s / h) / t, 7 * h) - 3 * b;
  Bindings v{{"s", 2048}, {"b", 4}, {"h", 4096}, {"a", 32}, {"t", 8}};
  double direct = *evaluate(e, v);
  Expr partial = substitute(e, {{"s", 2048}, {"h", 4096}, {"a", 32}});
  EXPECT_EQ(symbols_of(partial), (std::vector<std::string>{"b", "t"}));
  EXPECT_DOUBLE_EQ(*evaluate(partial, v), direct);
  EXPECT_DOUBLE_EQ(direct, 2048.0 * 4 * 4096 * (34 + 5.0 * 32 * 2048 / 4096) / 8 - 12);
}

TEST(Expr, UnboundSymbolIsAnError) {
  auto r = evaluate(s * b, {{"s", 1}});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path, "b");
  // The sizes of a lowered op: an unbound symbol makes the quantity 0.
  EXPECT_EQ(evaluate_or_zero(s * b, {{"s", 3}, {"b", 2}}), 6.0);
  EXPECT_EQ(evaluate_or_zero(s * b, {{"s", 1}}), 0.0);
}

TEST(Expr, ProvablyNonnegative) {
  EXPECT_TRUE(provably_nonnegative(s * b / t + 3));
  EXPECT_FALSE(provably_nonnegative(s - b));
  EXPECT_FALSE(provably_nonnegative(1 - Expr::symbol("wo")));
}

TEST(Program, MatchesTreeEvaluationOverABatch) {
  std::vector<Expr> outs = {s * b * h * (34 + 5 * a * s / h) / t, max(s * b, h / t) + 1,
                            min(b, t) * (1 - Expr::symbol("wo")), Expr(42)};
  std::vector<std::string> ins = {"s", "b", "h", "a", "t", "wo"};
  auto prog = Program::compile(outs, ins);
  ASSERT_TRUE(prog.has_value()) << prog.error().to_string();
  const size_t rows = 1000;  // more than one 256-row block
  std::vector<double> in(ins.size() * rows), out(outs.size() * rows);
  for (size_t r = 0; r < rows; ++r) {
    in[0 * rows + r] = 128 + r;
    in[1 * rows + r] = 1 + r % 8;
    in[2 * rows + r] = 1024;
    in[3 * rows + r] = 16;
    in[4 * rows + r] = 1 << (r % 4);
    in[5 * rows + r] = (r % 5) / 4.0;
  }
  prog->evaluate(in, rows, out);
  for (size_t r = 0; r < rows; r += 97) {
    Bindings v;
    for (size_t i = 0; i < ins.size(); ++i) v[ins[i]] = in[i * rows + r];
    for (size_t o = 0; o < outs.size(); ++o)
      EXPECT_NEAR(out[o * rows + r], *evaluate(outs[o], v), 1e-9 * std::abs(*evaluate(outs[o], v)))
          << "row " << r << " output " << o;
  }
}

TEST(Program, RejectsSymbolsThatAreNotInputs) {
  auto prog = Program::compile({s * b}, {"s"});
  ASSERT_FALSE(prog.has_value());
  EXPECT_EQ(prog.error().path, "b");
}

}  // namespace
}  // namespace mist::sym
