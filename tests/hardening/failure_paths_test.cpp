// Failure paths of the command line: nothing fits (exit 3), an empty search space (exit 2), and
// the solver's failure terminations (values or errors, never an abort).
#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "analysis/prediction.hpp"
#include "cli/commands.hpp"
#include "cli_util.hpp"
#include "solver/solve.hpp"

namespace mist::hardening {
namespace {

TEST(TuneFailures, NothingFitsExitsThreeWithTheClosestPlanAndItsShortfall) {
  // A 13B model on one 32 GB GPU with 1 GiB of host memory (so offloading cannot help): no plan fits.
  const auto cluster = temp_file("one_v100.json",
                                 R"({"gpu": "V100-SXM2-32GB", "nodes": 1, "gpus_per_node": 1, "host_memory_GiB": 1})");
  const auto training = temp_file("fp16.json", R"({"global_batch_size": 8, "seq_length": 2048, "precision": "fp16"})");
  auto text = mist(job_args("tune", "gpt3-13b", cluster, training));
  ASSERT_EQ(text.code, cli::kExitNoFit) << text.err;
  EXPECT_NE(text.err.find("no plan fits"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("the closest"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("more GPU memory"), std::string::npos) << text.err;

  auto args = job_args("tune", "gpt3-13b", cluster, training);
  args.push_back("--json");
  auto json = mist(args);
  ASSERT_EQ(json.code, cli::kExitNoFit) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j.at("fits"), false);
  ASSERT_TRUE(j.contains("closest")) << json.out;
  const double shortfall = j["closest"].at("shortfall_bytes").get<double>();
  EXPECT_TRUE(std::isfinite(shortfall) && shortfall > 0) << shortfall;
  // The closest plan is a real plan for this job: it predicts, and does not fit by that much.
  const auto plan = temp_file("closest.json", j["closest"]["plan"].dump());
  auto pargs = job_args("predict", "gpt3-13b", cluster, training);
  pargs.insert(pargs.end(), {"--plan", plan, "--json"});
  auto pred = mist(pargs);
  ASSERT_EQ(pred.code, cli::kExitOk) << pred.err;
  const auto pj = nlohmann::json::parse(pred.out);
  EXPECT_EQ(pj.at("fits"), false);
  double worst = 0, capacity = 0;
  for (const auto& s : pj["stages"]) {
    worst = std::max(worst, s.at("shortfall_bytes").get<double>());
    capacity = s.at("capacity_bytes").get<double>();
  }
  // tune keeps the default headroom (the memory band) free, predict none: tune's shortfall is
  // predict's plus that share of the GPU.
  EXPECT_NEAR(worst + analysis::kMemoryBand * capacity, shortfall, 1e-6 * shortfall);
  // It also says how many of these GPUs would give a plan that fits, and on that many one does.
  ASSERT_TRUE(j.contains("gpus_to_fit")) << json.out;
  ASSERT_TRUE(j["gpus_to_fit"].is_number()) << json.out;
  const int64_t gpus = j["gpus_to_fit"].get<int64_t>();
  EXPECT_GT(gpus, 1);
  EXPECT_NE(text.err.find(fmt::format("on {} GPUs", gpus)), std::string::npos) << text.err;
  auto v100s = [](const char* name, int64_t n) {
    return temp_file(name, fmt::format(R"({{"gpu": "V100-SXM2-32GB", "nodes": {}, "gpus_per_node": 1,
                                          "host_memory_GiB": 1}})", n));
  };
  EXPECT_EQ(mist(job_args("tune", "gpt3-13b", v100s("more_v100.json", gpus), training)).code, cli::kExitOk);
  EXPECT_EQ(mist(job_args("tune", "gpt3-13b", v100s("half_v100.json", gpus / 2), training)).code, cli::kExitNoFit);
}

TEST(TuneFailures, AnEmptySearchSpaceIsInvalidInputNotNoFit) {
  // One layer and one head allow only tp = pp = 1, so dp = 16, which does not divide 7.
  const auto model = temp_file("one_layer.json", R"({"name": "one", "family": "gpt", "num_layers": 1,
      "hidden_size": 64, "num_heads": 1, "ffn_hidden_size": 256, "vocab_size": 128, "max_position_embeddings": 128,
      "norm": "layernorm", "mlp": "gelu", "positions": "learned"})");
  const auto training = temp_file("gbs7.json", R"({"global_batch_size": 7, "seq_length": 128})");
  auto o = mist(job_args("tune", model, kExamples + "cluster_2x8_a100.json", training));
  EXPECT_EQ(o.code, cli::kExitInvalidInput) << o.err;
  EXPECT_NE(o.err.find("global_batch_size"), std::string::npos) << o.err;
}

TEST(TuneFailures, ABatchNoGpuCountDividesIsInvalidInput) {
  // 32 GPUs and a prime global batch of 7: dp must be 1 or 7, and 7 does not divide 32; dp = 1
  // needs tp·pp = 32, but 4 heads allow tp ≤ 4 and 4 layers pp ≤ 4. The space is empty.
  const auto cluster = temp_file("4x8.json", R"({"gpu": "A100-SXM4-80GB", "nodes": 4, "gpus_per_node": 8})");
  const auto training = temp_file("gbs7b.json", R"({"global_batch_size": 7, "seq_length": 128})");
  auto o = mist(job_args("tune", small_model_file(), cluster, training));
  EXPECT_EQ(o.code, cli::kExitInvalidInput) << o.err << o.out;
  EXPECT_NE(o.err.find("global_batch_size"), std::string::npos) << o.err;
}

// --- Solver terminations ------------------------------------------------------------------------

using solver::Backend;
using solver::MilpModel;
using solver::Sense;
using solver::SolveOptions;
using solver::TerminationReason;

const SolveOptions kBackends[] = {SolveOptions{.backend = Backend::kCbc},
                                  SolveOptions{.backend = Backend::kBruteForce}};

TEST(SolverFailures, InfeasibleIsATerminationWithAMessageOnBothBackends) {
  for (const auto& o : kBackends) {
    MilpModel m("infeasible");
    const auto x = m.add_integer("x", 0, 3);
    const auto y = m.add_integer("y", 0, 3);
    m.add_constraint("too_much", {{x, 1}, {y, 1}}, Sense::kGreaterEqual, 7);
    m.set_objective({{x, 1}});
    auto r = solver::solve(m, o);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    EXPECT_EQ(r->termination.reason, TerminationReason::kInfeasible) << solver::to_string(o.backend);
    EXPECT_FALSE(r->termination.has_solution());
    EXPECT_FALSE(r->termination.to_string().empty());
  }
}

TEST(SolverFailures, ZeroTimeLimitStopsWithoutAnAbort) {
  for (const auto& o0 : kBackends) {
    SolveOptions o = o0;
    o.time_limit_s = 0;
    MilpModel m("knapsack");
    std::vector<solver::Term> cap, obj;
    for (int i = 0; i < 12; ++i) {
      const auto x = m.add_binary("x" + std::to_string(i));
      cap.push_back({x, 3.0 + i});
      obj.push_back({x, -(5.0 + (i * 7) % 11)});
    }
    m.add_constraint("cap", cap, Sense::kLessEqual, 40);
    m.set_objective(obj);
    auto r = solver::solve(m, o);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    // Brute force is exact whatever the limit; CBC may stop at its root with or without a solution.
    const auto reason = r->termination.reason;
    EXPECT_TRUE(reason == TerminationReason::kOptimal || reason == TerminationReason::kFeasible ||
                reason == TerminationReason::kNoSolutionFound)
        << r->termination.to_string();
    if (r->termination.has_solution()) {
      EXPECT_TRUE(std::isfinite(r->objective));
    }
  }
}

TEST(SolverFailures, NonFiniteInputsAreErrorsNamingTheFieldOnBothBackends) {
  for (const auto& o0 : kBackends) {
    {
      MilpModel m("nan_coefficient");
      const auto x = m.add_integer("x", 0, 3);
      m.add_constraint("c", {{x, std::nan("")}}, Sense::kLessEqual, 1);
      m.set_objective({{x, 1}});
      auto r = solver::solve(m, o0);
      ASSERT_FALSE(r.has_value()) << solver::to_string(o0.backend);
      EXPECT_NE(r.error().to_string().find("constraints[0]"), std::string::npos) << r.error().to_string();
    }
    {
      MilpModel m("inf_objective");
      const auto x = m.add_integer("x", 0, 3);
      m.set_objective({{x, HUGE_VAL}});
      auto r = solver::solve(m, o0);
      ASSERT_FALSE(r.has_value()) << solver::to_string(o0.backend);
      EXPECT_NE(r.error().to_string().find("objective"), std::string::npos) << r.error().to_string();
    }
    {
      MilpModel m("ok");
      const auto x = m.add_integer("x", 0, 3);
      m.set_objective({{x, 1}});
      SolveOptions o = o0;
      o.time_limit_s = std::nan("");
      auto r = solver::solve(m, o);
      ASSERT_FALSE(r.has_value());
      EXPECT_NE(r.error().to_string().find("options.time_limit_s"), std::string::npos) << r.error().to_string();
    }
  }
}

}  // namespace
}  // namespace mist::hardening
