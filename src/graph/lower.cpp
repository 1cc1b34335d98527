// Lowering, modelled on Megatron-LM (megatron/core/transformer, tensor_parallel): what each op
// keeps for backward is what decides activation memory, so each op below says what it saves.
// Korthikanti et al. 2022 (arXiv 2205.05198) §4 count the same tensors for a GPT block.
#include "graph/lower.hpp"

#include <utility>

#include <fmt/format.h>

#include "graph/builder.hpp"

namespace mist::graph {

namespace detail {

using spec::ModelSpec;

// LayerNorm / RMSNorm over `width` channels of the rank's tokens (h, or a latent's width):
// saves its input and the per-token statistics (fp32 mean and rstd for LayerNorm, rstd for RMSNorm).
int norm(LayerBuilder& B, const std::string& name, int x, spec::Norm kind, const ModelSpec&, const Expr& width) {
  const auto& o = B.o_;
  Expr n = sb(o) * width / region(o);
  int y = B.tensor(name + ".out", n * w(o));
  bool ln = kind == spec::Norm::kLayerNorm;
  int stats = B.tensor(name + ".stats", sb(o) / region(o) * (ln ? 8 : 4), false);
  Op& op = B.op(name, ln ? OpKind::kLayerNorm : OpKind::kRmsNorm, {x}, {y, stats}, {x, stats});
  op.params = ln ? 2 * width : width;
  op.fwd_flops = (ln ? 8 : 5) * n;
  op.bwd_flops = 2 * op.fwd_flops;
  op.bytes_read = n * w(o) + op.params * w(o);
  op.bytes_written = n * w(o);
  if (o.eager_elementwise && !ln) {
    // torchtitan's RMSNorm: x.float(), pow, mean, + eps, rsqrt, x·rstd, .type_as(x), ·weight.
    // Autograd keeps the fp32 copy (pow's and the product's input) and the normalised x (the
    // weight product's input), not x.
    int xf = B.tensor(name + ".x_fp32", n * 4, false);
    int normed = B.tensor(name + ".normed", n * w(o), false);
    op.outputs = {y, stats, xf, normed};
    op.saved = {xf, normed, stats};
    op.stream_kernels = 8;
    op.bytes_read = n * (w(o) + 4 + 4 + 4 + 4 + w(o)) + op.params * w(o);
    op.bytes_written = n * (4 + 4 + 4 + w(o) + w(o));
  }
  return y;
}

void fp8_linear(LayerBuilder& B, Op& op, int x) {
  const auto& o = B.o_;
  if (!o.fp8) return;
  op.fp8 = true;
  op.fp8_block_scaled = o.fp8_block_scaled;
  const Expr q = Expr(static_cast<double>(o.fp8_cast_bytes));
  const auto& g = op.gemm;
  // Forward: the GEMM's input (m×k); backward: the output gradient (m×n), each quantized once into
  // its row- and column-wise copies.
  op.fp8_cast_fwd = q * g.batch * g.m * g.k;
  op.fp8_cast_bwd = q * g.batch * g.m * g.n;
  if (!o.fp8_keeps_fp8_inputs) {
    // torchao's Float8Linear casts the weight in every forward and, transposed, in every backward:
    // an amax pass and a cast (2 + 2 + 1 bytes per parameter each time).
    op.fp8_cast_fwd = op.fp8_cast_fwd + 5 * op.params;
    op.fp8_cast_bwd = op.fp8_cast_bwd + 5 * op.params;
    return;
  }
  // Transformer Engine keeps the input's FP8 copy, one byte per element, instead of the bf16 input.
  int kept = B.tensor(op.name + ".input_fp8", B.bytes(x) / w(o), false);
  op.outputs.push_back(kept);
  for (int& t : op.saved)
    if (t == x) t = kept;
}

// Column-parallel linear h -> out (out already divided by t): saves its input. Under sequence
// parallelism the input is all-gathered into a temporary and the saved copy is the local shard
// (Megatron re-gathers it in backward); under torchtitan's the gathered input itself is kept
// (LoweringOptions::sp_keeps_gathered).
// `shares_input`: a second or third linear reading the same input as the one before it
// (torchtitan's wk and wv after wq, w3 after w1), whose input was gathered (and whose input gradient
// is reduced) once, by the first one.
int column_linear(LayerBuilder& B, const std::string& name, int x, Expr in_features, Expr out,
                  Expr bias, bool owns_weight, bool shares_input) {
  const auto& o = B.o_;
  int y = B.tensor(name + ".out", sb(o) * out * w(o));
  Op& op = B.op(name, OpKind::kLinear, {x}, {y}, {x});
  Expr full_in = sb(o) * in_features * w(o);
  if (shares_input) {
    // No collective of its own.
    if (o.sequence_parallel && B.gathered_input >= 0) op.saved = {B.gathered_input};
  } else if (o.sequence_parallel && o.sp_keeps_gathered && !o.recomputes_selectively) {
    const Expr gathered = o.sp_gathers_fp8 && o.fp8 ? sb(o) * in_features : full_in;
    const int g = B.tensor(name + ".gathered_input", gathered, false);
    op.outputs.push_back(g);
    op.saved = {g};
    B.gathered_input = g;
    op.fwd_comm = {CommKind::kAllGather, gathered};
    op.bwd_comm = {CommKind::kReduceScatter, full_in};
  } else if (o.sequence_parallel) {
    op.temporaries.push_back(B.tensor(name + ".gathered_input", full_in, false));
    op.fwd_comm = {CommKind::kAllGather, full_in};
    op.bwd_comm = {CommKind::kReduceScatter, full_in};
    op.bwd_regather = {CommKind::kAllGather, full_in};
  } else {
    op.bwd_comm = {CommKind::kAllReduce, full_in};
  }
  op.params = (owns_weight ? in_features * out : Expr(0.0)) + bias;
  op.is_gemm = true;
  op.gemm = {Expr(1.0), sb(o), out, in_features};
  op.fwd_flops = 2 * sb(o) * in_features * out;
  op.bwd_flops = 2 * op.fwd_flops;
  op.bytes_read = full_in + (in_features * out + bias) * w(o);
  op.bytes_written = B.bytes(y);
  fp8_linear(B, op, x);
  return y;
}

// A linear in -> out with its weight (and bias) whole on every GPU (the MoE router and the shared
// expert's gate; latent attention's down projections), on the rank's own tokens (its sequence
// shard under sequence parallelism: no collective); keeps its input.
int replicated_linear(LayerBuilder& B, const std::string& name, int x, Expr in, Expr out, bool bias, int out_bytes) {
  const auto& o = B.o_;
  const Expr local = sb(o) / region(o);
  const Expr ow = out_bytes > 0 ? Expr(static_cast<double>(out_bytes)) : w(o);
  int y = B.tensor(name + ".out", local * out * ow);
  Op& op = B.op(name, OpKind::kLinear, {x}, {y}, {x});
  op.params = in * out + (bias ? out : Expr(0.0));
  op.is_gemm = true;
  op.gemm = {Expr(1.0), local, out, in};
  op.fwd_flops = 2 * local * in * out;
  op.bwd_flops = 2 * op.fwd_flops;
  op.bytes_read = local * in * w(o) + op.params * w(o);
  op.bytes_written = local * out * ow;
  return y;
}

// Row-parallel linear in (already divided by t) -> h: saves its input; the partial sums are
// all-reduced (or reduce-scattered under sequence parallelism).
int row_linear(LayerBuilder& B, const std::string& name, int x, Expr in, bool bias) {
  const auto& o = B.o_;
  Expr full_out = sb(o) * S().h * w(o);
  int y = B.tensor(name + ".out", full_out / region(o));
  Op& op = B.op(name, OpKind::kLinear, {x}, {y}, {x});
  if (o.sequence_parallel) {
    op.temporaries.push_back(B.tensor(name + ".partial_sum", full_out, false));
    op.fwd_comm = {CommKind::kReduceScatter, full_out};
    op.bwd_comm = {CommKind::kAllGather, full_out};
  } else {
    op.fwd_comm = {CommKind::kAllReduce, full_out};
  }
  // The bias of a row-parallel layer is replicated, added after the reduction.
  op.params = in * S().h + (bias ? S().h : Expr(0.0));
  op.is_gemm = true;
  op.gemm = {Expr(1.0), sb(o), S().h, in};
  op.fwd_flops = 2 * sb(o) * in * S().h;
  op.bwd_flops = 2 * op.fwd_flops;
  op.bytes_read = sb(o) * in * w(o) + op.params * w(o);
  op.bytes_written = full_out;
  fp8_linear(B, op, x);
  return y;
}

// Dropout keeps a 1-byte mask per element (Megatron's fused bias-dropout-add does the same).
int dropout(LayerBuilder& B, const std::string& name, int x, Expr elements) {
  const auto& o = B.o_;
  if (!o.dropout) return x;
  int mask = B.tensor(name + ".mask", elements, false);
  int y = B.tensor(name + ".out", elements * w(o));
  Op& op = B.op(name, OpKind::kDropout, {x}, {y, mask}, {mask});
  op.fwd_flops = 2 * elements;
  op.bwd_flops = elements;
  op.bytes_read = elements * w(o);
  op.bytes_written = elements * (w(o) + 1);
  return y;
}

int residual_add(LayerBuilder& B, const std::string& name, int x, int y) {
  const auto& o = B.o_;
  Expr n = sb(o) * S().h / region(o);
  int z = B.tensor(name + ".out", n * w(o));
  Op& op = B.op(name, OpKind::kAdd, {x, y}, {z}, {});
  op.fwd_flops = n;
  op.bwd_flops = Expr(0.0);
  op.bytes_read = 2 * n * w(o);
  op.bytes_written = n * w(o);
  return z;
}

// Flash attention under context parallelism. Every rank holds s/cp tokens, chunks r and 2·cp−1−r of
// the sequence's 2·cp, so each has 1/cp of the causal work; the op's FLOPs count that share. How the
// keys and values travel is LoweringOptions::cp_exchange (layer.hpp):
// - kRing, as Transformer Engine's AttnFuncWithCPAndKVP2P runs it (Megatron-Core's --cp-comm-type
//   p2p): the rank's queries attend to all s keys in cp steps; at each step it sends the K/V block it
//   holds to the next CP rank while computing with it, so the ring (cp − 1 exchanges of the local k
//   and v) runs under the kernels. Forward keeps each step's received block and each step's partial
//   output and log-sum-exp until the final correction (TE's p2p_comm_buffers, out_per_step,
//   softmax_lse_per_step; bounded here by the last rank, whose every step sees all its queries);
//   backward sends K/V and their gradients together, double-buffered, and each step's kernel writes a
//   partial dq and dkv.
// - kGatherRing, PyTorch's _templated_ring_attention with its default all-gather rotation
//   (torchtitan): one all-gather of k and v, which only the first step's kernel hides; backward
//   gathers them again under its first step and passes the fp32 dK/dV to the next rank after every
//   step (an all-to-all permutation), each under the next step's kernel but the last. Its buffers
//   are the ring's (the gathered K/V are the cp blocks).
// - kAllGather, TE's AttnFuncWithCPAndKVAllGather (--cp-comm-type all_gather): k and v gathered whole
//   and reordered (index_select, a copy) before the two chunks' kernels; backward gathers them again,
//   computes into full-length dk and dv and reduce-scatters them. Nothing overlaps.
// - kAllToAll, TE's a2a (--cp-comm-type a2a, Ulysses): q, k and v become head-sharded over the whole
//   sequence by an all-to-all, the kernel runs with a/(t·cp) heads over all s tokens (`work`: the
//   model's mask, sliding windows included), and the output returns by a second one; backward the
//   same for the output gradient and dq, dk, dv. Each exchange keeps its input and output at once.
// - kA2aP2p, TE's AttnFuncWithCPAndKVP2P with cp_group_a2a (--cp-comm-type a2a+p2p): the a2a above
//   over each group of a = cp_a2a ranks (q, k, v head-sharded over a times the local tokens: the
//   same bytes), then the p2p ring over the R = cp/a groups with those blocks (R steps), then the
//   output's a2a back. Its buffers are both sets, the ring's for R steps.
// Each saves what flash attention saves, for the local tokens (the a2a's head-sharded tensors are
// the same bytes).
int cp_attention_core(LayerBuilder& B, int q, int k, int v, const Expr& qw, double work) {
  const auto& o = B.o_;
  const auto& s = S();
  const Expr heads = s.a / s.t;
  const Expr ctx_bytes = sb(o) * qw / s.t * w(o);
  const Expr lse_bytes = sb(o) * heads * 4;
  const Expr kv_block = B.bytes(k) + B.bytes(v);
  const CpExchange x = o.cp_exchange;
  int ctx = B.tensor("attn.core.out", ctx_bytes);
  int lse = B.tensor("attn.core.lse", lse_bytes, false);
  std::vector<int> fwd_tmp, bwd_tmp;
  if (x == CpExchange::kRing || x == CpExchange::kGatherRing) {
    fwd_tmp = {B.tensor("attn.core.cp_kv_blocks", s.cp * kv_block, false),
               B.tensor("attn.core.cp_step_outputs", s.cp * (ctx_bytes + lse_bytes), false)};
    bwd_tmp = {B.tensor("attn.core.cp_kv_dkv_buffers", 4 * kv_block, false),
               B.tensor("attn.core.cp_step_grads", B.bytes(q) + kv_block, false)};
  } else if (x == CpExchange::kAllGather) {
    fwd_tmp = {B.tensor("attn.core.cp_kv_gathered", 2 * s.cp * kv_block, false),
               B.tensor("attn.core.cp_step_outputs", ctx_bytes + lse_bytes, false)};
    bwd_tmp = {B.tensor("attn.core.cp_kv_gathered", 2 * s.cp * kv_block, false),
               B.tensor("attn.core.cp_dkv_full", s.cp * kv_block, false),
               B.tensor("attn.core.cp_step_grads", B.bytes(q) + s.cp * kv_block, false)};
  } else if (x == CpExchange::kAllToAll) {
    fwd_tmp = {B.tensor("attn.core.cp_a2a_qkv", B.bytes(q) + kv_block, false),
               B.tensor("attn.core.cp_a2a_out", ctx_bytes, false)};
    bwd_tmp = {B.tensor("attn.core.cp_a2a_dout", ctx_bytes, false),
               B.tensor("attn.core.cp_a2a_dqkv", B.bytes(q) + kv_block, false)};
  } else {
    const Expr ring = s.cp / Expr(static_cast<double>(o.cp_a2a));
    fwd_tmp = {B.tensor("attn.core.cp_a2a_qkv", B.bytes(q) + kv_block, false),
               B.tensor("attn.core.cp_kv_blocks", ring * kv_block, false),
               B.tensor("attn.core.cp_step_outputs", ring * (ctx_bytes + lse_bytes), false),
               B.tensor("attn.core.cp_a2a_out", ctx_bytes, false)};
    bwd_tmp = {B.tensor("attn.core.cp_a2a_dout", ctx_bytes, false),
               B.tensor("attn.core.cp_kv_dkv_buffers", 4 * kv_block, false),
               B.tensor("attn.core.cp_step_grads", B.bytes(q) + kv_block, false),
               B.tensor("attn.core.cp_a2a_dqkv", B.bytes(q) + kv_block, false)};
  }
  Op& op = B.op("attn.core", OpKind::kFlashAttention, {q, k, v}, {ctx, lse}, {q, k, v, ctx, lse});
  op.attention_core = true;
  // Causal for the exchanges that pair chunks (check_cp refuses them with a sliding window); the
  // a2a's kernel sees the whole sequence, with the model's own mask.
  op.attention_work = x == CpExchange::kAllToAll ? work : 0.5;
  op.flash2 = o.sdpa_flash2;
  op.fwd_temporaries = fwd_tmp;
  op.bwd_temporaries = bwd_tmp;
  op.fwd_flops = 4 * sb(o) * s.s * qw / s.t;
  op.bwd_flops = 10 * sb(o) * s.s * qw / s.t;
  // Every step reads a K/V block (the a2a's single kernel reads the whole sequence's, a/cp heads).
  op.bytes_read = ctx_bytes + s.cp * kv_block;
  op.bytes_written = ctx_bytes;
  const Expr first = 1 / s.cp, rest = (s.cp - 1) / s.cp;
  auto ctxg = [](CommKind k, const Expr& bytes) { return TpComm{k, bytes, CommGroup::kContext}; };
  switch (x) {
    case CpExchange::kRing:
      op.fwd_cp = {{ctxg(CommKind::kRingExchange, kv_block), rest}};
      op.bwd_cp = {{ctxg(CommKind::kRingExchange, 2 * kv_block), rest}};
      break;
    case CpExchange::kGatherRing: {
      // dK/dV accumulate in fp32 (PyTorch's _cp_options.convert_to_f32).
      const Expr dkv = kv_block * 4 / o.act_bytes;
      op.fwd_cp = {{ctxg(CommKind::kAllGather, s.cp * kv_block), first}};
      op.bwd_cp = {{ctxg(CommKind::kAllGather, s.cp * kv_block), first},
                   {ctxg(CommKind::kRingExchange, dkv), rest},
                   {ctxg(CommKind::kAllToAll, dkv), Expr(0.0)}};
      break;
    }
    case CpExchange::kAllGather:
      op.fwd_cp = {{ctxg(CommKind::kAllGather, s.cp * kv_block), Expr(0.0)}};
      op.bwd_cp = {{ctxg(CommKind::kAllGather, s.cp * kv_block), Expr(0.0)},
                   {ctxg(CommKind::kReduceScatter, s.cp * kv_block), Expr(0.0)}};
      break;
    case CpExchange::kAllToAll:
      op.fwd_cp = {{ctxg(CommKind::kAllToAll, B.bytes(q) + kv_block), Expr(0.0)},
                   {ctxg(CommKind::kAllToAll, ctx_bytes), Expr(0.0)}};
      op.bwd_cp = {{ctxg(CommKind::kAllToAll, ctx_bytes), Expr(0.0)},
                   {ctxg(CommKind::kAllToAll, B.bytes(q) + kv_block), Expr(0.0)}};
      break;
    case CpExchange::kA2aP2p: {
      // The ring's steps are R = cp/a: each of the first R − 1 hides the next block's exchange.
      const Expr a = Expr(static_cast<double>(o.cp_a2a)), ring_rest = (s.cp / a - 1) / (s.cp / a);
      const TpComm qkv{CommKind::kAllToAll, B.bytes(q) + kv_block, CommGroup::kContextA2a};
      const TpComm out{CommKind::kAllToAll, ctx_bytes, CommGroup::kContextA2a};
      op.fwd_cp = {{qkv, Expr(0.0)},
                   {TpComm{CommKind::kRingExchange, kv_block, CommGroup::kContextRing}, ring_rest},
                   {out, Expr(0.0)}};
      op.bwd_cp = {{out, Expr(0.0)},
                   {TpComm{CommKind::kRingExchange, 2 * kv_block, CommGroup::kContextRing}, ring_rest},
                   {qkv, Expr(0.0)}};
      break;
    }
  }
  return ctx;
}

// Self-attention core. Without flash attention: scores = q·kᵀ (saves q, k), softmax (saves its
// output), dropout (mask), context = p·v (saves p, v); GQA repeats k and v to all heads first, as
// Megatron's DotProductAttention does. With flash attention: saves q, k, v, the output and the
// fp32 log-sum-exp; no s² tensor exists.
// `qw` is the query width a·d (h unless the model sets its own head size) and `d` the head size;
// `work` the share of the s×s product a flash kernel computes (attention_work).
int attention_core(LayerBuilder& B, int q, int k, int v, const Expr& qw, const Expr& d, double work) {
  const auto& o = B.o_;
  const auto& s = S();
  Expr heads = s.a / s.t;
  Expr ctx_bytes = sb(o) * qw / s.t * w(o);
  if (o.flash_attention && o.context_parallel) return cp_attention_core(B, q, k, v, qw, work);
  if (o.flash_attention) {
    int ctx = B.tensor("attn.core.out", ctx_bytes);
    int lse = B.tensor("attn.core.lse", s.b * heads * s.s * 4, false);
    Op& op = B.op("attn.core", OpKind::kFlashAttention, {q, k, v}, {ctx, lse}, {q, k, v, ctx, lse});
    op.attention_core = true;
    op.attention_work = work;
    op.flash2 = o.sdpa_flash2;
    op.fwd_flops = 4 * s.b * s.s * s.s * qw / s.t;
    op.bwd_flops = 10 * s.b * s.s * s.s * qw / s.t;  // 2x the matmuls + recomputed q·kᵀ
    op.bytes_read = 3 * ctx_bytes;
    op.bytes_written = ctx_bytes;
    return ctx;
  }
  Expr scores = s.b * heads * s.s * s.s;
  int ke = k, ve = v;
  int sc = B.tensor("attn.scores", scores * w(o));
  Op& qk = B.op("attn.qk", OpKind::kBmm, {q, ke}, {sc}, {q, ke});
  qk.attention_core = true;
  qk.is_gemm = true;
  qk.gemm = {s.b * heads, s.s, s.s, d};
  qk.fwd_flops = 2 * s.b * s.s * s.s * qw / s.t;
  qk.bwd_flops = 2 * qk.fwd_flops;
  qk.bytes_read = 2 * ctx_bytes;
  qk.bytes_written = scores * w(o);
  int p = B.tensor("attn.probs", scores * w(o));
  Op& sm = B.op("attn.softmax", OpKind::kSoftmax, {sc}, {p}, {p});
  sm.attention_core = true;
  sm.fwd_flops = 5 * scores;
  sm.bwd_flops = 3 * scores;
  sm.bytes_read = scores * w(o);
  sm.bytes_written = scores * w(o);
  if (o.megatron_softmax) {
    sm.softmax_batches = s.b * heads;
    sm.softmax_elements = scores;
  }
  int pd = p;
  if (o.dropout) {
    int mask = B.tensor("attn.dropout.mask", scores, false);
    pd = B.tensor("attn.dropout.out", scores * w(o));
    Op& d = B.op("attn.dropout", OpKind::kDropout, {p}, {pd, mask}, {mask});
    d.attention_core = true;
    d.fwd_flops = 2 * scores;
    d.bwd_flops = scores;
    d.bytes_read = scores * w(o);
    d.bytes_written = scores * (w(o) + 1);
  }
  int ctx = B.tensor("attn.context", ctx_bytes);
  Op& pv = B.op("attn.pv", OpKind::kBmm, {pd, ve}, {ctx}, {pd, ve});
  pv.attention_core = true;
  pv.is_gemm = true;
  pv.gemm = {s.b * heads, s.s, d, s.s};
  pv.fwd_flops = 2 * s.b * s.s * s.s * qw / s.t;
  pv.bwd_flops = 2 * pv.fwd_flops;
  pv.bytes_read = scores * w(o) + ctx_bytes;
  pv.bytes_written = ctx_bytes;
  return ctx;
}

// QKV projection, split into views, rotary embedding on q and k, GQA expansion (non-flash only),
// attention core, output projection. Returns the output of the projection (before dropout).
int attention(LayerBuilder& B, int x, const ModelSpec& m, double work) {
  const auto& o = B.o_;
  const auto& s = S();
  // Heads of size h/a (d in the symbols' terms), or of the model's own head size: then the query
  // width a·d is a number of its own (Qwen3: 32 heads of 128 on h = 2048).
  const bool own = m.decoupled_head_dim();
  const Expr d = own ? Expr(static_cast<double>(m.head_dim())) : s.h / s.a;
  const Expr qw = own ? Expr(static_cast<double>(m.query_width())) : s.h;
  Expr kv_width = own ? s.g * d : s.h * s.g / s.a;  // g heads of size d
  Expr q_bytes = sb(o) * qw / s.t * w(o);
  Expr kv_bytes = sb(o) * kv_width / s.t * w(o);
  Expr qkv_bias = m.qkv_bias ? (qw + 2 * kv_width) / s.t : Expr(0.0);
  int q = -1, k = -1, v = -1;
  if (o.fused_projections) {
    int qkv = column_linear(B, "attn.qkv", x, s.h, (qw + 2 * kv_width) / s.t, qkv_bias);
    // q, k, v are views of one allocation: saving any of them keeps all of qkv alive.
    q = B.view("attn.q", qkv, q_bytes), k = B.view("attn.k", qkv, kv_bytes), v = B.view("attn.v", qkv, kv_bytes);
    B.op("attn.split", OpKind::kView, {qkv}, {q, k, v}, {});
  } else {
    const bool bias = m.qkv_bias;
    q = column_linear(B, "attn.wq", x, s.h, qw / s.t, bias ? qw / s.t : Expr(0.0));
    k = column_linear(B, "attn.wk", x, s.h, kv_width / s.t, bias ? kv_width / s.t : Expr(0.0), true, true);
    v = column_linear(B, "attn.wv", x, s.h, kv_width / s.t, bias ? kv_width / s.t : Expr(0.0), true, true);
  }
  if (m.qk_norm) {
    // Megatron's --qk-layernorm (TE RMSNorm over each head of q and of k, before the rotary
    // embedding): new q and k; keeps its inputs (views of qkv: all of it stays alive) and an fp32
    // 1/rms per head and token.
    int qn = B.tensor("attn.q_norm", q_bytes), kn = B.tensor("attn.k_norm", kv_bytes);
    int rstd = B.tensor("attn.qk_norm.rstd", sb(o) * (s.a + s.g) / s.t * 4, false);
    Op& n = B.op("attn.qk_norm", OpKind::kRmsNorm, {q, k}, {qn, kn, rstd}, {q, k, rstd});
    n.params = 2 * d;
    n.stream_kernels = 2;
    n.fwd_flops = 4 * sb(o) * (qw + kv_width) / s.t;
    n.bwd_flops = 8 * sb(o) * (qw + kv_width) / s.t;
    n.bytes_read = q_bytes + kv_bytes;
    n.bytes_written = q_bytes + kv_bytes;
    q = qn;
    k = kn;
  }
  if (m.positions == spec::Positions::kRotary) {
    // Out-of-place rotary (Megatron's apply_rotary_pos_emb): new q and k, saves only cos/sin.
    int qr = B.tensor("attn.q_rot", q_bytes), kr = B.tensor("attn.k_rot", kv_bytes);
    Op& r = B.op("attn.rotary", OpKind::kRotary, {q, k}, {qr, kr}, {});
    r.fwd_flops = 3 * sb(o) * (qw + kv_width) / s.t;
    r.bwd_flops = r.fwd_flops;
    r.bytes_read = q_bytes + kv_bytes;
    r.bytes_written = q_bytes + kv_bytes;
    if (o.eager_elementwise) {
      // torchtitan's apply_rotary_emb, for q and for k: .float(), the complex product, .type_as.
      // The product keeps its complex (fp32) operand for backward.
      const Expr elems = sb(o) * (qw + kv_width) / s.t;
      int fp32 = B.tensor("attn.qk_fp32", elems * 4, false);
      r.outputs.push_back(fp32);
      r.saved = {fp32};
      r.stream_kernels = 6;
      r.bytes_read = elems * (w(o) + 4 + 4);
      r.bytes_written = elems * (4 + 4 + w(o));
    }
    q = qr;
    k = kr;
  }
  // Without flash attention, and in torchtitan (its repeat_kv before SDPA), k and v are copied to
  // every query head.
  if ((!o.flash_attention || o.copies_around_attention) && m.num_kv_heads != m.num_heads) {
    int ke = B.tensor("attn.k_expanded", q_bytes), ve = B.tensor("attn.v_expanded", q_bytes);
    Op& e = B.op("attn.expand_kv", OpKind::kRepeat, {k, v}, {ke, ve}, {});
    e.attention_core = true;
    e.stream_kernels = 2;
    e.bytes_read = 2 * kv_bytes;
    e.bytes_written = 2 * q_bytes;
    e.fwd_flops = Expr(0.0);
    e.bwd_flops = 2 * sb(o) * qw / s.t;
    k = ke;
    v = ve;
  }
  int ctx = attention_core(B, q, k, v, qw, d, work);
  if (m.attention_sinks) {
    // gpt-oss's sinks: one learned logit per query head in the kernel's softmax (Megatron's
    // --softmax-type learnable); parameters only, the kernel's work is the same.
    B.last_op().params = B.last_op().params + s.a / s.t;
  }
  if (o.copies_around_attention) {
    // output.transpose(1, 2).contiguous(): the kernel's (b, heads, s, d) layout copied to (b, s, h).
    int c = B.tensor("attn.core.contiguous", q_bytes);
    Op& cp = B.op("attn.contiguous", OpKind::kCopy, {ctx}, {c}, {});
    cp.fwd_flops = Expr(0.0);
    cp.bwd_flops = sb(o) * qw / s.t;  // the gradient's layout copied back
    cp.bytes_read = q_bytes;
    cp.bytes_written = q_bytes;
    ctx = c;
  }
  return row_linear(B, "attn.proj", ctx, qw / s.t, m.linear_bias);
}

// MLP: GELU (h -> f -> h) or SwiGLU (h -> 2f -> f -> h; Megatron's fused bias_swiglu saves only
// its input). Returns the output of the down projection.
int mlp(LayerBuilder& B, int x, const ModelSpec& m, const std::string& prefix, Expr width) {
  const auto& o = B.o_;
  const auto& s = S();
  Expr act = sb(o) * width / s.t;
  if (m.mlp == spec::Mlp::kSwiGlu) {
    std::vector<int> in;
    if (o.fused_projections) {
      Expr bias = m.linear_bias ? 2 * width / s.t : Expr(0.0);
      in = {column_linear(B, prefix + ".gate_up", x, s.h, 2 * width / s.t, bias)};
    } else {
      // torchtitan's FeedForward: w2(silu(w1(x)) * w3(x)).
      Expr bias = m.linear_bias ? width / s.t : Expr(0.0);
      int gate = column_linear(B, prefix + ".w1", x, s.h, width / s.t, bias);
      in = {gate, column_linear(B, prefix + ".w3", x, s.h, width / s.t, bias, true, true)};
    }
    int y = B.tensor(prefix + ".swiglu.out", act * w(o));
    Op& op = B.op(prefix + ".swiglu", OpKind::kSwiGlu, in, {y}, in);
    op.fwd_flops = 4 * act;
    op.bwd_flops = 8 * act;
    op.bytes_read = 2 * act * w(o);
    op.bytes_written = act * w(o);
    if (o.eager_elementwise) {
      // F.silu(w1(x)) * w3(x): the SiLU's output is written, then read (and kept) by the product.
      int silu = B.tensor(prefix + ".silu.out", act * w(o), false);
      op.outputs.push_back(silu);
      op.saved.push_back(silu);
      op.stream_kernels = 2;
      op.bytes_read = 3 * act * w(o);
      op.bytes_written = 2 * act * w(o);
    }
    return row_linear(B, prefix + ".down", y, width / s.t, m.linear_bias);
  }
  Expr bias = m.linear_bias ? width / s.t : Expr(0.0);
  int h1 = column_linear(B, prefix + ".fc1", x, s.h, width / s.t, bias);
  int y = B.tensor(prefix + ".gelu.out", act * w(o));
  Op& op = B.op(prefix + ".gelu", OpKind::kGelu, {h1}, {y}, {h1});
  op.fwd_flops = 8 * act;
  op.bwd_flops = 12 * act;
  op.bytes_read = act * w(o);
  op.bytes_written = act * w(o);
  return row_linear(B, prefix + ".fc2", y, width / s.t, m.linear_bias);
}

// One transformer block's ops on input x (Megatron's TransformerLayer); returns its output.
int block_ops(LayerBuilder& B, int x, const ModelSpec& m, double work, bool dense_mlp) {
  Expr region_elems = sb(B.o_) * S().h / region(B.o_);
  if (m.parallel_block) {
    // Falcon: attention and MLP read the same normed input (or one norm each), one residual.
    int xa = norm(B, "ln_attn", x, m.norm, m);
    int xm = m.norms_per_block >= 2 ? norm(B, "ln_mlp", x, m.norm, m) : xa;
    int ya = attention(B, xa, m, work);
    int ym = mlp(B, xm, m, "mlp", S().f);
    int y = residual_add(B, "attn_mlp_sum", ya, ym);
    y = dropout(B, "dropout", y, region_elems);
    return residual_add(B, "residual", x, y);
  }
  // Megatron's recompute modules (Op::modules). Transformer Engine fuses a norm into the linear that
  // reads it (TELayerNormColumnParallelLinear): the input norm into the QKV projection, the pre-MLP
  // norm into fc1 (inside the "mlp" module). Latent attention's input norm (two down projections
  // read it) and an MoE block's pre-MLP norm are TENorm modules of their own: "layernorm", whose
  // output is restored when the gradient reaches the attention's or the MLP's output.
  const size_t ln1 = B.op_count();
  int x1 = norm(B, "ln1", x, m.norm, m);
  const size_t attn = B.op_count();
  int ya = m.is_mla() ? mla_attention(B, x1, m, work) : attention(B, x1, m, work);
  if (m.is_mla()) {
    B.module_range(ln1, attn, spec::kRecomputeLayernorm);
    B.restore_at(ln1, attn, B.op_count() - 1);
  }
  ya = dropout(B, "attn.dropout_out", ya, region_elems);
  int r1 = residual_add(B, "residual1", x, ya);
  const bool moe = m.is_moe() && !dense_mlp;
  const size_t ln2 = B.op_count();
  int x2 = norm(B, "ln2", r1, m.norm, m);
  const size_t mlp_first = B.op_count();
  int ym = moe ? moe_mlp(B, x2, m) : mlp(B, x2, m, "mlp", S().f);
  if (moe) {
    B.module_since(mlp_first, spec::kRecomputeMoe);
    B.module_range(ln2, mlp_first, spec::kRecomputeLayernorm);
    B.restore_at(ln2, mlp_first, B.op_count() - 1);
  } else {
    B.module_since(ln2, spec::kRecomputeMlp);
  }
  ym = dropout(B, "mlp.dropout_out", ym, region_elems);
  return residual_add(B, "residual2", r1, ym);
}

Layer lower_block(const ModelSpec& m, const LoweringOptions& o, double work, bool dense_mlp = false) {
  LayerBuilder B(dense_mlp ? "dense_block" : "block", LayerKind::kBlock, o);
  int x = B.tensor("block.input", sb(o) * S().h / region(o) * w(o));
  int out = block_ops(B, x, m, work, dense_mlp);
  return B.done(x, out);
}

// The vocab-parallel lookup of `tokens` (op `name`, output `name`.out): each rank holds V/t rows
// (`params` on this GPU: 0 where the table is counted elsewhere), the outputs are summed across the
// TP ranks (reduce-scattered to the rank's sequence shard under sequence parallelism).
int vocab_lookup(LayerBuilder& B, const std::string& name, int tokens, const Expr& params) {
  const auto& o = B.o_;
  const Expr full = sb(o) * S().h * w(o);
  int e = B.tensor(name + ".out", full / region(o));
  Op& op = B.op(name, OpKind::kEmbedding, {tokens}, {e}, {tokens});
  op.params = params;
  op.fwd_flops = Expr(0.0);
  op.bwd_flops = sb(o) * S().h;
  op.bytes_read = full;
  op.bytes_written = full;
  if (o.sequence_parallel) {
    op.temporaries.push_back(B.tensor(name + ".partial_sum", full, false));
    op.fwd_comm = {CommKind::kReduceScatter, full};
  } else {
    op.fwd_comm = {CommKind::kAllReduce, full};
  }
  return e;
}

Layer lower_embedding(const ModelSpec& m, const LoweringOptions& o) {
  const auto& s = S();
  LayerBuilder B("embedding", LayerKind::kEmbedding, o);
  int tokens = B.tensor("tokens", sb(o) * 8, false);  // int64 ids
  Expr full = sb(o) * s.h * w(o);
  int e = vocab_lookup(B, "embedding.word", tokens, s.V * s.h / s.t);
  int out = e;
  if (m.positions == spec::Positions::kLearned) {
    out = B.tensor("embedding.position.out", full / region(o));
    Op& p = B.op("embedding.position", OpKind::kAdd, {e}, {out}, {});
    p.params = Expr(static_cast<double>(m.max_position_embeddings)) * s.h;
    p.fwd_flops = sb(o) * s.h / region(o);
    p.bwd_flops = sb(o) * s.h / region(o);
    p.bytes_read = 2 * full / region(o);
    p.bytes_written = full / region(o);
  }
  out = dropout(B, "embedding.dropout", out, sb(o) * s.h / region(o));
  return B.done(tokens, out);
}

// The LM head and its loss on hidden state x (normed): the logits, their fp32 copy and the
// vocab-parallel cross entropy. `name` prefixes the ops ("" for the next-token loss, "mtp1." ...);
// only the first owns the LM head's weight. Returns the loss.
int lm_loss(LayerBuilder& B, const std::string& name, int xn, const ModelSpec& m, bool owns_weight) {
  const auto& s = S();
  const auto& o = B.o_;
  // Column-parallel over the vocabulary. A tied weight is counted in
  // LoweredModel::embedding_copy_params instead of here.
  int logits = column_linear(B, name + "lm_head", xn, s.h, s.V / s.t, Expr(0.0), owns_weight && !m.tie_word_embeddings);
  Expr n_logits = sb(o) * s.V / s.t;
  if (o.compiled_loss) {
    // torchtitan's cross_entropy_loss under torch.compile: Inductor fuses the fp32 upcast, the
    // log-softmax and the NLL into one pass over the bf16 logits (each row's log-sum-exp kept, fp32),
    // and AOTAutograd's partitioner keeps the logits themselves rather than any fp32 tensor; the
    // backward recomputes the softmax from them and writes the logits' gradient (softmax minus the
    // one-hot target, scaled) in their dtype, in one pass.
    int loss = B.tensor(name + "loss.value", sb(o) * 4);
    int lse = B.tensor(name + "loss.logsumexp", sb(o) * 4, false);
    Op& ce = B.op(name + "loss.cross_entropy", OpKind::kCrossEntropy, {logits}, {loss, lse}, {logits, lse});
    ce.fwd_flops = 5 * n_logits;
    ce.bwd_flops = 2 * n_logits;
    ce.bytes_read = n_logits * w(o);
    ce.bytes_written = Expr(0.0);
    ce.fwd_comm = {CommKind::kAllReduce, sb(o) * 4 * 3};  // max, sum-exp and target logit
    return loss;
  }
  if (o.fused_cross_entropy && o.te_cross_entropy) {
    // Transformer Engine's parallel_cross_entropy (a Triton kernel): one pass for the row's max and
    // sum of exponentials, one writing the loss and the gradient (softmax minus the one-hot target)
    // into the logits, which it keeps; backward scales them by the loss gradient in place.
    int loss = B.tensor(name + "loss.value", sb(o) * 4);
    Op& ce = B.op(name + "loss.cross_entropy", OpKind::kCrossEntropy, {logits}, {loss}, {logits});
    ce.backward_in_place = true;
    ce.fwd_flops = 5 * n_logits;
    ce.bwd_flops = n_logits;
    ce.bytes_read = 2 * n_logits * w(o);
    ce.bytes_written = n_logits * w(o);
    ce.fwd_comm = {CommKind::kAllReduce, sb(o) * 4 * 3};  // max, sum-exp and target logit
    return loss;
  }
  int loss_in = logits;
  if (o.act_bytes != 4) {
    // Megatron computes the loss in fp32 (fp16_lm_cross_entropy off by default).
    loss_in = B.tensor(name + "loss.logits_fp32", n_logits * 4);
    Op& c = B.op(name + "loss.to_fp32", OpKind::kCast, {logits}, {loss_in}, {});
    c.fwd_flops = Expr(0.0);
    c.bwd_flops = Expr(0.0);
    c.bytes_read = n_logits * w(o);
    c.bytes_written = n_logits * 4;
  }
  int loss = B.tensor(name + "loss.value", sb(o) * 4);
  int targets = B.tensor(name + "loss.targets", sb(o) * 9, false);
  Op* ce_ptr = nullptr;
  if (o.fused_cross_entropy) {
    // Vocab-parallel cross entropy: exponentiates the fp32 logits in place and keeps them; its
    // backward turns them into the gradient in place. Also keeps the target mask and ids.
    ce_ptr = &B.op(name + "loss.cross_entropy", OpKind::kCrossEntropy, {loss_in}, {loss, targets}, {loss_in, targets});
    ce_ptr->backward_in_place = true;
  } else {
    // F.cross_entropy: log-softmax (kept for backward) then NLL. Its backward allocates the
    // gradient of the log-softmax (NLL's backward), then the gradient of the logits beside it.
    int lsm = B.tensor(name + "loss.log_softmax", n_logits * 4);
    int lsm_grad = B.tensor(name + "loss.log_softmax_grad", n_logits * 4, false);
    ce_ptr = &B.op(name + "loss.cross_entropy", OpKind::kCrossEntropy, {loss_in}, {loss, targets, lsm}, {lsm, targets});
    ce_ptr->bwd_temporaries.push_back(lsm_grad);
    // Under tensor parallelism torchtitan runs it as loss parallel on the vocabulary-sharded logits
    // (torch/distributed/tensor/parallel/loss.py): the log-softmax decomposed, x − max kept beside
    // exp(x − max) and then beside the result; the fused NLL and log-softmax backward holds the
    // one-hot, (one-hot + exp(result)) and its product with the loss gradient at once. One fp32
    // tensor of the logits' size more in each pass than the single kernels; z = min(1, t − 1) is 1
    // exactly when t > 1.
    const Expr z = sym::min(Expr(1.0), s.t - 1);
    ce_ptr->fwd_temporaries.push_back(B.tensor(name + "loss.parallel_shifted", n_logits * 4 * z, false));
    ce_ptr->bwd_temporaries.push_back(B.tensor(name + "loss.parallel_one_hot", n_logits * 4 * z, false));
  }
  Op& ce = *ce_ptr;
  ce.fwd_flops = 5 * n_logits;
  ce.bwd_flops = 2 * n_logits;
  ce.bytes_read = 2 * n_logits * 4;
  ce.bytes_written = n_logits * 4;
  ce.fwd_comm = {CommKind::kAllReduce, sb(o) * 4 * 3};  // max, sum-exp and target logit
  return loss;
}

// One multi-token-prediction depth (Megatron-Core's MultiTokenPredictionLayer) on the hidden state
// `hidden` (the main model's normed output, or the previous depth's): the token ids rolled one
// more place, looked up in the word embedding (its copy on this stage: embedding_copy_params),
// enorm of the embedding and hnorm of the hidden state concatenated to 2h, the column-parallel
// eh_proj to h (its output gathered over the TP group, then split back to the rank's sequence
// shard under sequence parallelism), one block of the model's last kind and the depth's final
// norm. Returns the depth's normed output.
int mtp_depth(LayerBuilder& B, const std::string& name, int hidden, const ModelSpec& m, double work) {
  const auto& s = S();
  const auto& o = B.o_;
  const Expr full = sb(o) * s.h * w(o), local = full / region(o);
  int tokens = B.tensor(name + "tokens", sb(o) * 8, false);
  Op& roll = B.op(name + "roll", OpKind::kCopy, {}, {tokens}, {});  // torch.roll of the ids, int64
  roll.fwd_flops = roll.bwd_flops = Expr(0.0);
  roll.bytes_read = roll.bytes_written = sb(o) * 8;
  int e = vocab_lookup(B, name + "embedding", tokens, Expr(0.0));
  int en = norm(B, name + "enorm", e, m.norm, m);
  int hn = norm(B, name + "hnorm", hidden, m.norm, m);
  int cat = B.tensor(name + "concat.out", 2 * local);
  Op& c = B.op(name + "concat", OpKind::kCopy, {en, hn}, {cat}, {});
  c.fwd_flops = c.bwd_flops = Expr(0.0);
  c.bytes_read = 2 * local;
  c.bytes_written = 2 * local;
  int proj = column_linear(B, name + "eh_proj", cat, 2 * s.h, s.h / s.t, Expr(0.0));
  // gather_from_tensor_model_parallel_region (backward: a split), then under sequence parallelism
  // scatter_to_sequence_parallel_region (a copy of the rank's shard; backward: an all-gather).
  int x = B.tensor(name + "eh_proj.gathered", o.sequence_parallel ? local : full);
  Op& g = B.op(name + "eh_proj.gather", OpKind::kCopy, {proj}, {x}, {});
  g.fwd_flops = g.bwd_flops = Expr(0.0);
  g.bytes_read = full;
  g.bytes_written = local;
  g.fwd_comm = {CommKind::kAllGather, full};
  if (o.sequence_parallel) {
    g.temporaries.push_back(B.tensor(name + "eh_proj.gathered_full", full, false));
    g.bwd_comm = {CommKind::kAllGather, full};
  }
  const size_t ops = B.op_count(), tensors = B.tensor_count();
  int y = block_ops(B, x, m, work, false);
  B.prefix_since(ops, tensors, name);
  return norm(B, name + "final_norm", y, m.norm, m);
}

// The last stage's layer: the final norm, the multi-token prediction depths (blocks in FP8 when the
// model's are: `o` is the blocks' options), then every depth's loss and the next-token loss, in the
// order Megatron-Core runs them (process_mtp_loss before the main output layer), summed.
Layer lower_head(const ModelSpec& m, const LoweringOptions& o, double work) {
  LoweringOptions ho = o;  // the builder reads ho: FP8 for the depths' blocks only
  ho.fp8 = false;
  LayerBuilder B("head", LayerKind::kHead, ho);
  int x = B.tensor("head.input", sb(ho) * S().h / region(ho) * w(ho));
  int xn = norm(B, "final_norm", x, m.norm, m);
  std::vector<int> depths;
  int hidden = xn;
  for (int k = 1; k <= o.mtp_layers; ++k) {
    ho.fp8 = o.fp8;
    hidden = mtp_depth(B, fmt::format("mtp{}.", k), hidden, m, work);
    ho.fp8 = false;  // the LM head stays bf16
    depths.push_back(hidden);
  }
  std::vector<int> losses;
  for (size_t k = 0; k < depths.size(); ++k)
    losses.push_back(lm_loss(B, fmt::format("mtp{}.", k + 1), depths[k], m, false));
  int loss = lm_loss(B, "", xn, m, true);
  for (size_t k = 0; k < losses.size(); ++k) {
    // Scaled by mtp_loss_scaling_factor / D and added (MTPLossAutoScaler): one value a token.
    int sum = B.tensor(fmt::format("mtp{}.loss_sum", k + 1), sb(ho) * 4);
    Op& add = B.op(fmt::format("mtp{}.loss_add", k + 1), OpKind::kAdd, {loss, losses[k]}, {sum}, {});
    add.fwd_flops = 2 * sb(ho);
    add.bwd_flops = Expr(0.0);
    add.bytes_read = 2 * sb(ho) * 4;
    add.bytes_written = sb(ho) * 4;
    loss = sum;
  }
  return B.done(x, loss);
}

}  // namespace detail

using detail::lower_block;
using detail::lower_embedding;
using detail::lower_head;
using detail::S;

const Symbols& symbols() {
  static const Symbols kSymbols;
  return kSymbols;
}

LoweringOptions lowering_options(const spec::TrainingSpec& training, bool sequence_parallel, spec::Engine engine) {
  LoweringOptions o;
  o.sequence_parallel = sequence_parallel;
  o.flash_attention = training.flash_attention;
  o.dropout = training.dropout;
  o.act_bytes = spec::dtype_bytes(training.precision);
  o.fp8 = training.fp8_training();
  o.fp8_block_scaled = training.fp8 == spec::Fp8Recipe::kBlockwise;
  o.fp8_keeps_fp8_inputs = engine != spec::Engine::kTorchtitan;
  o.fp8_params = o.fp8 && training.fp8_param_gather;
  o.moe_load = training.moe_load_factor();
  o.moe_load_padded = training.moe_pad_to_capacity;
  o.moe_allgather = training.moe_dispatcher == spec::MoeDispatcher::kAllGather;
  o.moe_router_fp32 = training.moe_router_fp32;
  o.mtp_layers = static_cast<int>(training.mtp_layers);
  o.recompute_modules = training.recompute_modules;
  o.te_cross_entropy = training.cross_entropy_fusion == spec::CrossEntropyFusion::kTe;
  o.compiled_loss = training.compiled_loss();
  // Current scaling (tensorwise, rowwise) computes each operand's amax in a pass before the cast.
  o.fp8_cast_bytes =
      training.fp8 == spec::Fp8Recipe::kTensorwise || training.fp8 == spec::Fp8Recipe::kRowwise ? 6 : 4;
  if (engine == spec::Engine::kTorchtitan) {
    o.eager_elementwise = true;
    o.megatron_softmax = false;
    o.copies_around_attention = true;
    o.sdpa_flash2 = true;
    o.compiled_blocks = training.compile;
    o.sp_keeps_gathered = true;
    o.sp_gathers_fp8 = training.fp8 == spec::Fp8Recipe::kTensorwise;
    o.fused_projections = false;
    o.fused_cross_entropy = false;
    o.selective = SelectivePolicy::kSaveOddMatmuls;
  }
  return o;
}

void mark_selective_recompute(Layer& layer, SelectivePolicy policy, uint32_t modules) {
  layer.selective = policy;
  int matmuls = 0;
  for (Op& op : layer.ops) {
    if (policy == SelectivePolicy::kAttentionCore) {
      // A module under a checkpoint (core_attn, mlp, moe, shared_experts) keeps its inputs; one
      // without its output only where no such module holds it (moe_act inside a recomputed moe).
      const uint32_t chosen = (op.modules | (op.attention_core ? spec::kRecomputeCoreAttn : 0u)) & modules;
      op.selective_recompute = chosen != 0;
      op.recompute_without_output = chosen != 0 && (chosen & ~spec::kRecomputeWithoutOutput) == 0;
      continue;
    }
    // aten.mm: the linears (the attention's bmm, without flash attention, is not on the list).
    const bool mm = op.kind == OpKind::kLinear;
    if (mm) ++matmuls;
    const bool kept = (mm && matmuls % 2 == 1) || op.kind == OpKind::kFlashAttention;
    op.selective_recompute = !kept && op.kind != OpKind::kView;
  }
}

// Of the full s×s score product, the share a flash attention kernel computes, as a mean over the
// model's blocks (mist lowers one block for all of them; a stage holding an odd share of windowed
// blocks is off by at most half a block's difference: docs/time-model.md). Full causal attention:
// 1/2. A block with window w: the kernel runs each tile of T = 128 queries against every key tile
// the band [i − w + 1, i] of its queries touches, its diagonal tile counted at half as in the
// causal 1/2 (so the share is 1/2 again when w ≥ s).
double attention_work(const spec::ModelSpec& m, int64_t seq) {
  const int64_t windowed = seq > m.sliding_window ? m.windowed_layers() : 0;
  if (windowed == 0) return 0.5;
  constexpr int64_t T = 128;
  const int64_t tiles = (seq + T - 1) / T;
  double computed = 0;  // query tiles × key tiles
  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t first_key = std::max<int64_t>(0, j * T - m.sliding_window + 1);
    computed += static_cast<double>(j - first_key / T + 1) - 0.5;
  }
  const double windowed_work = computed / (static_cast<double>(tiles) * static_cast<double>(tiles));
  const double share = static_cast<double>(windowed) / static_cast<double>(m.num_layers);
  return share * windowed_work + (1 - share) * 0.5;
}

