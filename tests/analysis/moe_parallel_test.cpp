// Expert parallelism in the memory and time models: expert weights and their states sharded over
// the expert grid (ep·etp, then ZeRO over the expert data-parallel group), the dispatcher's
// all-to-alls timed over the expert-parallel group's links.
#include <gtest/gtest.h>

#include "analysis/memory_model.hpp"
#include "analysis/overheads.hpp"
#include "analysis/prepared_job.hpp"
#include "test_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;
using mist::testing::memory_of;
using mist::testing::time_of;

double term(const StageMemory& s, std::string_view name) { return mist::testing::memory_term(s, name); }

// The job most tests here plan: Mixtral 8x7B on 2×8 H100, GBS 64, seq 4096, bf16 with bf16
// gradients.
struct MixtralJob {
  spec::ModelSpec m = *spec::catalog_model("mixtral-8x7b");
  spec::ClusterSpec c = cluster("H100-SXM5-80GB", 2, 8);
  spec::TrainingSpec t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false, spec::Dtype::kBf16);
  Result<MemoryPrediction> memory(const plan::Plan& p) const { return memory_of(m, c, t, p); }
  Result<TimePrediction> time(const plan::Plan& p) const { return time_of(m, c, t, p); }
};

plan::Plan mixtral(int64_t dp, int64_t tp, int64_t ep, int64_t etp, int zero) {
  const auto m = *spec::catalog_model("mixtral-8x7b");
  plan::StagePlan st;
  st.zero = zero;
  auto p = plan::uniform_plan(m, dp, tp, 1, 1, 64 / dp, st);
  p.sequence_parallel = tp > 1;
  p.ep = ep;
  p.etp = etp;
  return p;
}

// On 16 GPUs (tp 4, dp 4): each GPU holds E/ep experts, 1/etp of each, so the weights and the
// gradients shrink by the experts' parameters times (1 - 1/(ep·etp)). Under the distributed
// optimizer (ZeRO-1) the expert states are sharded over the expert data-parallel group of
// 16/(ep·etp) GPUs, so every GPU holds 1/16 of them whatever the split, and the dense states 1/dp.
TEST(MoeParallel, ExpertStateShardsOverTheExpertGrid) {
  const MixtralJob job;
  const auto& m = job.m;
  const double experts = 3.0 * m.num_experts * m.hidden_size * m.moe_ffn_hidden_size * m.num_layers;
  auto base = job.memory(mixtral(4, 4, 1, 1, 1));
  ASSERT_TRUE(base) << base.error().to_string();
  const auto& b0 = base->stages[0];
  for (auto [ep, etp] : {std::pair{2, 1}, {8, 1}, {1, 4}, {4, 4}, {4, 2}}) {
    auto r = job.memory(mixtral(4, 4, ep, etp, 1));
    ASSERT_TRUE(r) << r.error().to_string();
    const auto& s = r->stages[0];
    const double kept = 1.0 / (ep * etp) - 1;
    EXPECT_NEAR(term(s, "weights") - term(b0, "weights"), 2 * experts * kept, 1) << ep << "," << etp;
    EXPECT_NEAR(term(s, "gradients") - term(b0, "gradients"), 2 * experts * kept, 1) << ep << "," << etp;
    // 12 bytes per parameter (fp32 master and two moments), experts over 16 GPUs in both plans.
    EXPECT_NEAR(term(s, "optimizer_states"), term(b0, "optimizer_states"), 1) << ep << "," << etp;
  }
  // Without the distributed optimizer each expert's states stay on its ep·etp ranks' copies.
  auto z0 = job.memory(mixtral(4, 4, 8, 1, 0));
  auto z0_base = job.memory(mixtral(4, 4, 1, 1, 0));
  ASSERT_TRUE(z0 && z0_base);
  EXPECT_NEAR(term(z0->stages[0], "optimizer_states") - term(z0_base->stages[0], "optimizer_states"),
              12 * experts * (1.0 / 8 - 1), 1);
}

// The dispatcher's all-to-alls cost more when the expert-parallel group leaves the node: ep 8 with
// etp 1 keeps each EP group on 8 consecutive ranks (one node); with etp 2 its members are 2 apart
// and span both nodes.
TEST(MoeParallel, AllToAllLeavingTheNodeCostsMore) {
  const MixtralJob job;
  auto inside = job.time(mixtral(8, 2, 8, 1, 1));
  auto across = job.time(mixtral(8, 2, 8, 2, 1));
  auto none = job.time(mixtral(8, 2, 1, 2, 1));
  ASSERT_TRUE(inside && across && none);
  EXPECT_GT(across->stages[0].fwd_s, inside->stages[0].fwd_s);
  // ep 1 with etp 2 has no all-to-all, only the gather over 2 GPUs.
  EXPECT_LT(none->stages[0].fwd_s, across->stages[0].fwd_s);
}

