// Megatron-LM's --recompute-modules in the time and memory of a plan: what selective recompute
// runs again in backward is the listed modules' forward, collectives included (a recomputed MoE
// layer dispatches its tokens again), and what it saves shows in the stage's activations.
#include <gtest/gtest.h>

#include "analysis/prepared_job.hpp"
#include "analysis/time_model.hpp"
#include "test_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;

// Qwen3-30B-A3B on 2×8 H100: dp 16, ep 16 (the all-to-alls leave the node), 4 micro-batches,
// every block recomputed selectively with `modules`.
struct QwenJob {
  spec::ModelSpec m = *spec::catalog_model("qwen3-30b-a3b");
  spec::ClusterSpec c = cluster("H100-SXM5-80GB", 2, 8);
  spec::TrainingSpec training(uint32_t modules) const {
    auto t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false, spec::Dtype::kBf16);
    t.recompute_modules = modules;
    return t;
  }
  plan::Plan plan(bool selective) const {
    plan::StagePlan st;
    st.zero = 1;
    auto p = plan::uniform_plan(m, 16, 1, 1, 1, 4, st);
    p.ep = 16;
    p.recompute = selective ? plan::Recompute::kSelective : plan::Recompute::kNone;
    return p;
  }
  LayerTimes block(uint32_t modules, bool selective, std::string_view prefix = "") const {
    auto job = PreparedJob::create(m, c, training(modules));
    EXPECT_TRUE(job) << job.error().to_string();
    auto r = block_op_times(*job, plan(selective), prefix);
    EXPECT_TRUE(r) << r.error().to_string();
    return r ? *r : LayerTimes{};
  }
};

TEST(RecomputeModulesTime, TheRecomputedForwardIsTheModulesOwn) {
  const QwenJob job;
  const auto none = job.block(spec::kRecomputeCoreAttn, false);
  // moe: every MoE op's forward and its all-to-alls once more.
  const auto moe_ops = job.block(spec::kRecomputeCoreAttn, false, "moe.");
  ASSERT_GT(moe_ops.fwd_exposed, 0);
  EXPECT_NEAR(job.block(spec::kRecomputeMoe, true).core_fwd, moe_ops.fwd + moe_ops.fwd_exposed + moe_ops.fwd_tp,
              1e-12);
  // layernorm: the pre-MLP norm; moe_act: the experts' activation.
  EXPECT_NEAR(job.block(spec::kRecomputeLayernorm, true).core_fwd, job.block(spec::kRecomputeCoreAttn, false, "ln2").fwd,
              1e-12);
  EXPECT_NEAR(job.block(spec::kRecomputeMoeAct, true).core_fwd,
              job.block(spec::kRecomputeCoreAttn, false, "moe.experts.swiglu").fwd, 1e-12);
  // The default recomputes the attention core.
  EXPECT_NEAR(job.block(spec::kRecomputeCoreAttn, true).core_fwd, job.block(spec::kRecomputeCoreAttn, false, "attn.core").fwd,
              1e-12);
  EXPECT_DOUBLE_EQ(none.fwd, job.block(spec::kRecomputeMoe, true).fwd);
}

TEST(RecomputeModulesTime, MoreRecomputedModulesCostTimeAndSaveMemory) {
  const QwenJob job;
  auto predict = [&](uint32_t modules, bool selective) {
    auto r = mist::testing::predict(job.m, job.c, job.training(modules), job.plan(selective));
    EXPECT_TRUE(r) << r.error().to_string();
    return r ? *r : Prediction{};
  };
  const auto none = predict(spec::kRecomputeCoreAttn, false);
  const auto act = predict(spec::kRecomputeLayernorm | spec::kRecomputeMoeAct, true);
  const auto moe = predict(spec::kRecomputeMoe, true);
  auto acts = [](const Prediction& p) { return mist::testing::memory_term(p.memory.stages[0], "activations"); };
  EXPECT_LT(acts(act), acts(none));
  EXPECT_LT(acts(moe), acts(act));
  EXPECT_GT(act.time.iteration_time_s, none.time.iteration_time_s);
  EXPECT_GT(moe.time.iteration_time_s, act.time.iteration_time_s);
}

// The engines whose selective recompute is their own refuse Megatron's modules by the field's name.
TEST(RecomputeModulesTime, OtherEnginesRefuseTheModules) {
  auto t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false);
  t.recompute_modules = spec::kRecomputeMlp;
  const auto m = *spec::catalog_model("llama3-8b");
  for (auto e : {spec::Engine::kTorchtitan, spec::Engine::kDeepSpeed})
    mist::testing::expect_error(PreparedJob::create(m, cluster("H100-SXM5-80GB", 1, 8), t, {}, {}, e),
                                "training.recompute_modules", "--engine megatron");
  EXPECT_TRUE(PreparedJob::create(m, cluster("H100-SXM5-80GB", 1, 8), t, {}, {}, spec::Engine::kMegatron));
}

}  // namespace
}  // namespace mist::analysis
