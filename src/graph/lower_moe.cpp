// The mixture-of-experts MLP of a block, as Megatron-Core runs it (megatron/core/transformer/moe:
// TopKRouter, MoEAlltoAllTokenDispatcher, TEGroupedMLP, SharedExpertMLP) on its expert grid: the
// experts split over ep ranks and each expert's weights over etp ranks (symbols ep and etp), with
// unfused permutation (--moe-permute-fusion off) and the activation dtype for the router. Tokens
// are balanced across experts (each expert computes s·b·k/E tokens of every sequence, as the
// published MoE runs force it) unless the training sets a load imbalance or a capacity factor
// (LoweringOptions::moe_load): then the busiest rank's rows are counted. docs/memory-model.md,
// "Mixture of experts", lists what each step keeps, with the source lines of Megatron-LM d98e8a64
// it follows.
#include "graph/builder.hpp"

namespace mist::graph::detail {

namespace {

// Bytes of a routing probability: the router's dtype (Megatron's --moe-router-dtype fp32), else the
// activation dtype.
Expr pw(const LoweringOptions& o) { return o.moe_router_fp32 ? Expr(4.0) : w(o); }

// The GEMMs of this rank's `experts` local experts in one grouped GEMM, `tokens` rows in all
// (tokens / experts each under balanced routing); the weights are expert parameters. `bias`: each
// local expert's bias (gpt-oss), added in the GEMM's epilogue.
int grouped_linear(LayerBuilder& B, const std::string& name, int x, Expr tokens, Expr in, Expr out, Expr experts,
                   Expr bias = Expr(0.0)) {
  const auto& o = B.o_;
  int y = B.tensor(name + ".out", tokens * out * w(o));
  Op& op = B.op(name, OpKind::kLinear, {x}, {y}, {x});
  op.params = experts * (in * out + bias);
  op.expert = true;
  op.is_gemm = true;
  // TEGroupedLinear runs one cuBLAS GEMM per local expert over Transformer Engine's 4 compute
  // streams (nvte_multi_tensor_gemm -> multi_stream_cublas_gemm unless NVTE_USE_CUTLASS_GROUPED_GEMM;
  // detail::num_compute_streams = 4): with few rows per expert each round leaves SMs idle.
  op.gemm = {experts, tokens / experts, out, in, 4};
  op.fwd_flops = 2 * tokens * in * out;
  op.bwd_flops = 2 * op.fwd_flops;
  op.bytes_read = tokens * in * w(o) + op.params * w(o);
  op.bytes_written = tokens * out * w(o);
  fp8_linear(B, op, x);  // TE's GroupedLinear in FP8
  return y;
}

// A collective of the dispatcher, outside any linear, over `fwd.group`: the routed rows sent to
// the ranks of their experts (all-to-all over the expert-parallel group, the reverse all-to-all in
// backward), the rows of the expert tensor-parallel group gathered to each of its ranks
// (all-gather, reduce-scatter in backward), or the experts' partial sums reduced back (the
// reverse). `out_bytes`: its output on this rank, a new buffer (`grad`: it has a gradient).
int dispatcher_comm(LayerBuilder& B, const std::string& name, int x, Expr out_bytes, TpComm fwd, TpComm bwd,
                    bool grad = true) {
  int y = B.tensor(name + ".out", std::move(out_bytes), grad);
  Op& op = B.op(name, OpKind::kCopy, {x}, {y}, {});
  op.fwd_comm = std::move(fwd);
  op.bwd_comm = std::move(bwd);
  op.exposed_comm = true;
  op.fwd_flops = Expr(0.0);
  op.bwd_flops = Expr(0.0);
  op.bytes_read = Expr(0.0);
  op.bytes_written = Expr(0.0);
  return y;
}

// The activation of GELU experts as TEGroupedMLP runs it without a fused kernel
// (megatron/core/transformer/moe/experts.py at d98e8a64, bias_act_func's last branch):
// F.gelu(fc1's output), which keeps its input, then the product with each row's probability
// (`intermediate_parallel * permuted_probs`), which keeps both factors. Returns the product (with
// fp32 probabilities under a bf16 or fp16 activation, the product cast back to it).
int weighted_gelu(LayerBuilder& B, int fc1, int row_probs, const Expr& rows, const Expr& act) {
  const auto& o = B.o_;
  const bool promoted = o.moe_router_fp32 && o.act_bytes != 4;  // bf16 × fp32 probabilities: an fp32 product
  int g = B.tensor("moe.experts.gelu.out", act * w(o));
  Op& gelu = B.op("moe.experts.gelu", OpKind::kGelu, {fc1}, {g}, {fc1});
  gelu.fwd_flops = 8 * act;
  gelu.bwd_flops = 12 * act;
  gelu.bytes_read = act * w(o);
  gelu.bytes_written = act * w(o);
  int y = B.tensor("moe.experts.weight.out", act * (promoted ? Expr(4.0) : w(o)));
  Op& mul = B.op("moe.experts.weight", OpKind::kSwiGlu, {g, row_probs}, {y}, {g, row_probs});
  mul.fwd_flops = act;
  mul.bwd_flops = 3 * act;  // the input's gradient, and each row's dot product for its probability
  mul.bytes_read = act * w(o) + rows * pw(o);
  mul.bytes_written = act * (promoted ? Expr(4.0) : w(o));
  if (!promoted) return y;
  // Autograd's MulBackward in fp32: the input's gradient grad·p (cast back by the engine) and the
  // product grad·x that the probabilities' gradient sums, both fp32 and alive together.
  mul.bwd_temporaries = {B.tensor("moe.experts.weight.grad_x_fp32", act * 4, false),
                         B.tensor("moe.experts.weight.grad_p_fp32", act * 4, false)};
  // `.to(original_dtype)`: the product cast back for fc2; its backward casts the gradient to fp32.
  int y16 = B.tensor("moe.experts.weight_cast.out", act * w(o));
  Op& cast = B.op("moe.experts.weight_cast", OpKind::kCast, {y}, {y16}, {});
  cast.fwd_flops = Expr(0.0);
  cast.bwd_flops = act;
  cast.bytes_read = act * 4;
  cast.bytes_written = act * w(o);
  return y16;
}

// The rank's local experts on their `rows` routed rows (grouped fc1, the probability-weighted
// activation, grouped fc2); returns fc2's output. The experts are of the model's MLP kind.
int experts(LayerBuilder& B, int tokens, int row_probs, const Expr& rows, const Expr& local_experts,
            const spec::ModelSpec& m) {
  const auto& o = B.o_;
  const auto& s = S();
  const Expr fe = constant(m.moe_ffn_hidden_size);
  const bool glu = m.mlp == spec::Mlp::kSwiGlu;
  const Expr fc1_width = (glu ? 2 * fe : fe) / s.etp;
  // gpt-oss's experts carry biases (linear_bias): fc1's column-parallel one split over etp, fc2's
  // row-parallel one whole on every rank, added after the reduction as a dense row-parallel bias.
  const Expr fc1_bias = m.linear_bias ? fc1_width : Expr(0.0);
  const Expr fc2_bias = m.linear_bias ? s.h : Expr(0.0);
  int fc1 = grouped_linear(B, "moe.experts.fc1", tokens, rows, s.h, fc1_width, local_experts, fc1_bias);
  Expr act = rows * fe / s.etp;
  const size_t act_first = B.op_count();
  int y = -1;
  if (glu) {
    // SwiGLU weighted by each row's routing probability (WeightedSwiGLUFunction: the probabilities
    // multiply here, before fc2, not in the unpermutation): keeps its input and the probabilities.
    y = B.tensor("moe.experts.swiglu.out", act * w(o));
    Op& op = B.op("moe.experts.swiglu", OpKind::kSwiGlu, {fc1, row_probs}, {y}, {fc1, row_probs});
    op.fwd_flops = 5 * act;
    op.bwd_flops = 10 * act;
    op.bytes_read = 2 * act * w(o) + rows * pw(o);
    op.bytes_written = act * w(o);
  } else {
    y = weighted_gelu(B, fc1, row_probs, rows, act);
  }
  // "moe_act" (TEGroupedMLP's activation_checkpoint): restored when the gradient reaches fc2's output.
  const size_t act_end = B.op_count();
  B.module_range(act_first, act_end, spec::kRecomputeMoeAct);
  const int out = grouped_linear(B, "moe.experts.fc2", y, rows, fe / s.etp, s.h, local_experts, fc2_bias);
  B.restore_at(act_first, act_end, B.op_count() - 1);
  return out;
}

// Megatron-LM's MoEAllGatherTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py at
// d98e8a64), unfused permutation: over the tp_ep group (etp·ep consecutive ranks) each rank gathers
// the group's routing maps, probabilities and tokens (the tokens into the global memory buffer,
// use_global_buffer=True: Tensor::external), takes the columns of its local experts, permutes the
// gathered tokens routed to them (moe_utils.permute without probabilities: the argsort of the
// local map is a transient, only each row's token is kept), selects their probabilities
// (masked_select, which keeps its input and mask), runs its experts, scatters their rows back
// into the gathered tokens' order and reduce-scatters that over the group. `rows`: the rows its
// experts compute, as for the all-to-all dispatcher. Returns the output on the rank's own tokens;
// `held`: the (gathered) probabilities, which MoELayer.forward keeps until it returns.
int allgather_experts(LayerBuilder& B, int x, int probs, int routing_map, const spec::ModelSpec& m, const Expr& local,
                      const Expr& rows, const Expr& local_experts, int& held) {
  const auto& o = B.o_;
  const auto& s = S();
  const Expr E = constant(m.num_experts);
  const Expr G = local * s.etp * s.ep;   // tokens gathered from the tp_ep group
  const Expr cols = G * local_experts;   // entries of the local routing map
  int map = routing_map, p = probs, tokens = x;
  if (o.expert_parallel || o.expert_tensor_parallel) {
    auto gather = [&](const std::string& name, int in, Expr full, bool grad) {
      return dispatcher_comm(B, name, in, full, {CommKind::kAllGather, full, CommGroup::kExpertTpEp},
                             grad ? TpComm{CommKind::kReduceScatter, full, CommGroup::kExpertTpEp} : TpComm{},
                             grad);
    };
    map = gather("moe.gather_routing_map", map, G * E, false);  // under no_grad
    p = gather("moe.gather_probs", p, G * E * pw(o), true);
    tokens = gather("moe.gather_tokens", tokens, G * s.h * w(o), true);
    B.make_external(tokens);
  }
  held = p;  // custom_forward's `probs` (rebound by dispatch), kept until it returns
  // The local experts' columns of the routing map and of the probabilities, made contiguous.
  int local_map = B.tensor("moe.local_map.out", cols, false);
  Op& lm = B.op("moe.local_map", OpKind::kCopy, {map}, {local_map}, {});
  lm.fwd_flops = lm.bwd_flops = Expr(0.0);
  lm.bytes_read = lm.bytes_written = cols;
  int local_probs = B.tensor("moe.local_probs.out", cols * pw(o));
  Op& lp = B.op("moe.local_probs", OpKind::kCopy, {p}, {local_probs}, {});
  lp.fwd_flops = Expr(0.0);
  lp.bwd_flops = G * E;  // the gradient written into zeros of the gathered probabilities' shape
  lp.bytes_read = lp.bytes_written = cols * pw(o);
  // Permutation: the local map transposed and argsorted (int64 over every entry), each row's token
  // kept (the argsort's first rows entries modulo G), the rows copied out (index_select).
  int indices = B.tensor("moe.permute.indices", rows * 8, false);
  int permuted = B.tensor("moe.permute.out", rows * s.h * w(o));
  int map_t = B.tensor("moe.permute.map_t", cols, false);
  int order = B.tensor("moe.permute.argsort", cols * 8, false);
  Op& perm = B.op("moe.permute", OpKind::kCopy, {tokens, local_map}, {permuted, indices}, {indices});
  perm.fwd_temporaries = {map_t, order};
  perm.fwd_flops = Expr(0.0);
  perm.bwd_flops = rows * s.h;  // the gradient added back per gathered token
  perm.bytes_read = cols * 9 + rows * s.h * w(o);
  perm.bytes_written = cols * 9 + rows * (s.h * w(o) + 8);
  // The rows' probabilities: probsᵀ made contiguous, masked_select by the transposed local map;
  // autograd keeps both.
  int probs_t = B.tensor("moe.probs_select.probs_t", cols * pw(o), false);
  int mask_t = B.tensor("moe.probs_select.mask_t", cols, false);
  int row_probs = B.tensor("moe.probs_select.out", rows * pw(o));
  Op& sel = B.op("moe.probs_select", OpKind::kCopy, {local_probs, local_map}, {row_probs, probs_t, mask_t},
                 {probs_t, mask_t});
  sel.fwd_flops = Expr(0.0);
  sel.bwd_flops = cols;  // masked_scatter into zeros, transposed back
  sel.bytes_read = cols * (pw(o) + 1) + cols * pw(o);
  sel.bytes_written = cols * (pw(o) + 1) + rows * pw(o);

  int back = experts(B, permuted, row_probs, rows, local_experts, m);

  // Unpermutation: zeros of the gathered tokens' shape, each row added at its token (scatter_add).
  int full = B.tensor("moe.unpermute.out", G * s.h * w(o));
  Op& un = B.op("moe.unpermute", OpKind::kCopy, {back, indices}, {full}, {indices});
  un.fwd_flops = rows * s.h;
  un.bwd_flops = rows * s.h;
  un.bytes_read = rows * s.h * w(o);
  un.bytes_written = G * s.h * w(o) + rows * s.h * w(o);
  if (!(o.expert_parallel || o.expert_tensor_parallel)) return full;
  const Expr bytes = G * s.h * w(o);
  return dispatcher_comm(B, "moe.combine_scatter", full, local * s.h * w(o),
                         {CommKind::kReduceScatter, bytes, CommGroup::kExpertTpEp},
                         {CommKind::kAllGather, bytes, CommGroup::kExpertTpEp});
}

}  // namespace

int moe_mlp(LayerBuilder& B, int x, const spec::ModelSpec& m) {
  const auto& o = B.o_;
  const auto& s = S();
  const Expr E = constant(m.num_experts), k = constant(m.experts_per_token);
  const Expr fe = constant(m.moe_ffn_hidden_size);
  const Expr local = sb(o) / region(o);  // tokens of this rank's sequence shard

  // Shared expert, computed first (MoELayer.custom_forward, without --moe-shared-expert-overlap):
  // a dense SwiGLU MLP on every token, tensor-parallel as the dense MLP is, optionally scaled by
  // sigmoid(x·w_gate) (Qwen2-MoE), which keeps the MLP's output and the gate's score.
  int shared = -1;
  if (m.shared_expert_ffn_hidden_size > 0) {
    const size_t first = B.op_count();
    shared = mlp(B, x, m, "shared_expert", constant(m.shared_expert_ffn_hidden_size));
    B.module_since(first, spec::kRecomputeSharedExperts);  // SharedExpertMLP's checkpoint: its gate stays out
    if (m.shared_expert_gate) {
      int gate = replicated_linear(B, "shared_expert.gate", x, S().h, Expr(1.0));
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
  // dtype (moe_router_dtype unset), keeping its input; with linear_bias (gpt-oss) a bias per expert.
  int logits = replicated_linear(B, "moe.router", x, S().h, E, m.linear_bias, o.moe_router_fp32 ? 4 : 0);

  // Top-k, then a softmax over the k chosen logits in fp32 (kept), scattered into dense [T, E]
  // probabilities and a boolean routing map; the scatter keeps its int64 indices.
  int probs = B.tensor("moe.topk.probs", local * E * pw(o));
  int routing_map = B.tensor("moe.topk.routing_map", local * E, false);
  int softmax_k = B.tensor("moe.topk.softmax", local * k * 4, false);
  int topk_index = B.tensor("moe.topk.indices", local * k * 8, false);
  Op& topk = B.op("moe.topk", OpKind::kSoftmax, {logits}, {probs, routing_map, softmax_k, topk_index},
                  {softmax_k, topk_index});
  topk.fwd_flops = 5 * local * k + local * E;
  topk.bwd_flops = 3 * local * k;
  topk.bytes_read = local * E * pw(o);
  topk.bytes_written = local * (E * (pw(o) + 1) + k * 12);
  // Load-balancing loss (aux_loss, as the recipes set --moe-aux-loss-coeff > 0): a softmax of all
  // E logits in fp32, kept for backward.
  int aux_scores = B.tensor("moe.aux_loss.scores", local * E * 4, false);
  Op& aux = B.op("moe.aux_loss", OpKind::kSoftmax, {logits}, {aux_scores}, {aux_scores});
  aux.fwd_flops = 5 * local * E;
  aux.bwd_flops = 3 * local * E;
  aux.bytes_read = local * E * pw(o);
  aux.bytes_written = local * E * 4;

  // The expert grid (parallel folding): the E experts are split over the ep ranks of the
  // expert-parallel group, each expert's weights over the etp ranks of the expert tensor-parallel
  // group. With ep > 1 each rank's routed rows go to the ranks of their experts (all-to-all, the
  // probabilities too) and, balanced, as many come back; with etp > 1 the group's rows are gathered
  // to each of its ranks, which computes them on its 1/etp of each local expert.
  // Under a load imbalance the busiest rank (the one the step waits for) receives `load` times the
  // balanced share, at most ep times it (every rank's copies), and with a capacity factor no more
  // than the capacity; it sends its own share, so the all-to-all takes its receive volume.
  const Expr routed = local * k;  // rows this rank routes
  const Expr local_experts = E / s.ep;
  const Expr received = o.moe_load == 1.0 ? routed  // rows routed to this rank's experts, from its ep group
                        : o.moe_load_padded ? routed * Expr(o.moe_load)
                                            : routed * sym::min(Expr(o.moe_load), s.ep);
  const Expr rows = s.etp * received;   // rows this rank's expert GEMMs compute
  if (o.moe_allgather) {
    int held = -1;  // allgather_experts sets it
    int out = allgather_experts(B, x, probs, routing_map, m, local, rows, local_experts, held);
    if (shared >= 0) out = residual_add(B, "moe.add_shared", out, shared);
    B.hold_to_last_op({held});
    return out;
  }

  // Permutation: the rank's tokens copied once per chosen expert, sorted by expert (index_select);
  // the probabilities follow in the same order. Autograd keeps each row's token (int64) and, for
  // the probabilities' index op, a slice view of the whole int64 argsort of the routing map
  // (moe_utils.permute's flat_sorted = ...argsort()[:num_out_tokens]): local·(E + k)·8 bytes,
  // measured on the CPU executor (2026-12-03; local·k·16 before).
  int indices = B.tensor("moe.permute.indices", local * (E + k) * 8, false);
  int permuted = B.tensor("moe.permute.out", routed * s.h * w(o));
  int permuted_probs = B.tensor("moe.permute.probs", routed * pw(o));
  Op& perm = B.op("moe.permute", OpKind::kCopy, {x, probs, routing_map}, {permuted, permuted_probs, indices},
                  {indices});
  perm.fwd_flops = Expr(0.0);
  perm.bwd_flops = routed * s.h;  // the gradient scattered back and summed per token
  perm.bytes_read = routed * s.h * w(o);
  perm.bytes_written = routed * (s.h * w(o) + pw(o) + 16);

  int tokens = permuted, row_probs = permuted_probs;
  if (o.expert_parallel) {
    const TpComm a2a{CommKind::kAllToAll, received * s.h * w(o), CommGroup::kExpert};
    const TpComm a2a_probs{CommKind::kAllToAll, received * pw(o), CommGroup::kExpert};
    tokens = dispatcher_comm(B, "moe.dispatch_a2a", tokens, received * s.h * w(o), a2a, a2a);
    row_probs = dispatcher_comm(B, "moe.dispatch_a2a_probs", row_probs, received * pw(o), a2a_probs, a2a_probs);
  }
  // MoELayer.forward's custom_forward keeps, until it returns, the permuted tokens (`hidden_states`,
  // rebound by preprocess), the all-to-all's output (`dispatched_input`) and its probabilities
  // (`probs`, rebound by dispatch); without expert parallelism the all-to-all returns its input.
  const std::vector<int> held{permuted, tokens, row_probs};
  if (o.expert_tensor_parallel) {
    auto gather = [&](const std::string& name, int in, Expr full) {
      return dispatcher_comm(B, name, in, full, {CommKind::kAllGather, full, CommGroup::kExpertTp},
                             {CommKind::kReduceScatter, full, CommGroup::kExpertTp});
    };
    tokens = gather("moe.dispatch_gather", tokens, rows * s.h * w(o));
    row_probs = gather("moe.dispatch_gather_probs", row_probs, rows * pw(o));
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
  const bool sort = m.num_experts > 1 && !o.one_local_expert;
  if (sort) {
    tokens = sort_chunks("moe.sort_chunks", tokens, rows * s.h * w(o));
    row_probs = sort_chunks("moe.sort_chunks_probs", row_probs, rows * pw(o));
  }
  int back = experts(B, tokens, row_probs, rows, local_experts, m);
  if (sort) back = sort_chunks("moe.unsort_chunks", back, rows * s.h * w(o));
  if (o.expert_tensor_parallel) {
    const Expr full = rows * s.h * w(o);
    back = dispatcher_comm(B, "moe.combine_scatter", back, received * s.h * w(o),
                           {CommKind::kReduceScatter, full, CommGroup::kExpertTp},
                           {CommKind::kAllGather, full, CommGroup::kExpertTp});
  }
  if (o.expert_parallel) {
    const TpComm a2a{CommKind::kAllToAll, received * s.h * w(o), CommGroup::kExpert};
    back = dispatcher_comm(B, "moe.combine_a2a", back, routed * s.h * w(o), a2a, a2a);
  }

  // Unpermutation: each token's k rows added back into one (scatter_add by the kept indices).
  int out = B.tensor("moe.unpermute.out", local * s.h * w(o));
  Op& unperm = B.op("moe.unpermute", OpKind::kCopy, {back, indices}, {out}, {indices});
  unperm.fwd_flops = routed * s.h;
  unperm.bwd_flops = routed * s.h;
  unperm.bytes_read = routed * s.h * w(o);
  unperm.bytes_written = local * s.h * w(o);
  if (shared >= 0) out = residual_add(B, "moe.add_shared", out, shared);
  B.hold_to_last_op(held);
  return out;
}

}  // namespace mist::graph::detail
