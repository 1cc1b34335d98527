// The lowering's building blocks, shared by lower.cpp (embedding, attention, dense MLP, head) and
// lower_moe.cpp (the mixture-of-experts MLP). Internal to graph/.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/layer.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::graph::detail {

class LayerBuilder {
 public:
  LayerBuilder(std::string name, LayerKind kind, const LoweringOptions& o) : o_(o) {
    layer_.name = std::move(name);
    layer_.kind = kind;
  }

  int tensor(std::string name, Expr bytes, bool grad = true) {
    layer_.tensors.push_back(Tensor{std::move(name), std::move(bytes), grad, -1});
    return static_cast<int>(layer_.tensors.size()) - 1;
  }
  // A view's bytes are its own size (its gradient's); its storage is its base's.
  int view(std::string name, int base, Expr bytes) {
    layer_.tensors.push_back(Tensor{std::move(name), std::move(bytes), true, base});
    return static_cast<int>(layer_.tensors.size()) - 1;
  }
  Op& op(std::string name, OpKind kind, std::vector<int> in, std::vector<int> out,
         std::vector<int> saved) {
    Op o;
    o.name = std::move(name);
    o.kind = kind;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.saved = std::move(saved);
    layer_.ops.push_back(std::move(o));
    return layer_.ops.back();
  }
  const Expr& bytes(int id) const { return layer_.tensors[id].bytes; }
  void make_external(int id) { layer_.tensors[id].external = true; }  // Tensor::external
  // The tensors stay referenced until the last op made so far has run (Tensor::held_until).
  void hold_to_last_op(const std::vector<int>& ids) {
    for (int id : ids) layer_.tensors[id].held_until = static_cast<int>(layer_.ops.size()) - 1;
  }
  Op& last_op() { return layer_.ops.back(); }
  size_t op_count() const { return layer_.ops.size(); }
  size_t tensor_count() const { return layer_.tensors.size(); }
  // Prefixes the names of the ops and tensors made since (a block inside the head: "mtp1.ln1").
  void prefix_since(size_t first_op, size_t first_tensor, const std::string& prefix) {
    for (size_t i = first_op; i < layer_.ops.size(); ++i) layer_.ops[i].name = prefix + layer_.ops[i].name;
    for (size_t i = first_tensor; i < layer_.tensors.size(); ++i)
      layer_.tensors[i].name = prefix + layer_.tensors[i].name;
  }
  // Ops [first, last) belong to Megatron's recompute module `module` (Op::modules).
  void module_range(size_t first, size_t last, uint32_t module) {
    for (size_t i = first; i < last; ++i) layer_.ops[i].modules |= module;
  }
  void module_since(size_t first_op, uint32_t module) { module_range(first_op, layer_.ops.size(), module); }
  // Ops [first, last) are restored when the backward reaches op `at` (Op::restore_at).
  void restore_at(size_t first, size_t last, size_t at) {
    for (size_t i = first; i < last; ++i) layer_.ops[i].restore_at = static_cast<int>(at);
  }
  Layer done(int input, int output) {
    layer_.input = input;
    layer_.output = output;
    return std::move(layer_);
  }

  const LoweringOptions& o_;
  // The last column-parallel linear's gathered input (LoweringOptions::sp_keeps_gathered), which
  // the linears sharing its input keep too; -1: none.
  int gathered_input = -1;

 private:
  Layer layer_;
};

inline const Symbols& S() { return symbols(); }
inline Expr w(const LoweringOptions& o) { return Expr(o.act_bytes); }
// A model size as a constant of the lowering.
inline Expr constant(int64_t v) { return Expr(static_cast<double>(v)); }
// Sequence-parallel regions (norms, dropout, residual) are split t ways along the sequence.
inline Expr region(const LoweringOptions& o) { return o.sequence_parallel ? S().t : Expr(1.0); }
// Tokens of one micro-batch on this rank before tensor parallelism: s·b, or s·b/cp under context
// parallelism (each rank holds 2 of the sequence's 2·cp chunks).
inline Expr sb(const LoweringOptions& o) { return o.context_parallel ? S().s * S().b / S().cp : S().s * S().b; }

// The ops below append to B and return the id of their output tensor (lower.cpp has their notes).
int norm(LayerBuilder& B, const std::string& name, int x, spec::Norm kind, const spec::ModelSpec& m,
         const Expr& width = S().h);
int column_linear(LayerBuilder& B, const std::string& name, int x, Expr in_features, Expr out, Expr bias,
                  bool owns_weight = true, bool shares_input = false);
int row_linear(LayerBuilder& B, const std::string& name, int x, Expr in, bool bias);
// `out_bytes`: bytes per output element (0: the activation dtype; Megatron's router in fp32: 4).
int replicated_linear(LayerBuilder& B, const std::string& name, int x, Expr in, Expr out, bool bias = false,
                      int out_bytes = 0);
int residual_add(LayerBuilder& B, const std::string& name, int x, int y);
// Under FP8 training (LoweringOptions::fp8), makes linear `op` (input x) an FP8 linear: Op::fp8,
// its cast traffic, and with Transformer Engine its input kept for backward as an FP8 copy.
void fp8_linear(LayerBuilder& B, Op& op, int x);
// The dense MLP of `width` units (S().f for a dense block, the shared expert's width in an MoE
// block), its ops named prefix.*.
int mlp(LayerBuilder& B, int x, const spec::ModelSpec& m, const std::string& prefix, Expr width);
// Multi-head latent attention (lower_mla.cpp); `work` as for the flash attention core.
int mla_attention(LayerBuilder& B, int x, const spec::ModelSpec& m, double work);
// The mixture-of-experts MLP of a block (lower_moe.cpp).
int moe_mlp(LayerBuilder& B, int x, const spec::ModelSpec& m);

}  // namespace mist::graph::detail
