#include "symbolic/program.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>

namespace mist::sym {

class ProgramCompiler {
 public:
  ProgramCompiler(Program& p, const std::vector<std::string>& inputs) : p_(p) {
    for (size_t i = 0; i < inputs.size(); ++i) input_index_[inputs[i]] = static_cast<int>(i);
  }

  Result<int> reg(const Expr& e) {
    if (auto it = cache_.find(e.key()); it != cache_.end()) return it->second;
    MIST_TRY(int r, build(e));
    cache_[e.key()] = r;
    return r;
  }

 private:
  int emit(Program::Op op, int a = -1, int b = -1, double c = 0) {
    int dst = p_.num_regs_++;
    p_.code_.push_back({op, dst, a, b, c});
    return dst;
  }
  int constant(double v) {
    std::string k = "#c" + std::to_string(v);
    if (auto it = cache_.find(k); it != cache_.end()) return it->second;
    return cache_[k] = emit(Program::Op::kConst, -1, -1, v);
  }
  Result<int> power(const Expr& base, int e) {
    MIST_TRY(int b, reg(base));
    int r = b;
    for (int i = 1; i < e; ++i) r = emit(Program::Op::kMul, r, b);
    return r;
  }

  Result<int> build(const Expr& e) {
    const Node& n = e.node();
    switch (n.kind) {
      case Kind::kConst: return constant(n.value);
      case Kind::kSymbol: {
        auto it = input_index_.find(n.name);
        if (it == input_index_.end())
          return fail(n.name, "symbol is not an input of the program");
        return emit(Program::Op::kInput, it->second);
      }
      case Kind::kAdd: {
        int acc = n.value != 0 ? constant(n.value) : -1;
        for (const auto& t : n.terms) {
          MIST_TRY(int r, reg(t.term));
          if (t.coeff != 1.0) r = emit(Program::Op::kScale, r, -1, t.coeff);
          acc = acc < 0 ? r : emit(Program::Op::kAdd, acc, r);
        }
        return acc;
      }
      case Kind::kMul: {
        int num = -1, den = -1;
        for (const auto& f : n.factors) {
          MIST_TRY(int r, power(f.base, std::abs(f.exponent)));
          int& acc = f.exponent > 0 ? num : den;
          acc = acc < 0 ? r : emit(Program::Op::kMul, acc, r);
        }
        if (num < 0) num = constant(1.0);
        return den < 0 ? num : emit(Program::Op::kDiv, num, den);
      }
      case Kind::kMax:
      case Kind::kMin: {
        auto op = n.kind == Kind::kMax ? Program::Op::kMax : Program::Op::kMin;
        int acc = -1;
        for (const auto& a : n.args) {
          MIST_TRY(int r, reg(a));
          acc = acc < 0 ? r : emit(op, acc, r);
        }
        return acc;
      }
    }
    return fail("", "unknown expression kind");
  }

