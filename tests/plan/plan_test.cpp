#include "plan/plan.hpp"

#include <gtest/gtest.h>

namespace mist::plan {
namespace {

spec::ModelSpec model() { return *spec::catalog_model("llama2-7b"); }  // 32 layers, 32 heads
spec::ClusterSpec cluster(int64_t nodes = 2) {
  return *spec::cluster_from_json(Json{{"gpu", "A100-SXM4-80GB"}, {"nodes", nodes}, {"gpus_per_node", 8}}, "cluster");
}
spec::TrainingSpec training(int64_t gbs = 256) {
  return *spec::training_from_json(Json{{"global_batch_size", gbs}, {"seq_length", 4096}}, "training");
}

Json good_plan() {
  return Json::parse(R"({"dp": 2, "tp": 4, "pp": 2, "sequence_parallel": true, "micro_batch_size": 2,
    "grad_accum_steps": 64, "recompute": "selective",
    "stages": [{"num_layers": 15, "zero": 1, "ckpt_layers": 4, "offload": {"optimizer_states": 0.5}},
               {"num_layers": 17}]})");
}

Error error_of(const Json& j, const spec::TrainingSpec& t = training(), const spec::ClusterSpec& c = cluster()) {
  auto p = plan_from_json(j, "plan");
  if (!p) return p.error();
  auto v = validate_plan(*p, model(), c, t);
  if (!v) return v.error();
  ADD_FAILURE() << "plan was accepted: " << j.dump();
  return {};
}

TEST(Plan, ParsesValidatesAndRoundTrips) {
  auto p = plan_from_json(good_plan(), "plan");
  ASSERT_TRUE(p.has_value()) << p.error().to_string();
  EXPECT_EQ(p->stages[0].offload.optimizer_states, 0.5);
  EXPECT_EQ(p->recompute, Recompute::kSelective);
  EXPECT_EQ(p->virtual_pipeline_stages, 1);
  EXPECT_TRUE(validate_plan(*p, model(), cluster(), training()).has_value());
  auto back = plan_from_json(plan_to_json(*p), "plan");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, *p);
}

TEST(Plan, RejectsEachBrokenRuleByName) {
  struct Case {
    std::string pointer;  // JSON pointer of the field to change
    Json value;
    std::string path, words;
  };
  const Case cases[] = {
      {"/stages/1/num_layers", 16, "plan.stages", "add up to 31 but the model has 32"},
      {"/dp", 4, "plan", "dp·tp·pp = 4·4·2 = 32 but the cluster has 16"},
      {"/grad_accum_steps", 63, "plan", "global_batch_size is 256"},
      {"/tp", 3, "plan", "= 12 but the cluster has 16 GPUs"},
      {"/stages/0/zero", 4, "plan.stages[0].zero", "at most 3"},
      {"/stages/0/ckpt_layers", 16, "plan.stages[0].ckpt_layers", "only 15"},
      {"/stages/0/offload/optimizer_states", 1.5, "plan.stages[0].offload.optimizer_states", "at most 1"},
      {"/stages/0/offload/weights", -0.1, "plan.stages[0].offload.weights", "at least 0"},
      {"/micro_batch_size", 0, "plan.micro_batch_size", "at least 1"},
      {"/micro_batch_size", -2, "plan.micro_batch_size", "at least 1"},
      {"/micro_batch_size", 1.5, "plan.micro_batch_size", "integer"},
      {"/micro_batch_size", "2", "plan.micro_batch_size", "integer"},
      {"/dp", 1e300, "plan.dp", "integer"},
      {"/dp", 99999999999LL, "plan.dp", "at most"},
      {"/recompute", "full", "plan.recompute", "one of"},
      {"/pp", 3, "plan.stages", "has 2 entries but pp is 3"},
      {"/micro_batch", 2, "plan.micro_batch", "unknown field"},
  };
  for (const auto& c : cases) {
    Json j = good_plan();
    j[Json::json_pointer(c.pointer)] = c.value;
    Error e = error_of(j);
    EXPECT_EQ(e.path, c.path) << c.pointer << ": " << e.to_string();
    EXPECT_NE(e.message.find(c.words), std::string::npos) << c.pointer << ": " << e.to_string();
  }
}

TEST(Plan, TensorParallelMustDivideHeads) {
  // llama2-70b: 64 heads, 8 kv heads; tp 16 divides the heads but not the kv heads.
  auto m = *spec::catalog_model("llama2-70b");
  auto p = uniform_plan(m, 1, 16, 1, 1, 256, {});
  auto v = validate_plan(p, m, cluster(), training());
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().path, "plan.tp");
  EXPECT_NE(v.error().message.find("key/value heads"), std::string::npos);
}

TEST(Plan, InterleavingRules) {
  Json j = good_plan();
  j["virtual_pipeline_stages"] = 2;
  Error e = error_of(j);  // 15 layers do not split in 2
  EXPECT_EQ(e.path, "plan.stages[0].num_layers");
  j["stages"][0]["num_layers"] = 16;
  j["stages"][1]["num_layers"] = 16;
  j["grad_accum_steps"] = 64;
  auto p = plan_from_json(j, "plan");
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(validate_plan(*p, model(), cluster(), training()).has_value());
}

TEST(Plan, Bf16NeedsAmpere) {
  auto c = *spec::cluster_from_json(Json{{"gpu", "V100-SXM2-32GB"}, {"nodes", 2}, {"gpus_per_node", 8}}, "cluster");
  auto t = training();
  t.precision = spec::Dtype::kBf16;
  auto p = plan_from_json(good_plan(), "plan");
  auto v = validate_plan(*p, model(), c, t);
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().path, "training.precision");
  t.precision = spec::Dtype::kFp16;
  EXPECT_TRUE(validate_plan(*p, model(), c, t).has_value());
}

TEST(Plan, UniformPlanSplitsLayers) {
  auto p = uniform_plan(model(), 2, 4, 3, 2, 64, {});
  ASSERT_EQ(p.stages.size(), 3u);
  EXPECT_EQ(p.stages[0].num_layers + p.stages[1].num_layers + p.stages[2].num_layers, 32);
  EXPECT_EQ(p.stages[0].num_layers, 11);
  EXPECT_EQ(p.stages[2].num_layers, 10);
}

}  // namespace
}  // namespace mist::plan
