#include "symbolic/expr.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include <fmt/format.h>

namespace mist::sym {

namespace {

// The bytes of fmt::format("{:.17g}", v), built for every term of every sum (canonical keys), where
// fmt's precision path was half of a `mist predict`. std::to_chars with a precision is printf's
// %.17g; an integer below 1e15 prints as its digits there. Equal to fmt on 16M values: integers,
// fractions, random bit patterns, inf, nan, -0.
std::string number_key(double v) {
  char buf[32];
  char* end;
  if (std::fabs(v) < 1e15 && std::floor(v) == v && !(v == 0 && std::signbit(v)))
    end = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(v)).ptr;
  else
    end = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 17).ptr;
  return {buf, end};
}

// Pretty number: integers without a decimal point, others with 6 significant digits.
std::string number_str(double v) {
  if (std::fabs(v) < 1e15 && std::floor(v) == v) return fmt::format("{:.0f}", v);
  return fmt::format("{:.6g}", v);
}

bool nearly_zero(double v) { return v == 0.0; }

}  // namespace

// Builder owns the canonicalisation rules; Expr's private constructor is only reachable here.
struct Builder {
  static Expr make(Node n) { return Expr(std::make_shared<const Node>(std::move(n))); }

  static Expr constant(double v) {
    Node n;
    n.kind = Kind::kConst;
    n.key = number_key(v);
    n.value = v;
    return make(std::move(n));
  }

  // Sum c0 + Σ coeff·term from a map key -> (coeff, term); drops zero coefficients.
  static Expr add_from(double c0, const std::map<std::string, Term>& terms) {
    std::vector<Term> kept;
    for (const auto& [k, t] : terms)
      if (!nearly_zero(t.coeff)) kept.push_back(t);
    if (kept.empty()) return constant(c0);
    if (kept.size() == 1 && c0 == 0 && kept[0].coeff == 1.0) return kept[0].term;
    std::string key = "+(" + number_key(c0);
    for (const auto& t : kept) key += ";" + number_key(t.coeff) + "*" + t.term.key();
    key += ")";
    Node n;
    n.kind = Kind::kAdd;
    n.key = std::move(key);
    n.value = c0;
    n.terms = std::move(kept);
    return make(std::move(n));
  }

  // Product Π base^e from a map key -> (base, exponent); drops zero exponents.
  static Expr mul_from(const std::map<std::string, Factor>& factors) {
    std::vector<Factor> kept;
    for (const auto& [k, f] : factors)
      if (f.exponent != 0) kept.push_back(f);
    if (kept.empty()) return constant(1.0);
    if (kept.size() == 1 && kept[0].exponent == 1) return kept[0].base;
    std::string key = "*(";
    for (const auto& f : kept) key += f.base.key() + "^" + std::to_string(f.exponent) + ";";
    key += ")";
    Node n;
    n.kind = Kind::kMul;
    n.key = std::move(key);
    n.factors = std::move(kept);
    return make(std::move(n));
  }

  static Expr extremum(Kind kind, std::vector<Expr> args) {
    std::sort(args.begin(), args.end(), [](const Expr& a, const Expr& b) { return a.key() < b.key(); });
    std::string key = kind == Kind::kMax ? "max(" : "min(";
    for (const auto& a : args) key += a.key() + ";";
    key += ")";
    Node n;
    n.kind = kind;
    n.key = std::move(key);
    n.args = std::move(args);
    return make(std::move(n));
  }
};

