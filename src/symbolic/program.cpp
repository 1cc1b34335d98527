#include "symbolic/program.hpp"

#include <algorithm>
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
  // Rows are processed in blocks so that the register file stays in cache; each instruction is
  // a tight loop over the block that the compiler vectorises.
  constexpr size_t kBlock = 256;
  std::vector<double> regs(static_cast<size_t>(num_regs_) * kBlock);
  for (size_t start = 0; start < rows; start += kBlock) {
    const size_t n = std::min(kBlock, rows - start);
    for (const Instr& in : code_) {
      double* d = &regs[static_cast<size_t>(in.dst) * kBlock];
      const double* a = in.a >= 0 && in.op != Op::kInput ? &regs[static_cast<size_t>(in.a) * kBlock] : nullptr;
      const double* b = in.b >= 0 ? &regs[static_cast<size_t>(in.b) * kBlock] : nullptr;
      switch (in.op) {
        case Op::kConst: std::fill(d, d + n, in.c); break;
        case Op::kInput: std::copy_n(&inputs[static_cast<size_t>(in.a) * rows + start], n, d); break;
        case Op::kAdd: for (size_t i = 0; i < n; ++i) d[i] = a[i] + b[i]; break;
        case Op::kScale: for (size_t i = 0; i < n; ++i) d[i] = a[i] * in.c; break;
        case Op::kMul: for (size_t i = 0; i < n; ++i) d[i] = a[i] * b[i]; break;
        case Op::kDiv: for (size_t i = 0; i < n; ++i) d[i] = a[i] / b[i]; break;
        case Op::kMax: for (size_t i = 0; i < n; ++i) d[i] = std::max(a[i], b[i]); break;
        case Op::kMin: for (size_t i = 0; i < n; ++i) d[i] = std::min(a[i], b[i]); break;
      }
    }
    for (size_t o = 0; o < output_regs_.size(); ++o)
      std::copy_n(&regs[static_cast<size_t>(output_regs_[o]) * kBlock], n, &outputs[o * rows + start]);
  }
}

std::vector<double> Program::evaluate_row(std::span<const double> inputs) const {
  std::vector<double> out(num_outputs());
  evaluate(inputs, 1, out);
  return out;
}

}  // namespace mist::sym
