// The tuner with a mixture of experts whose first blocks are dense: they stay in the first stage's
// first chunk (plan::holds_dense_blocks), in every plan it returns.
#include <gtest/gtest.h>

#include <algorithm>

#include "analysis/prepared_job.hpp"
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

}  // namespace
}  // namespace mist::tuner