namespace {

// e as c0 + Σ coeff·term.
void as_terms(const Expr& e, double& c0, std::map<std::string, Term>& terms) {
  const Node& n = e.node();
  if (n.kind == Kind::kConst) {
    c0 += n.value;
  } else if (n.kind == Kind::kAdd) {
    c0 += n.value;
    for (const auto& t : n.terms) {
      auto [it, inserted] = terms.try_emplace(t.term.key(), t);
      if (!inserted) it->second.coeff += t.coeff;
    }
  } else {
    auto [it, inserted] = terms.try_emplace(e.key(), Term{1.0, e});
    if (!inserted) it->second.coeff += 1.0;
  }
}

// A non-constant, non-Add term as its factor map.
void as_factors(const Expr& e, int sign, std::map<std::string, Factor>& factors) {
  const Node& n = e.node();
  auto add = [&](const Expr& base, int exp) {
    auto [it, inserted] = factors.try_emplace(base.key(), Factor{base, exp});
    if (!inserted) it->second.exponent += exp;
  };
  if (n.kind == Kind::kMul) {
    for (const auto& f : n.factors) add(f.base, sign * f.exponent);
  } else {
    add(e, sign);
  }
}

Expr term_product(const Expr& a, const Expr& b, int b_sign) {
  std::map<std::string, Factor> f;
  as_factors(a, 1, f);
  as_factors(b, b_sign, f);
  return Builder::mul_from(f);
}

bool is_monomial(const Expr& e) {
  const Node& n = e.node();
  if (n.kind != Kind::kAdd) return true;
  return n.value == 0 && n.terms.size() == 1;
}

}  // namespace

Expr::Expr() : Expr(0.0) {}
Expr::Expr(double value) : node_(Builder::constant(value).node_) {}
Expr Expr::symbol(const std::string& name) {
  Node n;
  n.kind = Kind::kSymbol;
  n.key = name;
  n.name = name;
  return Builder::make(std::move(n));
}
Kind Expr::kind() const { return node_->kind; }
double Expr::constant_value() const { return node_->value; }
const std::string& Expr::key() const { return node_->key; }

Expr operator+(const Expr& a, const Expr& b) {
  if (a.is_constant() && b.is_constant()) return Expr(a.constant_value() + b.constant_value());
  double c0 = 0;
  std::map<std::string, Term> terms;
  as_terms(a, c0, terms);
  as_terms(b, c0, terms);
  return Builder::add_from(c0, terms);
}

Expr operator-(const Expr& a) { return Expr(-1.0) * a; }
Expr operator-(const Expr& a, const Expr& b) { return a + (-b); }

Expr operator*(const Expr& a, const Expr& b) {
  if (a.is_constant() && b.is_constant()) return Expr(a.constant_value() * b.constant_value());
  // Expand (ca0 + Σ ca_i·ta_i)(cb0 + Σ cb_j·tb_j) and collect like terms.
  double a0 = 0, b0 = 0;
  std::map<std::string, Term> at, bt;
  as_terms(a, a0, at);
  as_terms(b, b0, bt);
  double c0 = a0 * b0;
  std::map<std::string, Term> out;
  auto put = [&](double coeff, const Expr& t) {
    if (t.is_constant()) {
      c0 += coeff * t.constant_value();
      return;
    }
    auto [it, inserted] = out.try_emplace(t.key(), Term{coeff, t});
    if (!inserted) it->second.coeff += coeff;
  };
  if (a0 != 0)
    for (const auto& [k, t] : bt) put(a0 * t.coeff, t.term);
  if (b0 != 0)
    for (const auto& [k, t] : at) put(b0 * t.coeff, t.term);
  for (const auto& [ka, ta] : at)
    for (const auto& [kb, tb] : bt) put(ta.coeff * tb.coeff, term_product(ta.term, tb.term, 1));
  return Builder::add_from(c0, out);
}

Expr operator/(const Expr& a, const Expr& b) {
  if (b.is_constant()) return a * Expr(1.0 / b.constant_value());  // x/0 gives inf, as in IEEE
  if (is_monomial(b)) {
    // b = c·Π f^e: multiply by (1/c)·Π f^-e.
    double c = 1.0;
    Expr t = b;
    if (b.kind() == Kind::kAdd) {
      c = b.node().terms[0].coeff;
      t = b.node().terms[0].term;
    }
    std::map<std::string, Factor> f;
    as_factors(t, -1, f);
    return a * Expr(1.0 / c) * Builder::mul_from(f);
  }
  // A sum in the denominator stays an atom with exponent -1.
  std::map<std::string, Factor> f;
  f.try_emplace(b.key(), Factor{b, -1});
  return a * Builder::mul_from(f);
}

Expr pow(const Expr& base, int exponent) {
  if (exponent == 0) return Expr(1.0);
  if (exponent < 0) return Expr(1.0) / pow(base, -exponent);
  Expr r = base;
  for (int i = 1; i < exponent; ++i) r = r * base;
  return r;
}

