// Multi-head latent attention (DeepSeek-V2/V3) as Megatron-Core d98e8a64 runs it with Transformer
// Engine (megatron/core/transformer/multi_latent_attention.py, the TE spec of
// models/gpt/gpt_layer_specs.py with qk_layernorm): the down projections are plain TELinear layers
// whose weights every TP rank holds whole, run on the rank's own tokens (its sequence shard under
// sequence parallelism); the compressed query and key/value go through TELayerNormColumnParallelLinear
// (RMSNorm, gather, column-parallel up projection); the rotary part of the key (one per token, shared
// by the heads) is gathered over the sequence-parallel group. With rope fusion (Megatron's default
// with --position-embedding-type rope, which mist exports; arguments.py:1628 turns it off for
// other types) fused_apply_mla_rope_for_q and _for_kv write the query, the key and the value as new
// tensors and keep no activation (the unfused path's rotations, torch.cat and .contiguous() keep
// none either, with a few transients more). The attention core takes heads of d_n + d_r for q·k
// and d_v for the output.
#include "graph/builder.hpp"

namespace mist::graph::detail {

int mla_attention(LayerBuilder& B, int x, const spec::ModelSpec& m, double work) {
  const auto& o = B.o_;
  const auto& s = S();
  const Expr heads = s.a / s.t;
  const Expr dn = constant(m.qk_nope_head_dim), dr = constant(m.qk_rope_head_dim), dv = constant(m.v_head_dim);
  const Expr rq = constant(m.q_lora_rank), rkv = constant(m.kv_lora_rank);
  const Expr dqk = dn + dr;
  const Expr tokens = sb(o);  // this rank's tokens after the up projections gather the sequence
  const Expr local = sb(o) / region(o);

  // Query: down to r_q on the local tokens, norm, up to a·(d_n + d_r) (column-parallel); without a
  // bottleneck, one column-parallel projection from h.
  // "mla_up_proj" (MLASelfAttention's qkv_up_checkpoint): the normed up projections and the rotary
  // kernels, restored when the gradient reaches the attention core's output.
  std::vector<size_t> up_proj;
  int q = -1;
  if (m.q_lora_rank > 0) {
    int qc = replicated_linear(B, "attn.q_down", x, s.h, rq);
    up_proj.push_back(B.op_count());
    int qn = norm(B, "attn.q_norm", qc, spec::Norm::kRmsNorm, m, rq);
    up_proj.push_back(B.op_count());
    q = column_linear(B, "attn.q_up", qn, rq, heads * dqk, Expr(0.0));
  } else {
    q = column_linear(B, "attn.q_proj", x, s.h, heads * dqk, Expr(0.0));
  }
  // Keys and values: one down projection to r_kv + d_r on the local tokens, split into the latent
  // (normed, then up to a·(d_n + d_v)) and the rotary key, gathered over the sequence (a new
  // tensor) when sequence parallelism split it.
  int kvc = replicated_linear(B, "attn.kv_down", x, s.h, rkv + dr);
  int latent = B.view("attn.kv_latent", kvc, local * rkv * w(o));
  int k_rope = B.view("attn.k_rope", kvc, local * dr * w(o));
  B.op("attn.kv_split", OpKind::kView, {kvc}, {latent, k_rope}, {});
  if (o.sequence_parallel) {
    int gathered = B.tensor("attn.k_rope_gathered", tokens * dr * w(o));
    Op& g = B.op("attn.k_rope_gather", OpKind::kCopy, {k_rope}, {gathered}, {});
    g.fwd_comm = {CommKind::kAllGather, tokens * dr * w(o)};
    g.bwd_comm = {CommKind::kReduceScatter, tokens * dr * w(o)};
    g.fwd_flops = Expr(0.0);
    g.bwd_flops = Expr(0.0);
    g.bytes_read = Expr(0.0);
    g.bytes_written = Expr(0.0);
    k_rope = gathered;
  }
  up_proj.push_back(B.op_count());
  int kvn = norm(B, "attn.kv_norm", latent, spec::Norm::kRmsNorm, m, rkv);
  up_proj.push_back(B.op_count());
  int kv = column_linear(B, "attn.kv_up", kvn, rkv, heads * (dn + dv), Expr(0.0));

  // The fused rotary kernels: the query, key and value the attention kernel takes, new tensors,
  // nothing kept (the rotations multiply by constant tables).
  const Expr q_bytes = tokens * heads * dqk * w(o);
  const Expr v_bytes = tokens * heads * dv * w(o);
  int query = B.tensor("attn.query", q_bytes), key = B.tensor("attn.key", q_bytes);
  int value = B.tensor("attn.value", v_bytes);
  up_proj.push_back(B.op_count());
  Op& r = B.op("attn.rotary", OpKind::kRotary, {q, kv, k_rope}, {query, key, value}, {});
  r.stream_kernels = 2;  // one for the query, one for the key and value
  r.fwd_flops = 3 * tokens * (heads + 1) * dr;
  r.bwd_flops = r.fwd_flops;
  r.bytes_read = 2 * q_bytes + v_bytes;
  r.bytes_written = 2 * q_bytes + v_bytes;

  // Flash attention with heads of d_n + d_r for the scores and d_v for the output.
  const Expr out_bytes = tokens * heads * dv * w(o);
  int ctx = B.tensor("attn.core.out", out_bytes);
  int lse = B.tensor("attn.core.lse", tokens * heads * 4, false);
  Op& core = B.op("attn.core", OpKind::kFlashAttention, {query, key, value}, {ctx, lse}, {query, key, value, ctx, lse});
  core.attention_core = true;
  core.attention_work = work;
  // q·kᵀ over d_n + d_r, p·v over d_v: 2·s²·a·(d_qk + d_v) per sequence forward; the backward
  // redoes q·kᵀ and computes dq, dk, dv, dp: 2.5 times that, as for equal head sizes.
  const Expr full = s.b * s.s * s.s * heads;
  core.fwd_flops = 2 * full * (dqk + dv);
  core.bwd_flops = 5 * full * (dqk + dv);
  core.bytes_read = 2 * q_bytes + v_bytes;
  core.bytes_written = out_bytes;
  for (size_t i : up_proj) {
    B.module_range(i, i + 1, spec::kRecomputeMlaUpProj);
    B.restore_at(i, i + 1, B.op_count() - 1);
  }
  return row_linear(B, "attn.proj", ctx, heads * dv, false);
}

}  // namespace mist::graph::detail
