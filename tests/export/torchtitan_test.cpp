// torchtitan: exact overrides for a set of plans, its generated pipeline split, refusals.
#include <algorithm>

#include <gtest/gtest.h>

#include "export/splits.hpp"
#include "export/torchtitan.hpp"
#include "export_jobs.hpp"

namespace mist::engines {
namespace {

using testing::cluster;
using testing::model;
using testing::training;

std::vector<std::string> lines(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                               const plan::Plan& p) {
  auto r = export_plan(Engine::kTorchtitan, {m, c, t, p, {}});
  EXPECT_TRUE(r && r->exported) << (r && !r->reasons.empty() ? r->reasons[0].to_string() : "");
  std::vector<std::string> out;
  if (r && r->exported)
    for (const auto& o : r->exported->options) out.push_back(o.name + (o.value ? " " + *o.value : ""));
  return out;
}

TEST(Torchtitan, FsdpWithTensorParallelAndFullCheckpointing) {
  auto p = testing::plan(4, 2, {32}, 2, 32, /*zero=*/3, /*ckpt=*/32);
  p.sequence_parallel = true;
  p.grad_accumulation_fusion = false;  // PyTorch's AccumulateGrad
  p.async_tp_backward = false;         // DTensor's backward collectives are synchronous
  EXPECT_EQ(lines(model("llama3-8b"), cluster(1, 8), training(256, 4096), p),
            (std::vector<std::string>{"--module llama3", "--config llama3_8b",
                                      "--parallelism.data_parallel_replicate_degree 1",
                                      "--parallelism.data_parallel_shard_degree 4",
                                      "--parallelism.fsdp_reshard_after_forward always",
                                      "--parallelism.tensor_parallel_degree 2",
                                      "--parallelism.enable_sequence_parallel",
                                      "--parallelism.pipeline_parallel_degree 1",
                                      "--training.num_tokens_per_microbatch_per_dp_rank 8192",
                                      "--training.num_tokens_per_train_step 1048576",
                                      "--training.max_context_length 4096",
                                      "--training.mixed_precision_param bfloat16",
                                      "activation-checkpoint:full"}));
}

TEST(Torchtitan, ReplicatedPipelineWithEvenAndDefaultSplits) {
  // Even 10-layer stages need both less-layers weights at 0; 10 | 11 | 10 | 9 is torchtitan's default.
  auto p = testing::plan(2, 2, {10, 10, 10, 10}, 1, 256);
  p.grad_accumulation_fusion = p.async_tp_backward = false;
  const auto m = model("gpt3-13b");
  const auto c = cluster(2, 8);
  const auto t = training(512, 2048, spec::Dtype::kFp32);
  EXPECT_EQ(lines(m, c, t, p),
            (std::vector<std::string>{"--parallelism.data_parallel_replicate_degree 2",
                                      "--parallelism.data_parallel_shard_degree 1",
                                      "--parallelism.tensor_parallel_degree 2",
                                      "--parallelism.no_enable_sequence_parallel",
                                      "--parallelism.pipeline_parallel_degree 4",
                                      "--parallelism.pipeline_parallel_schedule 1F1B",
                                      "--parallelism.pipeline_parallel_first_stage_less_layers 0",
                                      "--parallelism.pipeline_parallel_last_stage_less_layers 0",
                                      "--parallelism.num_pp_microbatches 256",
                                      "--training.disable_cuda_graphs",
                                      "--training.num_tokens_per_microbatch_per_dp_rank 2048",
                                      "--training.num_tokens_per_train_step 1048576",
                                      "--training.max_context_length 2048",
                                      "--training.mixed_precision_param float32",
                                      "activation-checkpoint:none"}));
  auto q = testing::plan(2, 2, {10, 11, 10, 9}, 1, 256);
  q.grad_accumulation_fusion = q.async_tp_backward = false;
  auto got = lines(m, c, t, q);
  ASSERT_GE(got.size(), 8u);
  EXPECT_EQ(got[6], "--parallelism.pipeline_parallel_first_stage_less_layers 1");
  EXPECT_EQ(got[7], "--parallelism.pipeline_parallel_last_stage_less_layers 1");
}

TEST(Torchtitan, InterleavedScheduleAndAsyncTensorParallel) {
  auto p = testing::plan(2, 4, {20, 20}, 2, 128, /*zero=*/1);
  p.virtual_pipeline_stages = 2;
  p.sequence_parallel = p.overlap_tp_comm = true;
  p.grad_accumulation_fusion = p.async_tp_backward = p.overlap_grad_reduce = false;
  auto t = training(512, 2048);
  t.compile = true;  // async TP runs in the compiled model
  auto got = lines(model("gpt3-13b"), cluster(2, 8), t, p);
  EXPECT_EQ(got, (std::vector<std::string>{"--parallelism.data_parallel_replicate_degree 1",
                                           "--parallelism.data_parallel_shard_degree 2",
                                           "--parallelism.fsdp_reshard_after_forward never",
                                           "--parallelism.tensor_parallel_degree 4",
                                           "--parallelism.enable_sequence_parallel",
                                           "--parallelism.pipeline_parallel_degree 2",
                                           "--parallelism.pipeline_parallel_schedule Interleaved1F1B",
                                           "--parallelism.pipeline_parallel_layers_per_stage 10",
                                           "--parallelism.pipeline_parallel_first_stage_less_layers 0",
                                           "--parallelism.pipeline_parallel_last_stage_less_layers 0",
                                           "--parallelism.num_pp_microbatches 128",
                                           "--training.disable_cuda_graphs",
                                           "--training.num_tokens_per_microbatch_per_dp_rank 4096",
                                           "--training.num_tokens_per_train_step 1048576",
                                           "--training.max_context_length 2048",
                                           "--training.mixed_precision_param bfloat16",
                                           "--compile.enable",
                                           "--compile.enable_async_tensor_parallel",
                                           "activation-checkpoint:none"}));
}

TEST(Torchtitan, GeneratedSplit) {
  // pipeline_parallel.py: (L + first + last) weights spread evenly, extras to the first stages.
  EXPECT_EQ(torchtitan_stage_layers(40, 4, 1, 1), (std::vector<int64_t>{10, 11, 10, 9}));
  EXPECT_EQ(torchtitan_stage_layers(40, 4, 0, 0), (std::vector<int64_t>{10, 10, 10, 10}));
  EXPECT_EQ(torchtitan_stage_layers(32, 3, 2, 1), (std::vector<int64_t>{10, 12, 10}));
  EXPECT_TRUE(torchtitan_stage_layers(4, 4, 2, 0).empty());  // the first weight exceeds a stage
  // Rank r runs virtual stages r, r + pp, ...; mist needs them equal.
  EXPECT_EQ(torchtitan_rank_layers({5, 5, 5, 5}, 2), (std::vector<int64_t>{10, 10}));
  EXPECT_TRUE(torchtitan_rank_layers({5, 6, 5, 4}, 2).empty());
  auto two = torchtitan_split({30, 10}, 1);  // two stages: any split, through the weights
  ASSERT_TRUE(two);
  EXPECT_EQ(two->first_less, 0);
  EXPECT_EQ(two->last_less, 19);  // 59 weights: 30 + 29, the extra one to the first stage
  // Middle stages get the even share (±1): 15 between 5 and 10 cannot be made.
  EXPECT_FALSE(torchtitan_split({5, 15, 10, 10}, 1));
  auto near = torchtitan_nearest_layers({5, 15, 10, 10}, 1);
  ASSERT_TRUE(near);
  EXPECT_TRUE(torchtitan_split(*near, 1));
  EXPECT_EQ((*near)[0] + (*near)[1] + (*near)[2] + (*near)[3], 40);
}

TEST(Torchtitan, RefusesWhatItCannotRun) {
  const auto t = training(512, 2048);
  auto p = testing::plan(2, 4, {20, 20}, 2, 128, /*zero=*/1, /*ckpt=*/4);
  p.recompute = plan::Recompute::kSelective;
  p.stages[0].offload.optimizer_states = 0.5;
  p.overlap_grad_reduce = false;
  std::vector<Error> why;
  EXPECT_FALSE(expressible(p, Engine::kTorchtitan, &why, &t));
  std::vector<std::string> paths;
  for (const auto& e : why) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"plan.stages[0].offload.optimizer_states", "plan.grad_accumulation_fusion",
                                             "plan.async_tp_backward", "plan.stages[0].ckpt_layers",
                                             "plan.recompute"}));  // full everywhere, so selective goes
  const auto n = nearest_expressible(p, Engine::kTorchtitan, &t).plan;
  EXPECT_EQ(n.stages[0].zero, 1);  // FSDP under PP (the test below)
  EXPECT_EQ(n.stages[1].ckpt_layers, 20);
  // fp16 is a training setting no plan can change.
  auto fp16 = training(512, 2048, spec::Dtype::kFp16);
  EXPECT_FALSE(expressible(n, Engine::kTorchtitan, &why, &fp16));
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0].path, "training.precision");
}