  Program& p_;
  std::unordered_map<std::string, int> input_index_;
  std::unordered_map<std::string, int> cache_;
};

Result<Program> Program::compile(const std::vector<Expr>& outputs,
                                 const std::vector<std::string>& inputs) {
  Program p;
  p.num_inputs_ = inputs.size();
  ProgramCompiler c(p, inputs);
  for (const auto& e : outputs) {
    MIST_TRY(int r, c.reg(e));
    p.output_regs_.push_back(r);
  }
  return p;
}

void Program::evaluate(std::span<const double> inputs, size_t rows, std::span<double> outputs) const {
  if (rows == 0) return;
  // What is the same on every row is computed once. An input whose column holds one value makes
  // every instruction that depends only on such inputs (and constants) uniform: its value is
  // computed once, as a scalar, by the same operation on the same operands as each row would.
  // The tuner's batches vary a few knobs (the offload fractions) and hold the rest.
  std::vector<char> uniform(static_cast<size_t>(num_regs_), 0);
  std::vector<double> value(static_cast<size_t>(num_regs_), 0.0);
  std::vector<const Instr*> varying;
  for (const Instr& in : code_) {
    const auto dst = static_cast<size_t>(in.dst);
    switch (in.op) {
      case Op::kConst:
        uniform[dst] = 1, value[dst] = in.c;
        break;
      case Op::kInput: {
        const double* col = &inputs[static_cast<size_t>(in.a) * rows];
        // Bitwise, so that -0.0 and 0.0 (or two NaNs) are not taken for each other.
        uniform[dst] = std::all_of(col, col + rows, [&](double x) { return std::memcmp(&x, col, sizeof x) == 0; });
        value[dst] = col[0];
        break;
      }
      default: {
        const bool ua = uniform[static_cast<size_t>(in.a)] != 0;
        const bool ub = in.op == Op::kScale || uniform[static_cast<size_t>(in.b)] != 0;
        if (ua && ub) {
          uniform[dst] = 1;
          value[dst] = apply(in.op, value[static_cast<size_t>(in.a)],
                             in.op == Op::kScale ? 0.0 : value[static_cast<size_t>(in.b)], in.c);
        }
      }
    }
    if (!uniform[dst]) varying.push_back(&in);
  }
  // The varying instructions, rows in blocks so that the register file stays in cache; each is a
  // tight loop over the block that the compiler vectorises. Registers are `block` rows apart, no
  // wider than the batch, and left uninitialised: each is written before it is read.
  constexpr size_t kBlock = 256;
  const size_t block = std::min(kBlock, rows);
  const auto regs = std::make_unique_for_overwrite<double[]>(static_cast<size_t>(num_regs_) * block);
  for (size_t start = 0; start < rows; start += block) {
    const size_t n = std::min(block, rows - start);
    for (const Instr* in : varying) {
      double* d = &regs[static_cast<size_t>(in->dst) * block];
      if (in->op == Op::kInput) {
        std::copy_n(&inputs[static_cast<size_t>(in->a) * rows + start], n, d);
        continue;
      }
      const auto ia = static_cast<size_t>(in->a);
      const double* a = &regs[ia * block];
      if (in->op == Op::kScale) {
        for (size_t i = 0; i < n; ++i) d[i] = a[i] * in->c;
        continue;
      }
      const auto ib = static_cast<size_t>(in->b);
      const double* b = &regs[ib * block];
      const bool sa = uniform[ia] != 0, sb = uniform[ib] != 0;  // at most one of them
      const double x = value[ia], y = value[ib];
#define MIST_PROGRAM_LOOP(expr_vv, expr_sv, expr_vs)           \
  if (sa)                                                      \
    for (size_t i = 0; i < n; ++i) d[i] = expr_sv;             \
  else if (sb)                                                 \
    for (size_t i = 0; i < n; ++i) d[i] = expr_vs;             \
  else                                                         \
    for (size_t i = 0; i < n; ++i) d[i] = expr_vv;             \
  break
      switch (in->op) {
        case Op::kAdd: MIST_PROGRAM_LOOP(a[i] + b[i], x + b[i], a[i] + y);
        case Op::kMul: MIST_PROGRAM_LOOP(a[i] * b[i], x * b[i], a[i] * y);
        case Op::kDiv: MIST_PROGRAM_LOOP(a[i] / b[i], x / b[i], a[i] / y);
        case Op::kMax: MIST_PROGRAM_LOOP(std::max(a[i], b[i]), std::max(x, b[i]), std::max(a[i], y));
        case Op::kMin: MIST_PROGRAM_LOOP(std::min(a[i], b[i]), std::min(x, b[i]), std::min(a[i], y));
        default: break;
      }
#undef MIST_PROGRAM_LOOP
    }
    for (size_t o = 0; o < output_regs_.size(); ++o) {
      const auto r = static_cast<size_t>(output_regs_[o]);
      if (uniform[r])
        std::fill_n(&outputs[o * rows + start], n, value[r]);
      else
        std::copy_n(&regs[r * block], n, &outputs[o * rows + start]);
    }
  }
}

double Program::apply(Op op, double a, double b, double c) {
  switch (op) {
    case Op::kAdd: return a + b;
    case Op::kScale: return a * c;
    case Op::kMul: return a * b;
    case Op::kDiv: return a / b;
    case Op::kMax: return std::max(a, b);
    case Op::kMin: return std::min(a, b);
    default: return 0;  // kConst and kInput are not applied
  }
}

std::vector<double> Program::evaluate_row(std::span<const double> inputs) const {
  std::vector<double> out(num_outputs());
  evaluate(inputs, 1, out);
  return out;
}

}  // namespace mist::sym