bool provably_nonnegative(const Expr& e) {
  const Node& n = e.node();
  switch (n.kind) {
    case Kind::kConst: return n.value >= 0;
    case Kind::kSymbol: return true;
    case Kind::kAdd:
      if (n.value < 0) return false;
      for (const auto& t : n.terms)
        if (t.coeff < 0 || !provably_nonnegative(t.term)) return false;
      return true;
    case Kind::kMul:
      for (const auto& f : n.factors)
        if (f.exponent % 2 != 0 && !provably_nonnegative(f.base)) return false;
      return true;
    case Kind::kMax:
      for (const auto& a : n.args)
        if (provably_nonnegative(a)) return true;
      return false;
    case Kind::kMin:
      for (const auto& a : n.args)
        if (!provably_nonnegative(a)) return false;
      return true;
  }
  return false;
}

namespace {

// Flattens nested extrema of the same kind, folds constants, removes provably dominated args.
Expr extremum(Kind kind, const std::vector<Expr>& in) {
  std::vector<Expr> flat;
  for (const auto& a : in) {
    if (a.kind() == kind)
      flat.insert(flat.end(), a.node().args.begin(), a.node().args.end());
    else
      flat.push_back(a);
  }
  // Keep one constant: the largest (max) or smallest (min).
  std::vector<Expr> args;
  bool have_const = false;
  double c = 0;
  for (const auto& a : flat) {
    if (a.is_constant()) {
      double v = a.constant_value();
      c = !have_const ? v : (kind == Kind::kMax ? std::max(c, v) : std::min(c, v));
      have_const = true;
    } else {
      args.push_back(a);
    }
  }
  if (have_const) args.push_back(Expr(c));
  // x dominates y for max when x - y >= 0 provably (for min: y - x >= 0).
  std::vector<Expr> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < args.size() && !dominated; ++j) {
      if (i == j) continue;
      Expr diff = kind == Kind::kMax ? args[j] - args[i] : args[i] - args[j];
      bool same = args[i].key() == args[j].key();
      // Of two equal arguments keep the first.
      if (same ? j < i : provably_nonnegative(diff)) dominated = true;
    }
    if (!dominated) kept.push_back(args[i]);
  }
  if (kept.empty()) return Expr(0.0);
  if (kept.size() == 1) return kept[0];
  return Builder::extremum(kind, std::move(kept));
}

}  // namespace

Expr max(const Expr& a, const Expr& b) { return extremum(Kind::kMax, {a, b}); }
Expr max(const std::vector<Expr>& args) {
  if (args.empty()) return Expr(0.0);
  return extremum(Kind::kMax, args);
}
Expr min(const Expr& a, const Expr& b) { return extremum(Kind::kMin, {a, b}); }

Expr sum(const std::vector<Expr>& items) {
  double c0 = 0;
  std::map<std::string, Term> terms;
  for (const auto& e : items) as_terms(e, c0, terms);
  return Builder::add_from(c0, terms);
}

Expr substitute(const Expr& e, const Bindings& values) {
  const Node& n = e.node();
  switch (n.kind) {
    case Kind::kConst: return e;
    case Kind::kSymbol: {
      auto it = values.find(n.name);
      return it == values.end() ? e : Expr(it->second);
    }
    case Kind::kAdd: {
      std::vector<Expr> items{Expr(n.value)};
      for (const auto& t : n.terms) items.push_back(Expr(t.coeff) * substitute(t.term, values));
      return sum(items);
    }
    case Kind::kMul: {
      Expr r(1.0);
      for (const auto& f : n.factors) r = r * pow(substitute(f.base, values), f.exponent);
      return r;
    }
    case Kind::kMax:
    case Kind::kMin: {
      std::vector<Expr> args;
      for (const auto& a : n.args) args.push_back(substitute(a, values));
      return extremum(n.kind, args);
    }
  }
  return e;
}

