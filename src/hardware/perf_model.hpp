// Analytical time of one op on a GPU: a precision-aware roofline. GEMMs run at the GPU's measured
// achievable matmul rate, derated by tile and wave quantisation; everything else streams through
// HBM. Each constant of PerfConstants is documented with its source in docs/time-model.md.
#pragma once

#include "graph/layer.hpp"
#include "hardware/op_cost.hpp"
#include "spec/cluster.hpp"
#include "spec/training.hpp"

namespace mist::hardware {

struct PerfConstants {
  // Fraction of the dense peak that GEMMs reach on this device, as fitted by `mist fit` from
  // measured op times (docs/time-model.md); 0: use the catalog's MAMF, else default_matmul_efficiency.
  double matmul_efficiency = 0;
  // Achievable fraction of peak HBM bandwidth for streaming kernels (STREAM-like copies reach
  // 85-92% on A100/H100).
  double hbm_efficiency = 0.85;
  // Achievable fraction of the dense tensor-core peak for large GEMMs where no MAMF measurement
  // exists (measured MAMF/peak: A100 0.87, H100 0.80, B200 0.78, MI300X 0.51).
  double default_matmul_efficiency = 0.8;
  // Fixed cost of one kernel launch on the critical path.
  double kernel_launch_s = 4e-6;
  // What the host spends issuing one kernel in the software stack: the framework's Python, the
  // autograd engine, PyTorch's dispatcher and the launch itself. The GPU runs ahead of the host
  // only while the host keeps up: a pass over a layer takes at least its kernels times this. 0:
  // never a bound. A property of the stack, fitted with its efficiency by `mist fit --runs` on
  // published runs where small layers are host-bound (docs/time-model.md, "Host-bound layers").
  double host_per_kernel_s = 0;
  // Fixed cost of each output tile of a GEMM (pipeline fill, epilogue), in units of the reduction
  // dimension k: a tile costs as much as k + gemm_k_overhead of steady main loop, so GEMMs with a
  // short k (row-parallel layers at high TP, small hidden sizes) run below the large-GEMM rate.
  // Fitted by `mist fit --gemm-table` to XLA's measured H100 bf16 GEMM table (docs/time-model.md,
  // "GEMM efficiency and k"); assumed the same on other GPUs until measured there.
  double gemm_k_overhead = 192.7;
  // FLOP/s of the elementwise math of memory-bound ops (exp, erf, random numbers), added to their
  // streaming time; 0: never a bound (a GPU's ALUs and SFUs keep these ops memory-bound). Fitted by
  // `mist fit` where it binds: on a CPU, softmax, GELU and dropout run 30-70x slower than their
  // bytes alone say (docs/time-model.md).
  double vector_flops = 0;
  // FlashAttention-2 throughput as a fraction of the dense peak (Dao 2023: forward up to 73%,
  // backward up to 63% of A100 peak at long sequences).
  double flash_fwd_efficiency = 0.70;
  double flash_bwd_efficiency = 0.60;
  // On Hopper and later (compute capability >= 9), training stacks run attention through cuDNN's
  // fused kernel (Transformer Engine's default on sm_90): 518 (forward, causal) and 499
  // (backward) TFLOP/s of the 989 peak on H100 SXM5 at head dim 128, sequence 4k (Shah et al.,
  // FlashAttention-3, 2024, Figs. 5-6). Blackwell is assumed the same fraction until measured.
  double flash_fwd_efficiency_sm90 = 518.0 / 989.0;
  double flash_bwd_efficiency_sm90 = 499.0 / 989.0;
  // FlashAttention-2 on the same GPUs (PyTorch SDPA's flash backend, which torchtitan runs): 319
  // (forward, causal) and 310 (backward) TFLOP/s of the 989 peak at head dim 128, sequence 4k
  // (the same FlashAttention-3 figures); it was written for Ampere and uses none of Hopper's
  // asynchronous tensor-core instructions.
  double flash2_fwd_efficiency_sm90 = 319.0 / 989.0;
  double flash2_bwd_efficiency_sm90 = 310.0 / 989.0;
  // An FP8 GEMM with block scales (1×128 / 128×128, the blockwise recipe) on Hopper, as a fraction
  // of the same GEMM with row or tensor scales: Hopper's tensor cores take no block scales, so the
  // main loop moves each 128-deep partial sum out to the CUDA cores, scales and adds it. CUTLASS's
  // block-scaled against its row-scaled FP8 GEMM on H100 (FBGEMM pull request 2546, "fp8 block gemm
  // only" against "fp8 row gemm only"): 870/1126, 828/1083 and 828/1141 TFLOP/s at 8192³,
  // 65536×8192×7168 and 65536×3584×8192, 0.755 on average. Blackwell takes block scales in its
  // tensor cores (Transformer Engine runs the recipe through MXFP8 GEMMs there): 1.
  double fp8_block_scaled_rate_sm90 = 0.755;
};

// Dense peak FLOP/s for matrix math in this precision (fp32 training uses the fp32 pipes: PyTorch
// disables TF32 for matmuls by default).
double peak_matmul_flops(const spec::GpuSpec& g, spec::Dtype d);
// The clock compute-bound kernels sustain under the GPU's power limit, as a fraction of the one at
// its TDP (1 when the limit is the TDP or the power figures are not known; docs/time-model.md).
double power_limited_clock(const spec::GpuSpec& g);
// peak_matmul_flops at that clock: what matmul and attention efficiencies (fitted or measured at
// the TDP) are fractions of. MFU stays a fraction of the datasheet peak.
double sustained_matmul_flops(const spec::GpuSpec& g, spec::Dtype d);
// What a large, well-shaped GEMM achieves: MAMF when measured (scaled to the precision), else
// peak × default efficiency.
double achievable_matmul_flops(const spec::GpuSpec& g, spec::Dtype d, const PerfConstants& k = {});

// The work of a GEMM in whole tiles and whole waves of all SMs, divided by the efficiency of the
// tile that needs least (FLOPs; at rate R the GEMM's compute takes this / R). Without the tiles'
// fixed cost: gemm_time multiplies by (1 + gemm_k_overhead / k).
double gemm_effective_flops(const spec::GpuSpec& g, double batch, double m, double n, double k);
// Share of the SMs busy over a GEMM's waves of 128×128 output tiles: tiles / (waves · SMs); 1 on a
// CPU. Habitat's wave scaling (Yu et al., USENIX ATC 2021): a kernel's time moves with its number
// of waves, not only with the device's rate. profile::scale_factor scales measured GEMM times with
// it; it is coarser than gemm_effective_flops's choice of tile and kept apart so that scaled times
// stay what they were.
double wave_utilisation(const spec::GpuSpec& g, double batch, double m, double n);

// The two bounds of a GEMM's time, launch excluded: its main loop at the matmul rate (the tiles'
// work with their fixed cost) and its operands streamed through HBM. A GEMM is memory-bound when
// the second is longer; gemm_time takes that one, and the fit (fit.hpp) linearises by the same test.
struct GemmBounds {
  double compute_s = 0, memory_s = 0;
  bool memory_bound() const { return memory_s > compute_s; }
};
GemmBounds gemm_bounds(const spec::GpuSpec& g, const GemmKernel& k, const PerfConstants& c = {});
// The share of the matmul rate a GEMM with block scales keeps (fp8_block_scaled_rate_sm90 on
// Hopper; 1 otherwise, or without block scales).
double block_scaled_rate(const spec::GpuSpec& g, const GemmKernel& k, const PerfConstants& c = {});
// Time of C[m×n] = A[m×k]·B[k×n], `batch` times, elements of `d`.
double gemm_time(const spec::GpuSpec& g, spec::Dtype d, double batch, double m, double n, double k,
                 const PerfConstants& c = {});
double gemm_time(const spec::GpuSpec& g, const GemmKernel& k, const PerfConstants& c = {});

// On Hopper and later (NVIDIA compute capability >= 9) training stacks run attention through
// cuDNN's fused kernel: its efficiencies are the _sm90 constants.
bool sm90_attention(const spec::GpuSpec& g);
// The fraction of the dense peak flash attention reaches (forward or backward), on a device whose
// attention is sm90's or not.
double flash_efficiency(const PerfConstants& c, bool sm90, bool backward);
double flash_efficiency(const spec::GpuSpec& g, const PerfConstants& c, bool backward);
double flash_time(const spec::GpuSpec& g, const FlashKernel& k, const PerfConstants& c = {});
// Time of a kernel that moves `bytes` through HBM.
double streaming_time(const spec::GpuSpec& g, double bytes, const PerfConstants& c = {});
// ... and does `k.flops` of elementwise math at c.vector_flops.
double streaming_time(const spec::GpuSpec& g, const StreamKernel& k, const PerfConstants& c = {});

double kernel_time(const spec::GpuSpec& g, const Kernel& k, const PerfConstants& c = {});

struct OpTime {
  double fwd = 0;  // seconds
  double bwd = 0;  // seconds: input gradients and weight gradients
};

// Time of one lowered op with its symbols bound (b, s, h, a, g, f, V, t): the sum of the times of
// the kernels each pass runs (op_cost.hpp).
OpTime op_time(const spec::GpuSpec& g, spec::Dtype d, const graph::Op& op, const sym::Bindings& at,
               const PerfConstants& c = {});

}  // namespace mist::hardware
