// The mixture-of-experts block: parameters, FLOPs, what it keeps and its dispatcher collectives.
#include <gtest/gtest.h>

#include "graph/liveness.hpp"
#include "graph/lower.hpp"

namespace mist::graph {
namespace {

double eval(const Expr& e, const sym::Bindings& b) {
  auto v = sym::evaluate(e, b);
  EXPECT_TRUE(v.has_value()) << (v ? "" : v.error().to_string());
  return v ? *v : 0;
}

LoweringOptions options(bool sp) {
  LoweringOptions o;
  o.sequence_parallel = sp;
  return o;
}

const char* kMoeModels[] = {"mixtral-8x7b", "mixtral-8x22b", "qwen1.5-moe-a2.7b", "qwen2-57b-a14b"};

const Op* find_op(const Layer& L, std::string_view name) {
  for (const auto& op : L.ops)
    if (op.name == name) return &op;
  return nullptr;
}

// The block's parameters are the model's count; tensor parallelism shards the experts and the
// shared expert t ways and keeps the router whole on every GPU.
TEST(MoeLowering, ParametersMatchTheModelSpec) {
  for (const char* name : kMoeModels) {
    const auto m = *spec::catalog_model(name);
    const auto lm = lower(m, 4096, options(false));
    sym::Bindings b = lm.dims;
    b["t"] = 1;
    EXPECT_DOUBLE_EQ(eval(lm.block.params(), b), static_cast<double>(m.block_parameters())) << name;
    const double total = eval(lm.embedding.params(), b) + m.num_layers * eval(lm.block.params(), b) +
                         eval(lm.head.params(), b);
    EXPECT_DOUBLE_EQ(total, static_cast<double>(m.num_parameters())) << name;
    b["t"] = 4;
    const double experts = 3.0 * m.num_experts * m.hidden_size * m.moe_ffn_hidden_size;
    EXPECT_DOUBLE_EQ(eval(find_op(lm.block, "moe.experts.fc1")->params, b) +
                         eval(find_op(lm.block, "moe.experts.fc2")->params, b),
                     experts / 4)
        << name;
    EXPECT_DOUBLE_EQ(eval(find_op(lm.block, "moe.router")->params, b),
                     static_cast<double>(m.hidden_size * m.num_experts))
        << name;
  }
}

// Forward matmul FLOPs are 2 per multiply-add of the parameters a token uses (the active ones:
// router, k experts, the shared expert) plus the attention core's 4·b·s²·h: the model FLOPs MFU
// counts follow the active parameters, not the total.
TEST(MoeLowering, ForwardFlopsFollowTheActiveParameters) {
  for (const char* name : kMoeModels) {
    const auto m = *spec::catalog_model(name);
    const auto lm = lower(m, 4096, options(false));
    sym::Bindings b = lm.dims;
    b["t"] = 1;
    b["b"] = 2;
    const double tokens = 2.0 * 4096, s = 4096, h = static_cast<double>(m.hidden_size);
    double gemm = 0, core = 0;
    for (const auto& op : lm.block.ops) {
      if (op.is_gemm) gemm += eval(op.fwd_flops, b);
      if (op.kind == OpKind::kFlashAttention) core += eval(op.fwd_flops, b);
    }
    // Active matmul parameters: everything active but the norms and biases.
    double bias = m.qkv_bias ? h + 2.0 * m.num_kv_heads * m.head_dim() : 0;
    const double matmul_params = static_cast<double>(m.active_block_parameters()) - 2 * h - bias;
    EXPECT_NEAR(gemm / (2 * tokens * matmul_params), 1.0, 1e-12) << name;
    EXPECT_NEAR(core / (4 * 2 * s * s * h), 1.0, 1e-12) << name;
  }
}

// What the MoE MLP keeps beyond a dense SwiGLU MLP of one expert's width, under sequence
// parallelism over t GPUs (s·b = T tokens, w bytes per element): per local token the top-k
// softmax (fp32) and scatter indices (int64), k·12 bytes, the permutation's two int64 index
// vectors, k·16, and the aux loss's fp32 softmax over the experts, E·4; the gathered routed rows
// (the expert fc1's input) T·k·h·w with their probabilities T·k·w; and the expert activations of
// the k-1 further copies of each token, (k-1)·T·3·f_e/t·w. The dense MLP keeps only the local
// shard of its input, which the router keeps too.
TEST(MoeLowering, KeepsTheRoutedTokensAndExpertActivations) {
  for (const char* name : {"mixtral-8x7b", "mixtral-8x22b"}) {
    const auto moe = *spec::catalog_model(name);
    auto dense = moe;
    dense.num_experts = dense.experts_per_token = 0;
    dense.ffn_hidden_size = moe.moe_ffn_hidden_size;
    dense.moe_ffn_hidden_size = 0;
    for (double t : {1.0, 2.0, 8.0}) {
      const bool sp = t > 1;
      auto saved = [&](const spec::ModelSpec& m) {
        const auto lm = lower(m, 4096, options(sp));
        sym::Bindings b = lm.dims;
        b["t"] = t;
        b["b"] = 1;
        return eval(analyze_activations(lm.block, lm.dims).saved, b);
      };
      const double T = 4096, h = static_cast<double>(moe.hidden_size), E = static_cast<double>(moe.num_experts),
                   k = static_cast<double>(moe.experts_per_token), fe = static_cast<double>(moe.moe_ffn_hidden_size);
      const double extra = T / t * (k * 28 + E * 4) + T * k * (h * 2 + 2) + (k - 1) * T * 3 * fe / t * 2;
      EXPECT_NEAR(saved(moe) - saved(dense), extra, 1e-6 * extra) << name << " t=" << t;
    }
  }
}

// Under tensor parallelism the dispatcher gathers every routed token of the group before the
// experts and reduce-scatters their output after them: collectives of T·k·h·w bytes that no GEMM
// hides (marked exposed); without it there are none.
TEST(MoeLowering, DispatcherCollectivesUnderTensorParallelism) {
  const auto m = *spec::catalog_model("mixtral-8x7b");
  const auto with = lower(m, 4096, options(true));
  sym::Bindings b = with.dims;
  b["t"] = 4;
  b["b"] = 1;
  const Op* gather = find_op(with.block, "moe.dispatch_gather");
  const Op* scatter = find_op(with.block, "moe.combine_scatter");
  ASSERT_TRUE(gather && scatter);
  const double bytes = 4096.0 * 2 * m.hidden_size * 2;
  EXPECT_EQ(gather->fwd_comm.kind, CommKind::kAllGather);
  EXPECT_EQ(gather->bwd_comm.kind, CommKind::kReduceScatter);
  EXPECT_EQ(scatter->fwd_comm.kind, CommKind::kReduceScatter);
  EXPECT_DOUBLE_EQ(eval(gather->fwd_comm.bytes, b), bytes);
  EXPECT_DOUBLE_EQ(eval(scatter->fwd_comm.bytes, b), bytes);
  EXPECT_TRUE(gather->exposed_comm && scatter->exposed_comm);
  const auto without = lower(m, 4096, options(false));
  EXPECT_EQ(find_op(without.block, "moe.dispatch_gather"), nullptr);
  EXPECT_EQ(find_op(without.block, "moe.combine_scatter"), nullptr);
}

// The liveness walk's bounds hold for MoE blocks as for dense ones.
TEST(MoeLowering, LivenessPeaksBoundTheSavedSet) {
  for (const char* name : kMoeModels) {
    for (bool sp : {false, true}) {
      const auto m = *spec::catalog_model(name);
      auto lm = lower(m, 4096, options(sp));
      sym::Bindings b = lm.dims;
      b["b"] = 2;
      b["t"] = sp ? 4 : 1;
      auto a = analyze_activations(lm.block, lm.dims);
      const double saved = eval(a.saved, b), input = eval(a.input, b);
      EXPECT_GE(eval(a.fwd_peak, b) + input + 1e-6, saved) << name;
      EXPECT_GE(eval(a.bwd_peak, b), saved) << name;
      EXPECT_GE(eval(a.bwd_peak_recomputed, b) + 1e-6, saved) << name;
    }
  }
}

}  // namespace
}  // namespace mist::graph