LoweredModel lower(const spec::ModelSpec& m, int64_t seq_length, const LoweringOptions& opts) {
  LoweredModel lm;
  lm.options = opts;
  lm.embedding = lower_embedding(m, opts);
  LoweringOptions block_opts = opts;
  if (opts.compiled_blocks) block_opts.eager_elementwise = false;
  lm.block = lower_block(m, block_opts, attention_work(m, seq_length));
  lm.block.compiled = opts.compiled_blocks;
  if (m.is_moe() && m.first_dense_layers > 0) {
    lm.dense_block = lower_block(m, block_opts, attention_work(m, seq_length), true);
    lm.dense_block.compiled = opts.compiled_blocks;
    lm.dense_blocks = m.first_dense_layers;
    mark_selective_recompute(lm.dense_block, opts.selective, opts.recompute_modules);
  }
  // The LM head stays bf16 (Megatron's output layer is not a TE linear; torchtitan's float8
  // converter skips "output"); lower_head keeps FP8 for its multi-token prediction blocks only.
  // The head's norm and linear stay eager under torch.compile (torchtitan compiles the blocks and,
  // apart, the loss: compiled_loss); multi-token prediction is Megatron-LM's alone.
  lm.head = lower_head(m, opts, attention_work(m, seq_length));
  // The engines checkpoint blocks only: the embedding and the head keep what they save.
  mark_selective_recompute(lm.embedding, SelectivePolicy::kAttentionCore, opts.recompute_modules);
  mark_selective_recompute(lm.block, opts.selective, opts.recompute_modules);
  mark_selective_recompute(lm.head, SelectivePolicy::kAttentionCore, opts.recompute_modules);
  lm.num_blocks = m.num_layers;
  lm.embedding_copy_params = m.tie_word_embeddings || opts.mtp_layers > 0 ? S().V * S().h / S().t : Expr(0.0);
  lm.dims = {{"s", static_cast<double>(seq_length)},
             {"h", static_cast<double>(m.hidden_size)},
             {"a", static_cast<double>(m.num_heads)},
             {"g", static_cast<double>(m.num_kv_heads)},
             {"f", static_cast<double>(m.ffn_hidden_size)},
             {"V", static_cast<double>(m.vocab_size)}};
  return lm;
}

