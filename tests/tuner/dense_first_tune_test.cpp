// The tuner with a mixture of experts whose first blocks are dense: they stay in the first stage's
// first chunk (plan::holds_dense_blocks), in every plan it returns.
#include <gtest/gtest.h>

#include <algorithm>

#include "analysis/prepared_job.hpp"
#include "export/exchange.hpp"
#include "export/megatron.hpp"
#include "tuner/tuner.hpp"
#include "tune_jobs.hpp"

namespace mist::tuner {
namespace {

using testing::cluster;

// The tuner never puts fewer than the dense blocks in the first stage's first chunk.
TEST(DenseFirst, TunerKeepsTheDenseBlocksOnStageZero) {
  auto m = *spec::catalog_model("qwen3-30b-a3b");
  m.first_dense_layers = 2;
  m.ffn_hidden_size = 6144;
  const auto c = cluster("H100-SXM5-80GB", 1, 8);  // tight enough that pipelined plans are among the best
  auto t = testing::training(64, 4096);
  t.grad_dtype = spec::Dtype::kBf16;
  t.flash_attention = true;
  auto job = analysis::PreparedJob::create(m, c, t);
  ASSERT_TRUE(job);
  TuneOptions o;
  o.engine = engines::Engine::kMegatron;
  auto r = tune(*job, o);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_FALSE(r->best.empty());
  bool pipelined = false;
  for (const auto& cand : r->best) {
    const auto& pl = cand.plan;
    pipelined = pipelined || pl.pp > 1;
    EXPECT_GE(pl.stages.front().num_layers / std::max<int64_t>(1, pl.virtual_pipeline_stages), 2);
    EXPECT_TRUE(plan::validate_plan(pl, m, c, t).has_value());
  }
  EXPECT_TRUE(pipelined);
}

// DeepSeek-V3 on 1,024 H100 (GBS 8192, seq 4096, bf16) in Megatron-LM's space: a plan with
// expert parallelism that fits, its 3 dense blocks on stage 0, exported to Megatron-LM flags that
// import back to the same plan.
TEST(DenseFirst, DeepSeekV3On1024H100ExportsAndRoundTrips) {
  const auto m = *spec::catalog_model("deepseek-v3");
  const auto c = cluster("H100-SXM5-80GB", 128, 8);
  auto t = testing::training(8192, 4096);
  t.flash_attention = true;
  TuneOptions o;
  o.engine = engines::Engine::kMegatron;
  o.space = engine_space(engines::Engine::kMegatron);
  o.top = 3;
  auto r = testing::tune(m, c, t, o);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_FALSE(r->best.empty());
  const auto& best = r->best.front();
  EXPECT_TRUE(best.prediction.memory.fits);
  EXPECT_GT(best.plan.ep, 1);
  EXPECT_GE(best.plan.stages.front().num_layers / best.plan.virtual_pipeline_stages, 3);
  auto exported = engines::export_plan(engines::Engine::kMegatron, {m, c, t, best.plan, {}});
  ASSERT_TRUE(exported && exported->exported) << (exported ? "" : exported.error().to_string());
  std::string cmd;
  for (const auto& opt : exported->exported->options) cmd += " " + opt.name + (opt.value ? " " + *opt.value : "");
  EXPECT_NE(cmd.find("--multi-latent-attention"), std::string::npos);
  EXPECT_NE(cmd.find("--moe-layer-freq ([0]*3+[1]*58)"), std::string::npos);
  auto back = engines::import_megatron_flags(cmd, m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.ep, best.plan.ep);
  EXPECT_EQ(back->plan.tp, best.plan.tp);
  EXPECT_EQ(back->plan.pp, best.plan.pp);
  EXPECT_EQ(back->plan.dp, best.plan.dp);
  ASSERT_EQ(back->plan.stages.size(), best.plan.stages.size());
  for (size_t i = 0; i < best.plan.stages.size(); ++i)
    EXPECT_EQ(back->plan.stages[i].num_layers, best.plan.stages[i].num_layers) << i;
}

}  // namespace
}  // namespace mist::tuner