// Under pipeline parallelism torchtitan's FSDP2 keeps each stage's whole weights and accumulates its
// whole gradients until the last micro-batch (the pipeline schedule turns gradient sync off before
// then): ZeRO-1, which alone takes no ZeRO-1 (no optimizer-only sharding). Exported as FSDP without
// resharding; an import with resharding under PP reads as ZeRO-1 too, and says so.
TEST(Torchtitan, PipelineStagesKeepTheirWholeGradients) {
  const auto t = training(512, 2048);
  const auto m = model("gpt3-13b");
  const auto c = cluster(2, 8);
  auto pp = testing::plan(2, 4, {20, 20}, 2, 128, /*zero=*/3);
  const auto n = nearest_expressible(pp, Engine::kTorchtitan, &t);
  EXPECT_EQ(n.plan.stages[0].zero, 1);
  ASSERT_FALSE(n.changes.empty());
  EXPECT_EQ(n.changes.front().rfind("plan.stages[0].zero: 3 -> 1", 0), 0u) << n.changes.front();
  // Its reduce-scatters run after the last micro-batch's backward; without PP they overlap it.
  EXPECT_FALSE(n.plan.overlap_grad_reduce);
  auto alone = testing::plan(4, 4, {40}, 1, 128, /*zero=*/1);
  alone.overlap_grad_reduce = false;
  const auto na = nearest_expressible(alone, Engine::kTorchtitan, &t).plan;
  EXPECT_EQ(na.stages[0].zero, 2);
  EXPECT_TRUE(na.overlap_grad_reduce);
  auto one = n.plan;
  one.grad_accumulation_fusion = one.async_tp_backward = false;
  const auto got = lines(m, c, t, one);
  EXPECT_NE(std::find(got.begin(), got.end(), "--parallelism.fsdp_reshard_after_forward never"), got.end());
  std::string flags;
  for (const auto& l : got) flags += l + " ";
  auto back = import_torchtitan_overrides(flags, m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.stages[0].zero, 1);
  EXPECT_FALSE(back->plan.overlap_grad_reduce);
  const std::string always = "--parallelism.data_parallel_shard_degree 2 --parallelism.fsdp_reshard_after_forward always "
                             "--parallelism.tensor_parallel_degree 4 --parallelism.pipeline_parallel_degree 2";
  auto resharded = import_torchtitan_overrides(always, m, c);
  ASSERT_TRUE(resharded) << resharded.error().to_string();
  EXPECT_EQ(resharded->plan.stages[0].zero, 1);
  EXPECT_TRUE(std::ranges::any_of(resharded->notes, [](const std::string& s) {
    return s.find("fsdp_reshard_after_forward always") != std::string::npos;
  }));
}

