// Context parallelism in the exports: Megatron-LM's --context-parallel-size with the p2p ring and
// torchtitan's context_parallel_degree, both imported back to the plan; the importers' refusals;
// torchtitan's FSDP over dp_shard·cp and DeepSpeed-Ulysses' heads as capability rules.
#include <gtest/gtest.h>

#include "export/exchange.hpp"
#include "export/megatron.hpp"
#include "export/torchtitan.hpp"
#include "export_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::engines {
namespace {

using mist::testing::expect_error;
using testing::cluster;
using testing::command;
using testing::model;
using testing::training;
using testing::value;

// Llama-3-8B at 128K tokens on 8 GPUs: tp 2, cp 4, ZeRO-1 (over dp·cp = 4), every block recomputed.
plan::Plan long_plan(int zero = 1) {
  auto p = testing::plan(1, 2, {32}, 1, 8, zero, 32);
  p.cp = 4;
  p.sequence_parallel = true;
  return p;
}

TEST(CpExport, MegatronWritesTheRingAndReadsItBack) {
  const auto m = model("llama3-8b");
  const auto c = cluster(1, 8, "H100-SXM5-80GB");
  auto r = export_plan(Engine::kMegatron, {m, c, training(8, 131072), long_plan(), {}});
  ASSERT_TRUE(r && r->exported);
  const auto& o = r->exported->options;
  EXPECT_EQ(value(o, "--context-parallel-size"), "4");
  EXPECT_EQ(value(o, "--cp-comm-type"), "p2p");
  EXPECT_EQ(value(o, "--global-batch-size"), "8");  // dp 1 · 8 micro-batches: CP ranks share a sequence
  auto back = import_megatron_flags(command(o), m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.cp, 4);
  EXPECT_EQ(back->plan.dp, 1);
  EXPECT_EQ(back->plan.tp, 2);
  EXPECT_EQ(back->plan.grad_accum_steps, 8);
  // A dense plan has no CP flags at all (Megatron's default is 1).
  auto dense = export_plan(Engine::kMegatron, {m, c, training(8, 8192), testing::plan(4, 2, {32}, 1, 2, 1), {}});
  ASSERT_TRUE(dense && dense->exported);
  EXPECT_FALSE(value(dense->exported->options, "--context-parallel-size").has_value());
}

// plan.cp_comm as --cp-comm-type: a2a and all_gather written and read back; torchtitan, whose only
// exchange is PyTorch's ring, runs the ring instead and says so.
TEST(CpExport, ExchangeTypesRoundTripThroughMegatron) {
  const auto m = model("llama3-8b");
  const auto c = cluster(1, 8, "H100-SXM5-80GB");
  for (auto [comm, flag] : {std::pair{plan::CpComm::kAllToAll, "a2a"}, std::pair{plan::CpComm::kAllGather, "all_gather"}}) {
    auto p = long_plan();
    p.cp_comm = comm;
    auto r = export_plan(Engine::kMegatron, {m, c, training(8, 131072), p, {}});
    ASSERT_TRUE(r && r->exported);
    EXPECT_EQ(value(r->exported->options, "--cp-comm-type"), flag);
    auto back = import_megatron_flags(command(r->exported->options), m, c);
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->plan.cp_comm, comm);
  }
  auto t = training(8, 131072);
  auto p = long_plan(3);
  p.cp_comm = plan::CpComm::kAllToAll;
  const auto n = nearest_expressible(p, Engine::kTorchtitan, &t);
  EXPECT_EQ(n.plan.cp_comm, plan::CpComm::kRing);
  EXPECT_EQ(n.plan.cp, 4);
  EXPECT_TRUE(std::any_of(n.changes.begin(), n.changes.end(), [](const auto& ch) { return ch.starts_with("plan.cp_comm"); }));
}

// Megatron's hierarchical a2a+p2p: the all-to-all groups' size and the ring's written as
// --hierarchical-context-parallel-sizes, read back; engines without it take their own exchange.
TEST(CpExport, HierarchicalA2aP2pRoundTripsThroughMegatron) {
  const auto m = model("llama3-8b");
  const auto c = cluster(2, 8, "H100-SXM5-80GB");
  auto p = testing::plan(1, 1, {32}, 1, 8, 1, 32);
  p.cp = 16;
  p.cp_comm = plan::CpComm::kA2aP2p;
  p.cp_a2a = 8;
  auto r = export_plan(Engine::kMegatron, {m, c, training(8, 131072), p, {}});
  ASSERT_TRUE(r && r->exported) << (r ? (r->reasons.empty() ? "" : r->reasons[0].to_string()) : r.error().to_string());
  const auto& o = r->exported->options;
  EXPECT_EQ(value(o, "--cp-comm-type"), "a2a+p2p");
  EXPECT_EQ(value(o, "--hierarchical-context-parallel-sizes"), "8 2");
  auto back = import_megatron_flags(command(o), m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.cp_comm, plan::CpComm::kA2aP2p);
  EXPECT_EQ(back->plan.cp_a2a, 8);
  auto t = training(8, 131072);
  auto q = p;
  q.stages[0].zero = 3;
  const auto n = nearest_expressible(q, Engine::kTorchtitan, &t);
  EXPECT_EQ(n.plan.cp_comm, plan::CpComm::kRing);
  EXPECT_EQ(n.plan.cp_a2a, 1);
}