Result<double> evaluate(const Expr& e, const Bindings& values) {
  const Node& n = e.node();
  switch (n.kind) {
    case Kind::kConst: return n.value;
    case Kind::kSymbol: {
      auto it = values.find(n.name);
      if (it == values.end()) return fail(n.name, "symbol has no value");
      return it->second;
    }
    case Kind::kAdd: {
      double r = n.value;
      for (const auto& t : n.terms) {
        MIST_TRY(double v, evaluate(t.term, values));
        r += t.coeff * v;
      }
      return r;
    }
    case Kind::kMul: {
      double r = 1.0;
      for (const auto& f : n.factors) {
        MIST_TRY(double v, evaluate(f.base, values));
        r *= std::pow(v, f.exponent);
      }
      return r;
    }
    case Kind::kMax:
    case Kind::kMin: {
      double r = 0;
      for (size_t i = 0; i < n.args.size(); ++i) {
        MIST_TRY(double v, evaluate(n.args[i], values));
        r = i == 0 ? v : (n.kind == Kind::kMax ? std::max(r, v) : std::min(r, v));
      }
      return r;
    }
  }
  return 0.0;
}

double evaluate_or_zero(const Expr& e, const Bindings& values) {
  auto v = evaluate(e, values);
  return v ? *v : 0.0;
}

