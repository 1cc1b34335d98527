// Qwen3's attention lowered: projections h -> a·d -> h with a·d of its own, the attention core
// over a·d, and the per-head q/k RMSNorm with what it keeps.
#include <gtest/gtest.h>

#include "graph/liveness.hpp"
#include "graph/lower.hpp"
#include "graph_checks.hpp"

namespace mist::graph {
namespace {

using testing::eval;
using testing::find_op;

sym::Bindings at(const LoweredModel& lm, double t, double b = 1) {
  sym::Bindings x = lm.dims;
  x["t"] = t;
  x["b"] = b;
  x["ep"] = x["etp"] = 1;
  return x;
}

// The block holds the model's parameters, and its forward matmuls are 2 per active matmul
// parameter per token plus the attention core's 4·b·s²·a·d (a·d = 4096 on h = 2048 for 30B-A3B).
TEST(Qwen3Lowering, ParametersAndFlopsFollowTheQueryWidth) {
  for (const char* name : {"qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-8b"}) {
    const auto m = *spec::catalog_model(name);
    LoweringOptions o;
    const auto lm = lower(m, 4096, o);
    const auto b = at(lm, 1, 2);
    EXPECT_DOUBLE_EQ(eval(lm.block.params(), b), static_cast<double>(m.block_parameters())) << name;
    double gemm = 0, core = 0;
    for (const auto& op : lm.block.ops) {
      if (op.is_gemm) gemm += eval(op.fwd_flops, b);
      if (op.kind == OpKind::kFlashAttention) core += eval(op.fwd_flops, b);
    }
    const double tokens = 2.0 * 4096, h = static_cast<double>(m.hidden_size), d = static_cast<double>(m.head_dim());
    const double non_matmul = 2 * h + 2 * d;  // the two RMSNorms and the q/k norms
    EXPECT_NEAR(gemm / (2 * tokens * (static_cast<double>(m.active_block_parameters()) - non_matmul)), 1.0, 1e-12)
        << name;
    EXPECT_NEAR(core / (4 * 2 * 4096.0 * 4096 * m.query_width()), 1.0, 1e-12) << name;
  }
}

// The q/k norm keeps its inputs, q and k, and an fp32 1/rms per head and token. q and k are views
// of the fused QKV output, which the attention keeps alive anyway (it saves v, another view of
// it): so beyond a model without the norms a block keeps only the statistics, s·b·(a + g)/t·4.
TEST(Qwen3Lowering, QkNormKeepsItsInputsAndStatistics) {
  auto with = *spec::catalog_model("qwen3-8b");
  auto without = with;
  without.qk_norm = false;
  for (double t : {1.0, 4.0}) {
    LoweringOptions o;
    o.sequence_parallel = t > 1;
    auto saved = [&](const spec::ModelSpec& m) {
      const auto lm = lower(m, 4096, o);
      return eval(analyze_activations(lm.block, lm.dims).saved, at(lm, t));
    };
    const double T = 4096, a = 32, g = 8;
    const double extra = T * (a + g) / t * 4;
    EXPECT_NEAR(saved(with) - saved(without), extra, 1e-6 * extra) << "t=" << t;
  }
  const auto lm = lower(with, 4096, LoweringOptions{});
  const Op* n = find_op(lm.block, "attn.qk_norm");
  ASSERT_NE(n, nullptr);
  EXPECT_DOUBLE_EQ(eval(n->params, at(lm, 4)), 256);  // one weight of d for q, one for k, not sharded
}

}  // namespace
}  // namespace mist::graph
