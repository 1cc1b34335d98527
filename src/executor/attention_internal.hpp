// Shared by attention.cpp, ring_attention.cpp and cp_exchanges.cpp: views of one head, the
// attention Functions' saved arguments, the causal score tile of flash attention, and what the
// context-parallel exchanges share (the other ranks' tokens, attention over a causal prefix).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include <ATen/ATen.h>

#include "executor/functions_internal.hpp"

namespace mist::executor::ops::detail {

// Head `hd` of sequence `bi` of x [s, b, heads·d]: a [s, d] view with row stride b·width.
inline at::Tensor head(const at::Tensor& x, int64_t bi, int64_t hd, int64_t d) {
  return x.select(1, bi).narrow(1, hd * d, d);
}

inline const AttnDims* dims_of(AutogradContext* ctx) { return saved_ptr<AttnDims>(ctx, "dims"); }
inline void keep(AutogradContext* ctx, const AttnDims* d, int64_t op) {
  ctx->set_materialize_grads(false);
  ctx->saved_data["dims"] = as_int(d);
  ctx->saved_data["op"] = op;
}
inline int op_of(AutogradContext* ctx) { return static_cast<int>(ctx->saved_data["op"].toInt()); }

// What a flash-attention Function's backward starts from: its saved q, k, v, output and fp32
// log-sum-exp, the output gradient g, and the input gradients it fills (allocated first, as the
// lowering's walk counts them: gq empty, gk and gv zeroed).
struct FlashBackward {
  const AttnDims* d;
  at::Tensor q, k, v, o, lse, g, gq, gk, gv;
  variable_list grads() const { return {gq, gk, gv, at::Tensor(), at::Tensor()}; }
};
// Nothing when no gradient reached the output (then every input gradient is undefined: none_of_them).
inline std::optional<FlashBackward> flash_backward(AutogradContext* ctx, const variable_list& grads) {
  auto sv = ctx->get_saved_variables();
  if (!grads[0].defined()) return std::nullopt;
  FlashBackward f{dims_of(ctx), sv[0], sv[1], sv[2], sv[3], sv[4], grads[0], {}, {}, {}};
  const int64_t s = f.q.size(0), b = f.q.size(1), kvw = f.d->groups * f.d->head_dim;
  f.gq = at::empty({s, b, f.d->heads * f.d->head_dim}, f.q.options());
  f.gk = at::zeros({s, b, kvw}, f.k.options());
  f.gv = at::zeros({s, b, kvw}, f.v.options());
  return f;
}
inline variable_list none_of_them() { return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()}; }

inline constexpr int64_t kTile = 64;  // query rows per flash-attention tile

// Scores of query rows [r0, r0 + n) against keys [0, r0 + n), scaled and causally masked.
inline at::Tensor tile_scores(const at::Tensor& qf, const at::Tensor& kf, int64_t r0, int64_t n, double scale) {
  auto sc = at::mm(qf.narrow(0, r0, n), kf.narrow(0, 0, r0 + n).t()).mul_(scale);
  auto diag = sc.narrow(1, r0, n);
  diag.masked_fill_(at::ones({n, n}, sc.options().dtype(at::kBool)).triu_(1), -std::numeric_limits<float>::infinity());
  return sc;
}

// Context parallelism (BlockRun::cp): the sequence is 2·cp chunks of c tokens; the measured rank is
// the last, r = cp−1, holding chunks cp−1 and cp (contiguous, global positions P = (cp−1)·c on).
// Every exchange computes the same function of its local q, k, v: each local query attends to
// chunks 0..cp−2 (the other ranks' keys, drawn) and causally to the local keys. The other ranks'
// tokens are drawn from a generator seeded by the chunk alone, so every pass and every exchange
// sees the same ones; they are rounded to the training dtype as a received tensor would be.
// Chunk `chunk`'s k then v [c, b, width] (width = 2·g·d), or its q [c, b, a·d], in `opts`' dtype.
at::Tensor remote_kv(int64_t chunk, int64_t c, int64_t b, int64_t width, const at::TensorOptions& opts);
at::Tensor remote_q(int64_t chunk, int64_t c, int64_t b, int64_t width, const at::TensorOptions& opts);

// One head of flash attention over a causal prefix, in fp32 (tensors [n, d], contiguous): query
// row i, at global position p0 + i, attends to keys [0, p0 + i] of kf and vf (to all of them when
// not causal: keys that precede every query).
struct PrefixForward {
  at::Tensor out, lse;  // [n, d], [n]
};
PrefixForward prefix_attention(const at::Tensor& qf, const at::Tensor& kf, const at::Tensor& vf, int64_t p0, double scale,
                               bool causal = true);
// Its backward from the output gradient gof (and the forward's of and lse): dq [n, d], and dk, dv
// over all of kf's rows (zero beyond the last key a query reaches).
struct PrefixBackward {
  at::Tensor dq, dk, dv;
};
PrefixBackward prefix_attention_backward(const at::Tensor& qf, const at::Tensor& kf, const at::Tensor& vf,
                                         const at::Tensor& of, const at::Tensor& lse, const at::Tensor& gof, int64_t p0,
                                         double scale, bool causal = true);

}  // namespace mist::executor::ops::detail
