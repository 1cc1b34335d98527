// A stack's calibration comes with the settings its runs used (data/published/*.time_constants.json,
// "stack_settings"): a job whose files leave a setting out takes the stack's, one that states it
// keeps its own. Megatron-Core on H100 (NeMo's recipes, the Megatron-Core r0.8 table): gradients
// reduced in bf16 and TP communication overlapped with its GEMMs.
#include <gtest/gtest.h>

#include "job/prepare.hpp"
#include "plan/plan.hpp"
#include "spec/catalog.hpp"
#include "spec/training.hpp"

namespace mist::job {
namespace {

Job gpt_32b_on_h100(const Json& training_extra, const Json& plan_extra, const char* gpu = "H100-SXM5-80GB") {
  Job j;
  j.model = *spec::model_from_json(Json{{"model_type", "gpt2"}, {"n_embd", 7168}, {"n_layer", 48}, {"n_head", 56},
                                        {"vocab_size", 131072}, {"n_positions", 4096}},
                                   "model");
  j.cluster = *spec::cluster_from_json(Json{{"gpu", gpu}, {"nodes", 48}, {"gpus_per_node", 8}}, "cluster");
  Json t = {{"global_batch_size", 192}, {"seq_length", 4096}, {"precision", "bf16"}, {"flash_attention", true}};
  t.update(training_extra);
  j.training = *spec::training_from_json(t, "training");
  Json p = {{"dp", 48}, {"tp", 8}, {"pp", 1}, {"sequence_parallel", true}, {"micro_batch_size", 1},
            {"grad_accum_steps", 4}, {"stages", Json::array({{{"num_layers", 48}, {"zero", 1}}})}};
  p.update(plan_extra);
  j.plan = *plan::plan_from_json(p, "plan");
  return j;
}

TEST(StackSettings, UnstatedSettingsTakeTheStacksAndStatedOnesWin) {
  auto unstated = predict(gpt_32b_on_h100(Json::object(), Json::object()));
  ASSERT_TRUE(unstated.has_value()) << unstated.error().to_string();
  EXPECT_TRUE(unstated->plan.overlap_tp_comm);
  ASSERT_EQ(unstated->calibration.settings.size(), 2u);
  EXPECT_NE(unstated->calibration.settings[0].find("bf16"), std::string::npos);
  EXPECT_FALSE(unstated->calibration.settings_why.empty());
  auto prepared = prepare(gpt_32b_on_h100(Json::object(), Json::object()));
  ASSERT_TRUE(prepared.has_value());
  EXPECT_EQ(prepared->training().grad_dtype, spec::Dtype::kBf16);

  auto stated = predict(gpt_32b_on_h100({{"grad_dtype", "fp32"}}, {{"overlap_tp_comm", false}}));
  ASSERT_TRUE(stated.has_value()) << stated.error().to_string();
  EXPECT_FALSE(stated->plan.overlap_tp_comm);
  EXPECT_TRUE(stated->calibration.settings.empty());
  // fp32 gradients move twice the bytes and TP collectives stay exposed: slower.
  EXPECT_GT(stated->time.iteration_time_s, 1.2 * unstated->time.iteration_time_s);

  // --uncalibrated takes nothing from a stack; nor does a stack whose runs used mist's defaults
  // (Megatron-LM 2022 on A100).
  auto physics = predict(gpt_32b_on_h100(Json::object(), Json::object()), {.uncalibrated = true});
  ASSERT_TRUE(physics.has_value());
  EXPECT_FALSE(physics->plan.overlap_tp_comm);
  EXPECT_TRUE(physics->calibration.settings.empty());
  auto a100 = predict(gpt_32b_on_h100(Json::object(), Json::object(), "A100-SXM4-80GB"));
  ASSERT_TRUE(a100.has_value()) << a100.error().to_string();
  EXPECT_FALSE(a100->plan.overlap_tp_comm);
  EXPECT_TRUE(a100->calibration.settings.empty());
}

// Two plans that differ only in what their files spelled out are the same plan.
TEST(StackSettings, WhatAFileStatedIsNotPartOfAPlansIdentity) {
  const auto a = gpt_32b_on_h100(Json::object(), Json::object()).plan;
  const auto b = gpt_32b_on_h100(Json::object(), {{"overlap_tp_comm", false}}).plan;
  EXPECT_FALSE(a.overlap_tp_comm_stated.value);
  EXPECT_TRUE(b.overlap_tp_comm_stated.value);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace mist::job
