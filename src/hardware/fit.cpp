#include "hardware/fit.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace mist::hardware {

void add_kernel(FitSample& s, const spec::GpuSpec& g, const Kernel& k, const PerfConstants& at) {
  if (const auto* mm = std::get_if<GemmKernel>(&k)) {
    if (mm->empty()) return;
    const double peak = sustained_matmul_flops(g, mm->dtype) * block_scaled_rate(g, *mm, at);
    const double work = gemm_effective_flops(g, mm->batch, mm->m, mm->n, mm->k);
    if (gemm_bounds(g, *mm, at).memory_bound()) {
      s.stream_s_at_peak += mm->bytes() / g.mem_bw;
    } else {
      s.gemm_s_at_peak += work / peak;
      s.gemm_k_s_at_peak += work / (mm->k * peak);
    }
  } else if (const auto* fa = std::get_if<FlashKernel>(&k)) {
    if (fa->flops <= 0) return;
    const double at_peak = fa->flops / sustained_matmul_flops(g, fa->dtype);
    (fa->backward ? s.flash_bwd_s_at_peak : s.flash_fwd_s_at_peak) += at_peak;
    s.hopper = sm90_attention(g);
  } else {
    const auto& st = std::get<StreamKernel>(k);
    if (st.bytes <= 0) return;
    s.stream_s_at_peak += st.bytes / g.mem_bw;
    s.vector_flops += std::max(0.0, st.flops);
  }
  s.kernels += 1;
}

void add_kernels(FitSample& s, const spec::GpuSpec& g, const std::vector<Kernel>& kernels, const PerfConstants& at) {
  for (const Kernel& k : kernels) add_kernel(s, g, k, at);
}

double predict(const FitSample& s, const PerfConstants& c) {
  // The catalog's MAMF (or the default efficiency) when no fitted matmul efficiency is set.
  const double e_mm = c.matmul_efficiency > 0 ? c.matmul_efficiency : c.default_matmul_efficiency;
  return (s.gemm_s_at_peak + c.gemm_k_overhead * s.gemm_k_s_at_peak) / e_mm +
         s.stream_s_at_peak / c.hbm_efficiency + s.kernels * c.kernel_launch_s +
         (c.vector_flops > 0 ? s.vector_flops / c.vector_flops : 0) +
         s.flash_fwd_s_at_peak / flash_efficiency(c, s.hopper, false) +
         s.flash_bwd_s_at_peak / flash_efficiency(c, s.hopper, true);
}

ErrorStats relative_errors(const std::vector<FitSample>& samples, const PerfConstants& c) {
  std::vector<double> e;
  for (const auto& s : samples) e.push_back(std::fabs(predict(s, c) - s.seconds) / s.seconds);
  return error_stats(std::move(e));
}

ErrorStats error_stats(std::vector<double> e) {
  ErrorStats r;
  r.rows = static_cast<int>(e.size());
  if (e.empty()) return r;
  std::sort(e.begin(), e.end());
  r.median = e.size() % 2 ? e[e.size() / 2] : (e[e.size() / 2 - 1] + e[e.size() / 2]) / 2;
  r.max = e.back();
  for (double x : e) r.mean += x / static_cast<double>(e.size());
  return r;
}

namespace {

// Weighted least squares over the columns in `use`: minimises Σ ((x·f_i − t_i) / t_i)².
// Returns false when the normal equations are singular.
constexpr int kUnknowns = 7;  // 1/e_mm, 1/e_hbm, launch, 1/vector_flops, 1/e_fa_fwd, 1/e_fa_bwd, k0/e_mm

// `k0`: the tiles' fixed cost folded into the GEMM column when it is not an unknown (else 0).
std::array<double, kUnknowns> features(const FitSample& s, double k0) {
  return {s.gemm_s_at_peak + k0 * s.gemm_k_s_at_peak, s.stream_s_at_peak, s.kernels, s.vector_flops,
          s.flash_fwd_s_at_peak, s.flash_bwd_s_at_peak, s.gemm_k_s_at_peak};
}

bool solve(const std::vector<FitSample>& samples, const std::array<bool, kUnknowns>& use, double k0,
           std::array<double, kUnknowns>& x) {
  std::array<int, kUnknowns> col{};
  int n = 0;
  for (int j = 0; j < kUnknowns; ++j)
    if (use[j]) col[n++] = j;
  if (n == 0) return false;
  double A[kUnknowns][kUnknowns + 1] = {};
  for (const auto& s : samples) {
    std::array<double, kUnknowns> f = features(s, k0);
    for (double& v : f) v /= s.seconds;
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) A[a][b] += f[col[a]] * f[col[b]];
      A[a][n] += f[col[a]];  // target t_i / t_i = 1
    }
  }
  // Gaussian elimination with partial pivoting.
  for (int i = 0; i < n; ++i) {
    int p = i;
    for (int r = i + 1; r < n; ++r)
      if (std::fabs(A[r][i]) > std::fabs(A[p][i])) p = r;
    if (std::fabs(A[p][i]) < 1e-300) return false;
    for (int c = 0; c <= n; ++c) std::swap(A[i][c], A[p][c]);
    for (int r = 0; r < n; ++r) {
      if (r == i) continue;
      const double q = A[r][i] / A[i][i];
      for (int c = i; c <= n; ++c) A[r][c] -= q * A[i][c];
    }
  }
  x = {};
  for (int i = 0; i < n; ++i) x[col[i]] = A[i][n] / A[i][i];
  return true;
}

}  // namespace

