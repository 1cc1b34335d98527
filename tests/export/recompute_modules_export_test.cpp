// Megatron-LM's --recompute-modules: written with selective recompute when the training names
// modules other than its default, read back (a list of arguments, argparse's nargs), its unknown
// modules refused by name, and the engines without it refusing training.recompute_modules.
#include <gtest/gtest.h>

#include "export/capability.hpp"
#include "export/exchange.hpp"
#include "export/megatron.hpp"
#include "spec/engine_fields.hpp"
#include "export_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::engines {
namespace {

using mist::testing::expect_error;
using testing::cluster;
using testing::command;
using testing::model;
using testing::value;

// Qwen3-30B-A3B on 16 GPUs: dp 16, the experts over ep 16, every block recomputed selectively.
plan::Plan qwen3_plan() {
  auto p = testing::plan(16, 1, {48}, 1, 4, /*zero=*/1);
  p.ep = 16;
  p.recompute = plan::Recompute::kSelective;
  return p;
}

spec::TrainingSpec with_modules(uint32_t modules) {
  auto t = testing::training(64, 4096);
  t.recompute_modules = modules;
  return t;
}

TEST(RecomputeModulesExport, MegatronWritesTheListAndItRoundTrips) {
  const auto m = model("qwen3-30b-a3b");
  const uint32_t modules = spec::kRecomputeLayernorm | spec::kRecomputeMoeAct;
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8, "H100-SXM5-80GB"), with_modules(modules), qwen3_plan(), {}});
  ASSERT_TRUE(r && r->exported) << (r ? "" : r.error().to_string());
  const auto& o = r->exported->options;
  EXPECT_EQ(value(o, "--recompute-granularity"), "selective");
  EXPECT_EQ(value(o, "--recompute-modules"), "layernorm moe_act");
  EXPECT_NE(render_options(o).find("--recompute-modules layernorm moe_act \\"), std::string::npos);
  auto back = import_megatron_flags(command(o), m, cluster(2, 8, "H100-SXM5-80GB"));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.recompute, plan::Recompute::kSelective);
  EXPECT_EQ(back->training.recompute_modules, std::optional<uint32_t>(modules));
  // Megatron's default is written as the granularity alone, and read back as the attention core.
  auto plain = export_plan(Engine::kMegatron,
                           {m, cluster(2, 8, "H100-SXM5-80GB"), with_modules(spec::kRecomputeCoreAttn), qwen3_plan(), {}});
  ASSERT_TRUE(plain && plain->exported);
  EXPECT_FALSE(value(plain->exported->options, "--recompute-modules").has_value());
  auto plain_back = import_megatron_flags(command(plain->exported->options), m, cluster(2, 8, "H100-SXM5-80GB"));
  ASSERT_TRUE(plain_back);
  EXPECT_FALSE(plain_back->training.recompute_modules.has_value());
}

TEST(RecomputeModulesExport, MegatronsImportChecksTheNames) {
  const auto m = model("qwen3-30b-a3b");
  const auto c = cluster(2, 8, "H100-SXM5-80GB");
  auto r = export_plan(Engine::kMegatron, {m, c, with_modules(spec::kRecomputeCoreAttn), qwen3_plan(), {}});
  ASSERT_TRUE(r && r->exported);
  const std::string base = command(r->exported->options);  // a repeated flag keeps its last value
  expect_error(import_megatron_flags(base + " --recompute-modules core_attn experts", m, c), "--recompute-modules",
               "'experts'");
  // The list stops at the next flag (an unknown one here, which a module name would not be).
  auto ok = import_megatron_flags(base + " --recompute-modules moe --not-a-megatron-flag 3", m, c);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->training.recompute_modules, std::optional<uint32_t>(spec::kRecomputeMoe));
  // Transformer Engine's fused permutation is read and said to be outside the model.
  auto fused = import_megatron_flags(base + " --moe-permute-fusion", m, c);
  ASSERT_TRUE(fused) << fused.error().to_string();
  bool noted = false;
  for (const auto& n : fused->notes) noted |= n.starts_with("--moe-permute-fusion: mist models");
  EXPECT_TRUE(noted);
  // An empty list recomputes nothing (argparse's nargs='*' gives []).
  auto none = import_megatron_flags(base + " --recompute-modules", m, c);
  ASSERT_TRUE(none) << none.error().to_string();
  EXPECT_EQ(none->plan.recompute, plan::Recompute::kNone);
}

TEST(RecomputeModulesExport, OtherEnginesRefuseMegatronsModules) {
  const auto m = model("llama3-8b");
  auto p = testing::plan(8, 1, {32}, 1, 8, 3);
  p.recompute = plan::Recompute::kSelective;
  const auto t = with_modules(spec::kRecomputeCoreAttn | spec::kRecomputeMlp);
  for (Engine e : {Engine::kTorchtitan, Engine::kDeepSpeed}) {
    std::vector<Error> why;
    EXPECT_FALSE(expressible(p, e, &why, &t, &m));
    bool named = false;
    for (const auto& w : why) named |= w.path == "training.recompute_modules";
    EXPECT_TRUE(named) << to_string(e);
  }
  // Without selective recompute in the plan the modules do not matter.
  p.recompute = plan::Recompute::kNone;
  std::vector<Error> why;
  expressible(p, Engine::kTorchtitan, &why, &t, &m);
  for (const auto& w : why) EXPECT_NE(w.path, "training.recompute_modules");
}

}  // namespace
}  // namespace mist::engines

namespace mist::engines {
namespace {

// The export refuses the fields another engine runs with the prediction's own rule
// (spec::engine_training_refusals): the same fields, and the recompute modules only where the plan
// recomputes selectively. torch.compile on a Megatron-LM export is refused since 2026-12-07 (it was
// exported without it before, while the prediction refused the job).
TEST(RecomputeModulesExport, TheExportRefusesWhatThePredictionRefuses) {
  auto t = with_modules(spec::kRecomputeMoe);
  t.compile = true;
  t.mtp_layers = 1;
  for (spec::Engine e : spec::all_engines()) {
    for (bool selective : {false, true}) {
      auto p = qwen3_plan();
      p.recompute = selective ? plan::Recompute::kSelective : plan::Recompute::kNone;
      std::vector<std::string> got;
      for (const auto& r : inexpressible_reasons(p, e, &t))
        if (r.path == "training.compile" || r.path == "training.mtp_layers" || r.path == "training.recompute_modules")
          got.push_back(r.path);
      std::vector<std::string> want;
      for (const auto& r : spec::engine_training_refusals(t, e, selective)) want.push_back(r.path);
      EXPECT_EQ(got, want) << spec::to_string(e) << (selective ? " selective" : "");
    }
  }
  // Megatron-LM: compile alone; torchtitan: the Megatron-only fields, modules only when selective.
  EXPECT_EQ(spec::engine_training_refusals(t, spec::Engine::kMegatron, true).size(), 1u);
  EXPECT_EQ(spec::engine_training_refusals(t, spec::Engine::kTorchtitan, false).size(), 1u);
}

}  // namespace
}  // namespace mist::engines
