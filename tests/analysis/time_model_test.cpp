#include "analysis/time_model.hpp"

#include <gtest/gtest.h>

#include "analysis/prepared_job.hpp"
#include "test_jobs.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;
using mist::testing::training;

TEST(ClosedForm, MatchesHandComputedCases) {
  // Uniform stages, no deltas: pp·T + (G-1)·T.
  const std::vector<double> none;
  EXPECT_DOUBLE_EQ(pipeline_iteration_time({1, 1, 1, 1}, {0, 0, 0, 0}, none, 8, 1), 4 + 7);
  // Bottleneck stage dominates the steady state.
  EXPECT_DOUBLE_EQ(pipeline_iteration_time({1, 3, 1}, {0, 0, 0}, none, 5, 1), 5 + 4 * 3);
  // A delta on a later stage hides behind the backward of the stages before it (0.6 each).
  EXPECT_DOUBLE_EQ(pipeline_iteration_time({1, 1, 1}, {0, 0, 1.5}, {0.6, 0.6, 0.6}, 2, 1), 3 + 1 + 0.3);
  EXPECT_DOUBLE_EQ(pipeline_iteration_time({1, 1, 1}, {0, 0, 1}, {0.6, 0.6, 0.6}, 2, 1), 3 + 1 + 0);
  EXPECT_DOUBLE_EQ(pipeline_iteration_time({1, 1, 1}, {2, 0, 0}, {0.6, 0.6, 0.6}, 2, 1), 3 + 1 + 2);
  // Without drain times nothing hides a delta.
  EXPECT_DOUBLE_EQ(pipeline_iteration_time({1, 1, 1}, {0, 0, 1.5}, none, 2, 1), 3 + 1 + 1.5);
  // Interleaving shortens the fill: T + (pp - 1)·T/v ...
  EXPECT_DOUBLE_EQ(pipeline_iteration_time({2, 2, 2, 2}, {0, 0, 0, 0}, none, 8, 2), 2 + 3.0 + 7 * 2);
  // ... and the drain: each earlier stage's chunk backward is 1/v of its B.
  EXPECT_DOUBLE_EQ(pipeline_iteration_time({2, 2, 2, 2}, {0, 0, 0, 3}, {1, 1, 1, 1}, 8, 2), 2 + 3.0 + 7 * 2 + 1.5);
}

struct Job {
  spec::ModelSpec m = *spec::catalog_model("llama2-7b");
  spec::ClusterSpec c = cluster("A100-SXM4-80GB", 2, 8);
  spec::TrainingSpec t = training(256, 4096, spec::Dtype::kBf16, true, false);
  TimePrediction run(const plan::Plan& p) {
    auto r = mist::testing::time_of(m, c, t, p);
    EXPECT_TRUE(r.has_value()) << r.error().to_string();
    return r.value_or(TimePrediction{});
  }
};

TEST(TimeModel, RecomputeAndShardingCostTime) {
  Job s;
  const auto base = s.run(plan::uniform_plan(s.m, 4, 2, 2, 1, 64, {}));
  plan::StagePlan ck;
  ck.ckpt_layers = 16;
  const auto full = s.run(plan::uniform_plan(s.m, 4, 2, 2, 1, 64, ck));
  // Full recompute adds one forward: about a third more compute.
  EXPECT_GT(full.iteration_time_s / base.iteration_time_s, 1.2);
  EXPECT_LT(full.iteration_time_s / base.iteration_time_s, 1.45);
  plan::StagePlan z3;
  z3.zero = 3;
  EXPECT_GT(s.run(plan::uniform_plan(s.m, 4, 2, 2, 1, 64, z3)).iteration_time_s, base.iteration_time_s);
  plan::StagePlan off;
  off.offload.optimizer_states = 1.0;
  EXPECT_GT(s.run(plan::uniform_plan(s.m, 4, 2, 2, 1, 64, off)).iteration_time_s, base.iteration_time_s);
  // Model FLOPs do not count recompute: the same for both plans, so MFU drops with recompute.
  EXPECT_DOUBLE_EQ(full.model_flops_per_iteration, base.model_flops_per_iteration);
  EXPECT_LT(full.mfu, base.mfu);
}

