#include "graph/lower.hpp"

#include <set>

#include <algorithm>

#include <gtest/gtest.h>

#include "graph/liveness.hpp"

namespace mist::graph {
namespace {

double eval(const Expr& e, const sym::Bindings& b) {
  auto v = sym::evaluate(e, b);
  EXPECT_TRUE(v.has_value()) << (v ? "" : v.error().to_string());
  return v ? *v : 0;
}

LoweringOptions options(bool sp, bool flash, bool dropout = false) {
  LoweringOptions o;
  o.sequence_parallel = sp;
  o.flash_attention = flash;
  o.dropout = dropout;
  return o;
}

// Llama 3 8B in bf16 at sequence length `seq`, with its lowering's training settings.
struct Llama8b {
  spec::ModelSpec m = *spec::catalog_model("llama3-8b");
  spec::TrainingSpec t;
  explicit Llama8b(int64_t seq) {
    t.precision = spec::Dtype::kBf16;
    t.seq_length = seq;
  }
  LoweredModel lowered(bool sp = false) const {
    return lower(m, t.seq_length, lowering_options(t, sp, spec::Engine::kTorchtitan));
  }
};

const char* kModels[] = {"gpt3-1.3b", "gpt3-175b", "llama2-70b", "llama3-8b", "falcon-7b", "falcon-40b"};

// The lowering's parameters add up to the model's own count, for every family; with tensor
// parallelism every GPU holds the sharded part once and the replicated part (norms, biases) whole.
TEST(Lowering, ParametersMatchTheModelSpec) {
  for (const char* name : kModels) {
    const auto m = *spec::catalog_model(name);
    const auto lm = lower(m, 2048, options(false, true));
    sym::Bindings b = lm.dims;
    b["t"] = 1;
    const double total = eval(lm.embedding.params(), b) + m.num_layers * eval(lm.block.params(), b) +
                         eval(lm.head.params(), b);
    EXPECT_DOUBLE_EQ(total, static_cast<double>(m.num_parameters())) << name;
    EXPECT_DOUBLE_EQ(eval(lm.block.params(), b), static_cast<double>(m.block_parameters())) << name;
    b["t"] = 8;
    const double per_gpu = eval(lm.block.params(), b);
    EXPECT_GT(per_gpu, m.block_parameters() / 8.0) << name;
    EXPECT_LT(per_gpu, m.block_parameters() / 8.0 + 10.0 * m.hidden_size) << name;
  }
}

// Every kind the lowering emits has a stored name that parses back to it; other names parse to none.
TEST(Lowering, OpKindsRoundTripThroughTheirStoredNames) {
  std::set<std::string> seen;
  for (const char* name : kModels)
    for (bool flash : {false, true}) {
      const auto lm = lower(*spec::catalog_model(name), 2048, options(false, flash, true));
      for (const Layer* L : {&lm.embedding, &lm.block, &lm.head})
        for (const auto& op : L->ops) {
          EXPECT_EQ(parse_op_kind(to_string(op.kind)), op.kind) << op.name;
          seen.insert(to_string(op.kind));
        }
    }
  EXPECT_EQ(seen.size(), 16u);  // every enumerator of OpKind (the fp32 cast too: bf16 models above)
  EXPECT_EQ(parse_op_kind("linear"), OpKind::kLinear);
  for (const char* other : {"layer", "Linear", "", "conv2d"}) EXPECT_FALSE(parse_op_kind(other).has_value()) << other;
}

// FLOPs of a block: 2 FLOPs per multiply-add of every matmul; for GPT the well-known
// 24·b·s·h² + 4·b·s²·h forward (Narayanan et al. SC21, Eq. 3 without the LM head).
TEST(Lowering, GptBlockForwardFlops) {
  const auto m = *spec::catalog_model("gpt3-13b");
  const auto lm = lower(m, 2048, options(false, false));
  sym::Bindings b = lm.dims;
  b["t"] = 1;
  b["b"] = 4;
  const double s = 2048, h = m.hidden_size, bb = 4;
  double matmul = 0;
  for (const auto& op : lm.block.ops)
    if (op.kind == OpKind::kLinear || op.kind == OpKind::kBmm) matmul += eval(op.fwd_flops, b);
  EXPECT_NEAR(matmul / (24 * bb * s * h * h + 4 * bb * s * s * h), 1.0, 1e-12);
  // Backward of every matmul is twice its forward.
  EXPECT_NEAR(eval(lm.block.bwd_flops(), b) / eval(lm.block.fwd_flops(), b), 2.0, 0.05);
}

TEST(Lowering, SequenceParallelShardsEveryActivation) {
  for (const char* name : kModels) {
    const auto m = *spec::catalog_model(name);
    sym::Bindings b = lower(m, 2048, options(false, false)).dims;
    b["b"] = 1;
    auto saved = [&](bool sp, double t) {
      auto lm = lower(m, 2048, options(sp, false, true));
      auto a = analyze_activations(lm.block, {});
      sym::Bindings bb = b;
      bb["t"] = t;
      return eval(a.saved, bb);
    };
    // With SP every saved tensor is split t ways: 8 GPUs hold exactly 1/8 of one GPU's.
    EXPECT_NEAR(saved(true, 8) / saved(false, 1), 1.0 / 8, 1e-9) << name;
    EXPECT_GT(saved(false, 8), saved(true, 8)) << name;
  }
}

TEST(Lowering, LivenessPeaksBoundTheSavedSet) {
  for (const char* name : kModels) {
    for (bool flash : {false, true}) {
      for (bool sp : {false, true}) {
        const auto m = *spec::catalog_model(name);
        auto lm = lower(m, 4096, options(sp, flash, true));
        sym::Bindings b = lm.dims;
        b["b"] = 2;
        b["t"] = 4;
        for (const Layer* L : {&lm.embedding, &lm.block, &lm.head}) {
          auto a = analyze_activations(*L, lm.dims);
          const double saved = eval(a.saved, b), input = eval(a.input, b);
          // Forward ends holding what it saved (input excluded) plus its output.
          EXPECT_GE(eval(a.fwd_peak, b) + input + 1e-6, saved) << name << " " << L->name;
          // Backward starts holding everything saved plus the output gradient.
          EXPECT_GE(eval(a.bwd_peak, b), saved) << name << " " << L->name;
          EXPECT_LE(eval(a.saved_selective, b), saved) << name << " " << L->name;
          // Selective recompute can peak above no recompute (the replayed core plus the output its
          // checkpoint holds; measured by `mist validate`, docs/validation.md), but never below
          // what it saves.
          EXPECT_GE(eval(a.bwd_peak_selective, b), eval(a.saved_selective, b)) << name << " " << L->name;
          // A fully recomputed layer rebuilds everything it would have saved, on top of its input,
          // and holds its recomputed output and output gradient while back-propagating.
          EXPECT_GE(eval(a.bwd_peak_recomputed, b) + 1e-6, saved) << name << " " << L->name;
          EXPECT_GE(eval(a.bwd_peak_recomputed, b), eval(a.bwd_peak, b) - 1e-6) << name << " " << L->name;
          EXPECT_LE(eval(a.fwd_peak_selective, b), eval(a.fwd_peak, b) + 1e-6) << name << " " << L->name;
        }
      }
    }
  }
}

// The non-flash GQA path repeats k and v to all heads (Megatron), so the saved s² probabilities
// and the expanded k, v appear; with flash only the g kv heads are kept.
TEST(Lowering, GqaKeepsOnlyKvHeadsWithFlash) {
  const auto m = *spec::catalog_model("llama2-70b");  // 64 heads, 8 kv heads
  sym::Bindings b = lower(m, 4096, options(false, true)).dims;
  b["b"] = 1;
  b["t"] = 8;
  auto saved = [&](bool flash) {
    auto lm = lower(m, 4096, options(false, flash));
    return eval(analyze_activations(lm.block, {}).saved, b);
  };
  const double s = 4096, h = m.hidden_size;
  const double flash = saved(true);
  // Flash: no a·s² term; the qkv projection output is (h + 2h·g/a) wide.
  EXPECT_LT(flash, 40 * s * h);
  EXPECT_GT(saved(false) - flash, 2.0 * m.num_heads / 8 * s * s);  // at least the fp16 probabilities
}

// torchtitan's loss under torch.compile (training compile_loss, its default since 2025): the bf16
// logits and each row's log-sum-exp kept, where the eager loss keeps the fp32 log-softmax and the
// targets; no fp32 copy, log-softmax or its gradient at the backward's peak.
TEST(Lowering, TorchtitanCompiledLossKeepsTheLogits) {
  Llama8b j(8192);
  j.t.compile = true;
  const auto compiled = j.lowered();
  j.t.compile_loss = false;
  const auto eager = j.lowered();
  sym::Bindings b = compiled.dims;
  b["b"] = 2;
  b["t"] = 1;
  const double sb = 8192 * 2, n = sb * 128256;
  const auto c = analyze_activations(compiled.head, compiled.dims), e = analyze_activations(eager.head, eager.dims);
  EXPECT_DOUBLE_EQ(eval(e.saved, b) - eval(c.saved, b), (4 * n + 9 * sb) - (2 * n + 4 * sb));
  EXPECT_GE(eval(e.bwd_peak, b) - eval(c.bwd_peak, b), 2 * 4 * n);
  EXPECT_GE(eval(e.fwd_peak, b) - eval(c.fwd_peak, b), 4 * n);
}

// DTensor's sequence parallelism (torchtitan): each column-parallel group's gathered input is what
// its matmuls keep, where Megatron keeps the shard and gathers it again in backward; torchao's
// float8 TP gathers it in FP8; under the op-level selective policy the gather is recomputed as
// Megatron's is. Loss parallelism adds one fp32 logits-sized tensor to each pass of the loss.
TEST(Lowering, TorchtitanSequenceParallelKeepsTheGatheredInput) {
  Llama8b j(4096);
  const auto tt = j.lowered(true);
  auto mo = lowering_options(j.t, true, spec::Engine::kTorchtitan);
  mo.sp_keeps_gathered = false;
  const auto shard = lower(j.m, j.t.seq_length, mo);
  mo.sp_keeps_gathered = true;
  mo.recomputes_selectively = true;
  const auto sac = lower(j.m, j.t.seq_length, mo);
  j.t.fp8 = spec::Fp8Recipe::kTensorwise;
  const auto fp8 = j.lowered(true);
  sym::Bindings b = tt.dims;
  b["b"] = 1;
  b["t"] = 8;
  const double sbh = 4096.0 * 4096;
  auto saved = [&](const LoweredModel& lm) { return eval(analyze_activations(lm.block, lm.dims).saved, b); };
  // Two groups (wq, wk, wv; w1, w3): the whole gathered input kept instead of the shard.
  EXPECT_DOUBLE_EQ(saved(tt) - saved(shard), 2 * (2 * sbh - 2 * sbh / 8));
  EXPECT_DOUBLE_EQ(saved(sac), saved(shard));
  EXPECT_DOUBLE_EQ(saved(tt) - saved(fp8), 2 * sbh);  // one byte an element instead of two
  auto regathers = [](const LoweredModel& lm) {
    return std::ranges::count_if(lm.block.ops, [](const Op& op) { return op.bwd_regather.kind != CommKind::kNone; });
  };
  EXPECT_EQ(regathers(tt), 0);
  EXPECT_EQ(regathers(sac), 2);
  EXPECT_EQ(regathers(shard), 2);
  // Loss parallelism: the head's forward and backward each hold one more fp32 tensor of the
  // rank's logits when t > 1.
  const double n = 4096.0 * 128256;
  bool shifted = false, one_hot = false;
  for (const auto& op : tt.head.ops)
    if (op.name == "loss.cross_entropy") {
      for (int i : op.fwd_temporaries)
        if (tt.head.tensors[i].name == "loss.parallel_shifted") {
          b["t"] = 1;
          EXPECT_DOUBLE_EQ(eval(tt.head.tensors[i].bytes, b), 0);
          b["t"] = 8;
          EXPECT_DOUBLE_EQ(eval(tt.head.tensors[i].bytes, b), 4 * n / 8);
          shifted = true;
        }
      for (int i : op.bwd_temporaries) one_hot |= tt.head.tensors[i].name == "loss.parallel_one_hot";
    }
  EXPECT_TRUE(shifted && one_hot);
}

}  // namespace
}  // namespace mist::graph