Result<FitResult> fit_constants(const std::vector<FitSample>& samples, const PerfConstants& base,
                                bool fit_k_overhead) {
  if (samples.empty()) return fail("rows", "no measured op rows to fit (an empty profile, or none for this device and dtype)");
  bool gemm = false, stream = false, vector = false, fa_fwd = false, fa_bwd = false;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    if (!(std::isfinite(s.seconds) && s.seconds > 0))
      return fail("rows[" + std::to_string(i) + "].median_s", "must be a finite time > 0");
    gemm = gemm || s.gemm_s_at_peak > 0;
    stream = stream || s.stream_s_at_peak > 0;
    vector = vector || s.vector_flops > 0;
    fa_fwd = fa_fwd || s.flash_fwd_s_at_peak > 0;
    fa_bwd = fa_bwd || s.flash_bwd_s_at_peak > 0;
  }
  if (!gemm) return fail("rows", "no GEMM rows (linear or bmm ops) to fit the matmul efficiency from");
  // The elementwise-math term only where the base does not already fix it.
  std::array<bool, kUnknowns> use = {true, stream, true, vector, fa_fwd, fa_bwd, fit_k_overhead};
  std::array<double, kUnknowns> x{};
  // Asked for, the tiles' cost is an unknown (or, dropped as non-positive, zero); else the base's.
  auto k0 = [&] { return fit_k_overhead ? 0.0 : base.gemm_k_overhead; };
  // Drop a column whose coefficient comes out non-positive (a launch cost or an elementwise rate
  // the rows cannot see) and fit the rest again; base keeps that constant.
  for (int attempt = 0; attempt <= kUnknowns; ++attempt) {
    if (!solve(samples, use, k0(), x)) {
      if (use[3] || use[2]) {  // drop the elementwise rate, then the launch cost
        use[use[3] ? 3 : 2] = false;
        continue;
      }
      return fail("rows", "the rows do not determine the constants (singular least-squares system)");
    }
    // A term that explains under a millionth of any row is noise, not a constant.
    auto negligible = [&](int j) {
      double most = 0;
      for (const auto& s : samples) most = std::max(most, x[j] * features(s, k0())[j] / s.seconds);
      return most < 1e-6;
    };
    bool again = false;
    for (int j = kUnknowns - 1; j >= 1; --j)
      if (use[j] && (x[j] <= 0 || negligible(j))) {
        use[j] = false;
        again = true;
        break;
      }
    if (!again) break;
  }
  if (!(x[0] > 0)) return fail("rows", "the GEMM rows give a non-positive matmul rate; the rows are inconsistent");
  FitResult r;
  r.constants = base;
  r.constants.matmul_efficiency = 1 / x[0];
  r.fitted_matmul = true;
  if (use[1] && x[1] > 0) {
    r.constants.hbm_efficiency = 1 / x[1];
    r.fitted_hbm = true;
  }
  if (use[2] && x[2] > 0) {
    r.constants.kernel_launch_s = x[2];
    r.fitted_launch = true;
  }
  if (use[3] && x[3] > 0) {
    r.constants.vector_flops = 1 / x[3];
    r.fitted_vector = true;
  }
  // A fitted attention efficiency is this device's, whatever its architecture.
  if (use[4] && x[4] > 0) {
    r.constants.flash_fwd_efficiency = r.constants.flash_fwd_efficiency_sm90 = 1 / x[4];
    r.fitted_flash_fwd = true;
  }
  if (use[5] && x[5] > 0) {
    r.constants.flash_bwd_efficiency = r.constants.flash_bwd_efficiency_sm90 = 1 / x[5];
    r.fitted_flash_bwd = true;
  }
  if (use[6] && x[6] > 0) {
    r.constants.gemm_k_overhead = x[6] / x[0];
    r.fitted_k_overhead = true;
  } else if (fit_k_overhead) {
    r.constants.gemm_k_overhead = 0;  // asked for and not seen in the rows: no fixed tile cost
    r.fitted_k_overhead = true;
  }
  r.before = relative_errors(samples, base);
  r.after = relative_errors(samples, r.constants);
  return r;
}

