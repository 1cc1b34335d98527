#include "advisor/advisor.hpp"

#include <cmath>

#include <gtest/gtest.h>

namespace mist::advisor {
namespace {

spec::TrainingSpec training(int64_t gbs, int64_t seq) {
  spec::TrainingSpec t;
  t.global_batch_size = gbs;
  t.seq_length = seq;
  t.flash_attention = true;
  return t;  // bf16, AdamW
}

// A space small enough for tests on a 70B model: tensor parallel 8, up to 2 stages, selective
// recompute, ZeRO and checkpointing tuned, optimizer states either on the GPU or on the host.
tuner::SearchSpace small_space() {
  tuner::SearchSpace s;
  s.tp = {8};
  s.micro_batch = {1};
  s.recompute = {plan::Recompute::kSelective};
  s.max_pp = 2;
  s.zero = {0, 1};
  s.weight_offload = s.grad_offload = s.act_offload = {0};
  s.opt_offload = {0, 1};
  s.pareto_points = 8;
  return s;
}

const Row& find(const Comparison& c, const std::string& gpu, int64_t n) {
  for (const auto& r : c.rows)
    if (r.gpu == gpu && r.num_gpus == n) return r;
  throw std::runtime_error("no row " + gpu);
}

TEST(Advisor, FasterGpusOfTheSameJobGiveMoreTokensPerSecond) {
  auto m = spec::catalog_model("llama2-70b");
  ASSERT_TRUE(m.has_value());
  AdvisorOptions o;
  o.gpus = {"A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB"};
  o.counts = {16};
  o.space = small_space();
  o.prices = *default_prices();
  auto c = compare_gpus(*m, training(32, 4096), o);
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  const Row& a100 = find(*c, "A100-SXM4-80GB", 16);
  const Row& h100 = find(*c, "H100-SXM5-80GB", 16);
  const Row& h200 = find(*c, "H200-SXM-141GB", 16);
  ASSERT_TRUE(a100.feasible && h100.feasible && h200.feasible) << a100.reason << h100.reason << h200.reason;
  EXPECT_GT(h100.tokens_per_s, a100.tokens_per_s);
  EXPECT_GE(h200.tokens_per_s, h100.tokens_per_s);
  for (const Row* r : {&a100, &h100, &h200}) {
    EXPECT_GT(r->mfu, 0);
    EXPECT_LT(r->mfu, 1);
    EXPECT_EQ(r->nodes, 2);
    EXPECT_EQ(r->gpus_per_node, 8);
    ASSERT_TRUE(r->plan.has_value());
    EXPECT_EQ(r->plan->dp * r->plan->tp * r->plan->pp, 16);
    EXPECT_DOUBLE_EQ(r->time_to_train_s, o.tokens / r->tokens_per_s);
    EXPECT_EQ(c->smallest_fitting.at(r->gpu), 16);
  }
  // Priced rows: cost = time x price x GPUs, exactly as documented.
  ASSERT_TRUE(h100.price.has_value());
  EXPECT_DOUBLE_EQ(h100.cost.usd_total, h100.time_to_train_s / 3600.0 * h100.price->usd_per_gpu_hour * 16);
  EXPECT_DOUBLE_EQ(h100.cost.usd_per_hour, h100.price->usd_per_gpu_hour * 16);
}

TEST(Advisor, AGpuThatCannotHoldTheJobIsInfeasibleWithItsShortfall) {
  auto m = spec::catalog_model("llama2-70b");
  ASSERT_TRUE(m.has_value());
  AdvisorOptions o;
  o.gpus = {"A100-SXM4-40GB"};
  o.counts = {8};
  o.space = small_space();
  o.space.opt_offload = {0};  // 70B of weights, gradients and Adam states cannot sit on 8x40 GB
  auto c = compare_gpus(*m, training(32, 4096), o);
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  ASSERT_EQ(c->rows.size(), 1u);
  const Row& r = c->rows[0];
  EXPECT_FALSE(r.feasible);
  EXPECT_GT(r.shortfall_bytes, 0);
  EXPECT_NE(r.reason.find("GiB"), std::string::npos) << r.reason;
  EXPECT_FALSE(r.pareto);
  EXPECT_TRUE(c->smallest_fitting.empty());
}

TEST(Advisor, Bf16OnAGpuWithoutBf16IsAnInfeasibleRowNotAnAbort) {
  auto m = spec::catalog_model("gpt3-1.3b");
  ASSERT_TRUE(m.has_value());
  AdvisorOptions o;
  o.gpus = {"V100-SXM2-32GB"};
  o.counts = {8};
  o.space = small_space();
  auto c = compare_gpus(*m, training(32, 2048), o);
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  ASSERT_EQ(c->rows.size(), 1u);
  EXPECT_FALSE(c->rows[0].feasible);
  EXPECT_NE(c->rows[0].reason.find("bf16"), std::string::npos) << c->rows[0].reason;
}

TEST(Advisor, ThreadsDoNotChangeTheAnswer) {
  auto m = spec::catalog_model("gpt3-1.3b");
  ASSERT_TRUE(m.has_value());
  AdvisorOptions o;
  o.gpus = {"A100-SXM4-40GB", "H100-SXM5-80GB"};
  o.counts = {8, 16};
  o.space = small_space();
  o.prices = *default_prices();
  o.threads = 1;
  auto one = compare_gpus(*m, training(32, 2048), o);
  o.threads = 2;
  std::vector<size_t> reported;
  o.progress = [&](size_t done, size_t total) {
    EXPECT_EQ(total, 4u);
    reported.push_back(done);
  };
  auto two = compare_gpus(*m, training(32, 2048), o);
  EXPECT_EQ(reported, (std::vector<size_t>{1, 2, 3, 4}));
  ASSERT_TRUE(one.has_value() && two.has_value());
  ASSERT_EQ(one->rows.size(), 4u);
  ASSERT_EQ(two->rows.size(), 4u);
  for (size_t i = 0; i < one->rows.size(); ++i) {
    EXPECT_EQ(one->rows[i].gpu, two->rows[i].gpu);
    EXPECT_EQ(one->rows[i].num_gpus, two->rows[i].num_gpus);
    EXPECT_EQ(one->rows[i].feasible, two->rows[i].feasible);
    EXPECT_EQ(one->rows[i].tokens_per_s, two->rows[i].tokens_per_s);
    EXPECT_EQ(one->rows[i].plan, two->rows[i].plan);
    EXPECT_EQ(one->rows[i].pareto, two->rows[i].pareto);
  }
  EXPECT_EQ(one->smallest_fitting, two->smallest_fitting);
}

TEST(Advisor, CostsAreTimeTimesPriceTimesGpus) {
  // 3.6e9 tokens at 1e5 tokens/s = 10 hours; 8 GPUs at $2 = $16/hour.
  const Costs c = costs(1e5, 3.6e9, 8, 2.0);
  EXPECT_DOUBLE_EQ(c.usd_per_hour, 16.0);
  EXPECT_DOUBLE_EQ(c.usd_total, 160.0);
  EXPECT_DOUBLE_EQ(c.usd_per_million_tokens, 160.0 / 3600.0);  // $160 per 3600 M tokens
}

Row hand_row(std::string gpu, int64_t n, bool feasible, std::optional<double> price, double hours, double usd) {
  Row r;
  r.gpu = std::move(gpu);
  r.num_gpus = n;
  r.feasible = feasible;
  if (price) r.price = GpuPrice{r.gpu, *price, "2026-11-30", "test"};
  r.time_to_train_s = hours * 3600;
  r.cost.usd_total = usd;
  return r;
}

TEST(Advisor, ParetoMarksExactlyTheUndominatedPricedRows) {
  std::vector<Row> rows = {
      hand_row("a", 8, true, 1.0, 10, 100),   // cheapest (tied with f)
      hand_row("b", 16, true, 1.0, 5, 200),   // fastest
      hand_row("c", 8, true, 1.0, 12, 150),   // slower and dearer than a
      hand_row("d", 8, false, 1.0, 1, 1),     // infeasible: never on the set
      hand_row("e", 8, true, std::nullopt, 1, 0),  // no price: never on the set
      hand_row("f", 32, true, 1.0, 10, 100),  // ties a in both: both stay
      hand_row("g", 64, true, 1.0, 5, 250),   // as fast as b but dearer
  };
  mark_pareto(rows);
  std::string on;
  for (const auto& r : rows)
    if (r.pareto) on += r.gpu;
  EXPECT_EQ(on, "abf");
}

TEST(Advisor, RowsSortByTotalCostThenUnpricedThenInfeasible) {
  std::vector<Row> rows = {
      hand_row("inf", 8, false, 1.0, 0, 0),       hand_row("unpriced-slow", 8, true, std::nullopt, 20, 0),
      hand_row("dear", 8, true, 1.0, 1, 500),     hand_row("unpriced-fast", 8, true, std::nullopt, 2, 0),
      hand_row("cheap", 8, true, 1.0, 30, 50),
  };
  sort_rows(rows);
  std::vector<std::string> order;
  for (const auto& r : rows) order.push_back(r.gpu);
  EXPECT_EQ(order, (std::vector<std::string>{"cheap", "dear", "unpriced-fast", "unpriced-slow", "inf"}));
}

TEST(Advisor, NodeShapes) {
  auto c16 = cluster_for("H100-SXM5-80GB", 16, std::nullopt);
  ASSERT_TRUE(c16.has_value());
  EXPECT_EQ(c16->nodes, 2);
  EXPECT_EQ(c16->gpus_per_node, 8);
  auto c4 = cluster_for("H100-SXM5-80GB", 4, std::nullopt);
  ASSERT_TRUE(c4.has_value());
  EXPECT_EQ(c4->nodes, 1);
  EXPECT_EQ(c4->gpus_per_node, 4);
  auto c12 = cluster_for("H100-SXM5-80GB", 12, std::nullopt);
  ASSERT_FALSE(c12.has_value());
  EXPECT_EQ(c12.error().path, "--gpus");
  EXPECT_NE(c12.error().message.find("multiple of 8"), std::string::npos) << c12.error().message;
  auto c12by4 = cluster_for("H100-SXM5-80GB", 12, 4);
  ASSERT_TRUE(c12by4.has_value());
  EXPECT_EQ(c12by4->nodes, 3);
  EXPECT_FALSE(cluster_for("H100-SXM5-80GB", 0, std::nullopt).has_value());
  EXPECT_FALSE(cluster_for("H100-SXM5-80GB", -8, std::nullopt).has_value());
}

TEST(Advisor, UnknownGpuListsTheClosestNames) {
  auto g = resolve_gpu("h100-sxm");
  ASSERT_FALSE(g.has_value());
  EXPECT_NE(g.error().message.find("H100-SXM5-80GB"), std::string::npos) << g.error().message;
  AdvisorOptions o;
  o.gpus = {"A100-80GB"};
  auto c = compare_gpus(*spec::catalog_model("gpt3-1.3b"), training(8, 1024), o);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().path, "--candidates");
  EXPECT_NE(c.error().message.find("A100-SXM4-80GB"), std::string::npos) << c.error().message;
}

TEST(Advisor, BadOptionsAreErrorsNamingTheField) {
  const auto m = *spec::catalog_model("gpt3-1.3b");
  AdvisorOptions o;
  o.gpus = {};
  EXPECT_EQ(compare_gpus(m, training(8, 1024), o).error().path, "--candidates");
  o.gpus = {"L4-24GB"};
  o.counts = {};
  EXPECT_EQ(compare_gpus(m, training(8, 1024), o).error().path, "--gpus");
  o.counts = {0};
  EXPECT_EQ(compare_gpus(m, training(8, 1024), o).error().path, "--gpus");
  o.counts = {1};
  o.tokens = 0;
  EXPECT_EQ(compare_gpus(m, training(8, 1024), o).error().path, "--tokens");
  o.tokens = std::nan("");
  EXPECT_EQ(compare_gpus(m, training(8, 1024), o).error().path, "--tokens");
}

}  // namespace
}  // namespace mist::advisor
