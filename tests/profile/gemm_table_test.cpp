// The GEMM-table reader (profile/gemm_table.hpp): rows become GEMM samples, the '#' lines the
// provenance, and a malformed table an error naming its line and column.
#include "profile/gemm_table.hpp"

#include <sstream>

#include <gtest/gtest.h>

#include "hardware/op_cost.hpp"
#include "spec/cluster.hpp"

namespace mist::profile {
namespace {

Result<GemmTable> parse(const std::string& text) {
  std::istringstream in(text);
  return parse_gemm_table(in, "sweep.csv", *spec::catalog_gpu("H100-SXM5-80GB"), spec::Dtype::kBf16);
}

TEST(GemmTable, RowsAreGemmSamplesAndCommentsTheSource) {
  auto t = parse("# measured on one H100\n#\n#   \n# bf16\nb,m,n,k,seconds\r\n2,4096,4096,1024,1e-3\n\n"
                 "1,256,256,256,2e-5\n");
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ(t->source(), "measured on one H100 bf16");
  ASSERT_EQ(t->samples.size(), 2u);
  const auto& s = t->samples[0];
  EXPECT_EQ(s.seconds, 1e-3);
  EXPECT_EQ(s.label, "b=2 m=4096 n=4096 k=1024");
  EXPECT_EQ(s.group, s.label);
  hardware::FitSample want;
  hardware::add_kernel(want, *spec::catalog_gpu("H100-SXM5-80GB"), hardware::GemmKernel{2, 4096, 4096, 1024});
  EXPECT_EQ(s.gemm_s_at_peak, want.gemm_s_at_peak);
  EXPECT_EQ(s.kernels, 1);

  // A rate instead of a time: seconds = 2·b·m·n·k / rate; columns in any order, others ignored.
  t = parse("k,n,m,b,flops_per_s,note\n512,1024,1024,1,1e14,x\n");
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_DOUBLE_EQ(t->samples[0].seconds, 2.0 * 1024 * 1024 * 512 / 1e14);
}

TEST(GemmTable, ErrorsNameTheLineAndColumn) {
  auto expect = [](const std::string& text, const std::string& path, const std::string& message) {
    auto t = parse(text);
    ASSERT_FALSE(t.has_value()) << text;
    EXPECT_EQ(t.error().path, path) << text;
    EXPECT_NE(t.error().message.find(message), std::string::npos) << t.error().message;
  };
  expect("b,m,n,seconds\n1,2,3,1e-3\n", "sweep.csv line 1", "no column 'k'");
  expect("b,m,n,k\n1,2,3,4\n", "sweep.csv line 1", "exactly one of");
  expect("b,m,n,k,seconds,flops_per_s\n", "sweep.csv line 1", "exactly one of");
  expect("# c\nb,m,n,k,seconds\n1,64,64,0,1e-3\n", "sweep.csv line 3.k", "must be a number in [1, 1e+07]");
  expect("b,m,n,k,seconds\n1,64,64.5,64,1e-3\n", "sweep.csv line 2.n", "whole number");
  expect("b,m,n,k,seconds\n1,64,64,64,fast\n", "sweep.csv line 2.seconds", "got 'fast'");
  expect("b,m,n,k,seconds\n1,64,64,64\n", "sweep.csv line 2", "has 4 fields, the header 5");
  expect("b,m,n,k,seconds\n1,64,64,64,1e-3,\n", "sweep.csv line 2", "has 6 fields");
  expect("# only a header\nb,m,n,k,seconds\n", "", "sweep.csv has no GEMM rows");
  expect("", "", "has no GEMM rows");
}

TEST(GemmTable, AFileThatCannotBeReadIsAnErrorWithoutPath) {
  auto t = read_gemm_table("/nonexistent/sweep.csv", *spec::catalog_gpu("H100-SXM5-80GB"), spec::Dtype::kBf16);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().path, "");
  EXPECT_EQ(t.error().message, "cannot read /nonexistent/sweep.csv");
  t = read_gemm_table(std::string(MIST_SOURCE_DIR) + "/data/measured/xla_gemm_h100_bf16.csv",
                      *spec::catalog_gpu("H100-SXM5-80GB"), spec::Dtype::kBf16);
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ(t->samples.size(), 375u);
}

}  // namespace
}  // namespace mist::profile
