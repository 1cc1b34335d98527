// The capability data the tuner will query agrees with the checks: every nearest plan stays
// inside what EngineCaps says, and the reasons name plan fields.
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "export/capability.hpp"
#include "export_jobs.hpp"

namespace mist::engines {
namespace {

TEST(Capability, EngineNames) {
  for (Engine e : all_engines()) EXPECT_EQ(*engine_from_string(to_string(e)), e);
  auto bad = engine_from_string("colossal");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().path, "engine");
}

TEST(Capability, NearestPlansStayInsideTheCapabilityData) {
  std::mt19937 rng(3);
  const auto m = testing::model("llama2-13b");
  const auto c = testing::cluster(2, 8);
  const auto t = testing::training(512, 4096);
  for (int i = 0; i < 300; ++i) {
    const auto p = testing::random_plan(rng, m, c, t);
    for (Engine e : all_engines()) {
      const EngineCaps& caps = engine_caps(e);
      const Nearest n = nearest_expressible(p, e, &t);
      const auto& q = n.plan;
      SCOPED_TRACE(plan::plan_to_json(p).dump());
      for (const auto& s : q.stages) {
        // Under PP only where there is something to shard (dp·cp > 1: torchtitan's FSDP is on).
        const bool sharded_pp = q.pp > 1 && q.dp * q.cp > 1;
        EXPECT_TRUE((sharded_pp ? caps.zero_levels_with_pp : caps.zero_levels)[static_cast<size_t>(s.zero)]) << to_string(e);
        if (!caps.per_stage_zero) { EXPECT_EQ(s.zero, q.stages[0].zero); }
        if (!caps.offload.weights) { EXPECT_EQ(s.offload.weights, 0); }
        if (caps.offload.weights_need_zero3 && s.offload.weights > 0) { EXPECT_EQ(s.zero, 3); }
        if (!caps.offload.optimizer_any_fraction) {
          EXPECT_TRUE(s.offload.optimizer_states == 0 || s.offload.optimizer_states == 1);
        }
        if (s.offload.optimizer_states > 0) { EXPECT_GE(s.zero, caps.offload.optimizer_min_zero); }
        if (s.offload.optimizer_states > 0 && s.offload.optimizer_states < 1) {
          EXPECT_GE(s.zero, caps.offload.optimizer_fraction_min_zero);
        }
        if (caps.offload.tied_whole) {
          EXPECT_TRUE(s.offload.weights == s.offload.gradients && s.offload.gradients == s.offload.optimizer_states);
        }
        if (!caps.offload.activations_by_block) { EXPECT_EQ(s.offload.activations, 0); }
        if (caps.full_recompute == RecomputeSupport::kAllOrNone) {
          EXPECT_TRUE(s.ckpt_layers == 0 || s.ckpt_layers == s.num_layers);
        }
      }
      if (!caps.virtual_stages) { EXPECT_EQ(q.virtual_pipeline_stages, 1); }
      if (!caps.selective_recompute) { EXPECT_EQ(q.recompute, plan::Recompute::kNone); }
      // Every reason names a plan field.
      for (const auto& r : inexpressible_reasons(p, e, &t)) EXPECT_TRUE(r.path.starts_with("plan")) << r.to_string();
    }
  }
}

// Context parallelism: every nearest plan with cp > 1 runs an exchange the engine has, with tp, pp
// and key/value heads its CpCaps allow; the CP ranks that go become data-parallel ranks; nearest is
// a fixed point.
TEST(Capability, NearestCpPlansStayInsideTheCpCaps) {
  const auto t = testing::training(16, 131072);
  for (const char* name : {"llama2-7b", "llama3-8b", "llama2-13b"}) {
    const auto m = testing::model(name);
    for (int64_t tp : {1, 2})
      for (int64_t pp : {1, 2})
        for (int64_t cp : {2, 4, 8, 16})
          for (auto comm : {plan::CpComm::kRing, plan::CpComm::kAllToAll, plan::CpComm::kAllGather}) {
            std::vector<int64_t> layers(static_cast<size_t>(pp), m.num_layers / pp);
            auto p = testing::plan(1, tp, layers, 1, 16, /*zero=*/1);
            p.cp = cp;
            p.cp_comm = comm;
            p.sequence_parallel = tp > 1;
            for (Engine e : all_engines()) {
              const CpCaps& caps = engine_caps(e).cp;
              const auto n = nearest_expressible(p, e, &t, &m).plan;
              SCOPED_TRACE(fmt::format("{} {} {}", name, to_string(e), plan::plan_to_json(p).dump()));
              EXPECT_EQ(nearest_expressible(n, e, &t, &m).plan, n);
              EXPECT_EQ(n.dp * n.cp, p.dp * p.cp);
              if (n.cp == 1) continue;
              EXPECT_EQ(n.cp, p.cp);
              EXPECT_TRUE(caps.runs(n.cp_comm));
              if (!caps.with_tp) { EXPECT_EQ(n.tp, 1); }
              if (!caps.with_pp) { EXPECT_EQ(n.pp, 1); }
              if (!caps.grouped_kv) { EXPECT_EQ(m.num_kv_heads, m.num_heads); }
              // An exchange the rules chose (not the plan's own) is one the model allows.
              if (n.cp_comm != p.cp_comm) { EXPECT_TRUE(plan::check_cp(m, t, n.cp, n.cp_comm, n.tp)); }
            }
          }
  }
}

TEST(Capability, CanonicalForgetsFieldsWithoutEffect) {
  auto p = testing::plan(1, 1, {32}, 4, 8);
  p.overlap_grad_reduce = p.overlap_param_gather = false;
  p.overlap_tp_comm = true;
  const auto c = canonical(p);
  EXPECT_TRUE(c.overlap_grad_reduce);
  EXPECT_TRUE(c.overlap_param_gather);
  EXPECT_FALSE(c.overlap_tp_comm);
  auto q = testing::plan(8, 2, {32}, 4, 8, 1);
  q.overlap_param_gather = false;
  EXPECT_EQ(canonical(q), q);
}

// A plan file that leaves the switches out gets the engine's: DeepSpeed below ZeRO-2 reduces
// gradients after the backward, adds each micro-batch's gradients with a kernel of its own and
// runs the TP backward collectives synchronously. A stated switch stays, and Megatron-LM's
// defaults are the plan form's.
TEST(Capability, UnstatedSwitchesAreTheEnginesOwn) {
  const auto m = testing::model("llama2-13b");
  const auto t = testing::training(512, 4096);
  const Json base = {{"dp", 4}, {"tp", 2}, {"pp", 2}, {"micro_batch_size", 2}, {"grad_accum_steps", 64},
                     {"stages", Json::array({Json{{"num_layers", 20}}, Json{{"num_layers", 20}}})}};
  auto left_out = plan::plan_from_json(base, "plan");
  ASSERT_TRUE(left_out) << left_out.error().to_string();
  plan::Plan ds = *left_out;
  const auto notes = take_engine_switches(ds, Engine::kDeepSpeed, &t, &m);
  EXPECT_FALSE(ds.overlap_grad_reduce);
  EXPECT_FALSE(ds.grad_accumulation_fusion);
  EXPECT_FALSE(ds.async_tp_backward);
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_TRUE(notes[0].starts_with("plan.overlap_grad_reduce: true -> false (below ZeRO-2 DeepSpeed")) << notes[0];
  // Only the switches move: the layout and the stages are the file's.
  plan::Plan same = ds;
  same.overlap_grad_reduce = same.grad_accumulation_fusion = same.async_tp_backward = true;
  EXPECT_EQ(same, *left_out);
  // Stated, a switch stays what the file says.
  Json stated = base;
  stated["overlap_grad_reduce"] = true;
  stated["async_tp_backward"] = true;
  auto kept = plan::plan_from_json(stated, "plan");
  ASSERT_TRUE(kept);
  EXPECT_EQ(take_engine_switches(*kept, Engine::kDeepSpeed, &t, &m).size(), 1u);  // the fusion only
  EXPECT_TRUE(kept->overlap_grad_reduce);
  EXPECT_TRUE(kept->async_tp_backward);
  // Megatron-LM runs the plan form's defaults; torchtitan's TP backward is synchronous.
  plan::Plan mg = *left_out;
  EXPECT_TRUE(take_engine_switches(mg, Engine::kMegatron, &t, &m).empty());
  EXPECT_EQ(mg, *left_out);
  plan::Plan tt = *left_out;
  take_engine_switches(tt, Engine::kTorchtitan, &t, &m);
  EXPECT_FALSE(tt.async_tp_backward);
  EXPECT_FALSE(tt.grad_accumulation_fusion);
}

}  // namespace
}  // namespace mist::engines