namespace {

void collect_symbols(const Expr& e, std::set<std::string>& out) {
  const Node& n = e.node();
  switch (n.kind) {
    case Kind::kConst: return;
    case Kind::kSymbol: out.insert(n.name); return;
    case Kind::kAdd:
      for (const auto& t : n.terms) collect_symbols(t.term, out);
      return;
    case Kind::kMul:
      for (const auto& f : n.factors) collect_symbols(f.base, out);
      return;
    case Kind::kMax:
    case Kind::kMin:
      for (const auto& a : n.args) collect_symbols(a, out);
      return;
  }
}

// ---- printing ----

std::string str_of(const Expr& e);

// Display order of symbols inside a product: the conventional s·b·h first, then alphabetical.
int symbol_rank(const std::string& name) {
  static const char* kOrder[] = {"s", "b", "h"};
  for (int i = 0; i < 3; ++i)
    if (name == kOrder[i]) return i;
  return 3;
}

std::string base_str(const Expr& base) {
  if (base.kind() == Kind::kAdd) return "(" + str_of(base) + ")";
  return str_of(base);
}

std::string power_str(const Factor& f, int exponent) {
  std::string s = base_str(f.base);
  if (exponent == 1) return s;
  // Unicode superscripts for the small powers that occur (s², h³); ^n otherwise.
  static const char* kSup[] = {"", "", "²", "³"};
  if (exponent < 4) return s + kSup[exponent];
  return s + "^" + std::to_string(exponent);
}

std::vector<Factor> display_order(std::vector<Factor> fs) {
  std::stable_sort(fs.begin(), fs.end(), [](const Factor& a, const Factor& b) {
    bool as = a.base.kind() == Kind::kSymbol, bs = b.base.kind() == Kind::kSymbol;
    if (as != bs) return as;
    if (as) {
      int ra = symbol_rank(a.base.node().name), rb = symbol_rank(b.base.node().name);
      if (ra != rb) return ra < rb;
    }
    return a.base.key() < b.base.key();
  });
  return fs;
}

// Π f^e as "num/den" (either part may be empty).
void monomial_parts(const std::vector<Factor>& factors, std::string& num, std::string& den,
                    int& den_count) {
  den_count = 0;
  for (const auto& f : display_order(factors)) {
    if (f.exponent > 0) {
      num += (num.empty() ? "" : "·") + power_str(f, f.exponent);
    } else {
      den += (den.empty() ? "" : "·") + power_str(f, -f.exponent);
      ++den_count;
    }
  }
}

std::vector<Factor> factors_of(const Expr& t) {
  if (t.kind() == Kind::kMul) return t.node().factors;
  return {Factor{t, 1}};
}

// coeff·Π f^e, with coeff > 0 (the sign is printed by the caller).
std::string term_str(double coeff, const std::vector<Factor>& factors) {
  std::string num, den;
  int den_count = 0;
  monomial_parts(factors, num, den, den_count);
  double inv = 1.0 / coeff;
  bool integral = std::floor(coeff) == coeff;
  bool inverse_integral = !integral && std::fabs(inv - std::round(inv)) < 1e-9 * inv;
  std::string head;
  if (integral) {
    head = coeff == 1 ? num : (num.empty() ? number_str(coeff) : number_str(coeff) + "·" + num);
  } else if (inverse_integral) {
    head = num;
    den = den.empty() ? number_str(std::round(inv)) : number_str(std::round(inv)) + "·" + den;
    ++den_count;
  } else {
    head = num.empty() ? number_str(coeff) : number_str(coeff) + "·" + num;
  }
  if (head.empty()) head = "1";
  if (den.empty()) return head;
  return head + "/" + (den_count > 1 ? "(" + den + ")" : den);
}

std::string sum_str(const Node& n) {
  // Pull out the largest monomial common to all terms (only symbol factors, positive powers).
  std::map<std::string, int> common;
  bool first = true;
  if (n.value == 0 && n.terms.size() > 1) {
    for (const auto& t : n.terms) {
      std::map<std::string, int> here;
      for (const auto& f : factors_of(t.term))
        if (f.base.kind() == Kind::kSymbol && f.exponent > 0) here[f.base.key()] = f.exponent;
      if (first) {
        common = here;
        first = false;
      } else {
        for (auto it = common.begin(); it != common.end();) {
          auto h = here.find(it->first);
          if (h == here.end()) {
            it = common.erase(it);
          } else {
            it->second = std::min(it->second, h->second);
            ++it;
          }
        }
      }
    }
  }
  // Fewest factors first, then highest degree: s·b·h·(34 + 5·a·s/h), s·b·h·(10 + 24/t).
  std::vector<std::pair<double, std::vector<Factor>>> terms;
  for (const auto& t : n.terms) {
    std::vector<Factor> fs;
    for (const auto& f : factors_of(t.term)) {
      int e = f.exponent;
      if (auto c = common.find(f.base.key()); c != common.end()) e -= c->second;
      if (e != 0) fs.push_back(Factor{f.base, e});
    }
    terms.emplace_back(t.coeff, std::move(fs));
  }
  auto degree = [](const std::vector<Factor>& fs) {
    int d = 0;
    for (const auto& f : fs) d += f.exponent;
    return d;
  };
  std::stable_sort(terms.begin(), terms.end(), [&](const auto& a, const auto& b) {
    if (a.second.size() != b.second.size()) return a.second.size() < b.second.size();
    return degree(a.second) > degree(b.second);
  });
  std::string body;
  bool empty = true;
  auto append = [&](double coeff, const std::string& text) {
    if (empty) {
      body = (coeff < 0 ? "-" : "") + text;
      empty = false;
    } else {
      body += (coeff < 0 ? " - " : " + ") + text;
    }
  };
  if (n.value != 0) append(n.value, number_str(std::fabs(n.value)));
  for (const auto& [coeff, fs] : terms) append(coeff, term_str(std::fabs(coeff), fs));
  if (common.empty()) return body;
  std::vector<Factor> cf;
  for (const auto& [k, e] : common) cf.push_back(Factor{Expr::symbol(k), e});
  std::string num, den;
  int dc = 0;
  monomial_parts(cf, num, den, dc);
  return num + "·(" + body + ")";
}

std::string str_of(const Expr& e) {
  const Node& n = e.node();
  switch (n.kind) {
    case Kind::kConst: return number_str(n.value);
    case Kind::kSymbol: return n.name;
    case Kind::kAdd:
      if (n.value == 0 && n.terms.size() == 1) {
        const auto& t = n.terms[0];
        return (t.coeff < 0 ? "-" : "") + term_str(std::fabs(t.coeff), factors_of(t.term));
      }
      return sum_str(n);
    case Kind::kMul: return term_str(1.0, n.factors);
    case Kind::kMax:
    case Kind::kMin: {
      std::string s = n.kind == Kind::kMax ? "max(" : "min(";
      for (size_t i = 0; i < n.args.size(); ++i) s += (i ? ", " : "") + str_of(n.args[i]);
      return s + ")";
    }
  }
  return "?";
}

}  // namespace

std::vector<std::string> symbols_of(const Expr& e) {
  std::set<std::string> s;
  collect_symbols(e, s);
  return {s.begin(), s.end()};
}

std::string Expr::str() const { return str_of(*this); }

}  // namespace mist::sym