// Experts on groups of their own hold NCCL buffers for them: ep 2 etp 4 on tp 4 dp 4 (2 nodes)
// adds a ring over the ETP group (4 GPUs, NVLink: 32 channels × 2 peers), the all-to-all's one
// other EP rank (2 channels) and a ring over the expert data-parallel group of 2, which leaves the
// node (8 channels × 2 peers); with ep 1 and etp = tp the experts use the dense groups.
TEST(MoeParallel, ExpertGroupsHoldNcclBuffers) {
  const MixtralJob job;
  auto dense_groups = job.memory(mixtral(4, 4, 1, 4, 1));
  auto expert_groups = job.memory(mixtral(4, 4, 2, 4, 1));
  ASSERT_TRUE(dense_groups && expert_groups);
  EXPECT_NEAR(term(expert_groups->stages[0], "nccl_buffers") - term(dense_groups->stages[0], "nccl_buffers"),
              (2 * 32 + 2 + 2 * 8) * kNcclBytesPerPeerChannel, 1);
}

// Megatron's all-gather dispatcher (training.moe_token_dispatcher "allgather"): each rank of the
// tp_ep group (etp·ep consecutive ranks) gathers all the group's tokens, G = etp·ep·s·b/t of them,
// where the all-to-all sends only the routed rows. For Mixtral's top 2 of 8 experts on ep 8 that is
// 8 tokens' rows received per token against the all-to-all's 2 (each 7/8 from the other ranks), so
// the dispatcher's exposed time grows about 4-fold; for Qwen3-30B-A3B's top 8 of 128 the volumes
// are alike. The gathered tokens live in a buffer of G·h·w bytes kept for all layers, and the
// dispatcher's NCCL buffers are one ring over the group instead of a channel pair per EP peer.
TEST(MoeParallel, AllGatherDispatcherGathersTheTpEpGroupsTokens) {
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  auto t = mist::testing::training(8, 4096, spec::Dtype::kBf16, true, false, spec::Dtype::kBf16);
  auto ag_t = t;
  ag_t.moe_dispatcher = spec::MoeDispatcher::kAllGather;
  auto exposed = [&](const char* model, const spec::TrainingSpec& tr) {
    const auto m = *spec::catalog_model(model);
    auto job = *PreparedJob::create(m, c, tr);
    auto p = plan::uniform_plan(m, 8, 1, 1, 1, 1, {});
    p.ep = 8;
    auto moe = block_op_times(job, p, "moe.");
    EXPECT_TRUE(moe) << moe.error().to_string();
    return moe ? moe->fwd_exposed + moe->bwd_exposed : 0.0;
  };
  const double mixtral = exposed("mixtral-8x7b", ag_t) / exposed("mixtral-8x7b", t);
  const double qwen = exposed("qwen3-30b-a3b", ag_t) / exposed("qwen3-30b-a3b", t);
  EXPECT_GT(mixtral, 3.0);
  EXPECT_LT(mixtral, 5.0);
  EXPECT_GT(qwen, 0.9);
  EXPECT_LT(qwen, 1.3);

  // The gathered tokens' collective and buffer; the NCCL rings.
  const auto m = *spec::catalog_model("mixtral-8x7b");
  auto p = plan::uniform_plan(m, 8, 1, 1, 1, 1, {});
  p.ep = 8;
  auto job = *PreparedJob::create(m, c, ag_t);
  const auto* L = *job.lowering(p);
  sym::Bindings at = L->model.dims;
  at["b"] = 1;
  bind_parallel_degrees(at, p);
  const auto& gather = mist::testing::op_named(L->model.block, "moe.gather_tokens");
  EXPECT_EQ(gather.fwd_comm.group, graph::CommGroup::kExpertTpEp);
  const double G = 8.0 * 4096, bytes = G * m.hidden_size * 2;
  EXPECT_DOUBLE_EQ(*sym::evaluate(gather.fwd_comm.bytes, at), bytes);
  auto ag = memory_of(m, c, ag_t, p), a2a = memory_of(m, c, t, p);
  ASSERT_TRUE(ag && a2a);
  EXPECT_DOUBLE_EQ(term(ag->stages[0], "dispatcher_buffer"), bytes);
  for (const auto& x : a2a->stages[0].terms) EXPECT_NE(x.name, "dispatcher_buffer");
  EXPECT_NEAR(term(ag->stages[0], "nccl_buffers") - term(a2a->stages[0], "nccl_buffers"),
              (2 * 32 - 7 * 2) * kNcclBytesPerPeerChannel, 1);
}

