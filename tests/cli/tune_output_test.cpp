// What `mist tune` says about its plans (issue 18): which engines run each one, each engine's best
// plan and its gap, the plan in words with a legend, what decided the winner, progress only for a
// terminal, and --compare-to keeping the training file's job.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/json_fields.hpp"
#include "run_mist.hpp"

namespace mist::cli {
namespace {

using testing::kExamples;
using testing::mist;

std::string write(const std::string& name, const std::string& text) {
  const auto path = (testing::scratch_dir("tune-output") / name).string();
  std::ofstream(path) << text;
  return path;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The README's example: its best plan is one no engine runs (2026-12-04: a different ZeRO level per
// stage; before, weights offloaded under ZeRO-1), and some of the alternatives run on Megatron-LM.
std::vector<std::string> gpt13b(std::vector<std::string> extra) {
  std::vector<std::string> args = {"tune", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json",
                                   "--training", kExamples + "training_gpt.json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

int export_code(const Json& plan, const std::string& engine) {
  static int n = 0;
  const std::string path = write("plan" + std::to_string(n++) + ".json", plan.dump());
  return mist({"export", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
               kExamples + "training_gpt.json", "--plan", path, "--to", engine})
      .code;
}

const Json& tuned() {
  static const Json j = [] {
    auto o = mist(gpt13b({"--json"}));
    EXPECT_EQ(o.code, 0) << o.err;
    return Json::parse(o.out);
  }();
  return j;
}

TEST(TuneOutput, ThePlansMarkedRunnablePassEachEnginesExport) {
  const Json& j = tuned();
  std::vector<std::pair<Json, Json>> listed = {{j["plan"], j["runnable_on"]}};
  for (const auto& a : j["alternatives"]) listed.push_back({a["plan"], a["runnable_on"]});
  int runnable = 0, not_runnable = 0;
  for (const auto& [plan, on] : listed)
    for (const char* e : {"megatron", "deepspeed", "torchtitan"}) {
      const bool marked = std::find(on.begin(), on.end(), Json(e)) != on.end();
      EXPECT_EQ(export_code(plan, e), marked ? 0 : 2) << e << " " << plan.dump();
      (marked ? runnable : not_runnable)++;
    }
  // The example has both kinds: the test checks something either way.
  EXPECT_GT(runnable, 0);
  EXPECT_GT(not_runnable, 0);
  EXPECT_TRUE(j["runnable_on"].empty()) << "the best plan offloads weights under ZeRO-1";
}

TEST(TuneOutput, EachEnginesBestPlanIsWhatTuneEngineFindsAndRunsThere) {
  const Json& j = tuned();
  ASSERT_EQ(j["engines"].size(), 3u);
  const char* names[] = {"megatron", "deepspeed", "torchtitan"};
  for (size_t i = 0; i < 3; ++i) {
    const auto& e = j["engines"][i];
    EXPECT_EQ(e["engine"], names[i]);
    ASSERT_TRUE(e["feasible"].get<bool>()) << e.dump();
    EXPECT_EQ(export_code(e["plan"], names[i]), 0) << e.dump();
    auto alone = mist(gpt13b({"--json", "--engine", names[i]}));
    ASSERT_EQ(alone.code, 0) << alone.err;
    const auto a = Json::parse(alone.out);
    EXPECT_EQ(a["plan"], e["plan"]);
    EXPECT_EQ(a["prediction"]["iteration_time_s"], e["iteration_time_s"]);
    EXPECT_FALSE(a.contains("engines"));
    EXPECT_NEAR(e["gap"].get<double>(),
                e["simulated_time_s"].get<double>() / e["mist_plan_simulated_s"].get<double>() - 1, 1e-12);
  }
  // With Megatron-LM's calibration (the full space's), the full space's plan is the faster one.
  EXPECT_EQ(j["engines"][0]["mist_plan_time_s"], j["prediction"]["iteration_time_s"]);
  EXPECT_GT(j["engines"][0]["gap"].get<double>(), 0);
  auto skipped = mist(gpt13b({"--json", "--no-engines"}));
  ASSERT_EQ(skipped.code, 0) << skipped.err;
  EXPECT_FALSE(Json::parse(skipped.out).contains("engines"));
}

TEST(TuneOutput, GapsAndTheTermsThatDecidedTheWinner) {
  const Json& j = tuned();
  const double best = j["simulated_time_s"].get<double>();
  for (const auto& a : j["alternatives"])
    EXPECT_NEAR(a["gap"].get<double>(), a["simulated_time_s"].get<double>() / best - 1, 1e-12);
  // The terms add up to each plan's iteration.
  double sum_best = 0, sum_runner = 0;
  for (const auto& t : j["decided_by"]) sum_best += t["best_s"].get<double>(), sum_runner += t["runner_up_s"].get<double>();
  EXPECT_NEAR(sum_best, j["prediction"]["iteration_time_s"].get<double>(), 1e-9 * sum_best);
  EXPECT_NEAR(sum_runner, j["alternatives"][0]["iteration_time_s"].get<double>(), 1e-9 * sum_runner);
  auto text = mist(gpt13b({}));
  ASSERT_EQ(text.code, 0) << text.err;
  // The words and the gap are the JSON's plan and runner-up, as the text prints them.
  const Json& s0 = j["plan"]["stages"][0];
  const int v = j["plan"]["virtual_pipeline_stages"].get<int>(), n = s0["num_layers"].get<int>();
  const std::string stage0 =
      (v > 1 ? "stage 0: " + std::to_string(n) + " layers in " + std::to_string(v) + " chunks"
             : "stage 0: layers 0-" + std::to_string(n - 1)) +
      ", ZeRO-" + std::to_string(s0["zero"].get<int>());
  char gap[32];
  std::snprintf(gap, sizeof gap, "%.1f%%", 100 * j["alternatives"][0]["gap"].get<double>());
  const std::string leads = std::string("#1 leads #2 by ") + gap + ":";
  for (const std::string& s : {std::string("legend: dp, tp, pp"), std::string("runs on"), std::string("#1 in words:"),
                               stage0, leads, "+" + std::string(gap), std::string("each engine's best plan"),
                               std::string("  megatron  "), std::string("  torchtitan  ")})
    EXPECT_NE(text.out.find(s), std::string::npos) << s << "\n" << text.out;
  EXPECT_TRUE(text.out.find("nothing offloaded") != std::string::npos ||
              text.out.find("offloaded to host memory: ") != std::string::npos)
      << text.out;
}

// Run as a script would, through a pipe: nothing on stderr, unless --progress asks.
TEST(TuneOutput, APipedRunPrintsNothingOnStderr) {
  const std::string err = (testing::scratch_dir("tune-output") / "stderr.txt").string();
  auto run = [&](const std::string& extra) {
    std::string cmd = std::string(MIST_BINARY) + " tune --model gpt3-13b --cluster " + kExamples +
                      "cluster_2x8_a100.json --training " + kExamples + "training_gpt.json " + extra +
                      " > /dev/null 2> " + err + " < /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return read(err);
  };
  EXPECT_EQ(run(""), "");
  EXPECT_EQ(run("--json --compare-to '--micro-batch-size 1 --global-batch-size 512'"), "");
  const std::string shown = run("--progress");
  EXPECT_NE(shown.find("mist: [####################] 100% mist:"), std::string::npos) << shown;
  EXPECT_NE(shown.find("best so far"), std::string::npos) << shown;
  EXPECT_NE(shown.find("% megatron:"), std::string::npos) << shown;
}

// A training file without dropout, compared to Megatron-LM flags that leave it at Megatron's default
// (0.1), in fp32 (no --bf16) and with another global batch.
TEST(TuneOutput, CompareToKeepsTheTrainingFilesJob) {
  const std::string training =
      write("training_no_dropout.json",
            R"({"global_batch_size": 512, "seq_length": 2048, "precision": "bf16", "dropout": false})");
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"tune", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json",
                                  "--training", training, "--json", "--no-engines"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string flags = "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --micro-batch-size 1 "
                            "--global-batch-size 256 --seq-length 2048";
  auto plain = mist(args({})), kept = mist(args({"--compare-to", flags}));
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(kept.code, 0) << kept.err;
  const auto p = Json::parse(plain.out), k = Json::parse(kept.out);
  EXPECT_EQ(k["prediction"]["training"]["dropout"], false);
  EXPECT_EQ(k["prediction"]["training"], p["prediction"]["training"]);
  EXPECT_EQ(k["plan"], p["plan"]);  // the same job, so the same answer
  const auto& c = k["compare_to"];
  EXPECT_EQ(c["job_from"], "training_file");
  std::map<std::string, Json> diff;
  for (const auto& d : c["job_differences"]) diff[d["field"].get<std::string>()] = d;
  ASSERT_TRUE(diff.count("dropout")) << c.dump();
  EXPECT_EQ(diff["dropout"]["flags"], "true");
  EXPECT_EQ(diff["dropout"]["training_file"], "false");
  EXPECT_EQ(diff["precision"]["flags"], "fp32");
  EXPECT_EQ(diff["global_batch_size"]["flags"], "256");
  EXPECT_FALSE(diff.count("seq_length"));
  // The user's layout, with the accumulation that gives the file's global batch.
  EXPECT_EQ(c["plan"]["tp"], 4);
  EXPECT_EQ(c["plan"]["grad_accum_steps"], 512 / 2);

  auto from_flags = mist(args({"--compare-to", flags, "--job-from-flags"}));
  ASSERT_EQ(from_flags.code, 0) << from_flags.err;
  const auto f = Json::parse(from_flags.out);
  EXPECT_EQ(f["compare_to"]["job_from"], "flags");
  EXPECT_EQ(f["prediction"]["training"]["dropout"], true);
  EXPECT_EQ(f["prediction"]["training"]["global_batch_size"], 256);
  EXPECT_EQ(f["prediction"]["training"]["precision"], "fp32");

  auto text = mist({"tune", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json", "--training",
                    training, "--no-engines", "--compare-to", flags});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("dropout true (the training file: false)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("--job-from-flags for the flags'"), std::string::npos) << text.out;
  EXPECT_EQ(text.err, "");
  // A global batch the flags' micro-batch × dp does not divide cannot be kept: the error says what to do.
  auto odd = mist(args({"--compare-to", "--micro-batch-size 3 --global-batch-size 48"}));
  EXPECT_EQ(odd.code, 2);
  EXPECT_NE(odd.err.find("--job-from-flags"), std::string::npos) << odd.err;
}

}  // namespace
}  // namespace mist::cli
