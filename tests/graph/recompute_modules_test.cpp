// Megatron-LM's --recompute-modules (training.recompute_modules): what a selectively recomputed
// block keeps for backward and holds while its backward runs, module by module. A checkpoint
// (core_attn, mlp, moe, shared_experts) keeps its inputs; CheckpointWithoutOutput (layernorm,
// moe_act, mla_up_proj) also frees the output its consumers saved, and restores it when the
// gradient reaches the module holding the hook, beside the replay's own copy.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "graph/liveness.hpp"
#include "graph/lower.hpp"
#include "graph_checks.hpp"

namespace mist::graph {
namespace {

using testing::eval;
using testing::find_op;

struct Lowered {
  LoweredModel lm;
  sym::Bindings at;
};

// The model at seq 4096, micro-batch 1, tp 2 with sequence parallelism, ep 2, recomputing `modules`.
Lowered lowered(const std::string& name, uint32_t modules) {
  const auto m = *spec::catalog_model(name);
  spec::TrainingSpec t;
  t.global_batch_size = 8;
  t.seq_length = 4096;
  t.recompute_modules = modules;
  auto o = lowering_options(t, true);
  o.expert_parallel = m.is_moe();
  Lowered r{lower(m, 4096, o), {}};
  r.at = r.lm.dims;
  r.at["b"] = 1;
  r.at["t"] = 2;
  r.at["cp"] = 1;
  r.at["ep"] = 2;
  r.at["etp"] = 1;
  return r;
}

double out_bytes(const Layer& L, const std::string& op, const sym::Bindings& at, size_t i = 0) {
  const Op* o = find_op(L, op);
  EXPECT_NE(o, nullptr) << op;
  return o ? eval(L.tensors[o->outputs[i]].bytes, at) : 0;
}

// Bytes of the storages that ops named with `prefix` (or named `prefix` alone: `exact`) produce
// and some op saves (what a checkpoint of those ops no longer keeps).
double saved_inside(const Layer& L, const std::string& prefix, const sym::Bindings& at, bool exact = false) {
  std::set<int> produced, saved;
  for (const auto& op : L.ops)
    if (exact ? op.name == prefix : op.name.starts_with(prefix))
      for (int t : op.outputs) produced.insert(L.tensors[t].view_of >= 0 ? L.tensors[t].view_of : t);
  for (const auto& op : L.ops)
    for (int t : op.saved) {
      const int s = L.tensors[t].view_of >= 0 ? L.tensors[t].view_of : t;
      if (produced.count(s)) saved.insert(s);
    }
  double sum = 0;
  for (int s : saved) sum += eval(L.tensors[s].bytes, at);
  return sum;
}

// "layernorm" in an MoE block: the pre-MLP norm's output (h per token of the sequence shard, bf16)
// and its fp32 statistics are no longer kept. In backward the output is back in its storage from
// the MoE's last op on, with the replay's copy beside it: the backward peak (inside the MoE) holds
// one copy more than without recompute.
TEST(RecomputeModules, LayernormFreesTheMoePreMlpNormsOutput) {
  const auto none = lowered("qwen3-30b-a3b", spec::kRecomputeCoreAttn);
  const auto ln = lowered("qwen3-30b-a3b", spec::kRecomputeLayernorm);
  const auto a = analyze_activations(none.lm.block, none.at);
  const auto b = analyze_activations(ln.lm.block, ln.at);
  const double x2 = out_bytes(ln.lm.block, "ln2", ln.at), stats = out_bytes(ln.lm.block, "ln2", ln.at, 1);
  EXPECT_DOUBLE_EQ(x2, 4096.0 / 2 * 2048 * 2);  // s·b·h/t, bf16
  EXPECT_DOUBLE_EQ(eval(a.saved, none.at) - eval(b.saved_selective, ln.at), x2 + stats);
  EXPECT_DOUBLE_EQ(eval(b.bwd_peak_selective, ln.at), eval(a.bwd_peak, none.at) + x2);
  // Nothing else is recomputed: the attention core is kept (the list replaces the default).
  EXPECT_FALSE(find_op(ln.lm.block, "attn.core")->selective_recompute);
  EXPECT_TRUE(find_op(ln.lm.block, "ln2")->recompute_without_output);
  // The dense blocks' norms are fused into their linears (TELayerNormColumnParallelLinear): a dense
  // model's layernorm recompute recomputes nothing.
  const auto dense = lowered("llama3-8b", spec::kRecomputeLayernorm);
  for (const auto& op : dense.lm.block.ops) EXPECT_FALSE(op.selective_recompute) << op.name;
}

// "moe_act": the experts' activation output (the rows' f_e values, bf16) is not kept; fc2's
// backward finds it restored.
TEST(RecomputeModules, MoeActFreesTheExpertsActivation) {
  const auto none = lowered("qwen3-30b-a3b", spec::kRecomputeCoreAttn);
  const auto act = lowered("qwen3-30b-a3b", spec::kRecomputeMoeAct);
  const auto a = analyze_activations(none.lm.block, none.at);
  const auto b = analyze_activations(act.lm.block, act.at);
  const auto m = *spec::catalog_model("qwen3-30b-a3b");
  // Rows on this rank: its 2048 tokens' top-8 copies, balanced over ep 2 ranks: 2048·8.
  const double y = 2048.0 * m.experts_per_token * m.moe_ffn_hidden_size * 2;
  EXPECT_DOUBLE_EQ(out_bytes(act.lm.block, "moe.experts.swiglu", act.at), y);
  EXPECT_DOUBLE_EQ(eval(a.saved, none.at) - eval(b.saved_selective, act.at), y);
  EXPECT_GE(eval(b.bwd_peak_selective, act.at), eval(a.bwd_peak, none.at) - y);
  EXPECT_LE(eval(b.bwd_peak_selective, act.at), eval(a.bwd_peak, none.at) + y);
}

// "moe": the whole MoE layer is a checkpoint keeping only its input (the normed hidden state, kept
// by the norm anyway): everything its ops produce and save goes, and the combination with moe_act
// is the same as moe alone. "shared_experts" frees the shared expert's own.
TEST(RecomputeModules, MoeKeepsOnlyTheLayersInput) {
  const auto none = lowered("qwen2-57b-a14b", spec::kRecomputeCoreAttn);
  const auto moe = lowered("qwen2-57b-a14b", spec::kRecomputeMoe);
  const auto both = lowered("qwen2-57b-a14b", spec::kRecomputeMoe | spec::kRecomputeMoeAct);
  const auto shared = lowered("qwen2-57b-a14b", spec::kRecomputeSharedExperts);
  const auto a = analyze_activations(none.lm.block, none.at);
  const double inside = saved_inside(none.lm.block, "moe.", none.at) + saved_inside(none.lm.block, "shared_expert", none.at);
  EXPECT_GT(inside, 0);
  EXPECT_DOUBLE_EQ(eval(analyze_activations(moe.lm.block, moe.at).saved_selective, moe.at), eval(a.saved, none.at) - inside);
  EXPECT_DOUBLE_EQ(eval(analyze_activations(both.lm.block, both.at).saved_selective, both.at),
                   eval(analyze_activations(moe.lm.block, moe.at).saved_selective, moe.at));
  // The shared expert's own saved tensors (its gate, outside SharedExpertMLP's checkpoint, keeps
  // the MLP's output).
  const double own = saved_inside(none.lm.block, "shared_expert.", none.at) -
                     saved_inside(none.lm.block, "shared_expert.gate", none.at, true) -
                     saved_inside(none.lm.block, "shared_expert.gated", none.at, true);
  const double kept_output = out_bytes(none.lm.block, "shared_expert.down", none.at);
  EXPECT_DOUBLE_EQ(eval(a.saved, none.at) - eval(analyze_activations(shared.lm.block, shared.at).saved_selective, shared.at),
                   own - kept_output);
}

// "mlp" recomputes the dense blocks' MLP (with its fused norm) and leaves an MoE block alone;
// "mla_up_proj" frees latent attention's normed latents and the query, key and value its rotary
// kernel writes, which the attention core finds restored.
TEST(RecomputeModules, MlpAndMlaUpProjOnDeepSeekV3) {
  const auto none = lowered("deepseek-v3", spec::kRecomputeCoreAttn);
  const auto mlp = lowered("deepseek-v3", spec::kRecomputeMlp);
  const auto up = lowered("deepseek-v3", spec::kRecomputeMlaUpProj);
  for (const auto& op : mlp.lm.block.ops) EXPECT_FALSE(op.selective_recompute) << op.name;
  const auto d0 = analyze_activations(none.lm.dense_block, none.at);
  const auto d1 = analyze_activations(mlp.lm.dense_block, mlp.at);
  EXPECT_DOUBLE_EQ(eval(d0.saved, none.at) - eval(d1.saved_selective, mlp.at),
                   saved_inside(none.lm.dense_block, "mlp.", none.at) + saved_inside(none.lm.dense_block, "ln2", none.at));
  const auto b0 = analyze_activations(none.lm.block, none.at);
  const auto b1 = analyze_activations(up.lm.block, up.at);
  double freed = 0;
  for (const char* op : {"attn.q_norm", "attn.q_up", "attn.kv_norm", "attn.kv_up"})
    freed += out_bytes(up.lm.block, op, up.at) + (std::string(op).ends_with("norm") ? out_bytes(up.lm.block, op, up.at, 1) : 0);
  for (size_t i = 0; i < 3; ++i) freed += out_bytes(up.lm.block, "attn.rotary", up.at, i);
  // q_norm's and kv_norm's outputs are their up projections' saved inputs; q_up's and kv_up's
  // outputs were kept by nothing (the rotary kernel keeps no activation).
  freed -= out_bytes(up.lm.block, "attn.q_up", up.at) + out_bytes(up.lm.block, "attn.kv_up", up.at);
  // The checkpoint keeps its inputs, the gathered rotary key among them (kept by nothing before).
  freed -= out_bytes(up.lm.block, "attn.k_rope_gather", up.at);
  EXPECT_DOUBLE_EQ(eval(b0.saved, none.at) - eval(b1.saved_selective, up.at), freed);
  EXPECT_GT(eval(b1.bwd_peak_selective, up.at), 0);
}

}  // namespace
}  // namespace mist::graph
