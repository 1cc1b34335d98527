// A mixture of experts whose first blocks are dense (ModelSpec::first_dense_layers: DeepSeek's
// first_k_dense_replace, Qwen-MoE's mlp_only_layers [0, k)): the dense blocks are lowered apart,
// all held by the first stage's first chunk, and counted there by the memory model, the allocation
// replay and the time model (the tuner: tests/tuner/dense_first_tune_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>

#include "analysis/prepared_job.hpp"
#include "graph/liveness.hpp"
#include "test_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;
using mist::testing::expect_error;

// Qwen3-30B-A3B with its first two blocks dense (6144 units, its config's intermediate_size).
spec::ModelSpec dense_first() {
  auto m = *spec::catalog_model("qwen3-30b-a3b");
  m.name = "qwen3-30b-a3b-dense2";
  m.first_dense_layers = 2;
  m.ffn_hidden_size = 6144;
  EXPECT_TRUE(spec::validate_model(m, "model").has_value());
  return m;
}

spec::TrainingSpec train() {
  return mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false, spec::Dtype::kBf16);
}

// On 16 GPUs, GBS 64, ep 4: dp = 16 / pp.
plan::Plan layout(const spec::ModelSpec& m, std::vector<int64_t> split, int64_t v = 1) {
  plan::StagePlan st;
  st.zero = 1;
  const int64_t pp = static_cast<int64_t>(split.size()), dp = 16 / pp;
  auto p = plan::uniform_plan(m, dp, 1, pp, 1, 64 / dp, st);
  for (size_t i = 0; i < split.size(); ++i) p.stages[i].num_layers = split[i];
  p.ep = 4;
  p.virtual_pipeline_stages = v;
  return p;
}

// The lowering has both blocks; its parameters add up to the model's count.
TEST(DenseFirst, LoweringHasBothBlocks) {
  const auto m = dense_first();
  const auto job = *PreparedJob::create(m, cluster("H100-SXM5-80GB", 2, 8), train());
  const auto* lw = *job.lowering(layout(m, {24, 24}));
  const auto& lm = lw->model;
  ASSERT_EQ(lm.dense_blocks, 2);
  sym::Bindings b = lm.dims;
  b["t"] = b["cp"] = b["ep"] = b["etp"] = 1;
  auto n = [&](const graph::Layer& L) { return sym::evaluate_or_zero(L.params(), b); };
  EXPECT_DOUBLE_EQ(n(lm.dense_block), static_cast<double>(m.dense_block_parameters()));
  EXPECT_DOUBLE_EQ(n(lm.block), static_cast<double>(m.block_parameters()));
  EXPECT_DOUBLE_EQ(n(lm.embedding) + 46 * n(lm.block) + 2 * n(lm.dense_block) + n(lm.head),
                   static_cast<double>(m.num_parameters()));
  EXPECT_EQ(sym::evaluate_or_zero(lm.dense_block.expert_params(), b), 0.0);
}

// Every dense block sits in the first stage's first chunk, or the plan is refused naming the field.
TEST(DenseFirst, FirstStageHoldsTheDenseBlocks) {
  const auto m = dense_first();
  const auto c = cluster("H100-SXM5-80GB", 2, 8);
  const auto t = train();
  auto ok = plan::validate_plan(layout(m, {2, 46}), m, c, t);
  EXPECT_TRUE(ok.has_value()) << ok.error().to_string();
  expect_error(plan::validate_plan(layout(m, {1, 47}), m, c, t), "plan.stages[0].num_layers", "2 dense blocks");
  // Two chunks of one block each on stage 0: the second dense block would be in chunk 2.
  expect_error(plan::validate_plan(layout(m, {2, 46}, 2), m, c, t), "plan.stages[0].num_layers", "in 2 chunks");
  ok = plan::validate_plan(layout(m, {4, 44}, 2), m, c, t);
  EXPECT_TRUE(ok.has_value()) << ok.error().to_string();
  EXPECT_TRUE(plan::holds_dense_blocks(m, 4, 2));
  EXPECT_TRUE(plan::holds_dense_blocks(*spec::catalog_model("llama3-8b"), 1, 1));
  EXPECT_EQ(plan::dense_blocks(m, 0), 2);
  EXPECT_EQ(plan::dense_blocks(m, 1), 0);
}

