// The MoE all-to-alls overlapped with another micro-batch's compute (plan.overlap_moe_a2a,
// Megatron-Core's --overlap-moe-expert-parallel-comm): the steady state pairs each block's forward
// with another micro-batch's backward, the warm-up and cool-down run unpaired, and one more
// micro-batch is in flight.
#include <gtest/gtest.h>

#include <algorithm>

#include "analysis/prepared_job.hpp"
#include "analysis/time_model.hpp"
#include "test_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;

double term(const StageMemory& s, std::string_view name) { return mist::testing::memory_term(s, name); }
double delta_term(const StageTime& s, std::string_view name) {
  for (const auto& t : s.delta_terms)
    if (t.name == name) return t.seconds;
  return -1;
}

// Qwen3-30B-A3B on 2×8 H100: dp 16, ep 16 (the all-to-alls leave the node), no pipeline, 4
// micro-batches of one sequence.
struct QwenJob {
  spec::ModelSpec m = *spec::catalog_model("qwen3-30b-a3b");
  spec::ClusterSpec c = cluster("H100-SXM5-80GB", 2, 8);
  spec::TrainingSpec t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false, spec::Dtype::kBf16);
  plan::Plan plan(bool overlap, int64_t pp = 1, int64_t v = 1) const {
    plan::StagePlan st;
    st.zero = 1;
    auto p = plan::uniform_plan(m, 16 / pp, 1, pp, 1, 64 / (16 / pp), st);
    p.ep = 16 / pp;
    p.virtual_pipeline_stages = v;
    p.overlap_moe_a2a = overlap;
    return p;
  }
};

TEST(MoeA2aOverlap, TheSteadyStateHidesTheAllToAllsUnderTheOtherPass) {
  const QwenJob job;
  auto off = mist::testing::predict(job.m, job.c, job.t, job.plan(false));
  auto on = mist::testing::predict(job.m, job.c, job.t, job.plan(true));
  ASSERT_TRUE(off && on) << (off ? on.error().to_string() : off.error().to_string());
  auto prepared = PreparedJob::create(job.m, job.c, job.t);
  ASSERT_TRUE(prepared);
  auto blk = block_op_times(*prepared, job.plan(false), "");
  ASSERT_TRUE(blk);
  const double a2a = (blk->fwd_exposed - blk->fwd_cp) + (blk->bwd_exposed - blk->bwd_cp);
  const double compute = (off->time.stages[0].fwd_s + off->time.stages[0].bwd_s) / job.m.num_layers - a2a;
  ASSERT_GT(a2a, 0);
  ASSERT_GT(compute, 0);
  const auto &s_off = off->time.stages[0], &s_on = on->time.stages[0];
  // The pairs' saving comes off both passes (each in proportion to its all-to-alls, neither below
  // its compute): at most the shorter of the two streams per block and at least half of it (the
  // streams slow each other while both run).
  EXPECT_LT(s_on.fwd_s, s_off.fwd_s);
  EXPECT_LT(s_on.bwd_s, s_off.bwd_s);
  EXPECT_GT(s_on.fwd_s, 0);
  EXPECT_GT(s_on.bwd_s, 0);
  const double saved = s_off.stable_s - s_on.stable_s;
  const double per_block = saved / static_cast<double>(job.m.num_layers);
  EXPECT_LE(per_block, std::min(a2a, compute) * (1 + 1e-9));
  EXPECT_GE(per_block, 0.5 * std::min(a2a, compute));
  // Without a pipeline the first forward and the last backward run alone (2 micro-batches in
  // flight with the overlap): that much of the saving is paid back once.
  EXPECT_NEAR(delta_term(s_on, "moe_a2a_unpaired"), 2 * saved, 1e-9);
  EXPECT_LT(delta_term(s_off, "moe_a2a_unpaired"), 0) << "no such term without the overlap";
  // 4 micro-batches: 2 paired. (The gradient reduction hidden under a shorter backward may show a
  // little more.)
  EXPECT_NEAR(off->time.iteration_time_s - on->time.iteration_time_s, (64 / 16 - 2) * saved, 0.05 * saved);
  // One more micro-batch in flight: twice the saved activations without a pipeline.
  EXPECT_DOUBLE_EQ(on->memory.stages[0].in_flight, 2);
  EXPECT_NEAR(term(on->memory.stages[0], "activations"), 2 * term(off->memory.stages[0], "activations"), 1);
}

// The interleaved schedule: the overlap pays for its warm-up chunks and holds one more chunk.
TEST(MoeA2aOverlap, InterleavedStagesHoldOneMoreChunk) {
  const QwenJob job;
  auto off = mist::testing::predict(job.m, job.c, job.t, job.plan(false, 2, 2));
  auto on = mist::testing::predict(job.m, job.c, job.t, job.plan(true, 2, 2));
  ASSERT_TRUE(off && on) << (off ? on.error().to_string() : off.error().to_string());
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_DOUBLE_EQ(on->memory.stages[i].in_flight, off->memory.stages[i].in_flight + 0.5) << i;
    EXPECT_LT(on->time.stages[i].stable_s, off->time.stages[i].stable_s) << i;
    EXPECT_GT(delta_term(on->time.stages[i], "moe_a2a_unpaired"), 0) << i;
  }
  EXPECT_LT(on->time.iteration_time_s, off->time.iteration_time_s);
}

TEST(MoeA2aOverlap, RefusedWhereThereIsNothingToOverlap) {
  const QwenJob job;
  auto p = job.plan(true);
  p.ep = 1;
  mist::testing::expect_error(plan::validate_plan(p, job.m, job.c, job.t), "plan.overlap_moe_a2a", "ep > 1");
  auto ag = job.t;
  ag.moe_dispatcher = spec::MoeDispatcher::kAllGather;
  mist::testing::expect_error(plan::validate_plan(job.plan(true), job.m, job.c, ag), "plan.overlap_moe_a2a",
                              "all-gather");
  const auto dense = *spec::catalog_model("llama3-8b");
  auto dp = plan::uniform_plan(dense, 16, 1, 1, 1, 4, {});
  dp.overlap_moe_a2a = true;
  mist::testing::expect_error(plan::validate_plan(dp, dense, job.c, job.t), "plan.overlap_moe_a2a", "no experts");
  auto parsed = plan::plan_from_json(plan::plan_to_json(job.plan(true)), "plan");
  ASSERT_TRUE(parsed);
  EXPECT_TRUE(parsed->overlap_moe_a2a);
  EXPECT_FALSE(plan::plan_to_json(job.plan(false)).contains("overlap_moe_a2a"));
}

}  // namespace
}  // namespace mist::analysis
