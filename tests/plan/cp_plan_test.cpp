// Plan rules for context parallelism: the plan field, dp·tp·pp·cp = GPUs, the 2·cp chunk split,
// flash attention, sequence parallelism over each rank's tokens, and the expert grid over tp·cp·dp.
#include <gtest/gtest.h>

#include "plan/plan.hpp"
#include "../common/expect.hpp"

namespace mist::plan {
namespace {

using mist::testing::expect_error;
using mist::testing::parse;

spec::ClusterSpec h100(int64_t nodes) {
  auto c = spec::cluster_from_json(Json{{"gpu", "H100-SXM5-80GB"}, {"nodes", nodes}, {"gpus_per_node", 8}},
                                   "cluster");
  EXPECT_TRUE(c.has_value()) << c.error().to_string();
  return *c;
}

spec::TrainingSpec long_training(int64_t seq) {
  spec::TrainingSpec t;
  t.global_batch_size = 8;
  t.seq_length = seq;
  t.precision = spec::Dtype::kBf16;
  t.flash_attention = true;
  return t;
}

Plan cp_plan(const spec::ModelSpec& m, int64_t dp, int64_t tp, int64_t cp) {
  auto p = uniform_plan(m, dp, tp, 1, 1, 8 / dp, StagePlan{});
  p.cp = cp;
  p.sequence_parallel = tp > 1;
  return p;
}

// cp is read and written only when set; a plan file without it is as before.
TEST(CpPlan, FieldIsOptionalAndRoundTrips) {
  auto j = parse(R"({"dp": 1, "tp": 2, "pp": 1, "cp": 4, "micro_batch_size": 1, "grad_accum_steps": 8,
                     "stages": [{"num_layers": 32}]})");
  auto p = plan_from_json(j, "plan");
  ASSERT_TRUE(p.has_value()) << p.error().to_string();
  EXPECT_EQ(p->cp, 4);
  EXPECT_EQ(plan_to_json(*p).at("cp"), 4);
  EXPECT_EQ(*plan_from_json(plan_to_json(*p), "plan"), *p);
  p->cp = 1;
  EXPECT_FALSE(plan_to_json(*p).contains("cp"));
  j["cp"] = 0;
  expect_error(plan_from_json(j, "plan"), "plan.cp", "at least 1");
}

// cp_comm: "ring" by default and then not written; "a2a" and "all_gather" round-trip; any other
// value, or an exchange without context parallelism, is refused naming the field.
TEST(CpPlan, ExchangeFieldRoundTripsAndNeedsCp) {
  auto j = parse(R"({"dp": 1, "tp": 2, "pp": 1, "cp": 4, "cp_comm": "a2a", "micro_batch_size": 1,
                     "grad_accum_steps": 8, "stages": [{"num_layers": 32}]})");
  auto p = plan_from_json(j, "plan");
  ASSERT_TRUE(p.has_value()) << p.error().to_string();
  EXPECT_EQ(p->cp_comm, CpComm::kAllToAll);
  EXPECT_EQ(plan_to_json(*p).at("cp_comm"), "a2a");
  EXPECT_EQ(*plan_from_json(plan_to_json(*p), "plan"), *p);
  p->cp_comm = CpComm::kRing;
  EXPECT_FALSE(plan_to_json(*p).contains("cp_comm"));
  j["cp_comm"] = "all_gather";
  EXPECT_EQ(plan_from_json(j, "plan")->cp_comm, CpComm::kAllGather);
  j["cp_comm"] = "ulysses";
  expect_error(plan_from_json(j, "plan"), "plan.cp_comm", "ulysses");
  j["cp_comm"] = "a2a";
  j["cp"] = 1;
  j["dp"] = 4;
  expect_error(plan_from_json(j, "plan"), "plan.cp_comm", "cp is 1");
  // Llama-3-8B has 32 heads and 8 key/value heads: tp 2 leaves 4 of them per rank, which cp 8 cannot split.
  const auto m = *spec::catalog_model("llama3-8b");
  auto q = cp_plan(m, 1, 1, 8);
  q.cp_comm = CpComm::kAllToAll;
  EXPECT_TRUE(validate_plan(q, m, h100(1), long_training(131072)).has_value());
  q = cp_plan(m, 1, 2, 4);
  q.cp_comm = CpComm::kAllToAll;
  EXPECT_TRUE(validate_plan(q, m, h100(1), long_training(131072)).has_value());
  auto big = cp_plan(m, 1, 2, 8);
  big.cp_comm = CpComm::kAllToAll;
  expect_error(validate_plan(big, m, h100(2), long_training(131072)), "plan.cp_comm", "4 key/value heads");
}