// Offloaded shares cross PCIe while every GPU of the node copies: two GPUs behind each switch of a
// DGX A100 halve each one's uplink, a node with little DRAM bandwidth bounds both directions, and a
// plan that offloads nothing does not move.
TEST(TimeModel, OffloadCopiesShareTheNodesHostSide) {
  Job s;
  ASSERT_EQ(s.c.gpus_per_pcie_switch, 2);
  plan::StagePlan off;
  off.offload.weights = 0.5;
  off.offload.activations = 0.5;
  const auto offloading = plan::uniform_plan(s.m, 4, 2, 2, 1, 64, off);
  const auto resident = plan::uniform_plan(s.m, 4, 2, 2, 1, 64, {});
  const double shared = s.run(offloading).iteration_time_s, plain = s.run(resident).iteration_time_s;
  s.c.gpus_per_pcie_switch = 1;
  const double own = s.run(offloading).iteration_time_s;
  EXPECT_DOUBLE_EQ(s.run(resident).iteration_time_s, plain);
  EXPECT_GT(shared, own * 1.05) << "the copies bind this plan: halving the uplink shows";
  EXPECT_GT(own, plain);
  s.c.host_memory_bw = 100e9;  // 9.4 GB/s a GPU for both directions, under the uplink's 27 each
  EXPECT_GT(s.run(offloading).iteration_time_s, own * 1.5);
  EXPECT_DOUBLE_EQ(s.run(resident).iteration_time_s, plain);
}

TEST(TimeModel, BubbleShrinksWithMoreMicroBatchesAndInterleaving) {
  Job s;
  s.c = cluster("A100-SXM4-80GB", 1, 8);
  s.t.global_batch_size = 32;
  const auto few = s.run(plan::uniform_plan(s.m, 1, 2, 4, 4, 8, {}));
  s.t.global_batch_size = 128;
  const auto many = s.run(plan::uniform_plan(s.m, 1, 2, 4, 4, 32, {}));
  // Per sequence, a longer pipeline run amortises the fill.
  EXPECT_LT(many.iteration_time_s / 128, few.iteration_time_s / 32);
  auto inter = plan::uniform_plan(s.m, 1, 2, 4, 4, 32, {});
  inter.virtual_pipeline_stages = 2;
  EXPECT_LT(s.run(inter).pipeline_fill_s, many.pipeline_fill_s);
}

TEST(TimeModel, FasterGpusAreFaster) {
  Job s;
  s.m = *spec::catalog_model("llama2-70b");
  s.t.global_batch_size = 64;
  auto p = plan::uniform_plan(s.m, 2, 8, 4, 1, 32, {});
  p.sequence_parallel = true;
  double last = 0;
  for (const char* gpu : {"H200-SXM-141GB", "H100-SXM5-80GB", "A100-SXM4-80GB"}) {
    s.c = cluster(gpu, 8, 8);
    const double tps = s.run(p).tokens_per_s;
    if (last > 0) {
      EXPECT_LT(tps, last) << gpu;
    }
    last = tps;
  }
}

TEST(TimeModel, TensorParallelCommunicationCanOverlap) {
  Job s;
  auto p = plan::uniform_plan(s.m, 2, 8, 1, 1, 128, {});
  p.sequence_parallel = true;
  const double serial = s.run(p).iteration_time_s;
  p.overlap_tp_comm = true;
  EXPECT_LT(s.run(p).iteration_time_s, serial);
  p.sequence_parallel = false;
  auto bad = mist::testing::time_of(s.m, s.c, s.t, p);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().path, "plan.overlap_tp_comm");
}


double term(const TimePrediction& r, const std::string& name) {
  for (const auto& t : r.stages.at(0).stable_terms)
    if (t.name == name) return t.seconds;
  ADD_FAILURE() << "no term " << name;
  return 0;
}

