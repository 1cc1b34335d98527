// What a lowered op costs, as the kernels each pass of it runs. This is the one description of an
// op's cost: the time the model uses (perf_model.hpp: op_time), the linear features `mist fit`
// solves for (fit.hpp: add_kernels) and the GEMM shapes that scale a measured time to another GPU
// (profile::scale_factor) are all derived from the kernel list, so a fit and a prediction cannot
// disagree on what an op runs.
#pragma once

#include <variant>
#include <vector>

#include "graph/layer.hpp"
#include "spec/training.hpp"

namespace mist::hardware {

enum class Pass { kForward, kBackward };

// C[m×n] = A[m×k]·B[k×n], `batch` times, elements of `dtype`.
struct GemmKernel {
  double batch = 1, m = 0, n = 0, k = 0;
  spec::Dtype dtype = spec::Dtype::kBf16;
  bool block_scaled = false;  // FP8 with block scales applied in the main loop (graph::Op::fp8_block_scaled)
  double bytes() const;  // A, B and C once each: what the GEMM moves at least
  bool empty() const { return batch <= 0 || m <= 0 || n <= 0 || k <= 0; }  // a zero dimension: no work
};

// A memory-bound kernel: `bytes` through memory and `flops` of elementwise math (exp, erf, random
// numbers) on them.
struct StreamKernel {
  double bytes = 0, flops = 0;
};

// A fused attention kernel of `flops` as it runs (a causal mask's skipped blocks left out): its
// rate is a fraction of the dense peak in `dtype`, forward and backward apart.
struct FlashKernel {
  double flops = 0;
  bool backward = false;
  spec::Dtype dtype = spec::Dtype::kBf16;
  bool flash2 = false;  // PyTorch SDPA's FlashAttention-2 kernel (graph::Op::flash2)
};

using Kernel = std::variant<GemmKernel, StreamKernel, FlashKernel>;

// Whether the op has a backward at all: views have none, nor an op whose backward FLOPs are the
// constant 0 (a residual add passes its gradient through; a cast's gradient is the loss's).
bool has_backward(const graph::Op& op);

// Whether Megatron's FusedScaleMaskSoftmax runs its fused kernel on causal scores of `batches`
// (b·np) × sq × sk, as is_kernel_available decides (megatron/core/fusions/fused_softmax.py; the
// same in Megatron-DeepSpeed): 16 < sk ≤ 4096, sq and sk multiples of 4, and b·np a multiple of 4
// and of the kernel's batches per block (8 when sk ≤ 128, else 4: get_batch_per_block in
// scaled_masked_softmax.h). Otherwise forward_torch_softmax runs in eager PyTorch.
bool megatron_softmax_fused(double batches, double sq, double sk);

// The kernels one pass of `op` runs, its symbols bound by `at` (b, s, h, a, g, f, V, t), its
// tensors in `d`. A kernel that would do no work (a shape with a zero dimension) is left out.
std::vector<Kernel> op_kernels(const graph::Op& op, const sym::Bindings& at, spec::Dtype d, Pass pass);

}  // namespace mist::hardware
