// Multi-token prediction: Megatron-LM's --mtp-num-layers written and read back, its 'm' layers in a
// pipeline layout (with the loss, on the last stage), Megatron-LM's own checks on import, and the
// engines without it refusing it by name.
#include <gtest/gtest.h>

#include "export/exchange.hpp"
#include "export/megatron.hpp"
#include "export/splits.hpp"
#include "export_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::engines {
namespace {

using mist::testing::expect_error;
using testing::cluster;
using testing::command;
using testing::model;
using testing::value;

spec::TrainingSpec mtp_training(int64_t depths) {
  auto t = testing::training(128, 4096);
  t.mtp_layers = depths;
  return t;
}

TEST(MtpExport, MegatronWritesTheDepthsAndTheyRoundTrip) {
  const auto m = model("llama3-8b");
  for (int64_t depths : {1, 2}) {
    auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), mtp_training(depths), testing::plan(4, 2, {16, 16}, 1, 32, 1), {}});
    ASSERT_TRUE(r && r->exported);
    EXPECT_EQ(value(r->exported->options, "--mtp-num-layers"), std::to_string(depths));
    auto back = import_megatron_flags(command(r->exported->options), m, cluster(2, 8));
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->training.mtp_layers, std::optional<int64_t>(depths));
  }
  // Without it the flag is absent, and its absence reads as none (Megatron-LM's default).
  auto plain = export_plan(Engine::kMegatron, {m, cluster(2, 8), mtp_training(0), testing::plan(4, 2, {16, 16}, 1, 32, 1), {}});
  ASSERT_TRUE(plain && plain->exported);
  EXPECT_FALSE(value(plain->exported->options, "--mtp-num-layers").has_value());
  auto back = import_megatron_flags(command(plain->exported->options), m, cluster(2, 8));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->training.mtp_layers, std::optional<int64_t>(0));
}

// A split only a layout expresses puts the depths beside the loss ("...t*8mL"), as many 'm' as
// --mtp-num-layers: Megatron-LM's validate_layer_layout counts them.
TEST(MtpExport, ALayoutCarriesTheDepthsWithTheLoss) {
  const auto split = megatron_split({9, 7, 8, 8}, 1, 2);
  ASSERT_TRUE(split.layout);
  EXPECT_EQ(*split.layout, "Et*9|t*7|t*8|t*8mmL");
  auto back = megatron_layers_from_layout(*split.layout, 4, 32, 2);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->layers, (std::vector<int64_t>{9, 7, 8, 8}));
  expect_error(megatron_layers_from_layout(*split.layout, 4, 32, 1), "--pipeline-model-parallel-layout",
               "--mtp-num-layers");
  expect_error(megatron_layers_from_layout("Et*9|t*7|t*8m|t*8L", 4, 32, 1), "--pipeline-model-parallel-layout",
               "last stage");
  expect_error(megatron_layers_from_layout("Et*9|t*7|t*8|t*7mtL", 4, 32, 1), "--pipeline-model-parallel-layout",
               "follows");

  const auto m = model("llama3-8b");
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), mtp_training(1), testing::plan(4, 1, {9, 7, 8, 8}, 1, 32, 1), {}});
  ASSERT_TRUE(r && r->exported);
  EXPECT_EQ(value(r->exported->options, "--pipeline-model-parallel-layout"), "Et*9|t*7|t*8|t*8mL");
  auto imported = import_megatron_flags(command(r->exported->options), m, cluster(2, 8));
  ASSERT_TRUE(imported) << imported.error().to_string();
  EXPECT_EQ(imported->plan.stages.back().num_layers, 8);
}

// A model whose checkpoint holds MTP modules, planned without training them, says so and how.
TEST(MtpExport, AModelWithMtpModulesSaysWhenThePlanLeavesThemOut) {
  const auto m = model("deepseek-v3");
  ASSERT_EQ(m.mtp_layers, 1);
  auto p = testing::plan(32, 1, {8, 8, 8, 8, 8, 8, 8, 5}, 1, 4, 1);  // GBS 128
  p.ep = 32;
  auto said = [&](int64_t depths) {
    auto r = export_plan(Engine::kMegatron, {m, cluster(32, 8, "H100-SXM5-80GB"), mtp_training(depths), p, {}});
    EXPECT_TRUE(r && r->exported);
    if (!r || !r->exported) return false;
    bool note = false;
    for (const auto& n : r->exported->notes) note |= n.find("training.mtp_layers 1") != std::string::npos;
    return note;
  };
  EXPECT_TRUE(said(0));
  EXPECT_FALSE(said(1));
}

TEST(MtpExport, ImportKeepsMegatronsChecksAndOtherEnginesRefuseIt) {
  const auto gpt = model("gpt3-13b");  // learned absolute positions
  expect_error(import_megatron_flags("--tensor-model-parallel-size 2 --micro-batch-size 1 --seq-length 2048 "
                                     "--mtp-num-layers 1",
                                     gpt, cluster(2, 8)),
               "--mtp-num-layers", "rotary");
  const auto p = testing::plan(4, 2, {16, 16}, 1, 32, 1);
  const auto t = mtp_training(1);
  for (Engine e : {Engine::kTorchtitan, Engine::kDeepSpeed}) {
    bool named = false;
    for (const auto& w : inexpressible_reasons(p, e, &t)) named |= w.path == "training.mtp_layers";
    EXPECT_TRUE(named) << to_string(e);
  }
  bool megatron_named = false;
  for (const auto& w : inexpressible_reasons(p, Engine::kMegatron, &t)) megatron_named |= w.path == "training.mtp_layers";
  EXPECT_FALSE(megatron_named);
}

}  // namespace
}  // namespace mist::engines
