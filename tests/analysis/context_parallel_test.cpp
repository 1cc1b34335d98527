// Context parallelism in the lowering, the memory model and the time model: every token-wise
// tensor holds s/cp tokens, the attention's local queries attend to all s keys, the K/V blocks go
// around the CP ring under the attention kernels, and ZeRO shards over the dp·cp ranks that hold
// the same weights.
#include <gtest/gtest.h>

#include "analysis/overheads.hpp"
#include "analysis/prepared_job.hpp"
#include "analysis/time_model.hpp"
#include "hardware/comm_model.hpp"
#include "graph/liveness.hpp"
#include "test_jobs.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;
using mist::testing::memory_of;
using mist::testing::memory_term;
using mist::testing::op_named;
using mist::testing::time_of;

// Llama-3-8B on one node of 8 H100 at a long sequence.
struct LongJob {
  spec::ModelSpec m = *spec::catalog_model("llama3-8b");
  spec::ClusterSpec c = cluster("H100-SXM5-80GB", 1, 8);
  spec::TrainingSpec t = mist::testing::training(8, 32768, spec::Dtype::kBf16, true, false);
  plan::Plan plan(int64_t dp, int64_t tp, int64_t cp, int zero, int64_t ckpt = 0) const {
    plan::StagePlan st;
    st.zero = zero;
    st.ckpt_layers = ckpt;
    auto p = plan::uniform_plan(m, dp, tp, 1, 1, t.global_batch_size / dp, st);
    p.cp = cp;
    p.sequence_parallel = tp > 1;
    return p;
  }
};

// The lowering: each rank's block keeps 1/cp of what a rank without CP keeps, the attention does
// 1/cp of its FLOPs, and the ring exchanges the local K and V (cp − 1 steps) in forward and K/V
// with their gradients in backward.
TEST(ContextParallel, LoweringSplitsTokensAndRingsTheKeys) {
  const LongJob j;
  auto job = *PreparedJob::create(j.m, j.c, j.t, {});
  const auto* plain = *job.lowering(j.plan(8, 1, 1, 1));
  const auto* split = *job.lowering(j.plan(2, 1, 4, 1));
  sym::Bindings at = plain->model.dims;
  at["b"] = 1;
  at["t"] = 1;
  at["cp"] = 4;
  at["ep"] = at["etp"] = 1;
  auto ev = [&](const sym::Expr& e) {
    auto r = sym::evaluate(e, at);
    EXPECT_TRUE(r.has_value());
    return r.value_or(-1);
  };
  const double saved_plain = ev(plain->memory.block.saved);
  const double saved_split = ev(split->memory.block.saved);
  EXPECT_NEAR(saved_split, saved_plain / 4, 1e-9 * saved_plain);
  const auto& core = op_named(split->model.block, "attn.core");
  const auto& core1 = op_named(plain->model.block, "attn.core");
  EXPECT_NEAR(ev(core.fwd_flops), ev(core1.fwd_flops) / 4, 1.0);
  ASSERT_EQ(core.fwd_cp.size(), 1u);
  ASSERT_EQ(core.bwd_cp.size(), 1u);
  EXPECT_EQ(core.fwd_cp[0].comm.kind, graph::CommKind::kRingExchange);
  EXPECT_EQ(core.fwd_cp[0].comm.group, graph::CommGroup::kContext);
  EXPECT_DOUBLE_EQ(ev(core.fwd_cp[0].under), 0.75);  // the first cp − 1 of the cp steps
  EXPECT_TRUE(core1.fwd_cp.empty());
  // Llama-3-8B: 8 key/value heads of 128, bf16; the rank holds 32768 / 4 tokens.
  const double kv_block = 2.0 * 8192 * 8 * 128 * 2;
  EXPECT_DOUBLE_EQ(ev(core.fwd_cp[0].comm.bytes), kv_block);
  EXPECT_DOUBLE_EQ(ev(core.bwd_cp[0].comm.bytes), 2 * kv_block);
  // The forward keeps every step's block (cp of them) and each step's output and log-sum-exp; the
  // backward double-buffers K/V with their gradients.
  const auto& L = split->model.block;
  ASSERT_EQ(core.fwd_temporaries.size(), 2u);
  EXPECT_DOUBLE_EQ(ev(L.tensors[core.fwd_temporaries[0]].bytes), 4 * kv_block);
  const double q_block = 8192.0 * 4096 * 2, lse = 8192.0 * 32 * 4;
  EXPECT_DOUBLE_EQ(ev(L.tensors[core.fwd_temporaries[1]].bytes), 4 * (q_block + lse));
  double bwd = 0;
  for (int t : core.bwd_temporaries) bwd += ev(L.tensors[t].bytes);
  EXPECT_DOUBLE_EQ(bwd, 5 * kv_block + q_block);
  EXPECT_GE(ev(split->memory.block.fwd_peak), ev(plain->memory.block.fwd_peak) / 4);
}

