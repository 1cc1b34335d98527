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
  const std::string base = " --tensor-model-parallel-size 2 --micro-batch-size 1 --bf16 --num-layers 32"
                           " --hidden-size 4096 --num-attention-heads 32 --group-query-attention"
                           " --num-query-groups 8 --ffn-hidden-size 14336";
  EXPECT_EQ(import_megatron_flags(base + " --fp8-format hybrid", m, c)->training.fp8, spec::Fp8Recipe::kDelayed);
  EXPECT_EQ(import_megatron_flags(base, m, c)->training.fp8, spec::Fp8Recipe::kNone);
  expect_error(import_megatron_flags(base + " --fp8-recipe tensorwise", m, c), "--fp8-recipe", "--fp8-format");
  expect_error(import_megatron_flags(base + " --fp8-format hybrid --fp8-recipe custom", m, c), "--fp8-recipe",
               "custom");
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