TEST(Torchtitan, ImportErrorsNameTheOverride) {
  const auto m = model("gpt3-13b");
  const auto c = cluster(2, 8);
  auto error_path = [&](const std::string& text) {
    auto r = import_torchtitan_overrides(text, m, c);
    return r ? std::string("ok") : r.error().path;
  };
  EXPECT_EQ(error_path("--parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 8"),
            "--parallelism.data_parallel_replicate_degree");
  EXPECT_EQ(error_path("--parallelism.tensor-parallel-degree 2 --parallelism.data_parallel_shard_degree 4"),
            "--parallelism.data_parallel_shard_degree");
  EXPECT_EQ(error_path("--training.num_tokens_per_microbatch_per_dp_rank 3000"),
            "--training.num_tokens_per_microbatch_per_dp_rank");
  EXPECT_EQ(error_path("--parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule ZBVZeroBubble"),
            "--parallelism.pipeline_parallel_schedule");
  EXPECT_EQ(error_path("--parallelism.context_parallel_degree 3"), "--parallelism.context_parallel_degree");
  EXPECT_EQ(error_path("--training.enable_cpu_offload --parallelism.data_parallel_replicate_degree 16 "
                       "--parallelism.data_parallel_shard_degree 1"),
            "--training.enable_cpu_offload");
  auto ok = import_torchtitan_overrides("--parallelism.tensor-parallel-degree 8 activation-checkpoint:full", m, c);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->plan.dp, 2);
  EXPECT_EQ(ok->plan.stages[0].zero, 3);  // FSDP over the rest, resharding after forward by default
  EXPECT_EQ(ok->plan.micro_batch_size, 8);  // 16384 tokens of 2048
  EXPECT_EQ(ok->plan.stages[0].ckpt_layers, 40);
  // torchtitan's selective AC (its default) is its op-level policy, which a plan's "selective" means
  // for this engine: read as such, and written back as activation-checkpoint:selective.
  for (const char* text : {"--parallelism.tensor-parallel-degree 8 activation-checkpoint:selective",
                           "--parallelism.tensor-parallel-degree 8"}) {
    auto sel = import_torchtitan_overrides(text, m, c);
    ASSERT_TRUE(sel) << sel.error().to_string();
    EXPECT_EQ(sel->plan.recompute, plan::Recompute::kSelective) << text;
    EXPECT_EQ(sel->plan.stages[0].ckpt_layers, 0) << text;
  }
}

TEST(Torchtitan, SelectiveRecomputeIsItsOpLevelPolicy) {
  auto p = testing::plan(8, 1, {32}, 2, 1, /*zero=*/3);
  p.grad_accumulation_fusion = p.async_tp_backward = false;
  p.recompute = plan::Recompute::kSelective;
  const auto out = lines(model("llama3-8b"), cluster(1, 8), training(16, 8192), p);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), "activation-checkpoint:selective");
  // With full recompute too, torchtitan has one mode: full.
  auto both = testing::plan(8, 1, {32}, 2, 1, /*zero=*/3, /*ckpt=*/32);
  both.grad_accumulation_fusion = both.async_tp_backward = false;
  both.recompute = plan::Recompute::kSelective;
  auto r = export_plan(Engine::kTorchtitan, {model("llama3-8b"), cluster(1, 8), training(16, 8192), both, {}});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->exported.has_value());
  ASSERT_FALSE(r->reasons.empty());
  EXPECT_EQ(r->reasons[0].path, "plan.recompute") << r->reasons[0].to_string();
}

}  // namespace
}  // namespace mist::engines
