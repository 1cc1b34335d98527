// Program: a set of expressions compiled once into a register tape and evaluated over many rows
// at a time (one row = one assignment of the input symbols). This is how the memory and time
// expressions are evaluated for thousands of candidate plans without walking trees.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "symbolic/expr.hpp"

namespace mist::sym {

class Program {
 public:
  // Every free symbol of `outputs` must be in `inputs` (error otherwise, naming the symbol).
  // Common subexpressions are computed once.
  static Result<Program> compile(const std::vector<Expr>& outputs,
                                 const std::vector<std::string>& inputs);

  size_t num_inputs() const { return num_inputs_; }
  size_t num_outputs() const { return output_regs_.size(); }
  size_t num_instructions() const { return code_.size(); }

  // Column-major batches: inputs[i * rows + r] is input i of row r, outputs[o * rows + r] likewise.
  void evaluate(std::span<const double> inputs, size_t rows, std::span<double> outputs) const;
  // One row; returns all outputs.
  std::vector<double> evaluate_row(std::span<const double> inputs) const;

 private:
  enum class Op { kConst, kInput, kAdd, kScale, kMul, kDiv, kMax, kMin };
  struct Instr {
    Op op;
    int dst, a, b;  // registers (kInput: a = input index)
    double c;       // kConst value, kScale factor
  };
  // One instruction on one row: the same expressions as evaluate's loops over rows.
  static double apply(Op op, double a, double b, double c);

  std::vector<Instr> code_;
  std::vector<int> output_regs_;
  size_t num_inputs_ = 0;
  int num_regs_ = 0;
  friend class ProgramCompiler;
};

}  // namespace mist::sym
