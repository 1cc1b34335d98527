// The tuner on mixtures of experts: expert parallelism is searched with DP, TP and PP, and every
// plan it returns keeps Megatron's expert-grid rules.
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "export/megatron.hpp"
#include "tune_jobs.hpp"

namespace mist::tuner {
namespace {

using namespace testing;

// Mixtral 8x7B's shapes with 8 layers: quick to search, the same expert grid.
spec::ModelSpec small_mixtral() {
  auto m = *spec::catalog_model("mixtral-8x7b");
  m.name = "mixtral-8-layers";
  m.num_layers = 8;
  return m;
}

// Each (tp, dp) layout of a mixture of experts comes with every ep dividing the experts whose
// ep·etp divides tp·dp, for etp 1 and tp; a dense model's only with ep = etp = 1.
TEST(MoeTune, LayoutsCarryTheExpertDegrees) {
  const auto m = small_mixtral();
  const auto c = cluster("H100-SXM5-80GB", 2, 8);
  const auto t = training(64, 4096);
  SearchSpace s = engine_space(engines::Engine::kMegatron);
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> seen;
  for (const auto& p : layouts(s, m, c, t)) {
    EXPECT_TRUE(plan::check_experts(m, p.tp, p.dp, p.ep, p.etp)) << p.tp << " " << p.dp << " " << p.ep;
    EXPECT_TRUE(p.etp == 1 || p.etp == p.tp);
    seen.insert({p.tp, p.dp, p.ep, p.etp});
  }
  // tp 2, dp 8: ep 1, 2, 4, 8 with etp 1 and with etp 2 (ep 8 · etp 2 = 16 divides 16).
  for (int64_t ep : {1, 2, 4, 8})
    for (int64_t etp : {1, 2}) EXPECT_TRUE(seen.count({2, 8, ep, etp})) << ep << " " << etp;
  // tp 8, dp 1: ep·etp must divide 8, so ep 8 goes with etp 1 only.
  EXPECT_TRUE(seen.count({8, 1, 8, 1}));
  EXPECT_FALSE(seen.count({8, 1, 8, 8}));
  EXPECT_TRUE(seen.count({8, 1, 1, 8}));
  s.tune_experts = false;  // Megatron's defaults: ep 1, etp = tp
  for (const auto& p : layouts(s, m, c, t)) EXPECT_TRUE(p.ep == 1 && p.etp == p.tp);
  for (const auto& p : layouts(s, *spec::catalog_model("llama3-8b"), c, t)) EXPECT_TRUE(p.ep == 1 && p.etp == 1);
}

// Searching the expert grid never loses to Megatron's defaults (the space contains them), every
// plan keeps the rules, and the best exports to Megatron-LM flags that import back to the plan.
TEST(MoeTune, ExpertParallelismIsSearchedAndExported) {
  const auto m = small_mixtral();
  const auto c = cluster("H100-SXM5-80GB", 2, 8);
  const auto t = training(64, 4096);
  TuneOptions o;
  o.engine = engines::Engine::kMegatron;
  o.space = engine_space(engines::Engine::kMegatron);
  o.space.micro_batch = {1, 2};
  o.space.max_pp = 2;
  o.top = 3;
  o.rerank_by_simulation = false;  // best[0]: the closed form's optimum
  auto searched = tune(m, c, t, o);
  o.space.tune_experts = false;
  auto defaults = tune(m, c, t, o);
  ASSERT_TRUE(searched && defaults) << (searched ? defaults.error().to_string() : searched.error().to_string());
  ASSERT_FALSE(searched->best.empty());
  ASSERT_FALSE(defaults->best.empty());
  EXPECT_LE(searched->best[0].iteration_time_s, defaults->best[0].iteration_time_s * (1 + 1e-9));
  for (const auto& cand : searched->best) {
    EXPECT_TRUE(plan::validate_plan(cand.plan, m, c, t)) << plan::validate_plan(cand.plan, m, c, t).error().to_string();
    EXPECT_TRUE(cand.prediction.memory.fits);
  }
  const auto& best = searched->best[0].plan;
  auto exported = engines::export_plan(engines::Engine::kMegatron, {m, c, t, best, {}});
  ASSERT_TRUE(exported && exported->exported) << (exported ? "refused" : exported.error().to_string());
  std::string cmd;
  for (const auto& opt : exported->exported->options) cmd += " " + opt.name + (opt.value ? " " + *opt.value : "");
  auto back = engines::import_megatron_flags(cmd, m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.ep, best.ep);
  EXPECT_EQ(back->plan.etp, best.etp);
  EXPECT_EQ(back->plan.tp, best.tp);
  EXPECT_EQ(back->plan.dp, best.dp);
}

}  // namespace
}  // namespace mist::tuner