namespace mist::graph {
namespace {

// torchtitan's op-level selective policy on its Llama block (wq, wk, wv, SDPA, wo; w1, w3, w2): it
// keeps the outputs of the attention kernel and of the 1st, 3rd, 5th and 7th matmul, recomputes the
// rest, and between forward and backward holds exactly those plus the block's input.
TEST(Lowering, TorchtitanSelectivePolicyKeepsEveryOtherMatmul) {
  const auto m = *spec::catalog_model("llama3-8b");
  spec::TrainingSpec t;
  t.precision = spec::Dtype::kBf16;
  t.flash_attention = true;
  t.seq_length = 8192;
  const auto lm = lower(m, t.seq_length, lowering_options(t, false, spec::Engine::kTorchtitan));
  std::set<std::string> kept, recomputed_matmuls;
  for (const auto& op : lm.block.ops) {
    if (!op.selective_recompute && op.kind != OpKind::kView) kept.insert(op.name);
    if (op.selective_recompute && op.kind == OpKind::kLinear) recomputed_matmuls.insert(op.name);
  }
  EXPECT_EQ(kept, (std::set<std::string>{"attn.wq", "attn.wv", "attn.core", "mlp.w1", "mlp.down"}));
  EXPECT_EQ(recomputed_matmuls, (std::set<std::string>{"attn.wk", "attn.proj", "mlp.w3"}));
  sym::Bindings b = lm.dims;
  b["b"] = 1;
  b["t"] = 1;
  const auto acts = analyze_activations(lm.block, lm.dims);
  const double s = 8192, h = 4096, kv = 1024, f = 14336, a = 32;
  // input, wq, wv, the attention output and its fp32 log-sum-exp, w1, w2 (bf16).
  EXPECT_DOUBLE_EQ(eval(acts.saved_selective, b), s * (2 * h + 2 * h + 2 * kv + 2 * h + 2 * f + 2 * h) + 4 * a * s);
  // Without recompute the eager block keeps far more (fp32 copies of the norms and the rotary).
  EXPECT_GT(eval(acts.saved, b), 2.5 * eval(acts.saved_selective, b));
  // The backward replays the block on top of what it kept: above the kept set, and at most a full
  // recompute's replay with the kept outputs held besides.
  EXPECT_GT(eval(acts.bwd_peak_selective, b), eval(acts.saved_selective, b));
  EXPECT_LE(eval(acts.bwd_peak_selective, b),
            eval(acts.bwd_peak_recomputed, b) + eval(acts.saved_selective, b) - eval(acts.input, b));
  // Megatron's policy (and lowering) is unchanged by the engine option's default.
  const auto mega = lower(m, t.seq_length, lowering_options(t, false));
  for (const auto& op : mega.block.ops) EXPECT_EQ(op.selective_recompute, op.attention_core) << op.name;
}

// torch.compile of the blocks (training.compile): one kernel per elementwise chain, and AOTAutograd
// keeps of the policy's outputs only those the backward reads: w2's output feeds the residual sum
// alone, whose backward reads nothing, so a compiled block drops it. The head stays eager.
TEST(Lowering, CompiledTorchtitanBlocksFuseAndKeepWhatTheBackwardReads) {
  Llama8b j(8192);
  const auto eager = j.lowered();
  j.t.compile = true;
  const auto compiled = j.lowered();
  EXPECT_TRUE(compiled.block.compiled);
  EXPECT_FALSE(eager.block.compiled);
  for (const auto& op : compiled.block.ops)  // repeat_kv copies k and v: two tensors, two kernels
    EXPECT_EQ(op.stream_kernels, op.name == "attn.expand_kv" ? 2 : 1) << op.name;
  int eager_kernels = 0;
  for (const auto& op : eager.block.ops) eager_kernels += op.stream_kernels;
  EXPECT_GT(eager_kernels, static_cast<int>(eager.block.ops.size()) + 10);
  // The copies around attention stay (repeat_kv, contiguous), compiled or not.
  auto has = [](const Layer& l, const std::string& name) {
    return std::ranges::any_of(l.ops, [&](const Op& op) { return op.name == name; });
  };
  EXPECT_TRUE(has(compiled.block, "attn.expand_kv") && has(compiled.block, "attn.contiguous"));
  // The head is not compiled (torchtitan's apply_compile wraps the blocks only).
  EXPECT_EQ(compiled.head.ops.front().stream_kernels, eager.head.ops.front().stream_kernels);
  EXPECT_GT(compiled.head.ops.front().stream_kernels, 1);
  sym::Bindings b = compiled.dims;
  b["b"] = 1;
  b["t"] = 1;
  const double s = 8192, h = 4096;
  const auto a_eager = analyze_activations(eager.block, eager.dims);
  const auto a_compiled = analyze_activations(compiled.block, compiled.dims);
  EXPECT_DOUBLE_EQ(eval(a_eager.saved_selective, b) - eval(a_compiled.saved_selective, b), s * 2 * h);
}

}  // namespace
}  // namespace mist::graph
