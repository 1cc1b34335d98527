// Mixtures of experts: the Megatron-LM MoE flags, their round trip through the importer, the
// importer's refusals, and the other engines refusing MoE exports.
#include <gtest/gtest.h>

#include "export/exchange.hpp"
#include "export/megatron.hpp"
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
using testing::without_token;

// dp 2 tp 4 pp 2, the experts over ep 4 with etp 1 (expert data parallelism 2).
plan::Plan mixtral_plan(int64_t layers = 32) {
  auto p = testing::plan(2, 4, {layers / 2, layers / 2}, 1, 64, /*zero=*/1);
  p.sequence_parallel = true;
  p.ep = 4;
  p.etp = 1;
  return p;
}

TEST(MoeExport, MegatronGetsTheExpertFlagsAndTheyRoundTrip) {
  for (const char* name : {"mixtral-8x7b", "qwen1.5-moe-a2.7b"}) {
    const auto m = model(name);
    auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), training(128, 4096), mixtral_plan(m.num_layers), {}});
    ASSERT_TRUE(r && r->exported) << name;
    const auto& o = r->exported->options;
    EXPECT_EQ(value(o, "--num-experts"), std::to_string(m.num_experts)) << name;
    EXPECT_EQ(value(o, "--moe-router-topk"), std::to_string(m.experts_per_token)) << name;
    EXPECT_EQ(value(o, "--moe-ffn-hidden-size"), std::to_string(m.moe_ffn_hidden_size)) << name;
    EXPECT_EQ(value(o, "--moe-token-dispatcher-type"), "alltoall") << name;
    EXPECT_EQ(value(o, "--expert-model-parallel-size"), "4") << name;
    EXPECT_EQ(value(o, "--expert-tensor-parallel-size"), "1") << name;
    EXPECT_TRUE(value(o, "--moe-grouped-gemm").has_value()) << name;
    EXPECT_EQ(value(o, "--moe-shared-expert-gate").has_value(), m.shared_expert_gate) << name;
    if (m.shared_expert_ffn_hidden_size > 0) {
      EXPECT_EQ(value(o, "--moe-shared-expert-intermediate-size"), std::to_string(m.shared_expert_ffn_hidden_size));
    }
    auto back = import_megatron_flags(command(o), m, cluster(2, 8));
    ASSERT_TRUE(back) << name << ": " << back.error().to_string();
    EXPECT_EQ(back->plan.tp, 4);
    EXPECT_EQ(back->plan.ep, 4);
    EXPECT_EQ(back->plan.etp, 1);
    EXPECT_TRUE(back->plan.sequence_parallel);
  }
}

// A capacity factor (token dropping) and padding to it: written, read back, and Megatron-LM's own
// checks on import (padding needs a factor; a negative factor means none).
// GELU experts (Megatron without --swiglu): the export leaves --swiglu out, the options read back to
// the same plan, and --swiglu given for such a model is refused, naming it.
TEST(MoeExport, GeluExpertsLeaveSwigluOutAndRefuseIt) {
  auto m = model("mixtral-8x7b");
  m.mlp = spec::Mlp::kGelu;
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), training(128, 4096), mixtral_plan(), {}});
  ASSERT_TRUE(r && r->exported);
  const auto& o = r->exported->options;
  EXPECT_FALSE(value(o, "--swiglu").has_value());
  EXPECT_EQ(value(o, "--num-experts"), "8");
  auto back = import_megatron_flags(command(o), m, cluster(2, 8));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.ep, 4);
  expect_error(import_megatron_flags(command(o) + " --swiglu", m, cluster(2, 8)), "--swiglu", "GELU experts");
  // The catalog's SwiGLU experts keep the flag and read back with it.
  const auto swiglu = model("mixtral-8x7b");
  auto r2 = export_plan(Engine::kMegatron, {swiglu, cluster(2, 8), training(128, 4096), mixtral_plan(), {}});
  ASSERT_TRUE(r2 && r2->exported);
  EXPECT_TRUE(value(r2->exported->options, "--swiglu").has_value());
  EXPECT_TRUE(import_megatron_flags(command(r2->exported->options), swiglu, cluster(2, 8)));
}

// The router's dtype: written for fp32 (Megatron-LM's --moe-router-dtype), read back; fp64 refused.
TEST(MoeExport, RouterDtypeRoundTrips) {
  const auto m = model("mixtral-8x7b");
  auto t = training(128, 4096);
  t.moe_router_fp32 = true;
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), t, mixtral_plan(), {}});
  ASSERT_TRUE(r && r->exported);
  EXPECT_EQ(value(r->exported->options, "--moe-router-dtype"), "fp32");
  auto back = import_megatron_flags(command(r->exported->options), m, cluster(2, 8));
  ASSERT_TRUE(back) << back.error().to_string();
  ASSERT_TRUE(back->training.moe_router_fp32.has_value());
  EXPECT_TRUE(*back->training.moe_router_fp32);
  auto plain = export_plan(Engine::kMegatron, {m, cluster(2, 8), training(128, 4096), mixtral_plan(), {}});
  ASSERT_TRUE(plain && plain->exported);
  EXPECT_FALSE(value(plain->exported->options, "--moe-router-dtype").has_value());
  auto read = import_megatron_flags(command(plain->exported->options), m, cluster(2, 8));
  ASSERT_TRUE(read);
  EXPECT_FALSE(read->training.moe_router_fp32.value_or(true));
  expect_error(import_megatron_flags(command(r->exported->options) + " --moe-router-dtype fp64", m, cluster(2, 8)),
               "--moe-router-dtype", "fp64");
}

