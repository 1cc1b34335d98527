// `mist simulate` on the examples: the table, the JSON, and the structure of the Chrome trace.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

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

std::vector<std::string> simulate(const std::string& plan) {
  return {"simulate", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json",
          "--training", kExamples + "training_gpt.json", "--plan", kExamples + plan};
}

TEST(Simulate, PrintsBothIterationTimesAndWritesAPerfettoTrace) {
  const fs::path dir = testing::scratch_dir("simulate");
  const std::string trace = (dir / "trace.json").string();
  fs::remove(trace);
  auto args = simulate("plan_gpt13b_2x8.json");
  args.insert(args.end(), {"--trace", trace});
  const auto o = mist(args);
  ASSERT_EQ(o.code, kExitOk) << o.err;
  for (const char* s : {"simulated", "closed form", "peak (sim)", trace.c_str()})
    EXPECT_NE(o.out.find(s), std::string::npos) << s << "\n" << o.out;

  std::ifstream f(trace);
  ASSERT_TRUE(f) << trace;
  const auto t = nlohmann::json::parse(f);
  ASSERT_TRUE(t.is_object());
  ASSERT_TRUE(t.at("traceEvents").is_array());
  std::map<int, std::string> processes;
  std::set<std::pair<int, std::string>> threads;
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> slices;
  size_t counters = 0;
  for (const auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e.at("ph").is_string());
    ASSERT_TRUE(e.at("name").is_string());
    ASSERT_TRUE(e.at("pid").is_number_integer());
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "process_name") processes[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
      if (e["name"] == "thread_name")
        threads.insert({e["tid"].get<int>(), e["args"]["name"].get<std::string>()});
    } else if (ph == "X") {
      ASSERT_TRUE(e.at("tid").is_number_integer());
      ASSERT_TRUE(e.at("ts").is_number());
      ASSERT_TRUE(e.at("dur").is_number());
      ASSERT_GE(e["dur"].get<double>(), 0);
      slices[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
          {std::llround(e["ts"].get<double>() * 1000), std::llround(e["dur"].get<double>() * 1000)});
    } else if (ph == "C") {
      ++counters;
      ASSERT_TRUE(e.at("ts").is_number());
      ASSERT_TRUE(e.at("args").at("bytes").is_number());
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  EXPECT_EQ(processes, (std::map<int, std::string>{{1, "stage 0"}, {2, "stage 1"}}));
  EXPECT_EQ(threads, (std::set<std::pair<int, std::string>>{{1, "compute"}, {2, "collective"}, {3, "h2d"}, {4, "d2h"}}));
  EXPECT_GT(counters, 0u);
  // 128 micro-batches, a forward and a backward each, on both stages' compute threads.
  EXPECT_EQ((slices[{1, 1}].size()), 256u);
  EXPECT_EQ((slices[{2, 1}].size()), 256u);
  for (auto& [thread, v] : slices) {  // slices on one thread must nest: ours follow one another
    std::sort(v.begin(), v.end());
    for (size_t k = 1; k < v.size(); ++k) ASSERT_GE(v[k].first, v[k - 1].first + v[k - 1].second);
  }
}

TEST(Simulate, JsonAgreesWithTheModels) {
  for (const char* plan : {"plan_gpt13b_2x8.json", "plan_gpt13b_zero3_offload.json"}) {
    auto args = simulate(plan);
    args.push_back("--json");
    const auto o = mist(args);
    ASSERT_EQ(o.code, kExitOk) << o.err;
    const auto j = nlohmann::json::parse(o.out);
    const double sim = j.at("simulated_iteration_time_s"), closed = j.at("closed_form_iteration_time_s");
    EXPECT_GT(sim, 0);
    // Different models of the same schedule: within a few percent on these plans (docs/simulation.md).
    EXPECT_NEAR(closed / sim, 1, 0.05) << plan;
    EXPECT_EQ(j.at("schedule"), "1f1b");
    EXPECT_TRUE(j.at("trace").is_null());
    ASSERT_EQ(j.at("stages").size(), 2u);
    for (const auto& s : j["stages"]) {
      // The simulated 1F1B peak holds the micro-batches the memory model assumes in flight.
      const double a = s.at("simulated_peak_memory_bytes"), b = s.at("predicted_peak_memory_bytes");
      EXPECT_NEAR(a, b, 1e-9 * b) << plan;
      EXPECT_NEAR(s.at("compute_busy_s").get<double>() + s.at("compute_idle_s").get<double>(), sim, 1e-9 * sim);
      EXPECT_GT(s.at("forward_s").get<double>(), 0);
      EXPECT_GT(s.at("backward_s").get<double>(), 0);
    }
  }
}

TEST(Simulate, InvalidInputExitsTwo) {
  auto args = simulate("plan_gpt13b_2x8.json");
  args.insert(args.end(), {"--trace", "/nonexistent-dir/trace.json"});
  const auto o = mist(args);
  EXPECT_EQ(o.code, kExitInvalidInput);
  EXPECT_NE(o.err.find("--trace"), std::string::npos) << o.err;
  EXPECT_EQ(mist({"simulate", "--model", "gpt3-13b"}).code, kExitInvalidInput);
}

}  // namespace
}  // namespace mist::cli
