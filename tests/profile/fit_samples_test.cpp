// Profile rows as fit samples (profile/fit_samples.hpp): the shape key read back, the lowered op a
// row measured found again, each row's features those of the op's kernels, and the held-out split.
#include "profile/fit_samples.hpp"

#include <gtest/gtest.h>

#include "hardware/op_cost.hpp"
#include "profile/op_source.hpp"
#include "spec/cluster.hpp"

namespace mist::profile {
namespace {

const std::string kShape = "b=2;s=256;h=512;a=8;g=2;f=1408;t=1";

Measurement row(const std::string& op, const std::string& kind, const std::string& pass, double seconds = 1e-3,
                const std::string& shape = kShape, const std::string& dtype = "bf16") {
  return {"A100-SXM4-80GB", op, shape, dtype, pass, kind, seconds, seconds, seconds, 3, "test", "2026-12-01"};
}

TEST(ParseShape, ReadsTheShapeKeyBackAndRefusesMalformedOnes) {
  const auto at = parse_shape(kShape + ";V=1000");
  ASSERT_EQ(at.size(), 8u);
  EXPECT_EQ(at.at("b"), 2);
  EXPECT_EQ(at.at("f"), 1408);
  EXPECT_EQ(at.at("V"), 1000);
  // shape_key's output parses back to the same dimensions.
  EXPECT_EQ(shape_key(graph::LayerKind::kHead, at), kShape + ";V=1000");
  for (const char* bad : {"", "b=2;s=256", "b=2;s=256;h=512;a=8;g=2;f=1408;t", "b=x;s=256;h=512;a=8;g=2;f=1408;t=1",
                          "b=1.5;s=256;h=512;a=8;g=2;f=1408;t=1", "b=1e300;s=256;h=512;a=8;g=2;f=1408;t=1",
                          "b=0;s=256;h=512;a=8;g=2;f=1408;t=1"})
    EXPECT_TRUE(parse_shape(bad).empty()) << bad;
}

TEST(FindOp, FindsTheOpInTheLoweringVariantThatHasIt) {
  const auto at = parse_shape(kShape + ";V=1000");
  // A SwiGLU MLP's op, an RMSNorm, the flash core, the head's loss.
  for (auto [name, kind] : {std::pair{"mlp.gate_up", graph::OpKind::kLinear}, {"ln1", graph::OpKind::kRmsNorm},
                            {"attn.core", graph::OpKind::kFlashAttention}, {"attn.qk", graph::OpKind::kBmm},
                            {"loss.cross_entropy", graph::OpKind::kCrossEntropy}}) {
    const auto op = find_op(row(name, graph::to_string(kind), "forward"), at, 2);
    ASSERT_TRUE(op.has_value()) << name;
    EXPECT_EQ(op->name, name);
    EXPECT_EQ(op->kind, kind);
  }
  EXPECT_EQ(find_op(row("ln1", "rmsnorm", "forward"), at, 2)->params, sym::Expr::symbol("h"));
  // A whole layer's row, an unknown kind, a kind the name does not have: no op.
  EXPECT_FALSE(find_op(row("block", "layer", "forward"), at, 2).has_value());
  EXPECT_FALSE(find_op(row("mlp.fc1", "conv2d", "forward"), at, 2).has_value());
  EXPECT_FALSE(find_op(row("mlp.fc1", "gelu", "forward"), at, 2).has_value());
}

TEST(SampleOf, TheFeaturesAreThoseOfTheOpsKernels) {
  const auto g = *spec::catalog_gpu("A100-SXM4-80GB");
  const auto d = spec::Dtype::kBf16;
  const auto at = parse_shape(kShape);
  const auto fc1 = *find_op(row("mlp.fc1", "linear", "backward"), at, 2);
  const auto s = sample_of(row("mlp.fc1", "linear", "backward", 2e-3), g, d);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->kernels, 2);  // input and weight gradient
  EXPECT_EQ(s->seconds, 2e-3);
  EXPECT_EQ(s->group, kShape);
  EXPECT_EQ(s->label, "mlp.fc1 backward " + kShape);
  hardware::FitSample want;
  hardware::add_kernels(want, g, hardware::op_kernels(fc1, at, d, hardware::Pass::kBackward));
  EXPECT_EQ(s->gemm_s_at_peak, want.gemm_s_at_peak);
  EXPECT_EQ(s->stream_s_at_peak, want.stream_s_at_peak);
  // With the constants a fit writes, the sample predicts what op_time says of the op.
  hardware::PerfConstants c;
  c.matmul_efficiency = 0.7;
  hardware::FitSample at_c;
  hardware::add_kernels(at_c, g, hardware::op_kernels(fc1, at, d, hardware::Pass::kBackward), c);
  EXPECT_NEAR(hardware::predict(at_c, c) / hardware::op_time(g, d, fc1, at, c).bwd, 1, 1e-12);

  // Rows that run no kernel or name no op are no samples.
  EXPECT_FALSE(sample_of(row("attn.split", "view", "forward"), g, d).has_value());
  EXPECT_FALSE(sample_of(row("residual1", "add", "backward"), g, d).has_value());
  EXPECT_TRUE(sample_of(row("residual1", "add", "forward"), g, d).has_value());
  EXPECT_FALSE(sample_of(row("mlp.fc1", "linear", "recompute"), g, d).has_value());
  EXPECT_FALSE(sample_of(row("mlp.fc1", "linear", "forward", 1e-3, "b=2"), g, d).has_value());
}

TEST(SamplesOf, KeepsTheDevicesRowsInTheDtypeAndCountsTheSkipped) {
  const auto g = *spec::catalog_gpu("A100-SXM4-80GB");
  std::vector<Measurement> rows = {row("mlp.fc1", "linear", "forward"), row("attn.split", "view", "forward"),
                                   row("mlp.fc1", "linear", "forward", 1e-3, kShape, "fp32"),
                                   row("mlp.fc2", "linear", "forward", 1e-3, kShape, "fp32"),
                                   row("mlp.fc2", "linear", "forward")};
  rows.back().device = "H100-SXM5-80GB";
  const auto r = samples_of(rows, "A100-SXM4-80GB", "bf16", g, spec::Dtype::kBf16);
  EXPECT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.skipped, 1);  // the view
  EXPECT_EQ(most_common_dtype(rows, "A100-SXM4-80GB"), "bf16");  // 2 rows each: the first by name
  rows[1].dtype = "fp32";
  EXPECT_EQ(most_common_dtype(rows, "A100-SXM4-80GB"), "fp32");
  EXPECT_EQ(most_common_dtype(rows, "H100-SXM5-80GB"), "bf16");
  EXPECT_FALSE(most_common_dtype(rows, "cpu").has_value());
}

TEST(HoldOut, HoldsOutEveryNthShapeKeyWhole) {
  std::vector<hardware::FitSample> samples;
  for (const char* group : {"a", "b", "c", "d", "e", "f", "a", "c"}) {
    hardware::FitSample s;
    s.group = group;
    samples.push_back(s);
  }
  const auto split = hold_out(samples, 3);
  EXPECT_EQ(split.held, (std::set<std::string>{"c", "f"}));
  EXPECT_EQ(split.test.size(), 3u);
  EXPECT_EQ(split.train.size(), 5u);
  for (const auto& s : split.test) EXPECT_TRUE(s.group == "c" || s.group == "f");
  for (int every : {0, 1}) {
    const auto none = hold_out(samples, every);
    EXPECT_TRUE(none.test.empty());
    EXPECT_EQ(none.train.size(), samples.size());
  }
}

}  // namespace
}  // namespace mist::profile
