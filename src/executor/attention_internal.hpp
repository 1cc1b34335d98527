// Shared by attention.cpp and ring_attention.cpp: views of one head, the attention Functions'
// saved arguments, and the causal score tile of flash attention.
#pragma once

#include <cstdint>
#include <limits>

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

inline constexpr int64_t kTile = 64;  // query rows per flash-attention tile

// Scores of query rows [r0, r0 + n) against keys [0, r0 + n), scaled and causally masked.
inline at::Tensor tile_scores(const at::Tensor& qf, const at::Tensor& kf, int64_t r0, int64_t n, double scale) {
  auto sc = at::mm(qf.narrow(0, r0, n), kf.narrow(0, 0, r0 + n).t()).mul_(scale);
  auto diag = sc.narrow(1, r0, n);
  diag.masked_fill_(at::ones({n, n}, sc.options().dtype(at::kBool)).triu_(1), -std::numeric_limits<float>::infinity());
  return sc;
}

}  // namespace mist::executor::ops::detail