// Memory: the activations of a stage fall with cp, and ZeRO-1 shards the optimizer states over
// dp·cp (here dp 1: without CP they would not be sharded at all).
TEST(ContextParallel, ActivationsFallAndZeroShardsOverDpTimesCp) {
  const LongJob j;
  const auto a = *memory_of(j.m, j.c, j.t, j.plan(8, 1, 1, 1));
  const auto b = *memory_of(j.m, j.c, j.t, j.plan(1, 1, 8, 1));
  const auto& s1 = a.stages[0];
  const auto& s8 = b.stages[0];
  EXPECT_NEAR(memory_term(s8, "activations"), memory_term(s1, "activations") / 8, 0.01 * memory_term(s1, "activations") / 8);
  EXPECT_NEAR(memory_term(s8, "optimizer_states"), memory_term(s1, "optimizer_states"), 1e-6 * memory_term(s1, "optimizer_states"));
  EXPECT_DOUBLE_EQ(memory_term(s8, "weights"), memory_term(s1, "weights"));
  // tp 2 · cp 4 · dp 1: ZeRO over 4 ranks, not 1.
  const auto c = *memory_of(j.m, j.c, j.t, j.plan(1, 2, 4, 1));
  const auto d = *memory_of(j.m, j.c, j.t, j.plan(4, 2, 1, 1));
  EXPECT_NEAR(memory_term(c.stages[0], "optimizer_states"), memory_term(d.stages[0], "optimizer_states"),
              1e-6 * memory_term(d.stages[0], "optimizer_states"));
}

// Time: at 32K tokens on NVLink the ring hides under the attention (a few percent exposed at
// most), at 8K tokens over the network it does not; the dp·cp group reduces the gradients.
TEST(ContextParallel, RingHidesUnderLongAttentionOnly) {
  LongJob j;
  auto job = *PreparedJob::create(j.m, j.c, j.t, {});
  const auto p = j.plan(1, 1, 8, 1);
  auto blk = *block_op_times(job, p, "attn.core");
  EXPECT_GT(blk.fwd, 0);
  EXPECT_LT(blk.fwd_cp, 0.1 * blk.fwd);
  EXPECT_LT(blk.bwd_cp, 0.1 * blk.bwd);
  // 8K tokens over 8 ranks on 8 nodes (one GPU each): 1K queries per rank, blocks over the network.
  j.c = cluster("H100-SXM5-80GB", 8, 1);
  j.t.seq_length = 8192;
  auto far = *PreparedJob::create(j.m, j.c, j.t, {});
  auto b2 = *block_op_times(far, j.plan(1, 1, 8, 1), "attn.core");
  EXPECT_GT(b2.fwd_cp, 0.2 * b2.fwd);
  // The whole iteration against dp 8, which gives each GPU the same tokens and the same causal
  // work: CP pays for its ring and its 8× shorter GEMMs, within a quarter of the time.
  const auto t_cp = *time_of(LongJob{}.m, LongJob{}.c, LongJob{}.t, LongJob{}.plan(1, 1, 8, 1));
  const auto t_dp = *time_of(LongJob{}.m, LongJob{}.c, LongJob{}.t, LongJob{}.plan(8, 1, 1, 1));
  EXPECT_GT(t_cp.iteration_time_s, 0.97 * t_dp.iteration_time_s);
  EXPECT_LT(t_cp.iteration_time_s, 1.25 * t_dp.iteration_time_s);
}

