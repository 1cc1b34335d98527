// Fused CPU kernels for the executor's ops: each writes only into the tensors it is given, so an
// op allocates exactly its outputs (as Megatron's fused GPU kernels do) and the tracking allocator
// sees the same tensors as mist's lowering. Math runs in fp32 for bf16 tensors.
// Layout conventions: activations are [s, b, width] (Megatron's), row-major; "rows" = s·b.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace mist::executor::kernels {

// LayerNorm over the last dimension of x [rows, h]; mean and rstd are fp32 [rows].
void layernorm_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps,
                       const at::Tensor& y, const at::Tensor& mean, const at::Tensor& rstd);
// gx = dL/dx; the weight and bias gradients are added into the fp32 main_gw / main_gb.
void layernorm_backward(const at::Tensor& gy, const at::Tensor& x, const at::Tensor& mean,
                        const at::Tensor& rstd, const at::Tensor& w, const at::Tensor& gx,
                        const at::Tensor& main_gw, const at::Tensor& main_gb);
void rmsnorm_forward(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& y,
                     const at::Tensor& rstd);
void rmsnorm_backward(const at::Tensor& gy, const at::Tensor& x, const at::Tensor& rstd,
                      const at::Tensor& w, const at::Tensor& gx, const at::Tensor& main_gw);

// Causal softmax of scale·scores over the last dimension of [n, s, s]; masked entries are 0.
void causal_softmax_forward(const at::Tensor& scores, double scale, const at::Tensor& probs);
void causal_softmax_backward(const at::Tensor& gp, const at::Tensor& probs, double scale,
                             const at::Tensor& gx);

// Dropout with a 1-byte keep mask; the mask comes from a counter-based hash of (seed, index).
void dropout_forward(const at::Tensor& x, double p, uint64_t seed, const at::Tensor& y,
                     const at::Tensor& mask);
void dropout_backward(const at::Tensor& gy, const at::Tensor& mask, double p, const at::Tensor& gx);

// Rotary embedding (rotate-half form) of x [s, b, heads·d], which may be a column slice of a
// wider tensor; cos/sin are fp32 [s, d/2]. Output (and gx) are contiguous [s, b, heads·d].
void rotary_forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                    int64_t head_dim, const at::Tensor& y);
void rotary_backward(const at::Tensor& gy, const at::Tensor& cos, const at::Tensor& sin,
                     int64_t head_dim, const at::Tensor& gx);

// Fused SwiGLU: y = silu(gate)·up for gu = [gate | up] of [rows, 2f].
void swiglu_forward(const at::Tensor& gu, const at::Tensor& y);
void swiglu_backward(const at::Tensor& gy, const at::Tensor& gu, const at::Tensor& ggu);

// y = x·p per row for x [n, f] and probs [n] (TEGroupedMLP's product of GELU experts' activation
// with the routing probabilities); backward gx = gy·p and gp = Σ gy·x per row, without a temporary.
// p, gp and y (gy) may be fp32 beside a bf16 x (an fp32 router: the product is promoted).
void weight_rows_forward(const at::Tensor& x, const at::Tensor& p, const at::Tensor& y);
void weight_rows_backward(const at::Tensor& gy, const at::Tensor& x, const at::Tensor& p, const at::Tensor& gx,
                          const at::Tensor& gp);

// Weighted SwiGLU of the experts (Megatron's WeightedSwiGLUFunction): y = silu(gate)·up·p for
// gu = [gate | up] of [rows, 2f] and one probability per row, p [rows]. The backward writes
// ggu = dL/dgu and gp = dL/dp = Σ_c silu(gate)·up·gy. p and gp may be fp32 beside a bf16 gu (an
// fp32 router: the fused kernel casts inside).
void weighted_swiglu_forward(const at::Tensor& gu, const at::Tensor& p, const at::Tensor& y);
void weighted_swiglu_backward(const at::Tensor& gy, const at::Tensor& gu, const at::Tensor& p, const at::Tensor& ggu,
                              const at::Tensor& gp);

// GQA: repeats each of the g key/value heads of x [s, b, g·d] (maybe a column slice) to
// heads/g query heads: y [s, b, heads·d]. The backward sums each group's gradients.
void expand_heads_forward(const at::Tensor& x, int64_t head_dim, int64_t heads, const at::Tensor& y);
void expand_heads_backward(const at::Tensor& gy, int64_t head_dim, int64_t groups, const at::Tensor& gx);

}  // namespace mist::executor::kernels
