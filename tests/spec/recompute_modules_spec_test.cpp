// training.recompute_modules (Megatron-LM's --recompute-modules): the list a user writes, read and
// written back, and its bad forms named element by element (tests/plan/moe_plan_test.cpp: the
// modules a model lacks).
#include <gtest/gtest.h>

#include "spec/training.hpp"
#include "../common/expect.hpp"

namespace mist::spec {
namespace {

using mist::testing::expect_error;
using mist::testing::parse;

Result<TrainingSpec> training(std::string_view modules) {
  return training_from_json(
      parse(std::string(R"({"global_batch_size": 64, "seq_length": 4096, "recompute_modules": )") +
            std::string(modules) + "}"),
      "training");
}

TEST(RecomputeModulesSpec, ReadAndWrittenBackInMegatronsOrder) {
  auto t = training(R"(["moe_act", "layernorm"])");
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_EQ(t->recompute_modules, kRecomputeLayernorm | kRecomputeMoeAct);
  const Json j = training_to_json(*t);
  EXPECT_EQ(j.at("recompute_modules"), Json::array({"layernorm", "moe_act"}));
  auto back = training_from_json(j, "training");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, *t);
  // The default (Megatron's ["core_attn"]) is left out of the file.
  auto plain = training_from_json(parse(R"({"global_batch_size": 64, "seq_length": 4096})"), "training");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->recompute_modules, kRecomputeCoreAttn);
  EXPECT_FALSE(training_to_json(*plain).contains("recompute_modules"));
  EXPECT_EQ(recompute_module_names(~0u).size(), 7u);
  for (const auto& name : recompute_module_names(~0u)) EXPECT_NE(recompute_module_bit(name), 0u) << name;
  EXPECT_EQ(recompute_module_bit("experts"), 0u);
}

TEST(RecomputeModulesSpec, BadListsNameTheElement) {
  expect_error(training(R"(["core_attn", "experts"])"), "training.recompute_modules[1]", "must be one of");
  expect_error(training(R"(["moe", "moe"])"), "training.recompute_modules[1]", "listed twice");
  expect_error(training(R"(["moe", 3])"), "training.recompute_modules[1]", "must be a string");
  expect_error(training(R"("moe")"), "training.recompute_modules", "list of strings");
  expect_error(training("[]"), "training.recompute_modules", "empty");
}

}  // namespace
}  // namespace mist::spec