TEST(MoeExport, CapacityFactorRoundTrips) {
  const auto m = model("mixtral-8x7b");
  auto t = training(128, 4096);
  t.moe_capacity_factor = 1.25;
  t.moe_pad_to_capacity = true;
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), t, mixtral_plan(m.num_layers), {}});
  ASSERT_TRUE(r && r->exported);
  const auto& o = r->exported->options;
  EXPECT_EQ(value(o, "--moe-expert-capacity-factor"), "1.25");
  EXPECT_TRUE(value(o, "--moe-pad-expert-input-to-capacity").has_value());
  auto back = import_megatron_flags(command(o), m, cluster(2, 8));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->training.moe_capacity_factor, std::optional<double>(1.25));
  EXPECT_EQ(back->training.moe_pad_to_capacity, std::optional<bool>(true));
  const std::string flags = command(o);
  expect_error(import_megatron_flags(without_token(flags, " --moe-expert-capacity-factor 1.25"), m, cluster(2, 8)),
               "--moe-pad-expert-input-to-capacity", "--moe-expert-capacity-factor");
  // Dropless exports say nothing about capacity.
  auto plain = export_plan(Engine::kMegatron, {m, cluster(2, 8), training(128, 4096), mixtral_plan(m.num_layers), {}});
  EXPECT_FALSE(value(plain->exported->options, "--moe-expert-capacity-factor").has_value());
}

// The all-gather dispatcher, Megatron-LM's default: written as --moe-token-dispatcher-type
// allgather, read back; a command without the flag runs it, and the import says so in its
// training (the all-to-all only where the flag names it).
TEST(MoeExport, AllGatherDispatcherRoundTripsAndIsTheDefault) {
  const auto m = model("mixtral-8x7b");
  auto t = training(128, 4096);
  t.moe_dispatcher = spec::MoeDispatcher::kAllGather;
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), t, mixtral_plan(m.num_layers), {}});
  ASSERT_TRUE(r && r->exported);
  const std::string cmd = command(r->exported->options);
  EXPECT_EQ(value(r->exported->options, "--moe-token-dispatcher-type"), "allgather");
  auto back = import_megatron_flags(cmd, m, cluster(2, 8));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->training.moe_dispatcher, std::optional(spec::MoeDispatcher::kAllGather));
  auto unstated = import_megatron_flags(without_token(cmd, " --moe-token-dispatcher-type allgather"), m, cluster(2, 8));
  ASSERT_TRUE(unstated) << unstated.error().to_string();
  EXPECT_EQ(unstated->training.moe_dispatcher, std::optional(spec::MoeDispatcher::kAllGather));
  auto a2a = export_plan(Engine::kMegatron, {m, cluster(2, 8), training(128, 4096), mixtral_plan(m.num_layers), {}});
  ASSERT_TRUE(a2a && a2a->exported);
  auto a2a_back = import_megatron_flags(command(a2a->exported->options), m, cluster(2, 8));
  ASSERT_TRUE(a2a_back);
  EXPECT_EQ(a2a_back->training.moe_dispatcher, std::optional(spec::MoeDispatcher::kAllToAll));
  // A dense model's import says nothing about a dispatcher.
  auto dense = export_plan(Engine::kMegatron, {model("llama3-8b"), cluster(2, 8), training(128, 4096),
                                               testing::plan(2, 4, {16, 16}, 1, 64, 1), {}});
  ASSERT_TRUE(dense && dense->exported);
  auto dense_back = import_megatron_flags(command(dense->exported->options), model("llama3-8b"), cluster(2, 8));
  ASSERT_TRUE(dense_back);
  EXPECT_FALSE(dense_back->training.moe_dispatcher.has_value());
}