// Megatron's sequence-parallel column linear keeps only its input shard and all-gathers it again
// in backward for the weight gradient: per block, all-reduce ≙ all-gather + reduce-scatter, so TP
// traffic is 4 all-reduces without SP and 5 with it (the two re-gathers). In calls: 4 without SP
// (one all-reduce each way per linear pair), 10 with it (each all-reduce becomes two calls, and the
// two re-gathers), each paying NCCL's fixed cost per call.
TEST(TimeModel, SequenceParallelRegathersColumnInputsInBackward) {
  Job s;
  auto p = plan::uniform_plan(s.m, 2, 8, 1, 1, 128, {});
  analysis::TimeConstants k, no_base;
  no_base.comm.collective_base_s = 0;
  auto tp_comm = [&](const plan::Plan& q, const analysis::TimeConstants& kk) {
    auto r = mist::testing::time_of(s.m, s.c, s.t, q, kk);
    EXPECT_TRUE(r.has_value());
    return r ? term(*r, "tp_communication") : 0.0;
  };
  const double plain = tp_comm(p, no_base), plain_calls = tp_comm(p, k);
  p.sequence_parallel = true;
  const double sp = tp_comm(p, no_base), sp_calls = tp_comm(p, k);
  ASSERT_GT(plain, 0);
  EXPECT_NEAR(sp / plain, 1.25, 1e-9);
  // Per micro-batch and block, the fixed costs: 10 calls against 4.
  const double per_block = (sp_calls - sp) - 2.5 * (plain_calls - plain);
  EXPECT_NEAR(per_block, 0, 1e-9 * sp_calls);
}

TEST(TimeModel, UnfusedGradientAccumulationAddsAPassPerMicroBatch) {
  Job s;
  auto p = plan::uniform_plan(s.m, 2, 8, 1, 1, 128, {});
  const auto fused = s.run(p);
  p.grad_accumulation_fusion = false;
  const auto unfused = s.run(p);
  // Read two gradients, write one, once per micro-batch (128 of them): all of it in T.
  const double extra = unfused.iteration_time_s - fused.iteration_time_s;
  EXPECT_GT(extra, 0);
  const double pass = term(unfused, "backward") - term(fused, "backward");
  EXPECT_NEAR(pass, extra / 128, 1e-9);
  // ZeRO-2/3 reduce-scatter every micro-batch and accumulate only their shard: 1/dp of the bytes
  // (the kernel launch stays whole).
  plan::StagePlan z2;
  z2.zero = 2;
  auto q = plan::uniform_plan(s.m, 2, 8, 1, 1, 128, z2);
  const double fused2 = term(s.run(q), "backward");
  q.grad_accumulation_fusion = false;
  const double launch = hardware::PerfConstants{}.kernel_launch_s;
  EXPECT_NEAR(term(s.run(q), "backward") - fused2 - launch, (pass - launch) / 2, 1e-9);
}

// The optimizer step's HBM traffic per parameter (docs/time-model.md): update 28 B (fp32 master,
// m, v read and written, fp32 gradient read), gradient norm 4, 16-bit gradients copied to fp32
// main gradients 6, fp16 unscale 8, master copied into the 16-bit weights 6.
TEST(TimeModel, OptimizerStepBytesFollowTheMixedPrecisionRecipe) {
  EXPECT_EQ(optimizer_step_bytes(training(8, 1024, spec::Dtype::kBf16, true, false)), 28 + 4 + 6);  // fp32 grads
  const auto fp16 = training(8, 1024, spec::Dtype::kFp16, true, false, spec::Dtype::kFp16);
  EXPECT_EQ(optimizer_step_bytes(fp16), 28 + 4 + 6 + 8 + 6);
  const auto fp32 = training(8, 1024, spec::Dtype::kFp32, true, false);
  EXPECT_EQ(optimizer_step_bytes(fp32), 28 + 4);  // the weights are the master copy
}


