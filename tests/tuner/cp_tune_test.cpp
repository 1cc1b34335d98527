// The tuner with context parallelism: which CP degrees a layout is tried with, and Llama-3-8B at
// 131,072 tokens on 8 H100 without host offload, the job that needs CP to fit, tuned for Megatron-LM
// and torchtitan and exported to both.
#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "export/megatron.hpp"
#include "export/torchtitan.hpp"
#include "tune_jobs.hpp"

namespace mist::tuner {
namespace {

using namespace testing;

spec::TrainingSpec long_training(int64_t seq) {
  auto t = training(8, seq);
  t.flash_attention = true;
  return t;
}

// CP degrees leave every rank at least min_cp_tokens, divide the GPUs a stage has left after tp,
// and let tp split each rank's tokens; DeepSpeed's space has none for Llama-3-8B's grouped key/value
// heads (DeepSpeed-Ulysses needs as many as heads), and neither does a short job.
TEST(CpTune, DegreesFollowTheSequence) {
  SearchSpace s;
  const auto m = *spec::catalog_model("llama3-8b");
  const auto t = long_training(131072);
  EXPECT_EQ(cp_degrees(s, m, t, 8, 1), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(cp_degrees(s, m, t, 8, 8), (std::vector<int64_t>{1}));
  EXPECT_EQ(cp_degrees(s, m, long_training(8192), 8, 1), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(cp_degrees(s, m, long_training(4096), 8, 1), (std::vector<int64_t>{1}));
  auto no_flash = t;
  no_flash.flash_attention = false;
  EXPECT_EQ(cp_degrees(s, m, no_flash, 8, 1), (std::vector<int64_t>{1}));
  EXPECT_EQ(cp_degrees(engine_space(engines::Engine::kDeepSpeed), m, t, 8, 1), (std::vector<int64_t>{1}));
  std::set<int64_t> seen;
  for (const auto& p : layouts(s, m, cluster("H100-SXM5-80GB", 1, 8), t)) {
    EXPECT_EQ(p.dp * p.tp * p.pp * p.cp, 8);
    EXPECT_TRUE(plan::check_cp(m, t, p.cp));
    seen.insert(p.cp);
  }
  EXPECT_EQ(seen, (std::set<int64_t>{1, 2, 4, 8}));
}

// Without host offload the sequence fits only split over CP ranks (or over a TP group as wide as
// the node): Megatron-LM's best plan has cp > 1, every listed plan fits, and the best exports to
// flags that import back to it. torchtitan's best CP plan, exported, imports back too.
TEST(CpTune, LongSequenceGetsContextParallelismWithoutOffload) {
  const auto m = *spec::catalog_model("llama3-8b");
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  const auto t = long_training(131072);
  for (auto e : {engines::Engine::kMegatron, engines::Engine::kTorchtitan}) {
    TuneOptions o;
    o.engine = e;
    o.space = engine_space(e);
    o.space.weight_offload = o.space.grad_offload = o.space.opt_offload = o.space.act_offload = {0};
    o.space.micro_batch = {1};
    o.top = 5;
    auto r = tune(m, c, t, o);
    ASSERT_TRUE(r) << r.error().to_string();
    ASSERT_FALSE(r->best.empty());
    for (const auto& cand : r->best) {
      EXPECT_TRUE(cand.prediction.memory.fits);
      for (const auto& st : cand.plan.stages) EXPECT_EQ(st.offload, plan::Offload{});
    }
    const auto with_cp = std::find_if(r->best.begin(), r->best.end(), [](const auto& b) { return b.plan.cp > 1; });
    ASSERT_NE(with_cp, r->best.end()) << engines::to_string(e);
    if (e == engines::Engine::kMegatron) {
      EXPECT_GT(r->best[0].plan.cp, 1);
    }
    const auto& p = with_cp->plan;
    auto exported = engines::export_plan(e, {m, c, t, p, {}});
    ASSERT_TRUE(exported && exported->exported) << engines::to_string(e);
    std::string cmd;
    for (const auto& opt : exported->exported->options) cmd += " " + opt.name + (opt.value ? " " + *opt.value : "");
    auto back = e == engines::Engine::kMegatron ? engines::import_megatron_flags(cmd, m, c)
                                                : engines::import_torchtitan_overrides(cmd, m, c);
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->plan.cp, p.cp);
    EXPECT_EQ(back->plan.tp, p.tp);
    EXPECT_EQ(back->plan.dp, p.dp);
    EXPECT_EQ(back->plan.stages[0].zero, p.stages[0].zero);
  }
}

}  // namespace
}  // namespace mist::tuner