TEST(MoeExport, ImportRefusesWhatWouldBuildAnotherModel) {
  const auto m = model("mixtral-8x7b");
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), training(128, 4096), mixtral_plan(), {}});
  ASSERT_TRUE(r && r->exported);
  const std::string cmd = command(r->exported->options);
  auto read_back = [&](const std::string& c) { return import_megatron_flags(c, m, cluster(2, 8)); };
  expect_error(read_back(without_token(cmd, " --num-experts 8")), "--num-experts", "dense model");
  expect_error(read_back(without_token(cmd, " --moe-token-dispatcher-type alltoall") +
                         " --moe-token-dispatcher-type flex"),
               "--moe-token-dispatcher-type", "flex");
  expect_error(read_back(without_token(cmd, " --moe-grouped-gemm")), "--moe-grouped-gemm", "SequentialMLP");
  expect_error(read_back(cmd + " --moe-router-topk 4"), "--moe-router-topk", "2 experts");
  const std::string no_ep = without_token(cmd, " --expert-model-parallel-size 4");
  const std::string neither = without_token(no_ep, " --expert-tensor-parallel-size 1");
  // Megatron's defaults: no expert parallelism, expert tensor parallelism = tp.
  auto defaults = read_back(neither);
  ASSERT_TRUE(defaults) << defaults.error().to_string();
  EXPECT_EQ(defaults->plan.ep, 1);
  EXPECT_EQ(defaults->plan.etp, 4);
  expect_error(read_back(neither + " --expert-model-parallel-size 4"), "--expert-model-parallel-size", "(tp·cp·dp)");
  expect_error(read_back(no_ep + " --expert-model-parallel-size 3"), "--expert-model-parallel-size",
               "divide the 8 experts");
  // A dense model given expert flags.
  auto dense = export_plan(Engine::kMegatron, {model("llama3-8b"), cluster(2, 8), training(128, 4096),
                                               testing::plan(2, 4, {16, 16}, 1, 64, 1), {}});
  ASSERT_TRUE(dense && dense->exported);
  expect_error(import_megatron_flags(command(dense->exported->options) + " --num-experts 8", model("llama3-8b"),
                                     cluster(2, 8)),
               "--num-experts", "dense");
  expect_error(import_megatron_flags(command(dense->exported->options) + " --expert-model-parallel-size 2",
                                     model("llama3-8b"), cluster(2, 8)),
               "--expert-model-parallel-size", "no experts");
}

TEST(MoeExport, OtherEnginesRefuseMixturesOfExperts) {
  for (Engine e : {Engine::kDeepSpeed, Engine::kTorchtitan}) {
    auto r = export_plan(e, {model("mixtral-8x7b"), cluster(2, 8), training(128, 4096), mixtral_plan(), {}});
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().path, "--to");
    EXPECT_NE(r.error().message.find("Megatron-LM only"), std::string::npos) << r.error().to_string();
  }
}

// The MoE all-to-all overlap: --overlap-moe-expert-parallel-comm with the interleaved schedule,
// CUDA_DEVICE_MAX_CONNECTIONS above 1 for its communication stream, read back; Megatron-LM's own
// checks on import, and a plan Megatron cannot overlap (pp > 1 without chunks) loses it by name.
TEST(MoeExport, AllToAllOverlapRoundTripsWithMegatronsRules) {
  const auto m = model("mixtral-8x7b");
  auto t = training(128, 4096);
  auto p = mixtral_plan(m.num_layers);
  p.virtual_pipeline_stages = 2;
  p.overlap_moe_a2a = true;
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8, "H100-SXM5-80GB"), t, p, {}});
  ASSERT_TRUE(r && r->exported) << (r ? (r->reasons.empty() ? "" : r->reasons[0].to_string()) : r.error().to_string());
  const auto& o = r->exported->options;
  EXPECT_TRUE(value(o, "--overlap-moe-expert-parallel-comm").has_value());
  ASSERT_EQ(r->exported->environment.size(), 1u);
  EXPECT_EQ(r->exported->environment[0].value, "32");
  auto back = import_megatron_flags(command(o), m, cluster(2, 8, "H100-SXM5-80GB"));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_TRUE(back->plan.overlap_moe_a2a);
  // Without interleaving Megatron-LM asserts; the nearest plan turns the overlap off.
  auto flat = p;
  flat.virtual_pipeline_stages = 1;
  std::vector<Error> why;
  EXPECT_FALSE(expressible(flat, Engine::kMegatron, &why, &t, &m));
  bool named = false;
  for (const auto& w : why) named |= w.path == "plan.overlap_moe_a2a";
  EXPECT_TRUE(named);
  EXPECT_FALSE(nearest_expressible(flat, Engine::kMegatron, &t, &m).plan.overlap_moe_a2a);
  const std::string flags = command(o);
  expect_error(import_megatron_flags(without_token(flags, " --moe-token-dispatcher-type alltoall"), m,
                                     cluster(2, 8, "H100-SXM5-80GB")),
               "--overlap-moe-expert-parallel-comm", "alltoall");
  // The importer refuses by the same rule the nearest plan follows (one home: megatron_moe_overlap_refusal).
  expect_error(import_megatron_flags(without_token(flags, " --num-virtual-stages-per-pipeline-rank 2"), m,
                                     cluster(2, 8, "H100-SXM5-80GB")),
               "--overlap-moe-expert-parallel-comm", "interleaved schedule");
  expect_error(import_megatron_flags(without_token(flags, " --overlap-moe-expert-parallel-comm") +
                                         " --delay-wgrad-compute",
                                     m, cluster(2, 8, "H100-SXM5-80GB")),
               "--delay-wgrad-compute", "--overlap-moe-expert-parallel-comm");
}

}  // namespace
}  // namespace mist::engines
