// `--html FILE` on predict, simulate, tune and gpus: the report is written with the charts each
// command has, stdout is what it is without the option, and an unwritable path is refused naming it.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "cli/commands.hpp"
#include "run_mist.hpp"

namespace mist::cli {
namespace {

namespace fs = std::filesystem;
using testing::kExamples;
using testing::mist;

std::vector<std::string> job(const std::string& command, bool with_plan = true) {
  std::vector<std::string> a = {command, "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json",
                                "--training", kExamples + "training_gpt.json"};
  if (with_plan) a.insert(a.end(), {"--plan", kExamples + "plan_gpt13b_2x8.json"});
  return a;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void expect_ids(const std::string& page, const std::vector<std::string>& present, const std::vector<std::string>& absent) {
  for (const auto& id : present) EXPECT_NE(page.find("<svg id=\"" + id + "\""), std::string::npos) << id;
  for (const auto& id : absent) EXPECT_EQ(page.find("<svg id=\"" + id + "\""), std::string::npos) << id;
}

TEST(ReportCli, PredictAndSimulateWriteMemoryAndTimelineAndLeaveStdoutAlone) {
  const fs::path dir = testing::scratch_dir("report-cli");
  for (const char* command : {"predict", "simulate"}) {
    for (bool json : {false, true}) {
      const fs::path file = dir / (std::string(command) + ".html");
      fs::remove(file);
      auto plain = job(command);
      if (json) plain.push_back("--json");
      const auto without = mist(plain);
      const auto o = mist(with(plain, {"--html", file.string()}));
      ASSERT_EQ(o.code, kExitOk) << o.err;
      EXPECT_EQ(o.out, without.out) << command;
      const std::string page = read(file);
      ASSERT_FALSE(page.empty()) << file;
      expect_ids(page, {"memory", "timeline", "timeline-start"}, {"candidates", "gpus"});
      EXPECT_NE(page.find("gpt3-13b"), std::string::npos);
      EXPECT_NE(page.find("dp 2 × tp 4 (sequence parallel) × pp 2"), std::string::npos);
      EXPECT_EQ(page.find("http"), std::string::npos);
    }
  }
}

TEST(ReportCli, TuneDrawsTheCandidatesWithTheChosenPlan) {
  const fs::path file = testing::scratch_dir("report-cli") / "tune.html";
  fs::remove(file);
  const auto without = mist(with(job("tune", false), {"--json"}));
  const auto o = mist(with(job("tune", false), {"--json", "--html", file.string()}));
  ASSERT_EQ(o.code, kExitOk) << o.err;
  EXPECT_EQ(o.out, without.out);
  const std::string page = read(file);
  expect_ids(page, {"memory", "timeline", "candidates"}, {"gpus"});
  EXPECT_NE(page.find("<path class=\"chosen\""), std::string::npos);
  EXPECT_NE(page.find("<path class=\"front-line\""), std::string::npos);
  EXPECT_NE(page.find("<table id=\"top-plans\">"), std::string::npos);
  EXPECT_NE(page.find("<table id=\"frontier-plans\">"), std::string::npos);
}

TEST(ReportCli, GpusDrawsTheCellsWithTheirParetoSet) {
  const fs::path dir = testing::scratch_dir("report-cli");
  const fs::path file = dir / "gpus.html", training = dir / "training.json";
  std::ofstream(training) << R"({"global_batch_size": 16, "seq_length": 1024, "precision": "bf16"})";
  const auto o = mist({"gpus", "--model", "gpt3-1.3b", "--training", training.string(), "--space", "deepspeed",
                       "--candidates", "H100-SXM5-80GB,A100-SXM4-40GB", "--gpus", "1,2", "--html", file.string()});
  ASSERT_EQ(o.code, kExitOk) << o.err;
  const std::string page = read(file);
  expect_ids(page, {"gpus"}, {"memory", "timeline", "candidates"});
  EXPECT_NE(page.find("<circle class=\"point front"), std::string::npos);
  EXPECT_NE(page.find("H100-SXM5-80GB × 2"), std::string::npos);
}

// A report draws a plan; when nothing fits, tune exits 3 as without --html and says it wrote none.
TEST(ReportCli, TuneWithoutAFitWritesNoReportAndSaysSo) {
  const fs::path dir = testing::scratch_dir("report-cli");
  const fs::path file = dir / "nofit.html", cluster = dir / "l4.json";
  fs::remove(file);
  std::ofstream(cluster) << R"({"gpu": "L4-24GB", "nodes": 1, "gpus_per_node": 1})";
  const auto o = mist({"tune", "--model", "gpt3-13b", "--cluster", cluster.string(), "--training",
                       kExamples + "training_gpt.json", "--no-offload", "--html", file.string()});
  EXPECT_EQ(o.code, kExitNoFit) << o.err;
  EXPECT_NE(o.err.find("mist: note: no report written to " + file.string()), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(file));
}

TEST(ReportCli, AnUnwritablePathExitsTwoNamingTheOptionAndTheReason) {
  const std::string bad = "/nonexistent-dir-of-mist/report.html";
  for (const auto& args : {with(job("predict"), {"--html", bad}), with(job("simulate"), {"--html", bad}),
                           with(job("tune", false), {"--html", bad})}) {
    const auto o = mist(args);
    EXPECT_EQ(o.code, kExitInvalidInput) << args[0];
    EXPECT_EQ(o.err, "mist: invalid input: --html: cannot write " + bad + ": No such file or directory\n") << args[0];
    EXPECT_TRUE(o.out.empty()) << args[0];
  }
  // A folder is not a file either.
  const auto o = mist(with(job("predict"), {"--html", testing::scratch_dir("report-cli").string()}));
  EXPECT_EQ(o.code, kExitInvalidInput);
  EXPECT_NE(o.err.find("--html: cannot write"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace mist::cli
