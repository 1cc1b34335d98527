// `mist tune --engine E` returns only plans E can run (a property over many jobs).
#include <gtest/gtest.h>

#include "export/capability.hpp"
#include "plan/plan.hpp"
#include "tuner/tuner.hpp"
#include "tune_jobs.hpp"

namespace mist::tuner {
namespace {

using namespace testing;

TEST(EngineTuning, EveryPlanIsExpressibleByItsEngine) {
  struct Job {
    int64_t layers, hidden, nodes, per_node, gbs, seq;
    const char* gpu;
  };
  const Job jobs[] = {{8, 2048, 1, 4, 16, 2048, "L4-24GB"},       {12, 2048, 1, 8, 32, 2048, "L4-24GB"},
                      {16, 4096, 1, 4, 64, 4096, "A100-SXM4-40GB"}, {16, 2048, 2, 4, 32, 2048, "A100-SXM4-40GB"},
                      {12, 4096, 2, 4, 64, 2048, "H100-SXM5-80GB"}, {8, 4096, 1, 2, 8, 2048, "L4-24GB"},
                      {16, 2048, 1, 4, 32, 2048, "V100-SXM2-32GB"}};
  int plans = 0, adjusted = 0;
  for (const auto& j : jobs)
    for (auto e : engines::all_engines()) {
      const auto m = small_gpt(j.layers, j.hidden);
      const auto c = cluster(j.gpu, j.nodes, j.per_node);
      const bool bf16 = c.gpu.bf16_flops > 0;
      // torchtitan has no fp16; V100 has no bf16: that pair is refused as a whole (tested below).
      if (!bf16 && e == engines::Engine::kTorchtitan) continue;
      const auto t = training(j.gbs, j.seq, bf16 ? spec::Dtype::kBf16 : spec::Dtype::kFp16);
      TuneOptions o;
      o.engine = e;
      o.space = engine_space(e);
      o.space.tp = {1, 2};  // a smaller layout grid keeps the test quick; the settings are the engine's
      o.space.micro_batch = {1, 2};
      o.space.max_pp = 4;
      o.top = 3;
      auto r = tune(m, c, t, o);
      ASSERT_TRUE(r.has_value()) << engines::to_string(e) << ": " << r.error().to_string();
      adjusted += static_cast<int>(r->stats.engine_adjusted);
      for (const auto& cand : r->best) {
        std::vector<Error> why;
        EXPECT_TRUE(engines::expressible(cand.plan, e, &why, &t))
            << engines::to_string(e) << ": " << (why.empty() ? "" : why.front().to_string());
        EXPECT_TRUE(plan::validate_plan(cand.plan, m, c, t).has_value());
        ++plans;
      }
    }
  EXPECT_GT(plans, 30);
  EXPECT_GE(adjusted, 0);
}

TEST(EngineTuning, TrainingTheEngineCannotRunIsRefusedWithTheField) {
  const auto m = small_gpt(8, 2048);
  const auto c = cluster("V100-SXM2-32GB", 1, 4);
  TuneOptions o;
  o.engine = engines::Engine::kTorchtitan;
  o.space = engine_space(*o.engine);
  auto r = tune(m, c, training(16, 2048, spec::Dtype::kFp16), o);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path.rfind("training", 0), 0u) << r.error().to_string();
}

// The engine's space is a restriction of mist's: restricting never finds a faster plan.
TEST(EngineTuning, MistIsNeverSlowerThanAnEngine) {
  const auto m = small_gpt(12, 2048);
  const auto c = cluster("L4-24GB", 1, 8);
  const auto t = training(32, 2048);
  TuneOptions full;
  full.space = small_space();
  full.space.micro_batch = {1, 2, 4};
  full.space.tp = {1, 2, 4};
  full.space.opt_offload = {0, 0.25, 0.5, 0.75, 1};
  full.rerank_by_simulation = false;
  auto best = tune(m, c, t, full);
  ASSERT_TRUE(best.has_value() && !best->best.empty());
  TuneOptions meg;
  meg.engine = engines::Engine::kMegatron;
  meg.space = engine_space(*meg.engine);
  meg.space.tp = full.space.tp;
  meg.space.micro_batch = full.space.micro_batch;
  meg.space.max_pp = full.space.max_pp;
  meg.rerank_by_simulation = false;
  auto restricted = tune(m, c, t, meg);
  ASSERT_TRUE(restricted.has_value() && !restricted->best.empty());
  EXPECT_LE(best->best.front().iteration_time_s, restricted->best.front().iteration_time_s * (1 + 1e-9));
}

}  // namespace
}  // namespace mist::tuner
