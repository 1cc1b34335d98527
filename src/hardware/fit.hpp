// Least-squares fit of the op-time model's efficiency constants for one device from measured op
// times (`mist fit`, docs/time-model.md "Fitting the op constants"). The analytical op time is
// linear in these unknowns once the kernels the op runs are known (op_cost.hpp: op_kernels):
//   t = W / (e_mm · peak) + B / (e_hbm · mem_bw) + n · launch + F / vector_flops
//       + A_fwd / (e_fa_fwd · peak) + A_bwd / (e_fa_bwd · peak)
// with W the GEMM work in whole tiles and waves (hardware::gemm_effective_flops) times
// (1 + gemm_k_overhead / k), B the bytes a
// memory-bound op streams, n its kernel launches, F its elementwise FLOPs and A the FLOPs of flash
// attention (forward or backward). The fit solves for the six reciprocals (and, when asked,
// gemm_k_overhead / e_mm: the work is linear in the tiles' fixed cost too) minimising the squared
// relative error over the measured rows, and writes a constants file that a cluster's
// "time_constants" field applies.
#pragma once

#include <string>
#include <vector>

#include "core/json_fields.hpp"
#include "core/result.hpp"
#include "hardware/perf_model.hpp"

namespace mist::hardware {

// One measured op time as the features the model is linear in.
struct FitSample {
  std::string label;        // "mlp.fc1 forward b=1;s=256;..." (for reports)
  std::string group;        // rows that share it are held out together (the shape key)
  double seconds = 0;       // measured
  double gemm_s_at_peak = 0;    // Σ GEMM work / dense peak: seconds at 100% of the peak
  double gemm_k_s_at_peak = 0;  // Σ GEMM work / (k · dense peak): what one unit of gemm_k_overhead adds
  double stream_s_at_peak = 0;  // Σ streamed bytes / peak memory bandwidth
  double kernels = 0;           // kernel launches
  double vector_flops = 0;      // elementwise FLOPs of memory-bound ops
  double flash_fwd_s_at_peak = 0, flash_bwd_s_at_peak = 0;  // flash attention FLOPs / dense peak
  bool hopper = false;          // the device's flash efficiency is the _sm90 one (sm90_attention)
};

// Adds the features of one kernel (op_cost.hpp) to `s`, linearised at the constants `at`: a GEMM
// that `at` finds memory-bound (GemmBounds, the test gemm_time takes) counts as streaming, so the
// model stays linear in the unknowns. With the constants it was linearised at, predict(s, at) is the
// kernels' kernel_time (where `at` sets matmul_efficiency, or the device has no MAMF: see predict).
void add_kernel(FitSample& s, const spec::GpuSpec& g, const Kernel& k, const PerfConstants& at = {});
void add_kernels(FitSample& s, const spec::GpuSpec& g, const std::vector<Kernel>& kernels,
                 const PerfConstants& at = {});

// The model's time for a sample under constants `c`. Without a fitted matmul_efficiency GEMMs are
// rated at default_matmul_efficiency, not at the catalog's MAMF as achievable_matmul_flops does: the
// "defaults" errors `mist fit` reports are of that rate.
double predict(const FitSample& s, const PerfConstants& c);

struct ErrorStats {
  int rows = 0;
  double median = 0, max = 0, mean = 0;  // |predicted − measured| / measured
};
ErrorStats relative_errors(const std::vector<FitSample>& samples, const PerfConstants& c);
// Rows, median, max and mean of relative errors given as |error| (`mist fit --runs` too).
ErrorStats error_stats(std::vector<double> abs_errors);

struct FitResult {
  PerfConstants constants;        // base with the fitted fields replaced
  bool fitted_matmul = false, fitted_hbm = false, fitted_launch = false, fitted_vector = false;
  bool fitted_k_overhead = false;
  bool fitted_flash_fwd = false, fitted_flash_bwd = false;
  ErrorStats before, after;       // on the rows used: base constants, fitted constants
};

// Fits from `samples` (at least one with GEMM work; every time > 0). Constants a sample set cannot
// determine (no streaming rows, a negative launch) keep their value in `base`; gemm_k_overhead is
// fitted only with `fit_k_overhead` (GEMM sweeps over k), else kept. Errors name the field.
Result<FitResult> fit_constants(const std::vector<FitSample>& samples, const PerfConstants& base = {},
                                bool fit_k_overhead = false);

// The constants file: {"time_constants_version": 1, "device", "gpu", "dtype", "matmul_efficiency",
// "hbm_efficiency", "kernel_launch_s", "vector_TFLOPS", "flash_fwd_efficiency",
// "flash_bwd_efficiency", "gemm_k_overhead", "fit": {...provenance and residuals...}}.
Json constants_to_json(const FitResult& r, const std::string& gpu, const std::string& device,
                       const std::string& dtype, const Json& provenance);
// Applies a constants file's fitted fields to `c`. `gpu` is the cluster's GPU name: a file fitted
// for another GPU is refused. Errors name the field under `path` (e.g. "cluster.time_constants").
Result<void> apply_constants_json(const Json& j, const std::string& gpu, const std::string& path, PerfConstants& c);

}  // namespace mist::hardware