// The other exchanges (graph::CpExchange): Megatron's a2a and all_gather expose their collectives,
// the ring hides under the kernels; torchtitan's all-gather rotation hides its gather under the
// first step only, so over the network it exposes more than the p2p ring would.
TEST(ContextParallel, ExchangesExposeWhatTheirEnginesDoNotOverlap) {
  LongJob j;
  auto job = *PreparedJob::create(j.m, j.c, j.t, {});
  auto core = [&](const PreparedJob& pj, plan::CpComm comm, int64_t tp = 1) {
    auto p = j.plan(1, tp, 8 / tp, 1);
    p.cp_comm = comm;
    return *block_op_times(pj, p, "attn.core");
  };
  const auto ring = core(job, plan::CpComm::kRing);
  const auto a2a = core(job, plan::CpComm::kAllToAll);
  const auto ag = core(job, plan::CpComm::kAllGather);
  // The kernels are the same work on every rank.
  EXPECT_DOUBLE_EQ(a2a.fwd, ring.fwd);
  EXPECT_DOUBLE_EQ(ag.bwd, ring.bwd);
  // a2a: four all-to-alls of the local q, k, v and output (each 1/cp of a 32K sequence), all exposed.
  EXPECT_GT(a2a.fwd_cp, ring.fwd_cp);
  EXPECT_GT(a2a.bwd_cp, 0);
  // all_gather: the whole sequence's K/V before the kernels, again in backward with a reduce-scatter.
  EXPECT_GT(ag.fwd_cp, ring.fwd_cp);
  EXPECT_GT(ag.bwd_cp, ag.fwd_cp);
  // torchtitan over the network (8 nodes of 1): its gather hides under 1/cp of the kernel, the
  // p2p ring's exchanges under (cp − 1)/cp, so torchtitan exposes more.
  j.c = cluster("H100-SXM5-80GB", 8, 1);
  j.t.seq_length = 8192;
  auto far = *PreparedJob::create(j.m, j.c, j.t, {});
  auto tt = *PreparedJob::create(j.m, j.c, j.t, {}, {}, spec::Engine::kTorchtitan);
  const auto far_ring = core(far, plan::CpComm::kRing);
  const auto far_tt = core(tt, plan::CpComm::kRing);
  EXPECT_GT(far_tt.fwd_cp, far_ring.fwd_cp);
}

// Megatron's hierarchical a2a+p2p on 2 nodes of 8 (cp 16 in all-to-all groups of 8): the groups
// stay inside a node and the ring of 2 crosses; the attention core holds the a2a's buffers and the
// ring's for 2 steps, the same kernel work, and its all-to-alls cost less than the flat one's
// over 16 ranks across the network.
TEST(ContextParallel, HierarchicalA2aP2pNestsTheAllToAllInTheRing) {
  LongJob j;
  j.c = cluster("H100-SXM5-80GB", 2, 8);
  j.t.seq_length = 65536;
  const auto place = hardware::place_groups(j.c, 1, 1, 1, 1, 1, 16, 8);
  EXPECT_EQ(place.cp_a2a.size, 8);
  EXPECT_FALSE(place.cp_a2a.crosses_nodes);
  EXPECT_EQ(place.cp_ring.size, 2);
  EXPECT_TRUE(place.cp_ring.crosses_nodes);
  auto job = *PreparedJob::create(j.m, j.c, j.t, {});
  auto with = [&](plan::CpComm comm) {
    auto p = j.plan(1, 1, 16, 1);
    p.cp_comm = comm;
    p.cp_a2a = comm == plan::CpComm::kA2aP2p ? 8 : 1;
    return p;
  };
  auto temps = [&](plan::CpComm comm, bool fwd) {
    const auto p = with(comm);
    const auto* lowering = *job.lowering(p);
    sym::Bindings at = lowering->model.dims;
    at["b"] = 1, at["t"] = 1, at["cp"] = 16, at["ep"] = 1, at["etp"] = 1;
    const auto& core = op_named(lowering->model.block, "attn.core");
    double sum = 0;
    for (int id : fwd ? core.fwd_temporaries : core.bwd_temporaries)
      sum += sym::evaluate_or_zero(lowering->model.block.tensors[id].bytes, at);
    return sum;
  };
  using C = plan::CpComm;
  // Forward: the a2a's q, k, v and output, and the ring's blocks and step outputs for 2 steps of 16.
  EXPECT_DOUBLE_EQ(temps(C::kA2aP2p, true), temps(C::kAllToAll, true) + temps(C::kRing, true) * 2 / 16);
  EXPECT_DOUBLE_EQ(temps(C::kA2aP2p, false), temps(C::kAllToAll, false) + temps(C::kRing, false));
  auto core = [&](plan::CpComm comm) { return *block_op_times(job, with(comm), "attn.core"); };
  const auto ring = core(C::kRing), a2a = core(C::kAllToAll), nested = core(C::kA2aP2p);
  EXPECT_DOUBLE_EQ(nested.fwd, ring.fwd);
  EXPECT_DOUBLE_EQ(nested.bwd, ring.bwd);
  EXPECT_LT(nested.fwd_cp, a2a.fwd_cp);
  EXPECT_LT(nested.bwd_cp, a2a.bwd_cp);
}

// NCCL buffers: the CP ring adds its two neighbours' channels; the gradient ring spans dp·cp.
TEST(ContextParallel, NcclBuffersCountTheRing) {
  const LongJob j;
  auto p = j.plan(8, 1, 1, 1);
  auto q = j.plan(1, 1, 8, 1);
  EXPECT_DOUBLE_EQ(nccl_buffer_bytes(q, j.c, false) - nccl_buffer_bytes(p, j.c, false),
                   2.0 * 2.0 * kNcclBytesPerPeerChannel);
  EXPECT_EQ(communicators_of(q, j.c).dp_size, 8);
}

}  // namespace
}  // namespace mist::analysis