// Mist's two-stream interference: both streams run slowed until the shorter ends, the rest alone.
// Compute-bound: the collective costs its slowed time less what the compute would have done in it;
// collective-bound: the compute costs little; alone, each is itself; no factor, the longer.
TEST(TimeModel, OverlapTimeFollowsMistsInterferenceModel) {
  const Interference f{1.25, 1.05};
  // Compute 10, collective 4: both run for 4·1.05 = 4.2; compute has 10 - 4.2/1.25 = 6.64 left.
  EXPECT_NEAR(overlap_time(10, 4, f), 4.2 + 6.64, 1e-12);
  // Compute 2, collective 10: both run for 2·1.25 = 2.5; the collective has 10 - 2.5/1.05 left.
  EXPECT_NEAR(overlap_time(2, 10, f), 2.5 + 10 - 2.5 / 1.05, 1e-12);
  EXPECT_EQ(overlap_time(3, 0, f), 3);
  EXPECT_EQ(overlap_time(0, 3, f), 3);
  EXPECT_NEAR(overlap_time(3, 5, Interference{1, 1}), 5, 1e-12);
  // Never less than the longer alone, never more than both in a row.
  for (double c : {0.5, 1.0, 4.0})
    for (double g : {0.25, 1.0, 8.0}) {
      const double t = overlap_time(c, g, Interference{});
      EXPECT_GE(t, std::max(c, g));
      EXPECT_LE(t, c + g);
    }
}

// Megatron's asynchronous backward collectives hide under the backward GEMMs: never more than the
// collectives themselves, and never all of them (the two streams slow each other while both run).
TEST(TimeModel, AsyncTensorParallelBackwardHidesCollectivesUnderGemms) {
  Job s;
  for (bool sp : {false, true}) {
    auto p = plan::uniform_plan(s.m, 2, 8, 1, 1, 128, {});
    p.sequence_parallel = sp;
    p.async_tp_backward = false;
    const auto serial = s.run(p);
    p.async_tp_backward = true;
    const auto async = s.run(p);
    const double saved = term(serial, "backward") - term(async, "backward");
    EXPECT_GT(saved, 0) << sp;
    EXPECT_LT(saved, term(serial, "tp_communication")) << sp;
    EXPECT_LT(async.iteration_time_s, serial.iteration_time_s) << sp;
  }
}


// The host feeds one stream, a kernel every `host` seconds: the GPU idles behind it on short
// kernels and the host runs ahead under long ones, so the order of a pass's kernels matters.
TEST(TimeModel, TheHostStallsTheStreamWhereItsKernelsAreShort) {
  const double h = 10e-6, us = 1e-6;
  EXPECT_EQ(host_stall({}, h), 0);
  EXPECT_NEAR(host_stall({100 * us, 100 * us}, h), h, 1e-12);  // only the first launch
  EXPECT_NEAR(host_stall(std::vector<double>(10, 1 * us), h), 91 * us, 1e-12);  // 10 launches, 10 µs of work
  // A long kernel first: the host issues the short ones under it.
  EXPECT_NEAR(host_stall({100 * us, us, us, us, us}, h), h, 1e-12);
  // The short ones first: the GPU waits for each.
  EXPECT_NEAR(host_stall({us, us, us, us, 100 * us}, h), 46 * us, 1e-12);
  EXPECT_EQ(host_stall({us, us}, 0), 0);
}

