// FP8 training in the exports: Megatron-LM's --fp8-format hybrid --fp8-recipe, read back by the
// importer (Megatron's default recipe is delayed); the recipes each engine lacks refused, naming
// training.fp8_recipe; DeepSpeed without FP8.
#include <gtest/gtest.h>

#include "export/exchange.hpp"
#include "export/megatron.hpp"
#include "export/torchtitan.hpp"
#include "export_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::engines {
namespace {

using mist::testing::expect_error;
using testing::cluster;
using testing::command;
using testing::model;
using testing::value;

// Llama-3-8B at tp 2 in bf16, as Megatron-LM flags, for the importer's checks.
const std::string kLlama3Tp2 = " --tensor-model-parallel-size 2 --micro-batch-size 1 --bf16 --num-layers 32"
                               " --hidden-size 4096 --num-attention-heads 32 --group-query-attention"
                               " --num-query-groups 8 --ffn-hidden-size 14336";

spec::TrainingSpec fp8_training(spec::Fp8Recipe r) {
  auto t = testing::training(64, 4096);
  t.fp8 = r;
  return t;
}

TEST(Fp8Export, MegatronWritesTheRecipeAndReadsItBack) {
  const auto m = model("llama3-8b");
  const auto c = cluster(1, 8, "H100-SXM5-80GB");
  for (auto r : {spec::Fp8Recipe::kTensorwise, spec::Fp8Recipe::kDelayed, spec::Fp8Recipe::kBlockwise}) {
    auto x = export_plan(Engine::kMegatron, {m, c, fp8_training(r), testing::plan(4, 2, {32}, 1, 16, 1), {}});
    ASSERT_TRUE(x && x->exported) << spec::to_string(r);
    const auto& o = x->exported->options;
    EXPECT_EQ(value(o, "--fp8-format"), "hybrid");
    EXPECT_EQ(value(o, "--fp8-recipe"), spec::to_string(r));
    EXPECT_TRUE(value(o, "--bf16").has_value());
    auto back = import_megatron_flags(command(o), m, c);
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->training.fp8, r);
  }
  // Without --fp8-recipe Megatron uses delayed scaling; without --fp8-format no FP8 at all.
  EXPECT_EQ(import_megatron_flags(kLlama3Tp2 + " --fp8-format hybrid", m, c)->training.fp8, spec::Fp8Recipe::kDelayed);
  EXPECT_EQ(import_megatron_flags(kLlama3Tp2, m, c)->training.fp8, spec::Fp8Recipe::kNone);
  expect_error(import_megatron_flags(kLlama3Tp2 + " --fp8-recipe tensorwise", m, c), "--fp8-recipe", "--fp8-format");
  expect_error(import_megatron_flags(kLlama3Tp2 + " --fp8-format hybrid --fp8-recipe custom", m, c), "--fp8-recipe",
               "custom");
}

