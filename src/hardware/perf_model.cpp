#include "hardware/perf_model.hpp"

#include <algorithm>
#include <cmath>

namespace mist::hardware {

namespace {

double eval(const sym::Expr& e, const sym::Bindings& at) {
  auto v = sym::evaluate(e, at);
  return v ? *v : 0.0;  // an unbound symbol is a lowering bug; the op then costs nothing
}

// cuBLAS/CUTLASS pick a thread-block tile per GEMM; a large tile wastes work on ragged edges and
// leaves SMs idle in the last wave, a small one runs each tile less efficiently. The efficiencies
// of the smaller tiles relative to the 256×128 one are assumptions (docs/time-model.md).
struct Tile {
  double m, n, efficiency;
};
constexpr Tile kTiles[] = {{256, 128, 1.0}, {128, 128, 0.95}, {128, 64, 0.85}, {64, 64, 0.7}};

}  // namespace

double peak_matmul_flops(const spec::GpuSpec& g, spec::Dtype d) {
  switch (d) {
    case spec::Dtype::kBf16: return g.bf16_flops > 0 ? g.bf16_flops : g.fp16_flops;
    case spec::Dtype::kFp16: return g.fp16_flops;
    case spec::Dtype::kFp32: return g.fp32_flops;
  }
  return g.fp32_flops;
}

double achievable_matmul_flops(const spec::GpuSpec& g, spec::Dtype d, const PerfConstants& k) {
  const double peak = peak_matmul_flops(g, d);
  if (k.matmul_efficiency > 0) return peak * k.matmul_efficiency;  // fitted for this device (mist fit)
  // MAMF is measured in bf16; the same fraction of peak is assumed for fp16 (same tensor cores).
  if (g.matmul_bf16_flops > 0 && g.bf16_flops > 0 && d != spec::Dtype::kFp32)
    return peak * (g.matmul_bf16_flops / g.bf16_flops);
  return peak * k.default_matmul_efficiency;
}

double flash_efficiency(const spec::GpuSpec& g, const PerfConstants& c, bool backward) {
  const bool hopper = g.vendor == "nvidia" && g.compute_capability >= 9.0;
  if (backward) return hopper ? c.flash_bwd_efficiency_sm90 : c.flash_bwd_efficiency;
  return hopper ? c.flash_fwd_efficiency_sm90 : c.flash_fwd_efficiency;
}

double streaming_time(const spec::GpuSpec& g, double bytes, const PerfConstants& c) {
  if (bytes <= 0) return 0;
  return bytes / (g.mem_bw * c.hbm_efficiency) + c.kernel_launch_s;
}

double gemm_effective_flops(const spec::GpuSpec& g, double batch, double m, double n, double k) {
  if (batch <= 0 || m <= 0 || n <= 0 || k <= 0) return 0;
  const double sms = std::max(1.0, g.sm_count);
  double best = INFINITY;
  for (const Tile& t : kTiles) {
    const double tm = std::ceil(m / t.m), tn = std::ceil(n / t.n);
    const double tiles = batch * tm * tn;
    const double waves = std::ceil(tiles / sms);
    // Work done: whole tiles, in whole waves of all SMs.
    const double padded_flops = 2.0 * k * t.m * t.n * waves * sms;
    best = std::min(best, padded_flops / t.efficiency);
  }
  return best;
}

double gemm_time(const spec::GpuSpec& g, spec::Dtype d, double batch, double m, double n, double k,
                 const PerfConstants& c) {
  if (batch <= 0 || m <= 0 || n <= 0 || k <= 0) return 0;
  const double rate = achievable_matmul_flops(g, d, c);
  const double bytes = batch * (m * k + k * n + m * n) * spec::dtype_bytes(d);
  const double work = gemm_effective_flops(g, batch, m, n, k) * (1 + c.gemm_k_overhead / k);
  return std::max(work / rate, bytes / (g.mem_bw * c.hbm_efficiency)) + c.kernel_launch_s;
}

OpTime op_time(const spec::GpuSpec& g, spec::Dtype d, const graph::Op& op, const sym::Bindings& at,
               const PerfConstants& c) {
  OpTime t;
  if (op.kind == graph::OpKind::kView) return t;
  if (op.is_gemm) {
    const double B = eval(op.gemm.batch, at), m = eval(op.gemm.m, at), n = eval(op.gemm.n, at),
                 k = eval(op.gemm.k, at);
    t.fwd = gemm_time(g, d, B, m, n, k, c);
    // Input gradient dA = dC·Bᵀ (m×k, inner n) and weight gradient dB = Aᵀ·dC (k×n, inner m).
    t.bwd = gemm_time(g, d, B, m, k, n, c) + gemm_time(g, d, B, k, n, m, c);
    return t;
  }
  if (op.kind == graph::OpKind::kFlashAttention) {
    const double causal = op.causal_attention ? 0.5 : 1.0;
    const double peak = peak_matmul_flops(g, d);
    t.fwd = causal * eval(op.fwd_flops, at) / (peak * flash_efficiency(g, c, false)) + c.kernel_launch_s;
    t.bwd = causal * eval(op.bwd_flops, at) / (peak * flash_efficiency(g, c, true)) + c.kernel_launch_s;
    return t;
  }
  // Everything else is memory-bound: the forward streams what it reads and writes; the backward
  // reads the output gradient and the saved inputs and writes the input gradient, about twice.
  const double bytes = eval(op.bytes_read, at) + eval(op.bytes_written, at);
  const double math = c.vector_flops > 0 ? 1 / c.vector_flops : 0;
  t.fwd = streaming_time(g, bytes, c) + eval(op.fwd_flops, at) * math;
  t.bwd = op.bwd_flops.is_constant() && op.bwd_flops.constant_value() == 0
              ? 0
              : streaming_time(g, 2 * bytes, c) + eval(op.bwd_flops, at) * math;
  return t;
}

}  // namespace mist::hardware