// Megatron's hierarchical a2a+p2p: the all-to-all groups' size cp_a2a is required with it, more
// than 1 and fewer than cp, divides cp and each TP rank's heads, and belongs to it alone.
TEST(CpPlan, HierarchicalA2aP2pNamesItsGroups) {
  auto j = parse(R"({"dp": 1, "tp": 1, "pp": 1, "cp": 16, "cp_comm": "a2a+p2p", "cp_a2a": 8,
                     "micro_batch_size": 1, "grad_accum_steps": 8, "stages": [{"num_layers": 32}]})");
  auto p = plan_from_json(j, "plan");
  ASSERT_TRUE(p.has_value()) << p.error().to_string();
  EXPECT_EQ(p->cp_comm, CpComm::kA2aP2p);
  EXPECT_EQ(p->cp_a2a, 8);
  EXPECT_EQ(plan_to_json(*p).at("cp_comm"), "a2a+p2p");
  EXPECT_EQ(*plan_from_json(plan_to_json(*p), "plan"), *p);
  const auto m = *spec::catalog_model("llama3-8b");
  EXPECT_TRUE(validate_plan(*p, m, h100(2), long_training(131072)).has_value());
  for (int64_t bad : {1, 16, 3}) {
    j["cp_a2a"] = bad;
    expect_error(plan_from_json(j, "plan"), "plan.cp_a2a", "divide cp");
  }
  j.erase("cp_a2a");
  expect_error(plan_from_json(j, "plan"), "plan.cp_a2a", "is missing");
  j["cp_a2a"] = 2;
  j["cp_comm"] = "ring";
  expect_error(plan_from_json(j, "plan"), "plan.cp_a2a", "a2a+p2p");
  // Llama-3-8B's 8 key/value heads over tp 2 leave 4 a rank: all-to-all groups of 8 cannot split them.
  auto q = *p;
  q.tp = 2;
  q.cp = 8;
  q.cp_a2a = 8 / 2;
  EXPECT_TRUE(validate_plan(q, m, h100(2), long_training(131072)).has_value());
  q.cp = 16;
  q.cp_a2a = 8;
  q.sequence_parallel = true;
  expect_error(validate_plan(q, m, h100(4), long_training(131072)), "plan.cp_a2a", "4 key/value heads");
}

// The GPUs are dp·tp·pp·cp, the message says so; the expert grid spans tp·cp·dp.
TEST(CpPlan, GpusAreDpTpPpCp) {
  const auto m = *spec::catalog_model("llama3-8b");
  const auto t = long_training(131072);
  EXPECT_TRUE(validate_plan(cp_plan(m, 1, 2, 4), m, h100(1), t).has_value());
  expect_error(validate_plan(cp_plan(m, 2, 2, 4), m, h100(1), t), "plan", "dp·tp·pp·cp = 2·2·1·4 = 16");
  auto p = cp_plan(m, 1, 2, 4);
  EXPECT_EQ(grad_dp(p), 4);
  const auto mix = *spec::catalog_model("mixtral-8x7b");
  // tp 2 · cp 4 · dp 1 = 8 GPUs hold the experts: ep 8 fits, as it would with dp 4.
  EXPECT_TRUE(check_experts(mix, 2 * 4, 1, 8, 1).has_value());
  p = cp_plan(mix, 1, 2, 4);
  p.ep = 8;
  EXPECT_EQ(expert_dp(p), 1);
  p.ep = 4;
  EXPECT_EQ(expert_dp(p), 2);
}

// 2·cp must divide the sequence, flash attention must be on, and under sequence parallelism tp
// must divide each CP rank's tokens; each refusal names its field.
TEST(CpPlan, ChunksFlashAttentionAndSequenceParallelism) {
  const auto m = *spec::catalog_model("llama3-8b");
  auto t = long_training(4096 + 8);  // 4104 = 8·513: 2·cp = 8 divides, 16 does not
  EXPECT_TRUE(check_cp(m, t, 4).has_value());
  expect_error(check_cp(m, t, 8), "plan.cp", "2·cp = 16");
  t.flash_attention = false;
  expect_error(check_cp(m, t, 4), "plan.cp", "flash attention");
  t = long_training(24);
  t.global_batch_size = 8;
  // cp 2 leaves 12 tokens per rank, which tp 8 cannot split (though 8 divides the 24).
  expect_error(validate_plan(cp_plan(m, 1, 8, 2), m, h100(2), t), "plan.sequence_parallel", "12 tokens");
  EXPECT_TRUE(validate_plan(cp_plan(m, 1, 4, 2), m, h100(1), t).has_value());
}

}  // namespace
}  // namespace mist::plan
