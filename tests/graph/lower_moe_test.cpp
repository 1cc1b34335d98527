// The mixture-of-experts block: parameters, FLOPs, what it keeps and its dispatcher collectives.
#include <gtest/gtest.h>

#include "graph/liveness.hpp"
#include "graph/lower.hpp"
#include "graph_checks.hpp"

namespace mist::graph {
namespace {

using testing::eval;
using testing::find_op;

// Plan degrees: tp, expert parallelism, expert tensor parallelism.
struct Degrees {
  double t = 1, ep = 1, etp = 1;
};

// The lowering a plan of these degrees gets (PreparedJob::lowering): the collectives that exist.
LoweringOptions options(const spec::ModelSpec& m, Degrees d) {
  LoweringOptions o;
  o.sequence_parallel = d.t > 1;
  o.expert_parallel = d.ep > 1;
  o.expert_tensor_parallel = d.etp > 1;
  o.one_local_expert = d.ep == static_cast<double>(m.num_experts);
  return o;
}
LoweringOptions options(bool sp) {
  LoweringOptions o;
  o.sequence_parallel = sp;
  return o;
}

void bind(sym::Bindings& b, Degrees d) {
  b["t"] = d.t;
  b["ep"] = d.ep;
  b["etp"] = d.etp;
}

const Degrees kDegrees[] = {{1, 1, 1}, {2, 1, 1}, {2, 1, 2}, {8, 1, 8}, {8, 8, 1}, {4, 4, 2}, {1, 2, 1}};

const char* kMoeModels[] = {"mixtral-8x7b", "mixtral-8x22b", "qwen1.5-moe-a2.7b", "qwen2-57b-a14b"};

// The block's parameters are the model's count; the expert grid shards the experts ep·etp ways
// (E/ep experts, 1/etp of each), tensor parallelism the shared expert t ways, and the router stays
// whole on every GPU. Only the routed experts' weights are expert parameters.
TEST(MoeLowering, ParametersMatchTheModelSpec) {
  for (const char* name : kMoeModels) {
    const auto m = *spec::catalog_model(name);
    const auto lm = lower(m, 4096, options(false));
    sym::Bindings b = lm.dims;
    bind(b, {});
    EXPECT_DOUBLE_EQ(eval(lm.block.params(), b), static_cast<double>(m.block_parameters())) << name;
    const double total = eval(lm.embedding.params(), b) + m.num_layers * eval(lm.block.params(), b) +
                         eval(lm.head.params(), b);
    EXPECT_DOUBLE_EQ(total, static_cast<double>(m.num_parameters())) << name;
    const double experts = 3.0 * m.num_experts * m.hidden_size * m.moe_ffn_hidden_size;
    bind(b, {4, 2, 4});
    EXPECT_DOUBLE_EQ(eval(lm.block.expert_params(), b), experts / 8) << name;
    EXPECT_DOUBLE_EQ(eval(find_op(lm.block, "moe.experts.fc1")->params, b) +
                         eval(find_op(lm.block, "moe.experts.fc2")->params, b),
                     experts / 8)
        << name;
    EXPECT_DOUBLE_EQ(eval(find_op(lm.block, "moe.router")->params, b),
                     static_cast<double>(m.hidden_size * m.num_experts))
        << name;
    EXPECT_FALSE(find_op(lm.block, "moe.router")->expert) << name;
    if (const Op* shared = find_op(lm.block, "shared_expert.fc1")) {
      EXPECT_FALSE(shared->expert) << name;
    }
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
    // Each rank of a t-way TP group computes 1/t of the matmuls, however ep and etp split the
    // experts: the expert grid moves rows between ranks, not work.
    for (const Degrees d : kDegrees) {
      const auto lm_d = lower(m, 4096, options(m, d));
      sym::Bindings bd = lm_d.dims;
      bind(bd, d);
      bd["b"] = 2;
      double gemm_d = 0;
      for (const auto& op : lm_d.block.ops)
        if (op.is_gemm) gemm_d += eval(op.fwd_flops, bd);
      EXPECT_NEAR(gemm_d * d.t / gemm, 1.0, 1e-12) << name << " t=" << d.t << " ep=" << d.ep << " etp=" << d.etp;
    }
  }
}

// What the MoE MLP keeps beyond a dense SwiGLU MLP of one expert's width, under sequence
// parallelism over t GPUs (s·b = T tokens, T/t on each rank, w bytes per element): per local token
// the top-k softmax (fp32) and scatter indices (int64), k·12 bytes, the permutation's two int64
// index vectors, k·16, and the aux loss's fp32 softmax over the experts, E·4; the R = etp·(T/t)·k
// rows the rank's experts compute (the expert fc1's input, R·h·w, with their probabilities R·w:
// as many as the rank routed, balanced, times the expert tensor-parallel gather) and their
// activations R·3·f_e/etp·w, where the dense MLP keeps T·3·f_e/t·w (its column-parallel output
// covers the whole gathered sequence). The dense MLP keeps only
// the local shard of its input, which the router keeps too. Expert parallelism moves rows and
// keeps nothing more.
TEST(MoeLowering, KeepsTheRoutedTokensAndExpertActivations) {
  for (const char* name : {"mixtral-8x7b", "mixtral-8x22b"}) {
    const auto moe = *spec::catalog_model(name);
    auto dense = moe;
    dense.num_experts = dense.experts_per_token = 0;
    dense.ffn_hidden_size = moe.moe_ffn_hidden_size;
    dense.moe_ffn_hidden_size = 0;
    for (const Degrees d : kDegrees) {
      const double t = d.t;
      auto saved = [&](const spec::ModelSpec& m) {
        const auto lm = lower(m, 4096, m.is_moe() ? options(m, d) : options(t > 1));
        sym::Bindings b = lm.dims;
        bind(b, d);
        b["b"] = 1;
        return eval(analyze_activations(lm.block, lm.dims).saved, b);
      };
      const double T = 4096, h = static_cast<double>(moe.hidden_size), E = static_cast<double>(moe.num_experts),
                   k = static_cast<double>(moe.experts_per_token), fe = static_cast<double>(moe.moe_ffn_hidden_size);
      const double R = d.etp * T / t * k;
      const double extra = T / t * (k * 20 + E * 12) + R * (h * 2 + 2) + R * 3 * fe / d.etp * 2 - T * 3 * fe / t * 2;
      EXPECT_NEAR(saved(moe) - saved(dense), extra, 1e-6 * extra)
          << name << " t=" << t << " ep=" << d.ep << " etp=" << d.etp;
    }
  }
}

// The dispatcher's collectives, none of them hidden by a GEMM (marked exposed): with ep > 1 an
// all-to-all over the expert-parallel group of the T/t·k rows a rank routes (T/t·k·h·w bytes
// sent, the same back in backward) before the experts and one after; with etp > 1 an all-gather
// over the expert tensor-parallel group of the etp·T/t·k rows its experts compute and a
// reduce-scatter after them. A plan with ep = etp = 1 has none, whatever its tp.
TEST(MoeLowering, DispatcherCollectivesFollowTheExpertGrid) {
  const auto m = *spec::catalog_model("mixtral-8x7b");
  const Degrees d{4, 2, 4};
  const auto with = lower(m, 4096, options(m, d));
  sym::Bindings b = with.dims;
  bind(b, d);
  b["b"] = 1;
  const double routed = 4096.0 / d.t * 2, hw = m.hidden_size * 2.0;
  for (const char* name : {"moe.dispatch_a2a", "moe.combine_a2a"}) {
    const Op* a2a = find_op(with.block, name);
    ASSERT_TRUE(a2a) << name;
    EXPECT_EQ(a2a->fwd_comm.kind, CommKind::kAllToAll);
    EXPECT_EQ(a2a->bwd_comm.kind, CommKind::kAllToAll);
    EXPECT_EQ(a2a->fwd_comm.group, CommGroup::kExpert);
    EXPECT_DOUBLE_EQ(eval(a2a->fwd_comm.bytes, b), routed * hw);
    EXPECT_TRUE(a2a->exposed_comm);
  }
  const Op* gather = find_op(with.block, "moe.dispatch_gather");
  const Op* scatter = find_op(with.block, "moe.combine_scatter");
  ASSERT_TRUE(gather && scatter);
  EXPECT_EQ(gather->fwd_comm.kind, CommKind::kAllGather);
  EXPECT_EQ(gather->bwd_comm.kind, CommKind::kReduceScatter);
  EXPECT_EQ(scatter->fwd_comm.kind, CommKind::kReduceScatter);
  EXPECT_EQ(gather->fwd_comm.group, CommGroup::kExpertTp);
  EXPECT_DOUBLE_EQ(eval(gather->fwd_comm.bytes, b), d.etp * routed * hw);
  EXPECT_DOUBLE_EQ(eval(scatter->fwd_comm.bytes, b), d.etp * routed * hw);
  EXPECT_DOUBLE_EQ(eval(with.block.tensors[static_cast<size_t>(scatter->outputs[0])].bytes, b), routed * hw);
  EXPECT_TRUE(gather->exposed_comm && scatter->exposed_comm);
  const auto without = lower(m, 4096, options(m, {4, 1, 1}));
  for (const char* name : {"moe.dispatch_a2a", "moe.combine_a2a", "moe.dispatch_gather", "moe.combine_scatter"})
    EXPECT_EQ(find_op(without.block, name), nullptr) << name;
  // One expert per rank (ep = E): no rows to regroup expert-major.
  EXPECT_NE(find_op(with.block, "moe.sort_chunks"), nullptr);
  EXPECT_EQ(find_op(lower(m, 4096, options(m, {1, 8, 1})).block, "moe.sort_chunks"), nullptr);
}

// The liveness walk's bounds hold for MoE blocks as for dense ones.
TEST(MoeLowering, LivenessPeaksBoundTheSavedSet) {
  for (const char* name : kMoeModels) {
    for (const Degrees d : kDegrees) {
      const auto m = *spec::catalog_model(name);
      if (static_cast<int64_t>(d.ep) > m.num_experts) continue;
      auto lm = lower(m, 4096, options(m, d));
      sym::Bindings b = lm.dims;
      b["b"] = 2;
      bind(b, d);
      auto a = analyze_activations(lm.block, lm.dims);
      const double saved = eval(a.saved, b), input = eval(a.input, b);
      EXPECT_GE(eval(a.fwd_peak, b) + input + 1e-6, saved) << name;
      EXPECT_GE(eval(a.bwd_peak, b), saved) << name;
      EXPECT_GE(eval(a.bwd_peak_recomputed, b) + 1e-6, saved) << name;
    }
  }
}

// gpt-oss: the block's parameters (biases of q, k, v, o, the router and every expert; one sink
// per head) are the model's count, on one GPU and sharded (tp 2: the sinks and column biases
// halve; ep 4 etp 1: a quarter of the experts with their biases).
TEST(MoeLowering, GptOssParametersIncludeBiasesAndSinks) {
  const auto m = *spec::catalog_model("gpt-oss-20b");
  const auto lm = lower(m, 4096, options(m, {}));
  sym::Bindings b = lm.dims;
  bind(b, {});
  EXPECT_DOUBLE_EQ(eval(lm.block.params(), b), static_cast<double>(m.block_parameters()));
  bind(b, {2, 4, 1});
  const double h = 2880, fe = 2880, experts = 32;
  EXPECT_DOUBLE_EQ(eval(lm.block.expert_params(), b), experts / 4 * (3 * h * fe + 2 * fe + h));
  EXPECT_DOUBLE_EQ(eval(find_op(lm.block, "moe.router")->params, b), h * experts + experts);
  EXPECT_DOUBLE_EQ(eval(find_op(lm.block, "attn.core")->params, b), 64.0 / 2);
}

// The flash kernel's share of the s×s product: 1/2 for causal attention, and with gpt-oss's window
// of 128 on every other block, the mean of 1/2 and the band's share: per 128-query tile the
// diagonal tile at half and the one before it (the first tile has none): 0.5 + 31 · 1.5 = 47 of
// 32² tiles at s = 4096. A window that covers the sequence changes nothing.
TEST(MoeLowering, SlidingWindowCutsTheAttentionWork) {
  auto m = *spec::catalog_model("gpt-oss-20b");
  auto work = [&](int64_t seq) { return find_op(lower(m, seq, options(m, {})).block, "attn.core")->attention_work; };
  EXPECT_DOUBLE_EQ(work(4096), 0.5 * (47.0 / 1024.0) + 0.5 * 0.5);
  EXPECT_DOUBLE_EQ(work(128), 0.5);
  m.full_attention_interval = 0;  // every block windowed
  EXPECT_DOUBLE_EQ(work(4096), 47.0 / 1024.0);
  m.sliding_window = 1024;  // 8 tiles: j + 1 − 0.5 for j < 8, then 8.5 each (the band spans 9 tiles)
  double tiles = 0;
  for (int j = 0; j < 32; ++j) tiles += (j < 8 ? j + 1 : 9) - 0.5;
  EXPECT_DOUBLE_EQ(work(4096), tiles / 1024.0);
  const auto llama = *spec::catalog_model("llama3-8b");
  EXPECT_DOUBLE_EQ(find_op(lower(llama, 8192, options(false)).block, "attn.core")->attention_work, 0.5);
}

}  // namespace
}  // namespace mist::graph