// --fp8-param-gather: written with FP8 training, read back; Megatron-LM's own checks on import
// (FP8 needed, the distributed optimizer or FSDP needed, turned off under torch FSDP2); a plan
// without the distributed optimizer moves to ZeRO-1; the other engines refuse it.
TEST(Fp8Export, MegatronKeepsFp8ParametersWithTheDistributedOptimizer) {
  const auto m = model("llama3-8b");
  const auto c = cluster(1, 8, "H100-SXM5-80GB");
  auto t = fp8_training(spec::Fp8Recipe::kTensorwise);
  t.fp8_param_gather = true;
  auto x = export_plan(Engine::kMegatron, {m, c, t, testing::plan(4, 2, {32}, 1, 16, 1), {}});
  ASSERT_TRUE(x && x->exported);
  const auto& o = x->exported->options;
  EXPECT_TRUE(value(o, "--fp8-param-gather").has_value());
  auto back = import_megatron_flags(command(o), m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->training.fp8_param_gather, std::optional<bool>(true));
  EXPECT_TRUE(back->training.applied_to(testing::training(64, 4096)).fp8_param_gather);
  // Without FP8 parameters the flag is absent and reads back false.
  auto plain = export_plan(Engine::kMegatron, {m, c, fp8_training(spec::Fp8Recipe::kTensorwise),
                                               testing::plan(4, 2, {32}, 1, 16, 1), {}});
  EXPECT_FALSE(value(plain->exported->options, "--fp8-param-gather").has_value());
  EXPECT_EQ(import_megatron_flags(command(plain->exported->options), m, c)->training.fp8_param_gather,
            std::optional<bool>(false));

  expect_error(import_megatron_flags(kLlama3Tp2 + " --use-distributed-optimizer --fp8-param-gather", m, c),
               "--fp8-param-gather", "--fp8-format");
  expect_error(import_megatron_flags(kLlama3Tp2 + " --fp8-format hybrid --fp8-param-gather", m, c), "--fp8-param-gather",
               "distributed optimizer");
  auto fsdp2 = import_megatron_flags(kLlama3Tp2 + " --fp8-format hybrid --use-torch-fsdp2 --fp8-param-gather", m, c);
  ASSERT_TRUE(fsdp2) << fsdp2.error().to_string();
  EXPECT_EQ(fsdp2->training.fp8_param_gather, std::optional<bool>(false));

  // ZeRO-0 cannot keep FP8 parameters in Megatron-LM: the nearest plan it runs is ZeRO-1.
  const auto zero0 = testing::plan(4, 2, {32}, 1, 16, 0);
  EXPECT_FALSE(expressible(zero0, Engine::kMegatron, nullptr, &t));
  const auto near = nearest_expressible(zero0, Engine::kMegatron, &t);
  EXPECT_EQ(near.plan.stages[0].zero, 1);
  // torchtitan and DeepSpeed refuse it, naming the field.
  auto tt = fp8_training(spec::Fp8Recipe::kRowwise);
  tt.fp8_param_gather = true;
  bool named = false;
  for (const auto& w : inexpressible_reasons(zero0, Engine::kTorchtitan, &tt)) named |= w.path == "training.fp8_param_gather";
  EXPECT_TRUE(named);
}

TEST(Fp8Export, EachEngineRefusesTheRecipesItLacks) {
  const auto p = testing::plan(4, 2, {32}, 1, 16, 1);
  auto reason = [&](Engine e, spec::Fp8Recipe r) {
    const auto t = fp8_training(r);
    const auto why = inexpressible_reasons(p, e, &t);
    for (const auto& w : why)
      if (w.path.starts_with("training.")) return w.path;
    return std::string("none");
  };
  EXPECT_EQ(reason(Engine::kMegatron, spec::Fp8Recipe::kRowwise), "training.fp8_recipe");
  EXPECT_EQ(reason(Engine::kMegatron, spec::Fp8Recipe::kBlockwise), "none");
  EXPECT_EQ(reason(Engine::kTorchtitan, spec::Fp8Recipe::kTensorwise), "training.fp8_recipe");
  EXPECT_EQ(reason(Engine::kTorchtitan, spec::Fp8Recipe::kRowwise), "none");
  EXPECT_EQ(reason(Engine::kDeepSpeed, spec::Fp8Recipe::kTensorwise), "training.precision");
}

// torchtitan turns float8 on in its config function, which the notes say how to write.
TEST(Fp8Export, TorchtitanSaysWhereFloat8GoesIn) {
  const auto m = model("llama3-8b");
  const auto t = fp8_training(spec::Fp8Recipe::kRowwise);
  const auto notes = torchtitan_notes(m, t, testing::plan(8, 1, {32}, 1, 8, 3));
  bool said = false;
  for (const auto& n : notes) said |= n.find("Float8LinearConverter.Config(recipe_name=\"rowwise\"") != std::string::npos;
  EXPECT_TRUE(said);
}

}  // namespace
}  // namespace mist::engines
