// Plan rules for mixtures of experts and sliding-window attention.
#include <gtest/gtest.h>

#include "plan/plan.hpp"
#include "../common/expect.hpp"

namespace mist::plan {
namespace {

using mist::testing::expect_error;

using spec::ModelSpec;

spec::ClusterSpec h100(int64_t nodes) {
  auto c = spec::cluster_from_json(
      Json{{"gpu", "H100-SXM5-80GB"}, {"nodes", nodes}, {"gpus_per_node", 8}}, "cluster");
  EXPECT_TRUE(c.has_value()) << c.error().to_string();
  return *c;
}

// A sequence longer than the sliding window needs flash attention (the engines run the window in
// their fused kernels), and context parallelism over a window is refused (mist's ring is causal).
TEST(MoePlan, SlidingWindowNeedsFlashAttentionAndNoCp) {
  ModelSpec m = *spec::catalog_model("mixtral-8x7b");
  m.sliding_window = 4096;
  spec::TrainingSpec t;
  t.seq_length = 4096;
  t.flash_attention = false;
  EXPECT_TRUE(validate_training(m, h100(1), t).has_value());  // the window covers the sequence
  t.seq_length = 8192;
  expect_error(validate_training(m, h100(1), t), "training.flash_attention", "sliding attention window");
  t.flash_attention = true;
  EXPECT_TRUE(validate_training(m, h100(1), t).has_value());
  expect_error(check_cp(m, t, 2), "plan.cp", "sliding-window");
  expect_error(check_cp(m, t, 2, plan::CpComm::kAllGather), "plan.cp", "sliding-window");
  // The all-to-all attends over the whole sequence on every rank: the window needs no ring.
  EXPECT_TRUE(check_cp(m, t, 2, plan::CpComm::kAllToAll).has_value());
  // It splits each TP rank's 8 key/value heads over cp.
  expect_error(check_cp(m, t, 4, plan::CpComm::kAllToAll, 4), "plan.cp_comm", "cp must divide");
  m.sliding_window = 0;
  EXPECT_TRUE(check_cp(m, t, 2).has_value());
}

// The tensor-parallel degree must divide the expert widths too.
TEST(MoePlan, TensorParallelismDividesTheExperts) {
  ModelSpec m = *spec::catalog_model("qwen1.5-moe-a2.7b");  // experts of 1408 = 2^7·11
  EXPECT_TRUE(check_tp(m, 8).has_value());
  EXPECT_TRUE(check_experts(m, 8, 1, 1, 8).has_value());
  m.moe_ffn_hidden_size = 1400;
  // The routed experts are split over etp, not tp.
  EXPECT_TRUE(check_tp(m, 16).has_value());
  expect_error(check_experts(m, 16, 1, 1, 16), "plan.etp", "moe_ffn_hidden_size");
  EXPECT_TRUE(check_experts(m, 16, 1, 1, 8).has_value());
  m = *spec::catalog_model("qwen1.5-moe-a2.7b");
  m.shared_expert_ffn_hidden_size = 5630;
  expect_error(check_tp(m, 4), "plan.tp", "shared_expert_ffn_hidden_size");
}

// The expert grid: ep divides the experts, ep·etp the tp·dp GPUs of a stage (Megatron's
// parallel folding), and a dense model has neither. The expert data-parallel degree is what is
// left: tp·dp / (ep·etp).
TEST(MoePlan, ExpertGridRules) {
  const ModelSpec m = *spec::catalog_model("mixtral-8x7b");  // 8 experts of 14336
  EXPECT_TRUE(check_experts(m, 4, 2, 8, 1).has_value());
  EXPECT_TRUE(check_experts(m, 2, 1, 2, 1).has_value());
  EXPECT_TRUE(check_experts(m, 1, 16, 8, 2).has_value());  // etp need not divide tp
  expect_error(check_experts(m, 4, 4, 3, 1), "plan.ep", "divide the 8 experts");
  expect_error(check_experts(m, 2, 2, 8, 1), "plan.ep", "(tp·cp·dp)");
  expect_error(check_experts(m, 4, 1, 2, 4), "plan.ep", "(tp·cp·dp)");
  const ModelSpec dense = *spec::catalog_model("llama3-8b");
  expect_error(check_experts(dense, 4, 2, 2, 1), "plan.ep", "no experts");
  expect_error(check_experts(dense, 4, 2, 1, 4), "plan.etp", "no experts");
  Plan p = uniform_plan(m, 4, 4, 1, 1, 16, StagePlan{});
  p.ep = 4;
  p.etp = 2;
  EXPECT_EQ(expert_dp(p), 2);
  p.sequence_parallel = true;
  spec::TrainingSpec t;
  t.global_batch_size = 64;
  t.seq_length = 4096;
  EXPECT_TRUE(validate_plan(p, m, h100(2), t).has_value());
  p.ep = 16;
  expect_error(validate_plan(p, m, h100(2), t), "plan.ep", "divide the 8 experts");
  // Written to the plan file only when set, and read back.
  p.ep = 4;
  auto back = plan_from_json(plan_to_json(p), "plan");
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(back->ep, 4);
  EXPECT_EQ(back->etp, 2);
  EXPECT_FALSE(plan_to_json(uniform_plan(m, 4, 4, 1, 1, 16, StagePlan{})).contains("ep"));
}

// Megatron's MoELayer refuses tensor parallelism without sequence parallelism.
TEST(MoePlan, TensorParallelismNeedsSequenceParallelism) {
  const ModelSpec m = *spec::catalog_model("mixtral-8x7b");
  spec::TrainingSpec t;
  t.global_batch_size = 64;
  t.seq_length = 4096;
  Plan p = uniform_plan(m, 4, 2, 2, 1, 16, StagePlan{});
  p.sequence_parallel = false;
  expect_error(validate_plan(p, m, h100(2), t), "plan.sequence_parallel", "sequence parallelism");
  p.sequence_parallel = true;
  EXPECT_TRUE(validate_plan(p, m, h100(2), t).has_value());
}

// training.recompute_modules naming a module the model lacks is refused (Megatron-LM refuses
// mla_up_proj without latent attention); layernorm and mlp, which Megatron accepts everywhere,
// recompute nothing where the model has no such module.
TEST(MoePlan, RecomputeModulesTheModelLacksAreRefused) {
  const auto llama = *spec::catalog_model("llama3-8b");
  const auto qwen3 = *spec::catalog_model("qwen3-30b-a3b");
  spec::TrainingSpec t;
  t.global_batch_size = 64;
  t.seq_length = 4096;
  t.recompute_modules = spec::kRecomputeMoeAct;
  expect_error(validate_training(llama, h100(1), t), "training.recompute_modules", "no experts");
  EXPECT_TRUE(validate_training(qwen3, h100(1), t).has_value());
  t.recompute_modules = spec::kRecomputeSharedExperts;
  expect_error(validate_training(qwen3, h100(1), t), "training.recompute_modules", "no shared expert");
  EXPECT_TRUE(validate_training(*spec::catalog_model("deepseek-v3"), h100(1), t).has_value());
  t.recompute_modules = spec::kRecomputeMlaUpProj;
  expect_error(validate_training(qwen3, h100(1), t), "training.recompute_modules", "multi-latent");
  // Megatron accepts these and they recompute nothing where the model has no such module.
  t.recompute_modules = spec::kRecomputeLayernorm | spec::kRecomputeMlp;
  EXPECT_TRUE(validate_training(llama, h100(1), t).has_value());
  EXPECT_TRUE(validate_training(qwen3, h100(1), t).has_value());
}

}  // namespace
}  // namespace mist::plan
