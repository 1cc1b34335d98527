// `mist tune`: engine restriction, the MILP solver, --compare-to, and their bad input.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/json_fields.hpp"
#include "run_mist.hpp"

namespace mist::cli {
namespace {

using testing::mist;

std::string write(const std::string& name, const std::string& text) {
  const auto path = (testing::scratch_dir("tune-cli") / name).string();
  std::ofstream(path) << text;
  return path;
}

// A job small enough to tune in well under a second: 8 blocks of width 1024 on 4 L4s.
std::vector<std::string> job(std::vector<std::string> extra) {
  static const std::string model = write("model.json", R"({"name": "tune-cli-gpt", "family": "gpt", "num_layers": 8,
      "hidden_size": 1024, "num_heads": 8, "ffn_hidden_size": 4096, "vocab_size": 32000,
      "max_position_embeddings": 2048, "norm": "layernorm", "mlp": "gelu", "positions": "learned"})");
  static const std::string cluster = write("cluster.json", R"({"gpu": "L4-24GB", "nodes": 1, "gpus_per_node": 4})");
  static const std::string training =
      write("training.json", R"({"global_batch_size": 16, "seq_length": 1024, "precision": "bf16"})");
  std::vector<std::string> args = {"tune", "--model", model, "--cluster", cluster, "--training", training};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(TuneCli, EngineRestrictedPlansAndStats) {
  auto o = mist(job({"--engine", "megatron", "--json"}));
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = Json::parse(o.out);
  EXPECT_EQ(j["space"], "megatron");
  // One ZeRO level and no weight or gradient offload on every stage: Megatron-LM's flags.
  const auto& stages = j["plan"]["stages"];
  for (const auto& s : stages) {
    EXPECT_EQ(s["zero"], stages[0]["zero"]);
    EXPECT_EQ(s["offload"]["weights"], 0.0);
    EXPECT_EQ(s["offload"]["gradients"], 0.0);
  }
  EXPECT_GT(j["stats"]["layouts"].get<int>(), 0);
  EXPECT_GT(j["simulated_time_s"].get<double>(), 0);
}

TEST(TuneCli, MilpSolverGivesTheSamePlanTime) {
  auto dp = mist(job({"--json", "--no-rerank"}));
  auto milp = mist(job({"--json", "--no-rerank", "--solver", "milp"}));
  ASSERT_EQ(dp.code, 0) << dp.err;
  ASSERT_EQ(milp.code, 0) << milp.err;
  const auto a = Json::parse(dp.out), b = Json::parse(milp.out);
  EXPECT_NEAR(a["prediction"]["iteration_time_s"].get<double>() / b["prediction"]["iteration_time_s"].get<double>(),
              1.0, 1e-6);
  EXPECT_GT(b["stats"]["milp_solves"].get<int>(), 0);
}

TEST(TuneCli, CompareToPrintsTheSpeedupOverTheUsersFlags) {
  const std::string flags =
      "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 1 "
      "--global-batch-size 16 --seq-length 1024 --bf16";
  auto o = mist(job({"--compare-to", flags, "--json"}));
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = Json::parse(o.out);
  ASSERT_TRUE(j.contains("compare_to"));
  const auto& c = j["compare_to"];
  EXPECT_EQ(c["plan"]["dp"], 4);
  // mist searches a space that contains the user's plan, so it is never slower.
  EXPECT_GE(c["speedup"].get<double>(), 1.0 - 1e-9);
  EXPECT_NEAR(c["speedup"].get<double>(),
              c["iteration_time_s"].get<double>() / j["prediction"]["iteration_time_s"].get<double>(), 1e-12);
  auto text = mist(job({"--compare-to", flags}));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("your configuration"), std::string::npos) << text.out;
}

TEST(TuneCli, BadOptionsNameTheField) {
  struct Case {
    std::vector<std::string> extra;
    const char* field;
  };
  const Case cases[] = {{{"--solver", "simplex"}, "--solver"},
                        {{"--engine", "jax"}, "engine"},
                        {{"--engine", "megatron", "--space", "deepspeed"}, "--engine"},
                        {{"--solver", "milp", "--milp-time-limit", "0"}, "--milp-time-limit"},
                        {{"--virtual-stages", "0"}, "--virtual-stages"},
                        {{"--virtual-stages", "1,,2"}, "--virtual-stages"},
                        {{"--virtual-stages", "2x"}, "--virtual-stages"},
                        {{"--virtual-stages", "99999999999999999999"}, "--virtual-stages"},
                        {{"--compare-to", "--tensor-model-parallel-size 3"}, "tensor"},
                        {{"--compare-to", "--tensor-model-parallel-size 1", "--compare-megatron-flags", "--bf16"},
                         "--compare-megatron-flags"}};
  for (const auto& c : cases) {
    auto o = mist(job(c.extra));
    EXPECT_EQ(o.code, 2) << c.field << ": " << o.err;
    EXPECT_NE(o.err.find(c.field), std::string::npos) << o.err;
  }
}

// --virtual-stages decides which schedules the search may return: with 1 only 1F1B, with 2 alone
// every pipelined plan interleaves (and plans without a pipeline stay possible). Megatron-LM's
// knobs (no ZeRO-3, no weight offload) on one GPU per node (no tensor parallelism) make this
// model pipeline over 4 stages with 4 micro-batches, where the bubble is large.
TEST(TuneCli, VirtualStagesRestrictTheSchedule) {
  const std::string model = write("model_deep.json", R"({"name": "tune-cli-deep", "family": "gpt", "num_layers": 16,
      "hidden_size": 6144, "num_heads": 48, "ffn_hidden_size": 24576, "vocab_size": 32000,
      "max_position_embeddings": 2048, "norm": "layernorm", "mlp": "gelu", "positions": "learned"})");
  const std::string cluster = write("cluster_4x1.json", R"({"gpu": "L4-24GB", "nodes": 4, "gpus_per_node": 1})");
  const std::string training =
      write("training_small_batch.json", R"({"global_batch_size": 4, "seq_length": 2048, "precision": "bf16"})");
  auto args = [&](const char* v) {
    auto a = job({"--json", "--top", "5", "--engine", "megatron", "--virtual-stages", v});
    a[2] = model;     // --model
    a[4] = cluster;   // --cluster
    a[6] = training;  // --training
    return a;
  };
  auto one = mist(args("1")), two = mist(args("2")), any = mist(args("1,2,4"));
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(two.code, 0) << two.err;
  ASSERT_EQ(any.code, 0) << any.err;
  auto v_of = [](const Json& p) { return p.value("virtual_pipeline_stages", 1); };
  const auto a = Json::parse(one.out), b = Json::parse(two.out), c = Json::parse(any.out);
  EXPECT_EQ(v_of(a["plan"]), 1);
  for (const auto& alt : b["alternatives"]) {
    const auto& p = alt["plan"];
    if (p["pp"].get<int>() > 1) {
      EXPECT_EQ(v_of(p), 2);
    }
  }
  // On this job the best plan pipelines and interleaves, and the wider list finds it.
  EXPECT_GT(c["plan"]["pp"].get<int>(), 1);
  EXPECT_GT(v_of(c["plan"]), 1);
  EXPECT_LT(c["prediction"]["iteration_time_s"].get<double>(), a["prediction"]["iteration_time_s"].get<double>());
}

// A profile database that cannot be read stops the search before it starts, naming the field.
TEST(TuneCli, UnreadableProfileDatabaseIsRefusedUpFront) {
  const std::string cluster = write("cluster_bad_db.json",
                                    R"({"gpu": "L4-24GB", "nodes": 1, "gpus_per_node": 4, "profile_db": "no-such.db"})");
  auto args = job({});
  args[4] = cluster;  // --cluster
  auto o = mist(args);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("cluster.profile_db"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace mist::cli
