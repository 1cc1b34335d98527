#include "hardware/perf_model.hpp"

#include <algorithm>
#include <cmath>

namespace mist::hardware {

namespace {

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
    case spec::Dtype::kFp8: return g.fp8_flops;
  }
  return g.fp32_flops;
}

double power_limited_clock(const spec::GpuSpec& g) {
  const double limit = g.power_limit_watts > 0 ? g.power_limit_watts : g.tdp_watts;
  if (g.tdp_watts <= 0 || limit >= g.tdp_watts) return 1;
  // Dense tensor-core work already runs at the power limit at the TDP (why MAMF is below the peak).
  // Below it the clock falls until the dynamic power, C·V²·f with V scaling with f over the DVFS
  // range (so ∝ f³), fits in what the limit leaves above the idle draw.
  const double idle = std::min(g.idle_watts, 0.9 * limit);
  return std::cbrt((limit - idle) / (g.tdp_watts - idle));
}

double sustained_matmul_flops(const spec::GpuSpec& g, spec::Dtype d) {
  return peak_matmul_flops(g, d) * power_limited_clock(g);
}

double achievable_matmul_flops(const spec::GpuSpec& g, spec::Dtype d, const PerfConstants& k) {
  const double peak = sustained_matmul_flops(g, d);
  if (k.matmul_efficiency > 0) return peak * k.matmul_efficiency;  // fitted for this device (mist fit)
  // MAMF is measured in bf16; the same fraction of peak is assumed for fp16 and fp8 (the same
  // tensor cores, twice the rate per cycle in fp8), and a fitted fraction applies to both.
  if (g.matmul_bf16_flops > 0 && g.bf16_flops > 0 && d != spec::Dtype::kFp32)
    return peak * (g.matmul_bf16_flops / g.bf16_flops);
  return peak * k.default_matmul_efficiency;
}

bool sm90_attention(const spec::GpuSpec& g) { return g.vendor == "nvidia" && g.compute_capability >= 9.0; }

double flash_efficiency(const PerfConstants& c, bool sm90, bool backward) {
  if (backward) return sm90 ? c.flash_bwd_efficiency_sm90 : c.flash_bwd_efficiency;
  return sm90 ? c.flash_fwd_efficiency_sm90 : c.flash_fwd_efficiency;
}

double flash_efficiency(const spec::GpuSpec& g, const PerfConstants& c, bool backward) {
  return flash_efficiency(c, sm90_attention(g), backward);
}

double flash_time(const spec::GpuSpec& g, const FlashKernel& k, const PerfConstants& c) {
  if (k.flops <= 0) return 0;
  const double e = k.flash2 && sm90_attention(g)
                       ? (k.backward ? c.flash2_bwd_efficiency_sm90 : c.flash2_fwd_efficiency_sm90)
                       : flash_efficiency(g, c, k.backward);
  return k.flops / (sustained_matmul_flops(g, k.dtype) * e) + c.kernel_launch_s;
}

double streaming_time(const spec::GpuSpec& g, double bytes, const PerfConstants& c) {
  if (bytes <= 0) return 0;
  return bytes / (g.mem_bw * c.hbm_efficiency) + c.kernel_launch_s;
}

double streaming_time(const spec::GpuSpec& g, const StreamKernel& k, const PerfConstants& c) {
  const double math = c.vector_flops > 0 ? 1 / c.vector_flops : 0;  // 0: the math never binds
  return streaming_time(g, k.bytes, c) + k.flops * math;
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

double wave_utilisation(const spec::GpuSpec& g, double batch, double m, double n) {
  if (g.vendor == "cpu" || g.sm_count <= 0) return 1;
  const double tiles = batch * std::ceil(m / 128) * std::ceil(n / 128);
  if (tiles <= 0) return 1;
  return tiles / (std::ceil(tiles / g.sm_count) * g.sm_count);
}

double block_scaled_rate(const spec::GpuSpec& g, const GemmKernel& k, const PerfConstants& c) {
  const bool hopper = g.compute_capability >= 9.0 && g.compute_capability < 10.0;
  return k.block_scaled && hopper ? c.fp8_block_scaled_rate_sm90 : 1.0;
}

GemmBounds gemm_bounds(const spec::GpuSpec& g, const GemmKernel& k, const PerfConstants& c) {
  if (k.empty()) return {};
  const double rate = achievable_matmul_flops(g, k.dtype, c) * block_scaled_rate(g, k, c);
  const double work = gemm_effective_flops(g, k.batch, k.m, k.n, k.k) * (1 + c.gemm_k_overhead / k.k);
  return {work / rate, k.bytes() / (g.mem_bw * c.hbm_efficiency)};
}

double gemm_time(const spec::GpuSpec& g, const GemmKernel& k, const PerfConstants& c) {
  if (k.empty()) return 0;
  const GemmBounds b = gemm_bounds(g, k, c);
  return (b.memory_bound() ? b.memory_s : b.compute_s) + c.kernel_launch_s;
}

double gemm_time(const spec::GpuSpec& g, spec::Dtype d, double batch, double m, double n, double k,
                 const PerfConstants& c) {
  return gemm_time(g, GemmKernel{batch, m, n, k, d}, c);
}

double kernel_time(const spec::GpuSpec& g, const Kernel& k, const PerfConstants& c) {
  if (const auto* gemm = std::get_if<GemmKernel>(&k)) return gemm_time(g, *gemm, c);
  if (const auto* flash = std::get_if<FlashKernel>(&k)) return flash_time(g, *flash, c);
  return streaming_time(g, std::get<StreamKernel>(k), c);
}

OpTime op_time(const spec::GpuSpec& g, spec::Dtype d, const graph::Op& op, const sym::Bindings& at,
               const PerfConstants& c) {
  OpTime t;
  for (const Kernel& k : op_kernels(op, at, d, Pass::kForward)) t.fwd += kernel_time(g, k, c);
  for (const Kernel& k : op_kernels(op, at, d, Pass::kBackward)) t.bwd += kernel_time(g, k, c);
  return t;
}

}  // namespace mist::hardware