TEST(CpExport, MegatronImportRefusesOtherExchangesAndBadDegrees) {
  const auto m = model("llama3-8b");
  const auto c = cluster(1, 8, "H100-SXM5-80GB");
  const std::string base = " --tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1"
                           " --global-batch-size 8 --seq-length 131072 --num-layers 32 --hidden-size 4096"
                           " --num-attention-heads 32 --group-query-attention --num-query-groups 8"
                           " --ffn-hidden-size 14336";
  expect_error(import_megatron_flags(base + " --context-parallel-size 4 --cp-comm-type a2a+p2p", m, c),
               "--hierarchical-context-parallel-sizes", "product");
  expect_error(import_megatron_flags(base + " --context-parallel-size 4 --cp-comm-type a2a+p2p"
                                            " --hierarchical-context-parallel-sizes 2 4", m, c),
               "--hierarchical-context-parallel-sizes", "product");
  expect_error(import_megatron_flags(base + " --context-parallel-size 4 --cp-comm-type p2p a2a", m, c),
               "--cp-comm-type", "one type for every layer");
  expect_error(import_megatron_flags(base + " --context-parallel-size 4 --cp-comm-type ring", m, c),
               "--cp-comm-type", "a2a+p2p");
  // The same type for every layer is one type.
  auto same = import_megatron_flags(base + " --context-parallel-size 4 --cp-comm-type a2a a2a", m, c);
  ASSERT_TRUE(same) << same.error().to_string();
  EXPECT_EQ(same->plan.cp_comm, plan::CpComm::kAllToAll);
  expect_error(import_megatron_flags(base + " --context-parallel-size 3", m, c), "--context-parallel-size",
               "does not divide");
}

TEST(CpExport, TorchtitanShardsOverDpShardTimesCp) {
  const auto m = model("llama3-8b");
  const auto c = cluster(1, 8, "H100-SXM5-80GB");
  auto t = training(8, 131072);
  // What torchtitan runs of the plan (PyTorch's separate gradient accumulation, synchronous TP
  // backward); its CP degree and ZeRO level stay.
  const auto p = nearest_expressible(long_plan(3), Engine::kTorchtitan, &t).plan;
  EXPECT_EQ(p.cp, 4);
  auto r = export_plan(Engine::kTorchtitan, {m, c, t, p, {}});
  ASSERT_TRUE(r && r->exported) << (r && !r->reasons.empty() ? r->reasons[0].message : "");
  const auto& o = r->exported->options;
  EXPECT_EQ(value(o, "--parallelism.context_parallel_degree"), "4");
  EXPECT_EQ(value(o, "--parallelism.data_parallel_shard_degree"), "1");
  auto back = import_torchtitan_overrides(command(o), m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.cp, 4);
  EXPECT_EQ(back->plan.dp, 1);
  EXPECT_EQ(back->plan.stages[0].zero, 3);  // FSDP over the cp ranks, though dp_shard is 1
  // Without ZeRO the plan is not torchtitan's: CP turns FSDP on.
  std::vector<Error> why;
  EXPECT_FALSE(expressible(long_plan(0), Engine::kTorchtitan, &why, &t));
  ASSERT_FALSE(why.empty());
  EXPECT_EQ(why[0].path, "plan.stages[0].zero");
  EXPECT_EQ(nearest_expressible(long_plan(0), Engine::kTorchtitan, &t).plan.stages[0].zero, 2);
  expect_error(import_torchtitan_overrides(command(o) + " --parallelism.context_parallel_load_balancer ptrr", m, c),
               "--parallelism.context_parallel_load_balancer", "head-tail");
}

// DeepSpeed's context parallelism is DeepSpeed-Ulysses, which Megatron-DeepSpeed runs only with as
// many key/value heads as heads: for Llama-3-8B (8 of 32) the nearest plan gives the CP ranks to
// data parallelism, keeping the global batch (tests/export/ulysses_export_test.cpp has the rest).
TEST(CpExport, DeepSpeedFoldsCpIntoDataParallelismForGroupedKeyValueHeads) {
  auto p = long_plan();
  p.tp = 1;
  p.cp = 8;
  p.sequence_parallel = false;
  const auto m = model("llama3-8b");
  const auto t = training(8, 131072);
  std::vector<Error> why;
  EXPECT_FALSE(expressible(p, Engine::kDeepSpeed, &why, &t, &m));
  ASSERT_FALSE(why.empty());
  EXPECT_EQ(why[0].path, "plan.cp");
  EXPECT_NE(why[0].message.find("8 for 32"), std::string::npos) << why[0].message;
  const auto near = nearest_expressible(p, Engine::kDeepSpeed, &t, &m).plan;
  EXPECT_EQ(near.cp, 1);
  EXPECT_EQ(near.dp, 8);
  EXPECT_EQ(near.micro_batch_size * near.grad_accum_steps * near.dp, 8);
}

}  // namespace
}  // namespace mist::engines