Json constants_to_json(const FitResult& r, const std::string& gpu, const std::string& device,
                       const std::string& dtype, const Json& provenance) {
  Json j = {{"time_constants_version", 1}, {"gpu", gpu}, {"device", device}, {"dtype", dtype}};
  if (r.fitted_matmul) j["matmul_efficiency"] = r.constants.matmul_efficiency;
  if (r.fitted_hbm) j["hbm_efficiency"] = r.constants.hbm_efficiency;
  if (r.fitted_launch) j["kernel_launch_s"] = r.constants.kernel_launch_s;
  if (r.fitted_vector) j["vector_TFLOPS"] = r.constants.vector_flops / 1e12;
  if (r.fitted_flash_fwd) j["flash_fwd_efficiency"] = r.constants.flash_fwd_efficiency;
  if (r.fitted_flash_bwd) j["flash_bwd_efficiency"] = r.constants.flash_bwd_efficiency;
  if (r.fitted_k_overhead) j["gemm_k_overhead"] = r.constants.gemm_k_overhead;
  Json fit = provenance;
  fit["rows"] = r.after.rows;
  fit["median_rel_error"] = r.after.median;
  fit["max_rel_error"] = r.after.max;
  fit["median_rel_error_defaults"] = r.before.median;
  fit["max_rel_error_defaults"] = r.before.max;
  j["fit"] = fit;
  return j;
}

Result<void> apply_constants_json(const Json& j, const std::string& gpu, const std::string& path, PerfConstants& c) {
  MIST_TRY(JsonFields f, JsonFields::of(j, path));
  // "engine" and "stack" name the software stack a fit to published runs is for (job::stack_fits).
  MIST_CHECK(f.reject_unknown({"time_constants_version", "gpu", "device", "dtype", "engine", "stack",
                               "matmul_efficiency", "hbm_efficiency", "kernel_launch_s", "vector_TFLOPS",
                               "flash_fwd_efficiency", "flash_bwd_efficiency", "gemm_k_overhead",
                               "host_per_kernel_us", "fit", "stack_settings"}));
  MIST_TRY(int64_t version, f.integer("time_constants_version", 1, 1));
  (void)version;
  MIST_TRY(std::string for_gpu, f.string("gpu"));
  if (for_gpu != gpu)
    return fail(f.field_path("gpu"), "the constants were fitted for " + for_gpu + ", the cluster's GPU is " + gpu);
  PerfConstants out = c;
  // Fractions of the device's peak figures: a GPU's stay below 1; a CPU's memory-bound ops on
  // shapes that fit in its caches beat its DRAM figure, so up to 50 is accepted.
  MIST_TRY(auto mm, f.optional_number("matmul_efficiency", 1e-4, 50));
  MIST_TRY(auto hbm, f.optional_number("hbm_efficiency", 1e-4, 50));
  MIST_TRY(auto launch, f.optional_number("kernel_launch_s", 0, 1e-2));
  MIST_TRY(auto vector, f.optional_number("vector_TFLOPS", 1e-9, 1e6));
  MIST_TRY(auto fa_fwd, f.optional_number("flash_fwd_efficiency", 1e-4, 50));
  MIST_TRY(auto fa_bwd, f.optional_number("flash_bwd_efficiency", 1e-4, 50));
  MIST_TRY(auto k_overhead, f.optional_number("gemm_k_overhead", 0, 1e5));
  MIST_TRY(auto host, f.optional_number("host_per_kernel_us", 0, 1000));
  if (mm) out.matmul_efficiency = *mm;
  if (hbm) out.hbm_efficiency = *hbm;
  if (launch) out.kernel_launch_s = *launch;
  if (vector) out.vector_flops = *vector * 1e12;
  if (fa_fwd) out.flash_fwd_efficiency = out.flash_fwd_efficiency_sm90 = *fa_fwd;
  if (fa_bwd) out.flash_bwd_efficiency = out.flash_bwd_efficiency_sm90 = *fa_bwd;
  if (k_overhead) out.gemm_k_overhead = *k_overhead;
  if (host) out.host_per_kernel_s = *host * 1e-6;
  c = out;
  return {};
}

}  // namespace mist::hardware