const char* to_string(CommKind k) {
  switch (k) {
    case CommKind::kNone: return "none";
    case CommKind::kAllReduce: return "all-reduce";
    case CommKind::kAllGather: return "all-gather";
    case CommKind::kReduceScatter: return "reduce-scatter";
    case CommKind::kAllToAll: return "all-to-all";
    case CommKind::kRingExchange: return "ring exchange";
  }
  return "?";
}

Expr Layer::params() const {
  std::vector<Expr> v;
  for (const auto& o : ops) v.push_back(o.params);
  return sym::sum(v);
}
Expr Layer::expert_params() const {
  std::vector<Expr> v;
  for (const auto& o : ops)
    if (o.expert) v.push_back(o.params);
  return v.empty() ? Expr(0.0) : sym::sum(v);
}
Expr Layer::fp8_params() const {
  std::vector<Expr> v;
  for (const auto& o : ops)
    if (o.fp8) v.push_back(o.params);
  return v.empty() ? Expr(0.0) : sym::sum(v);
}
Expr Layer::fp8_expert_params() const {
  std::vector<Expr> v;
  for (const auto& o : ops)
    if (o.fp8 && o.expert) v.push_back(o.params);
  return v.empty() ? Expr(0.0) : sym::sum(v);
}
Expr Layer::fwd_flops() const {
  std::vector<Expr> v;
  for (const auto& o : ops) v.push_back(o.fwd_flops);
  return sym::sum(v);
}
Expr Layer::bwd_flops() const {
  std::vector<Expr> v;
  for (const auto& o : ops) v.push_back(o.bwd_flops);
  return sym::sum(v);
}
Expr Layer::external_bytes() const {
  std::vector<Expr> v;
  for (const auto& t : tensors)
    if (t.external) v.push_back(t.bytes);
  return v.empty() ? Expr(0.0) : sym::max(v);
}

}  // namespace mist::graph
