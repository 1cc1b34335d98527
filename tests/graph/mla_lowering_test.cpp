// Multi-head latent attention in the lowering (lower_mla.cpp): its parameters against the model's
// count at any tp (the down projections whole on every GPU, the up and output projections split),
// its GEMM FLOPs, and what the block keeps for backward.
#include <gtest/gtest.h>

#include "graph/liveness.hpp"
#include "graph/lower.hpp"
#include "graph_checks.hpp"

namespace mist::graph {
namespace {

using testing::eval;
using testing::find_op;

LoweringOptions options(double t) {
  LoweringOptions o;
  o.sequence_parallel = t > 1;
  o.expert_parallel = true;
  return o;
}

TEST(MlaLowering, ParametersFollowTheModelAndTp) {
  const auto m = *spec::catalog_model("deepseek-v3");
  for (double t : {1.0, 2.0, 8.0}) {
    const auto lm = lower(m, 4096, options(t));
    sym::Bindings b = lm.dims;
    b["t"] = t;
    b["ep"] = 8;
    b["etp"] = 1;
    b["b"] = 1;
    double attn = 0;
    for (const auto& op : lm.block.ops)
      if (op.name.rfind("attn.", 0) == 0) attn += eval(op.params, b);
    // Replicated: q down 7168·1536, kv down 7168·576, the two latent norms; split t ways: q up,
    // kv up, the output projection.
    const double replicated = 7168.0 * 1536 + 7168.0 * 576 + 1536 + 512;
    const double split = 1536.0 * 128 * 192 + 512.0 * 128 * 256 + 128.0 * 128 * 7168;
    EXPECT_DOUBLE_EQ(attn, replicated + split / t) << "t " << t;
    if (t == 1.0) {
      b["ep"] = 1;
      EXPECT_DOUBLE_EQ(eval(lm.block.params(), b), static_cast<double>(m.block_parameters()));
      EXPECT_DOUBLE_EQ(eval(lm.dense_block.params(), b), static_cast<double>(m.dense_block_parameters()));
    }
    // The attention kernel: heads of 192 for the scores and 128 for the output.
    const Op* core = find_op(lm.block, "attn.core");
    ASSERT_NE(core, nullptr);
    EXPECT_DOUBLE_EQ(eval(core->fwd_flops, b), 2.0 * 4096 * 4096 * (128 / t) * (192 + 128));
    EXPECT_EQ(core->attention_work, 0.5);
  }
}

// Kept for backward, per token at tp 1 (bf16): the block input (ln1's), ln1's rstd, the q and kv
// down projections' shared input (the normed x) is ln1's output, the latents (q: 1536; kv: the
// 576-wide down output, which the kv norm's input, a view, keeps whole), their norms' outputs and
// rstds, the query, key (128·192 each) and value (128·128), the kernel's output (128·128) and lse.
TEST(MlaLowering, KeepsTheLatentsAndTheKernelsOperands) {
  const auto m = *spec::catalog_model("deepseek-v3");
  const auto lm = lower(m, 4096, options(1));
  sym::Bindings b = lm.dims;
  b["t"] = 1;
  b["ep"] = 8;
  b["etp"] = 1;
  b["b"] = 1;
  Layer attn_only = lm.dense_block;
  const auto a = analyze_activations(attn_only, b);
  const double tokens = 4096, w = 2;
  const double attention = tokens * (w * (7168 + 7168 + 1536 + 576 + 1536 + 512 + 2 * 128 * 192 + 128 * 128 + 128 * 128) +
                                     4 * 3 + 4 * 128);
  // The dense MLP after it keeps ln2's input and output and rstd, gate_up's output (2·18432),
  // the SwiGLU's output (18432).
  const double mlp = tokens * (w * (7168 + 7168 + 2 * 18432 + 18432) + 4);
  EXPECT_DOUBLE_EQ(eval(a.saved, b), attention + mlp);
}

}  // namespace
}  // namespace mist::graph
