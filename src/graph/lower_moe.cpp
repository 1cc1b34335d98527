// The mixture-of-experts MLP of a block, as Megatron-Core runs it (megatron/core/transformer/moe:
// TopKRouter, MoEAlltoAllTokenDispatcher, TEGroupedMLP, SharedExpertMLP) with the experts
// tensor-parallel over the same t GPUs as the attention (expert_tensor_parallel_size = tp, its
// default) and no expert parallelism, unfused permutation (--moe-permute-fusion off) and the
// activation dtype for the router. Tokens are assumed balanced across experts: each expert computes
// s·b·k/E tokens (the published MoE runs force the balance; a router imbalance factor is future
// work). docs/memory-model.md, "Mixture of experts", lists what each step keeps, with the source
// lines of Megatron-LM d98e8a64 it follows.
#include "graph/builder.hpp"

namespace mist::graph::detail {

namespace {

Expr constant(int64_t v) { return Expr(static_cast<double>(v)); }

// The expert GEMMs of all E experts in one grouped GEMM: E problems of s·b·k/E tokens each.
// `tokens` is s·b·k (every token of the TP group, after the dispatcher's all-gather).
int grouped_linear(LayerBuilder& B, const std::string& name, int x, Expr tokens, Expr in, Expr out, Expr experts) {
  const auto& o = B.o_;
  int y = B.tensor(name + ".out", tokens * out * w(o));
  Op& op = B.op(name, OpKind::kLinear, {x}, {y}, {x});
  op.params = experts * in * out;
  op.is_gemm = true;
  op.gemm = {experts, tokens / experts, out, in};
  op.fwd_flops = 2 * tokens * in * out;
  op.bwd_flops = 2 * op.fwd_flops;
  op.bytes_read = tokens * in * w(o) + op.params * w(o);
  op.bytes_written = tokens * out * w(o);
  return y;
}

// A collective of the dispatcher over the TP group, outside any linear: the tokens each rank
// routed gathered to every rank of the group (all-gather, reduce-scatter in backward), or the
// experts' partial sums reduced back to the rank that owns each token (the reverse).
int dispatcher_comm(LayerBuilder& B, const std::string& name, int x, Expr full_bytes, bool gather) {
  const auto& o = B.o_;
  int y = B.tensor(name + ".out", gather ? full_bytes : full_bytes / region(o));
  Op& op = B.op(name, OpKind::kCopy, {x}, {y}, {});
  op.fwd_comm = {gather ? CommKind::kAllGather : CommKind::kReduceScatter, full_bytes};
  op.bwd_comm = {gather ? CommKind::kReduceScatter : CommKind::kAllGather, full_bytes};
  op.exposed_comm = true;
  op.fwd_flops = Expr(0.0);
  op.bwd_flops = Expr(0.0);
  op.bytes_read = Expr(0.0);
  op.bytes_written = Expr(0.0);
  return y;
}

// A linear h -> `out` with its weight whole on every GPU (the router, the shared expert's gate),
// on the rank's own tokens; keeps its input.
int replicated_linear(LayerBuilder& B, const std::string& name, int x, Expr out) {
  const auto& o = B.o_;
  const auto& s = S();
  const Expr local = sb() / region(o);
  int y = B.tensor(name + ".out", local * out * w(o));
  Op& op = B.op(name, OpKind::kLinear, {x}, {y}, {x});
  op.params = s.h * out;
  op.is_gemm = true;
  op.gemm = {Expr(1.0), local, out, s.h};
  op.fwd_flops = 2 * local * s.h * out;
  op.bwd_flops = 2 * op.fwd_flops;
  op.bytes_read = local * s.h * w(o) + op.params * w(o);
  op.bytes_written = local * out * w(o);
  return y;
}

}  // namespace

int moe_mlp(LayerBuilder& B, int x, const spec::ModelSpec& m) {
  const auto& o = B.o_;
  const auto& s = S();
  const Expr E = constant(m.num_experts), k = constant(m.experts_per_token);
  const Expr fe = constant(m.moe_ffn_hidden_size);
  const Expr local = sb() / region(o);  // tokens of this rank's sequence shard
  const bool split = o.sequence_parallel;

  // Shared expert, computed first (MoELayer.custom_forward, without --moe-shared-expert-overlap):
  // a dense SwiGLU MLP on every token, tensor-parallel as the dense MLP is, optionally scaled by
  // sigmoid(x·w_gate) (Qwen2-MoE), which keeps the MLP's output and the gate's score.
  int shared = -1;
  if (m.shared_expert_ffn_hidden_size > 0) {
    shared = mlp(B, x, m, "shared_expert", constant(m.shared_expert_ffn_hidden_size));
    if (m.shared_expert_gate) {
      int gate = replicated_linear(B, "shared_expert.gate", x, Expr(1.0));
      int score = B.tensor("shared_expert.gate.score", local * w(o));
      int gated = B.tensor("shared_expert.gated.out", local * s.h * w(o));
      Op& mul = B.op("shared_expert.gated", OpKind::kSwiGlu, {gate, shared}, {gated, score}, {score, shared});
      mul.fwd_flops = 5 * local * s.h;
      mul.bwd_flops = 8 * local * s.h;
      mul.bytes_read = local * s.h * w(o);
      mul.bytes_written = local * s.h * w(o);
      shared = gated;
    }
  }

  // Router (TopKRouter): a replicated h -> E linear on the rank's own tokens in the activation
  // dtype (moe_router_dtype unset), keeping its input.
  int logits = replicated_linear(B, "moe.router", x, E);

  // Top-k, then a softmax over the k chosen logits in fp32 (kept), scattered into dense [T, E]
  // probabilities and a boolean routing map; the scatter keeps its int64 indices.
  int probs = B.tensor("moe.topk.probs", local * E * w(o));
  int routing_map = B.tensor("moe.topk.routing_map", local * E, false);
  int softmax_k = B.tensor("moe.topk.softmax", local * k * 4, false);
  int topk_index = B.tensor("moe.topk.indices", local * k * 8, false);
  Op& topk = B.op("moe.topk", OpKind::kSoftmax, {logits}, {probs, routing_map, softmax_k, topk_index},
                  {softmax_k, topk_index});
  topk.fwd_flops = 5 * local * k + local * E;
  topk.bwd_flops = 3 * local * k;
  topk.bytes_read = local * E * w(o);
  topk.bytes_written = local * (E * (w(o) + 1) + k * 12);
  // Load-balancing loss (aux_loss, as the recipes set --moe-aux-loss-coeff > 0): a softmax of all
  // E logits in fp32, kept for backward.
  int aux_scores = B.tensor("moe.aux_loss.scores", local * E * 4, false);
  Op& aux = B.op("moe.aux_loss", OpKind::kSoftmax, {logits}, {aux_scores}, {aux_scores});
  aux.fwd_flops = 5 * local * E;
  aux.bwd_flops = 3 * local * E;
  aux.bytes_read = local * E * w(o);
  aux.bytes_written = local * E * 4;

  // Permutation: the rank's tokens copied once per chosen expert, sorted by expert (index_select);
  // the probabilities follow in the same order. Autograd keeps the two int64 index vectors.
  const Expr routed = local * k;  // rows this rank routes
  int indices = B.tensor("moe.permute.indices", routed * 16, false);
  int permuted = B.tensor("moe.permute.out", routed * s.h * w(o));
  int permuted_probs = B.tensor("moe.permute.probs", routed * w(o));
  Op& perm = B.op("moe.permute", OpKind::kCopy, {x, probs, routing_map}, {permuted, permuted_probs, indices},
                  {indices});
  perm.fwd_flops = Expr(0.0);
  perm.bwd_flops = routed * s.h;  // the gradient scattered back and summed per token
  perm.bytes_read = routed * s.h * w(o);
  perm.bytes_written = routed * (s.h * w(o) + w(o) + 16);

  // Under tensor parallelism the experts are sharded like an MLP: the dispatcher gathers every
  // routed token of the group (tokens and probabilities) to every rank, which computes them on its
  // 1/t of each expert.
  const Expr rows = sb() * k;  // rows every expert GEMM of this rank computes
  int tokens = permuted, row_probs = permuted_probs;
  if (split) {
    tokens = dispatcher_comm(B, "moe.dispatch_gather", permuted, rows * s.h * w(o), true);
    row_probs = dispatcher_comm(B, "moe.dispatch_gather_probs", permuted_probs, rows * w(o), true);
  }
  // sort_chunks_by_idxs (more than one local expert): the rows regrouped expert-major, a copy.
  auto sort_chunks = [&](const std::string& name, int in, Expr bytes) {
    int y = B.tensor(name + ".out", bytes);
    Op& c = B.op(name, OpKind::kCopy, {in}, {y}, {});
    c.fwd_flops = Expr(0.0);
    c.bwd_flops = bytes / w(o);  // the gradient copied back
    c.bytes_read = bytes;
    c.bytes_written = bytes;
    return y;
  };
  if (m.num_experts > 1) {
    tokens = sort_chunks("moe.sort_chunks", tokens, rows * s.h * w(o));
    row_probs = sort_chunks("moe.sort_chunks_probs", row_probs, rows * w(o));
  }
  int fc1 = grouped_linear(B, "moe.experts.fc1", tokens, rows, s.h, 2 * fe / s.t, E);
  // SwiGLU weighted by each row's routing probability (WeightedSwiGLUFunction: the probabilities
  // multiply here, before fc2, not in the unpermutation): keeps its input and the probabilities.
  Expr act = rows * fe / s.t;
  int y = B.tensor("moe.experts.swiglu.out", act * w(o));
  Op& glu = B.op("moe.experts.swiglu", OpKind::kSwiGlu, {fc1, row_probs}, {y}, {fc1, row_probs});
  glu.fwd_flops = 5 * act;
  glu.bwd_flops = 10 * act;
  glu.bytes_read = 2 * act * w(o) + rows * w(o);
  glu.bytes_written = act * w(o);
  int back = grouped_linear(B, "moe.experts.fc2", y, rows, fe / s.t, s.h, E);
  if (m.num_experts > 1) back = sort_chunks("moe.unsort_chunks", back, rows * s.h * w(o));
  if (split) back = dispatcher_comm(B, "moe.combine_scatter", back, rows * s.h * w(o), false);

  // Unpermutation: each token's k rows added back into one (scatter_add by the kept indices).
  int out = B.tensor("moe.unpermute.out", local * s.h * w(o));
  Op& unperm = B.op("moe.unpermute", OpKind::kCopy, {back, indices}, {out}, {indices});
  unperm.fwd_flops = routed * s.h;
  unperm.bwd_flops = routed * s.h;
  unperm.bytes_read = routed * s.h * w(o);
  unperm.bytes_written = local * s.h * w(o);
  return shared < 0 ? out : residual_add(B, "moe.add_shared", out, shared);
}

}  // namespace mist::graph::detail