// Routing that is not balanced: the busiest expert rank computes moe_load_imbalance times the
// balanced rows and receives that many in the all-to-all, and the step waits for it; a capacity
// factor drops what exceeds it, and padded to it every expert computes exactly the capacity. With
// ep 1 every expert is on every rank and an imbalance changes nothing.
TEST(MoeParallel, LoadImbalanceIsTheBusiestRanksAndACapacityBoundsIt) {
  const MixtralJob job;
  auto with = [&](double imbalance, double capacity, bool pad) {
    auto t = job.t;
    t.moe_load_imbalance = imbalance;
    t.moe_capacity_factor = capacity;
    t.moe_pad_to_capacity = pad;
    return t;
  };
  const auto p = mixtral(8, 2, 8, 1, 1);
  struct Seen {
    double fc1_flops, a2a_bytes, combine_bytes, iteration, activations;
  };
  auto seen = [&](const spec::TrainingSpec& t, const plan::Plan& plan) {
    auto job_t = *PreparedJob::create(job.m, job.c, t, {});
    const auto* L = *job_t.lowering(plan);
    sym::Bindings at = L->model.dims;
    at["b"] = 1;
    bind_parallel_degrees(at, plan);
    auto eval = [&](const sym::Expr& e) { return *sym::evaluate(e, at); };
    const auto& blk = L->model.block;
    const auto pred = *analysis::predict(job_t, plan);
    Seen s{eval(mist::testing::op_named(blk, "moe.experts.fc1").fwd_flops), 0, 0, pred.time.iteration_time_s,
           term(pred.memory.stages[0], "activations")};
    if (plan.ep > 1) {
      s.a2a_bytes = eval(mist::testing::op_named(blk, "moe.dispatch_a2a").fwd_comm.bytes);
      s.combine_bytes = eval(mist::testing::op_named(blk, "moe.combine_a2a").fwd_comm.bytes);
    }
    return s;
  };
  const Seen bal = seen(job.t, p), imb = seen(with(1.25, 0, false), p);
  EXPECT_DOUBLE_EQ(imb.fc1_flops, 1.25 * bal.fc1_flops);
  EXPECT_DOUBLE_EQ(imb.a2a_bytes, 1.25 * bal.a2a_bytes);
  EXPECT_DOUBLE_EQ(imb.combine_bytes, 1.25 * bal.combine_bytes);
  EXPECT_GT(imb.iteration, bal.iteration);
  EXPECT_GT(imb.activations, bal.activations);
  // A capacity of 1.0 drops the excess: the balanced rows again.
  const Seen cap = seen(with(1.25, 1.0, false), p);
  EXPECT_DOUBLE_EQ(cap.fc1_flops, bal.fc1_flops);
  EXPECT_DOUBLE_EQ(cap.iteration, bal.iteration);
  // Padded to a capacity of 1.5, every expert computes 1.5 times its share, imbalanced or not.
  const Seen pad = seen(with(1.0, 1.5, true), p);
  EXPECT_DOUBLE_EQ(pad.fc1_flops, 1.5 * bal.fc1_flops);
  EXPECT_GT(pad.iteration, imb.iteration);
  // ep 1: the rank holds every expert, its rows are all the routed ones.
  const auto p1 = mixtral(8, 2, 1, 1, 1);
  EXPECT_DOUBLE_EQ(seen(with(1.25, 0, false), p1).fc1_flops, seen(job.t, p1).fc1_flops);
}

// The routing fields belong to mixtures of experts, and padding needs a capacity.
TEST(MoeParallel, RoutingFieldsAreRefusedWhereTheyCannotApply) {
  const auto m = *spec::catalog_model("llama3-8b");
  auto t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false);
  t.moe_load_imbalance = 1.2;
  mist::testing::expect_error(plan::validate_training(m, cluster("H100-SXM5-80GB", 1, 8), t),
                              "training.moe_load_imbalance", "no experts");
  mist::testing::expect_error(
      spec::training_from_json(Json{{"global_batch_size", 8}, {"seq_length", 64}, {"moe_pad_to_capacity", true}},
                               "training"),
      "training.moe_pad_to_capacity", "moe_capacity_factor");
  mist::testing::expect_error(
      spec::training_from_json(Json{{"global_batch_size", 8}, {"seq_length", 64}, {"moe_load_imbalance", 0.9}},
                               "training"),
      "training.moe_load_imbalance", "");
  auto ag = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false);
  ag.moe_dispatcher = spec::MoeDispatcher::kAllGather;
  mist::testing::expect_error(plan::validate_training(m, cluster("H100-SXM5-80GB", 1, 8), ag),
                              "training.moe_token_dispatcher", "no experts");
  mist::testing::expect_error(
      spec::training_from_json(Json{{"global_batch_size", 8}, {"seq_length", 64}, {"moe_token_dispatcher", "flex"}},
                               "training"),
      "training.moe_token_dispatcher", "allgather");
  auto parsed = spec::training_from_json(
      Json{{"global_batch_size", 8}, {"seq_length", 64}, {"moe_token_dispatcher", "allgather"}}, "training");
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_EQ(parsed->moe_dispatcher, spec::MoeDispatcher::kAllGather);
  EXPECT_EQ(spec::training_to_json(*parsed).at("moe_token_dispatcher"), "allgather");
}

