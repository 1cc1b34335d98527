// Determinism: the same input gives byte-identical --json output, run twice in one process.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli_util.hpp"

namespace mist::hardening {
namespace {

std::vector<std::string> example(const std::string& cmd, const std::string& plan = "plan_gpt13b_2x8.json") {
  auto a = job_args(cmd, "gpt3-13b", kExamples + "cluster_2x8_a100.json", kExamples + "training_gpt.json");
  if (!plan.empty()) a.insert(a.end(), {"--plan", kExamples + plan});
  return a;
}

void expect_same_twice(std::vector<std::string> args, int code, bool json = true) {
  if (json) args.push_back("--json");
  const Outcome a = mist(args), b = mist(args);
  ASSERT_EQ(a.code, code) << a.err;
  ASSERT_EQ(b.code, code) << b.err;
  EXPECT_FALSE(a.out.empty());
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.err, b.err);
}

TEST(Determinism, PredictJsonIsByteIdentical) {
  expect_same_twice(example("predict"), cli::kExitOk);
  expect_same_twice(example("predict", "plan_gpt13b_zero3_offload.json"), cli::kExitOk);
  auto sim = example("predict");
  sim.push_back("--simulate");
  expect_same_twice(sim, cli::kExitOk);
}

TEST(Determinism, ExportIsByteIdentical) {
  for (const char* engine : {"megatron", "torchtitan"}) {
    auto a = example("export");
    a.insert(a.end(), {"--to", engine});
    const Outcome x = mist(a), y = mist(a);
    EXPECT_EQ(x.code, y.code);
    EXPECT_FALSE(x.out.empty()) << engine;
    EXPECT_EQ(x.out, y.out) << engine;
    EXPECT_EQ(x.err, y.err) << engine;
  }
}

TEST(Determinism, TuneJsonIsByteIdentical) {
  const auto training = temp_file("tune_training.json", R"({"global_batch_size": 16, "seq_length": 512})");
  const auto cluster = temp_file("tune_cluster.json", R"({"gpu": "A100-SXM4-40GB", "nodes": 1, "gpus_per_node": 4})");
  auto args = job_args("tune", small_model_file(), cluster, training);
  args.push_back("--json");
  const Outcome a = mist(args), b = mist(args);
  ASSERT_EQ(a.code, cli::kExitOk) << a.err;
  ASSERT_EQ(b.code, cli::kExitOk) << b.err;
  // No wall-clock time in --json (the text summary has it), so every byte must match.
  EXPECT_FALSE(nlohmann::json::parse(a.out)["stats"].contains("seconds"));
  EXPECT_EQ(a.out, b.out);
}

}  // namespace
}  // namespace mist::hardening