// The stack's host cost per kernel floors each pass over a layer: a small layer whose kernels the
// host issues more slowly than the GPU runs them takes the host's time; a large one keeps its GPU
// time; with no host cost nothing changes. Fully recomputed blocks issue their forward again.
TEST(TimeModel, HostCostPerKernelFloorsSmallLayersOnly) {
  auto small = *spec::catalog_model("gpt3-1.3b");
  small.num_layers = 8;
  const auto c = cluster("A100-SXM4-80GB", 1, 8);
  const auto t = training(16, 1024, spec::Dtype::kFp16, false, true);
  auto p = plan::uniform_plan(small, 1, 8, 1, 1, 16, {});
  TimeConstants k;
  const auto gpu = mist::testing::time_of(small, c, t, p, k);
  ASSERT_TRUE(gpu);
  k.perf.host_per_kernel_s = 0;
  EXPECT_EQ(mist::testing::time_of(small, c, t, p, k)->iteration_time_s, gpu->iteration_time_s);
  k.perf.host_per_kernel_s = 60e-6;
  const auto host = mist::testing::time_of(small, c, t, p, k);
  ASSERT_TRUE(host);
  EXPECT_GT(host->iteration_time_s, 2 * gpu->iteration_time_s);  // tp 8, micro-batch 1: host-bound
  // The floor is the kernels issued: twice the cost per kernel, (almost) twice the time.
  k.perf.host_per_kernel_s = 120e-6;
  const auto slower = mist::testing::time_of(small, c, t, p, k);
  EXPECT_NEAR(slower->iteration_time_s / host->iteration_time_s, 2.0, 0.1);
  // Recompute issues the forward again.
  plan::StagePlan ck{.num_layers = 0, .zero = 0, .ckpt_layers = 8, .offload = {}};
  k.perf.host_per_kernel_s = 60e-6;
  const auto recomputed = mist::testing::time_of(small, c, t, plan::uniform_plan(small, 1, 8, 1, 1, 16, ck), k);
  EXPECT_GT(recomputed->iteration_time_s, 1.2 * host->iteration_time_s);
  // A large GEMM-bound layer does not notice a realistic host cost.
  const auto big = *spec::catalog_model("llama2-70b");
  const auto t_big = training(64, 4096, spec::Dtype::kBf16, true, false);
  const auto c_big = cluster("A100-SXM4-80GB", 2, 8);
  const auto p_big = plan::uniform_plan(big, 1, 8, 2, 4, 16, ck);
  TimeConstants none, some;
  some.perf.host_per_kernel_s = 60e-6;
  const double a = mist::testing::time_of(big, c_big, t_big, p_big, none)->iteration_time_s;
  const double b = mist::testing::time_of(big, c_big, t_big, p_big, some)->iteration_time_s;
  EXPECT_GE(b, a);
  EXPECT_LT(b / a, 1.01);
}

// With the gradient reduction overlapped, the bucket reduced last runs exposed. On the first stage
// that is the embedding, a parameter larger than any bucket and the last gradient the backward
// makes (and the first weights the forward needs): its whole reduction and gather stay exposed,
// where a later stage exposes only a 40M-parameter bucket.
TEST(TimeModel, TheEmbeddingsBucketIsReducedAndGatheredExposed) {
  const auto m = *spec::catalog_model("llama3-8b");  // 128,256 × 4,096: a 525M-parameter embedding
  const auto c = cluster("H100-SXM5-80GB", 2, 8);
  const auto t = training(256, 4096, spec::Dtype::kBf16, true, false);
  plan::StagePlan z1;
  z1.zero = 1;
  plan::Plan p = plan::uniform_plan(m, 8, 1, 2, 1, 32, z1);
  auto job = PreparedJob::create(m, c, t, {});
  ASSERT_TRUE(job) << job.error().to_string();
  auto overlapped = StageTimer::create(*job, p);
  p.overlap_grad_reduce = p.overlap_param_gather = false;
  auto serial = StageTimer::create(*job, p);
  ASSERT_TRUE(overlapped && serial);
  const double emb = overlapped->embedding_times().params, blk = overlapped->block_times().params;
  const double first_params = 16 * blk + emb;
  const auto a = overlapped->parts(p.stages[0], 0), a_serial = serial->parts(p.stages[0], 0);
  const auto b = overlapped->parts(p.stages[1], 1), b_serial = serial->parts(p.stages[1], 1);
  // The embedding's reduction and gather are exposed whole, on top of what the overlapped rest
  // costs the compute (the interference); the last stage's last bucket is 40M parameters.
  const double share = emb / first_params;
  EXPECT_GT(share, 0.1);
  EXPECT_GE(a.grad_sync, share * a_serial.grad_sync);
  EXPECT_GE(a.param_gather, share * a_serial.param_gather);
  // Stage 0 exposes the embedding where stage 1 exposes a bucket: the difference, less the
  // interference the embedding would have cost under the backward (1 - 1/1.2856 of it).
  EXPECT_GT(a.grad_sync - b.grad_sync, 0.6 * (share - 40e6 / first_params) * a_serial.grad_sync);
  EXPECT_LT(a.grad_sync, a_serial.grad_sync);  // the rest is hidden
  EXPECT_LT(b.grad_sync, b_serial.grad_sync);  // on the last stage all but its last bucket
}

}  // namespace
}  // namespace mist::analysis
