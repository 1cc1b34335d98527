// The op-constant fit (hardware/fit.hpp): recovers known constants from rows synthesised with
// them, and the constants file round trip and its validation.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "hardware/fit.hpp"
#include "spec/catalog.hpp"

namespace mist::hardware {
namespace {

// GEMMs and streaming kernels of transformer-like shapes, timed with `truth` (and noise, if any).
std::vector<FitSample> synthesise(const spec::GpuSpec& g, const PerfConstants& truth, double noise, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  std::vector<FitSample> out;
  for (double tokens : {512.0, 2048.0, 8192.0, 32768.0})
    for (double h : {1024.0, 2560.0, 4096.0, 8192.0}) {
      FitSample mm;
      add_kernel(mm, g, GemmKernel{1, tokens, 3 * h, h, spec::Dtype::kBf16});
      FitSample bwd;  // a backward: two GEMMs
      add_kernels(bwd, g, {GemmKernel{1, tokens, h, 4 * h, spec::Dtype::kBf16},
                           GemmKernel{1, h, 4 * h, tokens, spec::Dtype::kBf16}});
      FitSample st;
      add_kernel(st, g, StreamKernel{tokens * h * 2 * 3, 0});
      FitSample sm;  // a softmax-like op: elementwise math on top of its bytes
      add_kernel(sm, g, StreamKernel{tokens * h * 2 * 2, 5 * tokens * h});
      FitSample fa, fb;  // causal flash attention, forward and backward
      add_kernel(fa, g, FlashKernel{0.5 * 4 * tokens * 2048 * h, false, spec::Dtype::kBf16});
      add_kernel(fb, g, FlashKernel{0.5 * 10 * tokens * 2048 * h, true, spec::Dtype::kBf16});
      for (FitSample s : {mm, bwd, st, sm, fa, fb}) {
        s.seconds = predict(s, truth) * jitter(rng);
        s.group = std::to_string(tokens) + "x" + std::to_string(h);
        out.push_back(s);
      }
    }
  return out;
}

TEST(Fit, RecoversTheConstantsTheRowsWereMadeWith) {
  const auto g = *spec::catalog_gpu("A100-SXM4-80GB");
  PerfConstants truth;
  truth.matmul_efficiency = 0.71;
  truth.hbm_efficiency = 0.64;
  truth.kernel_launch_s = 7e-6;
  truth.vector_flops = 3e12;
  truth.flash_fwd_efficiency = 0.55;
  truth.flash_bwd_efficiency = 0.45;
  const auto samples = synthesise(g, truth, 0, 1);
  auto r = fit_constants(samples);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE(r->fitted_matmul && r->fitted_hbm && r->fitted_launch && r->fitted_vector);
  EXPECT_NEAR(r->constants.vector_flops / 3e12, 1, 1e-6);
  EXPECT_NEAR(r->constants.flash_fwd_efficiency, 0.55, 1e-6);
  EXPECT_NEAR(r->constants.flash_bwd_efficiency, 0.45, 1e-6);
  // A device's fitted attention rate replaces the architecture's default (A100 here, not Hopper).
  EXPECT_NEAR(flash_efficiency(g, r->constants, true), 0.45, 1e-6);
  EXPECT_NEAR(r->constants.matmul_efficiency, 0.71, 1e-6);
  EXPECT_NEAR(r->constants.hbm_efficiency, 0.64, 1e-6);
  EXPECT_NEAR(r->constants.kernel_launch_s, 7e-6, 1e-10);
  EXPECT_LT(r->after.max, 1e-9);
  EXPECT_GT(r->before.median, 0.05);  // the defaults (MAMF rate, 85% of HBM, 4 µs) were wrong

  // With ±3% noise the constants stay within a few percent.
  auto noisy = fit_constants(synthesise(g, truth, 0.03, 7));
  ASSERT_TRUE(noisy.has_value());
  EXPECT_NEAR(noisy->constants.matmul_efficiency / 0.71, 1, 0.03);
  EXPECT_NEAR(noisy->constants.hbm_efficiency / 0.64, 1, 0.05);
  EXPECT_LT(noisy->after.max, 0.05);
}

TEST(Fit, GemmEfficiencyDrivesGemmTime) {
  const auto g = *spec::catalog_gpu("H100-SXM5-80GB");
  PerfConstants c;
  c.matmul_efficiency = 0.5;
  c.gemm_k_overhead = 0;
  const double m = 132 * 256 * 2, n = 128 * 4, k = 8192;
  const double t = gemm_time(g, spec::Dtype::kBf16, 1, m, n, k, c);
  EXPECT_NEAR(2 * m * n * k / (t - c.kernel_launch_s) / (0.5 * 989e12), 1, 1e-9);
  // Each tile's fixed cost stretches the main loop from k to k + k0.
  c.gemm_k_overhead = 256;
  const double t2 = gemm_time(g, spec::Dtype::kBf16, 1, m, n, k, c);
  EXPECT_NEAR((t2 - c.kernel_launch_s) / (t - c.kernel_launch_s), (k + 256) / k, 1e-9);
}

// A sweep of GEMM shapes (as `mist fit --gemm-table` reads) timed with a known rate, tile cost and
// launch cost gives them back; rows made without a tile cost give back none.
TEST(Fit, RecoversTheTilesFixedCostFromAGemmSweep) {
  const auto g = *spec::catalog_gpu("H100-SXM5-80GB");
  for (double k0 : {0.0, 200.0}) {
    PerfConstants truth;
    truth.matmul_efficiency = 0.66;
    truth.gemm_k_overhead = k0;
    truth.kernel_launch_s = 5e-6;
    std::vector<FitSample> rows;
    for (double b : {1.0, 4.0})
      for (double mn : {1024.0, 4096.0})
        for (double k : {256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0}) {
          FitSample s;
          add_kernel(s, g, GemmKernel{b, mn, mn, k, spec::Dtype::kBf16});
          s.seconds = predict(s, truth);
          rows.push_back(s);
        }
    auto r = fit_constants(rows, {}, /*fit_k_overhead=*/true);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    EXPECT_TRUE(r->fitted_k_overhead);
    EXPECT_NEAR(r->constants.gemm_k_overhead, k0, 1e-6);
    EXPECT_NEAR(r->constants.matmul_efficiency, 0.66, 1e-9);
    EXPECT_LT(r->after.max, 1e-9);
  }
}

TEST(Fit, RefusesRowsThatCannotDetermineTheConstants) {
  EXPECT_EQ(fit_constants({}).error().path, "rows");
  const auto g = *spec::catalog_gpu("A100-SXM4-80GB");
  FitSample st;
  add_kernel(st, g, StreamKernel{1e9, 0});
  st.seconds = 1e-3;
  auto r = fit_constants({st});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path, "rows");
  EXPECT_NE(r.error().message.find("no GEMM rows"), std::string::npos);
  FitSample mm;
  add_kernel(mm, g, GemmKernel{1, 4096, 4096, 4096, spec::Dtype::kBf16});
  mm.seconds = -1;
  EXPECT_EQ(fit_constants({mm}).error().path, "rows[0].median_s");
}

TEST(Fit, ConstantsFileRoundTripAndValidation) {
  const auto g = *spec::catalog_gpu("A100-SXM4-80GB");
  PerfConstants truth;
  truth.matmul_efficiency = 0.7;
  truth.hbm_efficiency = 0.6;
  truth.kernel_launch_s = 5e-6;
  auto r = fit_constants(synthesise(g, truth, 0, 3));
  ASSERT_TRUE(r.has_value());
  const Json j = constants_to_json(*r, g.name, g.name, "bf16", Json{{"command", "test"}});
  PerfConstants c;
  ASSERT_TRUE(apply_constants_json(j, g.name, "cluster.time_constants", c).has_value());
  EXPECT_NEAR(c.matmul_efficiency, 0.7, 1e-6);
  EXPECT_NEAR(c.hbm_efficiency, 0.6, 1e-6);
  EXPECT_NEAR(c.kernel_launch_s, 5e-6, 1e-10);
  // The rows were made with the default attention rates (A100: 0.70 / 0.60); applied, they hold on
  // any architecture of this device.
  EXPECT_NEAR(c.flash_fwd_efficiency, 0.70, 1e-6);
  EXPECT_NEAR(c.flash_bwd_efficiency_sm90, 0.60, 1e-6);
  EXPECT_EQ(j["fit"]["rows"], 96);
  EXPECT_FALSE(j.contains("vector_TFLOPS"));  // the rows had elementwise math, the truth none: not fitted
  EXPECT_EQ(c.vector_flops, 0);

  PerfConstants untouched;
  auto other = apply_constants_json(j, "H100-SXM5-80GB", "cluster.time_constants", untouched);
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().path, "cluster.time_constants.gpu");
  EXPECT_EQ(untouched.matmul_efficiency, 0);
  Json bad = j;
  bad["hbm_efficiency"] = 70;
  EXPECT_EQ(apply_constants_json(bad, g.name, "cluster.time_constants", c).error().path,
            "cluster.time_constants.hbm_efficiency");
  bad = j;
  bad["matmul_eficiency"] = 0.5;  // a misspelt field is refused, not ignored
  EXPECT_FALSE(apply_constants_json(bad, g.name, "k", c).has_value());
}

}  // namespace
}  // namespace mist::hardware
