// mist export / mist import end to end: refusal with the nearest plan, export of that plan, and
// import of the exported options back into the same plan.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "run_mist.hpp"

namespace mist::cli {
namespace {

namespace fs = std::filesystem;
using testing::kExamples;
using testing::mist;
using testing::Outcome;

std::string temp_path(const std::string& name) {
  const fs::path dir = testing::scratch_dir("export-cli");
  return (dir / name).string();
}

std::string write(const std::string& name, const std::string& text) {
  const std::string p = temp_path(name);
  std::ofstream(p) << text;
  return p;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> export_args(const std::string& plan, const std::string& to) {
  return {"export", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
          kExamples + "training_gpt.json", "--plan", plan, "--to", to};
}

TEST(ExportCli, RefusesWithTheNearestPlanThenExportsAndImportsIt) {
  // The example plan recomputes 6 blocks on the first stage only: Megatron needs one count.
  auto refused = mist(export_args(kExamples + "plan_gpt13b_2x8.json", "megatron"));
  EXPECT_EQ(refused.code, kExitInvalidInput);
  EXPECT_NE(refused.err.find("plan.stages[1].ckpt_layers"), std::string::npos) << refused.err;
  auto nearest = nlohmann::json::parse(refused.out);
  EXPECT_EQ(nearest["stages"][1]["ckpt_layers"], 6);

  const std::string plan = write("nearest.json", refused.out);
  auto flags = mist(export_args(plan, "megatron"));
  ASSERT_EQ(flags.code, kExitOk) << flags.err;
  EXPECT_NE(flags.out.find("--recompute-num-layers 6"), std::string::npos) << flags.out;
  EXPECT_NE(flags.err.find("mist: note:"), std::string::npos);

  auto back = mist({"import", "--from-megatron=" + flags.out, "--model", "gpt3-13b", "--cluster",
                    kExamples + "cluster_2x8_a100.json", "--training", kExamples + "training_gpt.json"});
  ASSERT_EQ(back.code, kExitOk) << back.err;
  EXPECT_EQ(nlohmann::json::parse(back.out), nearest);
  // The imported plan predicts.
  auto predicted = mist({"predict", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json",
                         "--training", kExamples + "training_gpt.json", "--plan", write("back.json", back.out)});
  EXPECT_EQ(predicted.code, kExitOk) << predicted.err;
}

TEST(ExportCli, DeepSpeedConfigToAFileAndFlagsToStdout) {
  auto refused = mist(export_args(kExamples + "plan_gpt13b_2x8.json", "deepspeed"));
  ASSERT_EQ(refused.code, kExitInvalidInput);
  const std::string plan = write("ds_nearest.json", refused.out);
  const std::string config = temp_path("ds_config.json");
  auto args = export_args(plan, "deepspeed");
  args.insert(args.end(), {"--out", config});
  auto x = mist(args);
  ASSERT_EQ(x.code, kExitOk) << x.err;
  EXPECT_NE(x.out.find("--deepspeed_config " + config), std::string::npos) << x.out;
  EXPECT_EQ(nlohmann::json::parse(read(config))["zero_optimization"]["stage"], 1);
  auto back = mist({"import", "--from-deepspeed", config, "--megatron-flags", x.out, "--model", "gpt3-13b",
                    "--cluster", kExamples + "cluster_2x8_a100.json"});
  ASSERT_EQ(back.code, kExitOk) << back.err;
  EXPECT_EQ(nlohmann::json::parse(back.out), nlohmann::json::parse(refused.out));
}

TEST(ExportCli, UsageErrors) {
  auto bad = mist(export_args(kExamples + "plan_gpt13b_2x8.json", "colossal"));
  EXPECT_EQ(bad.code, kExitInvalidInput);
  auto two = mist({"import", "--from-megatron", "--micro-batch-size 1", "--from-torchtitan", "x", "--model",
                   "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json"});
  EXPECT_EQ(two.code, kExitInvalidInput);
  EXPECT_NE(two.err.find("exactly one"), std::string::npos) << two.err;
  auto flag = mist({"import", "--from-megatron=--micro-batch-size x", "--model", "gpt3-13b", "--cluster",
                    kExamples + "cluster_2x8_a100.json"});
  EXPECT_EQ(flag.code, kExitInvalidInput);
  EXPECT_NE(flag.err.find("--micro-batch-size: expects a whole number"), std::string::npos) << flag.err;
}

}  // namespace
}  // namespace mist::cli