// Megatron's --moe-router-dtype fp32 (training.moe_router_dtype): the router's logits, the
// probabilities and every copy the dispatcher makes of them take 4 bytes an element; SwiGLU experts
// keep their probabilities in fp32 (the fused weighted SwiGLU casts inside), GELU experts multiply
// in fp32 and cast back (an fp32 product and the cast's output), and a dense model refuses it.
TEST(MoeParallel, RouterDtypeFp32WidensTheProbabilities) {
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  auto t = mist::testing::training(8, 4096, spec::Dtype::kBf16, true, false, spec::Dtype::kBf16);
  auto t32 = t;
  t32.moe_router_fp32 = true;
  auto m = *spec::catalog_model("mixtral-8x7b");
  auto p = plan::uniform_plan(m, 8, 1, 1, 1, 1, {});
  p.ep = 8;
  auto bytes = [&](const spec::ModelSpec& model, const spec::TrainingSpec& tr, const std::string& name) {
    auto job = *PreparedJob::create(model, c, tr);
    const auto* lowering = *job.lowering(p);
    sym::Bindings b = lowering->model.dims;
    b["b"] = 1;
    bind_parallel_degrees(b, p);
    for (const auto& x : lowering->model.block.tensors)
      if (x.name == name) return sym::evaluate_or_zero(x.bytes, b);
    return -1.0;
  };
  for (const char* name : {"moe.router.out", "moe.topk.probs", "moe.permute.probs", "moe.dispatch_a2a_probs.out"})
    EXPECT_DOUBLE_EQ(bytes(m, t32, name), 2 * bytes(m, t, name)) << name;
  EXPECT_EQ(bytes(m, t32, "moe.experts.weight_cast.out"), -1.0);  // SwiGLU: no product of its own
  auto gelu = m;
  gelu.mlp = spec::Mlp::kGelu;
  const double rows = 4096.0 * 2, act = rows * 14336;  // 4096 tokens, top 2, balanced, one local expert
  EXPECT_DOUBLE_EQ(bytes(gelu, t32, "moe.experts.weight.out"), act * 4);
  EXPECT_DOUBLE_EQ(bytes(gelu, t32, "moe.experts.weight_cast.out"), act * 2);
  EXPECT_DOUBLE_EQ(bytes(gelu, t, "moe.experts.weight.out"), act * 2);
  EXPECT_EQ(bytes(gelu, t, "moe.experts.weight_cast.out"), -1.0);

  auto parsed = spec::training_from_json(
      Json{{"global_batch_size", 8}, {"seq_length", 64}, {"moe_router_dtype", "fp32"}}, "training");
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_TRUE(parsed->moe_router_fp32);
  EXPECT_EQ(spec::training_to_json(*parsed).at("moe_router_dtype"), "fp32");
  EXPECT_FALSE(spec::training_to_json(t).contains("moe_router_dtype"));
  mist::testing::expect_error(
      spec::training_from_json(Json{{"global_batch_size", 8}, {"seq_length", 64}, {"moe_router_dtype", "fp64"}},
                               "training"),
      "training.moe_router_dtype", "fp32");
  mist::testing::expect_error(plan::validate_training(*spec::catalog_model("llama3-8b"), c, t32),
                              "training.moe_router_dtype", "no experts");
}

// A dense model refuses expert degrees, naming the field.
TEST(MoeParallel, DenseModelsHaveNoExpertGrid) {
  const auto m = *spec::catalog_model("llama3-8b");
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  const auto t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false);
  auto p = plan::uniform_plan(m, 4, 2, 1, 1, 16, {});
  p.sequence_parallel = true;
  p.ep = 2;
  auto r = memory_of(m, c, t, p);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "plan.ep");
}

}  // namespace
}  // namespace mist::analysis
