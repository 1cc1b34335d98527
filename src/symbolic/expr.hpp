// Symbolic expressions over non-negative real symbols (b, s, h, t, ...), kept in a canonical
// sum-of-products form so that like terms collect: Korthikanti's 34·s·b·h comes out as one term,
// not as a sum of the eleven tensors it is made of.
//
// Canonical form (invariants every constructor keeps):
//   Const     a number
//   Symbol    a named variable, assumed >= 0 (all of mist's knobs and shapes are)
//   Add       c0 + Σ c_i·term_i, terms unique and sorted by key, each a Symbol, Mul, Max or Min
//   Mul       Π base_j^e_j with coefficient 1, bases unique and sorted, e_j != 0; a base is a
//             Symbol, Max, Min, or an Add that could not be expanded (only as a divisor)
//   Max, Min  two or more arguments, sorted, none provably dominated by another
// Products of sums are expanded, so equal expressions have equal keys.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/result.hpp"

namespace mist::sym {

enum class Kind { kConst, kSymbol, kAdd, kMul, kMax, kMin };

struct Node;

class Expr {
 public:
  Expr();                      // the constant 0
  Expr(double value);          // NOLINT: a constant, implicit so that 2 * x reads naturally
  static Expr symbol(const std::string& name);

  Kind kind() const;
  bool is_constant() const { return kind() == Kind::kConst; }
  double constant_value() const;  // precondition: is_constant()
  const std::string& key() const;  // canonical structural key: equal keys <=> equal expressions
  const Node& node() const { return *node_; }

  // A readable formula, e.g. "s·b·h·(34 + 5·a·s/h)/t".
  std::string str() const;

  bool operator==(const Expr& o) const { return key() == o.key(); }

 private:
  explicit Expr(std::shared_ptr<const Node> n) : node_(std::move(n)) {}
  std::shared_ptr<const Node> node_;
  friend struct Builder;
};

struct Term {
  double coeff;
  Expr term;
};
struct Factor {
  Expr base;
  int exponent;
};

struct Node {
  Kind kind = Kind::kConst;
  std::string key;
  double value = 0;                 // kConst: the value; kAdd: the constant term c0
  std::string name;                 // kSymbol
  std::vector<Term> terms;          // kAdd
  std::vector<Factor> factors;      // kMul
  std::vector<Expr> args;           // kMax, kMin
};

Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator-(const Expr& a);
Expr operator*(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);
Expr pow(const Expr& base, int exponent);
Expr max(const Expr& a, const Expr& b);
Expr max(const std::vector<Expr>& args);  // max of an empty list is 0 (all our quantities are >= 0)
Expr min(const Expr& a, const Expr& b);
Expr sum(const std::vector<Expr>& items);

inline Expr& operator+=(Expr& a, const Expr& b) { return a = a + b; }
inline Expr& operator*=(Expr& a, const Expr& b) { return a = a * b; }

using Bindings = std::map<std::string, double>;

// True when e >= 0 follows from all symbols being >= 0 (a sufficient test, not a complete one).
bool provably_nonnegative(const Expr& e);
// Replaces bound symbols by their values and re-simplifies.
Expr substitute(const Expr& e, const Bindings& values);
// Numeric value; an unbound symbol is an error naming it.
Result<double> evaluate(const Expr& e, const Bindings& values);
// Numeric value, an unbound symbol making it 0: for the sizes of a lowered op, bound by the lowering's
// own dimensions, where an unbound symbol is a lowering bug and the quantity then counts as nothing.
double evaluate_or_zero(const Expr& e, const Bindings& values);
// Free symbols, sorted.
std::vector<std::string> symbols_of(const Expr& e);

}  // namespace mist::sym
