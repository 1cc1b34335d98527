// plan.stages[i].chunk_layers: the blocks of each interleaved model chunk where they differ
// (Megatron's accounting flags and layouts). Parsed, written back, checked against the stage and
// the chunk count, and refused by name when they do not fit.
#include <gtest/gtest.h>

#include "plan/plan.hpp"

namespace mist::plan {
namespace {

spec::ModelSpec model() { return *spec::catalog_model("llama3-8b"); }  // 32 blocks
spec::ClusterSpec cluster() {
  return *spec::cluster_from_json(Json{{"gpu", "H100-SXM5-80GB"}, {"nodes", 1}, {"gpus_per_node", 8}}, "cluster");
}
spec::TrainingSpec training() {
  return *spec::training_from_json(Json{{"global_batch_size", 64}, {"seq_length", 4096}}, "training");
}

// Layout "Et*3|t*4|t*4|t*4|t*4|t*4|t*4|t*5L" on pp 4: stage 0 builds 3 + 4, stage 3 builds 4 + 5.
Json uneven_plan() {
  return Json::parse(R"({"dp": 1, "tp": 2, "pp": 4, "micro_batch_size": 1, "grad_accum_steps": 64,
    "virtual_pipeline_stages": 2,
    "stages": [{"num_layers": 7, "chunk_layers": [3, 4]}, {"num_layers": 8}, {"num_layers": 8},
               {"num_layers": 9, "chunk_layers": [4, 5]}]})");
}

Error error_of(const Json& j) {
  auto p = plan_from_json(j, "plan");
  if (!p) return p.error();
  auto v = validate_plan(*p, model(), cluster(), training());
  if (!v) return v.error();
  ADD_FAILURE() << "plan was accepted: " << j.dump();
  return {};
}

TEST(ChunkLayers, ParsedCheckedAndWrittenBack) {
  auto p = plan_from_json(uneven_plan(), "plan");
  ASSERT_TRUE(p) << p.error().to_string();
  ASSERT_TRUE(validate_plan(*p, model(), cluster(), training())) << "uneven chunks of the right sizes";
  EXPECT_TRUE(uneven_chunks(*p));
  EXPECT_EQ(stage_chunk_layers(*p, 0), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(stage_chunk_layers(*p, 1), (std::vector<int64_t>{4, 4}));  // num_layers / v each
  EXPECT_EQ(stage_chunk_layers(*p, 3), (std::vector<int64_t>{4, 5}));
  auto back = plan_from_json(plan_to_json(*p), "plan");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, *p);
  // A stage of 9 blocks in 2 chunks needs its chunks stated; without them it is refused as before.
  Json j = uneven_plan();
  j["stages"][3].erase("chunk_layers");
  EXPECT_EQ(error_of(j).path, "plan.stages[3].num_layers");
  // Equal chunks stated are equal chunks.
  Json same = uneven_plan();
  same["stages"][1]["chunk_layers"] = Json::array({4, 4});
  auto q = plan_from_json(same, "plan");
  ASSERT_TRUE(q && validate_plan(*q, model(), cluster(), training()));
  EXPECT_EQ(stage_chunk_layers(*q, 1), stage_chunk_layers(*p, 1));
}

TEST(ChunkLayers, RefusedByNameWhenTheyDoNotFit) {
  struct Case {
    std::string pointer;
    Json value;
    std::string path, words;
  };
  const Case cases[] = {
      {"/stages/0/chunk_layers", Json::array({3, 3}), "plan.stages[0].chunk_layers", "adds up to 6 blocks but the "
                                                                                    "stage's num_layers is 7"},
      {"/stages/0/chunk_layers", Json::array({3, 2, 2}), "plan.stages[0].chunk_layers",
       "has 3 entries but virtual_pipeline_stages is 2"},
      {"/stages/0/chunk_layers", Json::array({3, -1}), "plan.stages[0].chunk_layers[1]", "whole number from 0"},
      {"/stages/0/chunk_layers", Json::array({3, 4.5}), "plan.stages[0].chunk_layers[1]", "whole number from 0"},
      {"/stages/0/chunk_layers", Json::array(), "plan.stages[0].chunk_layers", "list of 1 to"},
      {"/stages/0/chunk_layers", "3,4", "plan.stages[0].chunk_layers", "list of 1 to"},
  };
  for (const auto& c : cases) {
    Json j = uneven_plan();
    j[Json::json_pointer(c.pointer)] = c.value;
    const Error e = error_of(j);
    EXPECT_EQ(e.path, c.path) << c.pointer << " = " << c.value.dump();
    EXPECT_NE(e.message.find(c.words), std::string::npos) << e.message;
  }
  // Without interleaving there are no chunks to state.
  Json flat = Json::parse(R"({"dp": 1, "tp": 2, "pp": 4, "micro_batch_size": 1, "grad_accum_steps": 64,
    "stages": [{"num_layers": 8, "chunk_layers": [8]}, {"num_layers": 8}, {"num_layers": 8}, {"num_layers": 8}]})");
  const Error e = error_of(flat);
  EXPECT_EQ(e.path, "plan.stages[0].chunk_layers");
  EXPECT_NE(e.message.find("virtual_pipeline_stages of 2 or more"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace mist::plan