// Stage 0's weights are its 2 dense and l − 2 MoE blocks' (expert weights over ep 4 and the
// expert data-parallel group), and the allocation replay, built from the per-block sequences,
// finds the same allocated peak as the memory model.
TEST(DenseFirst, MemoryCountsTheDenseBlocks) {
  const auto m = dense_first();
  const auto c = cluster("H100-SXM5-80GB", 2, 8);
  const auto t = train();
  auto p = layout(m, {24, 24});
  p.stages[0].zero = p.stages[1].zero = 0;
  p.stages[0].ckpt_layers = 3;  // the two dense blocks and one MoE block recomputed
  const auto job = *PreparedJob::create(m, c, t);
  const auto pred = analysis::predict(job, p);
  ASSERT_TRUE(pred) << pred.error().to_string();
  const auto* lw = *job.lowering(p);
  sym::Bindings b = lw->model.dims;
  b["t"] = 1;
  b["cp"] = 1;
  b["ep"] = 4;
  b["etp"] = 1;
  auto n = [&](const graph::Layer& L) { return sym::evaluate_or_zero(L.params(), b); };
  const double stage0 = 22 * n(lw->model.block) + 2 * n(lw->model.dense_block) + n(lw->model.embedding);
  EXPECT_DOUBLE_EQ(mist::testing::memory_term(pred->memory.stages[0], "weights"), 2 * stage0);
  const double stage1 = 24 * n(lw->model.block) + n(lw->model.head);
  EXPECT_DOUBLE_EQ(mist::testing::memory_term(pred->memory.stages[1], "weights"), 2 * stage1);
  for (const auto& s : pred->memory.stages)
    EXPECT_NEAR(s.replayed_allocated_bytes / s.peak_allocated_bytes, 1.0, 0.02) << "stage " << s.index;
  // Activations of a micro-batch: the 3 recomputed blocks keep their inputs, the other 21 MoE
  // blocks what they save, plus the embedding's; times the micro-batches in flight.
  b["b"] = 1;
  auto saved = [&](const graph::Layer& L) {
    return sym::evaluate_or_zero(graph::analyze_activations(L, b).saved, b);
  };
  const double input = sym::evaluate_or_zero(graph::analyze_activations(lw->model.block, b).input, b);
  const double per_mb = 21 * saved(lw->model.block) + 3 * input + saved(lw->model.embedding);
  EXPECT_NEAR(mist::testing::memory_term(pred->memory.stages[0], "activations"),
              pred->memory.stages[0].in_flight * per_mb, 1e-9 * per_mb);
  // Without recompute the two dense blocks keep their own saved bytes.
  p.stages[0].ckpt_layers = 0;
  const auto none = analysis::predict(job, p);
  ASSERT_TRUE(none);
  const double per_mb0 = 22 * saved(lw->model.block) + 2 * saved(lw->model.dense_block) + saved(lw->model.embedding);
  EXPECT_NEAR(mist::testing::memory_term(none->memory.stages[0], "activations"),
              none->memory.stages[0].in_flight * per_mb0, 1e-9 * per_mb0);
  EXPECT_NE(saved(lw->model.dense_block), saved(lw->model.block));
}

// Stage 0's forward holds the embedding and two dense blocks in place of two MoE blocks: against
// a middle stage of the same layer count, the difference is exactly that.
TEST(DenseFirst, TimeCountsTheDenseBlocks) {
  const auto m = dense_first();
  const auto c = cluster("H100-SXM5-80GB", 4, 8);
  const auto t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false, spec::Dtype::kBf16);
  const auto job = *PreparedJob::create(m, c, t);
  plan::StagePlan zero1;
  zero1.zero = 1;
  auto p = plan::uniform_plan(m, 8, 1, 4, 1, 8, zero1);  // 32 GPUs, 12 blocks a stage
  p.ep = 4;
  auto timer = StageTimer::create(job, p);
  ASSERT_TRUE(timer) << timer.error().to_string();
  plan::StagePlan st = p.stages[0];
  st.num_layers = 12;
  auto pass = [&](const LayerTimes& x) { return x.fwd + x.fwd_exposed + x.stall_fwd; };
  const auto& emb = timer->embedding_times();
  const double emb_fwd = emb.fwd + emb.fwd_tp + emb.stall_fwd;
  const double first = timer->parts(st, 0).fwd, middle = timer->parts(st, 1).fwd;
  const double want = emb_fwd + 2 * (pass(timer->dense_block_times()) - pass(timer->block_times()));
  EXPECT_NEAR(first - middle, want, 1e-9 * first);
  EXPECT_GT(timer->dense_block_times().fwd, 0);
}

}  // namespace
}  // namespace mist::analysis
