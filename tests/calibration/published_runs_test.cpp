// Published runs as mist jobs: the file form, its errors, and the matmul-efficiency fit.
#include "calibration/published_runs.hpp"

#include <gtest/gtest.h>

#include "../common/sanitized.hpp"

namespace mist::calibration {
namespace {

using analysis::TimeConstants;

// Two small GPT runs on one A100 node (the shapes of gpt3-1.3b, layers cut for speed).
Json runs_json() {
  return Json::parse(R"({
    "published_runs_version": 1, "source": "test",
    "models": {"m": {"name": "m", "family": "gpt", "num_layers": 8, "hidden_size": 2048, "num_heads": 16,
                     "ffn_hidden_size": 8192, "vocab_size": 51200, "max_position_embeddings": 2048,
                     "norm": "layernorm", "mlp": "gelu", "positions": "learned"}},
    "runs": [
      {"name": "tp2 pp2 full", "model": "m",
       "cluster": {"gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8},
       "training": {"global_batch_size": 64, "seq_length": 2048, "precision": "bf16"},
       "plan": {"dp": 2, "tp": 2, "pp": 2, "micro_batch_size": 2, "grad_accum_steps": 16},
       "every_stage": {"zero": 1, "ckpt_layers": "all"}, "iteration_time_s": 1.0,
       "reported": {"anything": [1, 2]}},
      {"name": "tp8", "model": "m",
       "cluster": {"gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8},
       "training": {"global_batch_size": 16, "seq_length": 2048, "precision": "bf16"},
       "plan": {"dp": 1, "tp": 8, "pp": 1, "sequence_parallel": true, "micro_batch_size": 4, "grad_accum_steps": 4,
                "stages": [{"num_layers": 8}]},
       "iteration_time_s": 1.0}]})");
}

TEST(PublishedRuns, ReadsRunsWithUniformOrListedStages) {
  auto r = published_runs_from_json(runs_json(), "runs.json");
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  ASSERT_EQ(r->runs.size(), 2u);
  const auto& p = r->runs[0].job.plan;
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_EQ(p.stages[0].num_layers, 4);
  EXPECT_EQ(p.stages[1].ckpt_layers, 4);  // "all"
  EXPECT_EQ(p.stages[1].zero, 1);
  EXPECT_TRUE(r->runs[1].job.plan.sequence_parallel);
  EXPECT_EQ(r->runs[1].job.model.hidden_size, 2048);
}

TEST(PublishedRuns, BadInputNamesTheField) {
  auto path_of = [](const std::function<void(Json&)>& edit) {
    Json j = runs_json();
    edit(j);
    auto r = published_runs_from_json(j, "runs.json");
    return r ? std::string("ok") : r.error().path;
  };
  EXPECT_EQ(path_of([](Json& j) { j["runs"][0].erase("iteration_time_s"); }), "runs.json.runs[0].iteration_time_s");
  EXPECT_EQ(path_of([](Json& j) { j["runs"][1]["iteration_time_s"] = -2; }), "runs.json.runs[1].iteration_time_s");
  EXPECT_EQ(path_of([](Json& j) { j["runs"][0]["speed"] = 1; }), "runs.json.runs[0].speed");
  EXPECT_EQ(path_of([](Json& j) { j["runs"][0]["model"] = "no-such-model"; }), "runs.json.runs[0].model");
  EXPECT_EQ(path_of([](Json& j) { j["runs"][1]["every_stage"] = Json::object(); }), "runs.json.runs[1].every_stage");
  EXPECT_EQ(path_of([](Json& j) { j["runs"][0]["every_stage"]["ckpt_layers"] = "some"; }),
            "runs.json.runs[0].every_stage.ckpt_layers");
  EXPECT_EQ(path_of([](Json& j) { j["runs"][0]["every_stage"]["num_layers"] = 4; }),
            "runs.json.runs[0].every_stage.num_layers");
  EXPECT_EQ(path_of([](Json& j) { j["runs"][0]["plan"]["pp"] = 9; }), "runs.json.runs[0].plan.pp");
  EXPECT_EQ(path_of([](Json& j) { j["runs"][0]["plan"]["dp"] = 4; }).rfind("runs.json.runs[0].", 0), 0u);
  EXPECT_EQ(path_of([](Json& j) { j["runs"] = Json::array(); }), "runs.json.runs");
  EXPECT_EQ(path_of([](Json& j) { j["published_runs_version"] = 2; }), "runs.json.published_runs_version");
  EXPECT_EQ(path_of([](Json& j) { j["models"]["m"]["num_heads"] = 0; }).rfind("runs.json.models.m", 0), 0u);
}

// Runs whose "measured" times are the model's own predictions at a known efficiency: the fit must
// find that efficiency, and with it every error vanishes.
TEST(PublishedRuns, FitRecoversTheEfficiencyThatProducedTheTimes) {
  auto runs = published_runs_from_json(runs_json(), "runs.json")->runs;
  for (double truth : {0.81, 0.55}) {
    if (truth < 0.8 && mist::testing::kSanitized) break;  // one fit under the sanitizers
    TimeConstants k;
    k.perf.matmul_efficiency = truth;
    auto preds = run_errors(runs, k);
    ASSERT_TRUE(preds.has_value());
    for (size_t i = 0; i < runs.size(); ++i) runs[i].iteration_time_s = (*preds)[i].predicted_s;
    auto fit = fit_matmul_efficiency(runs);
    ASSERT_TRUE(fit.has_value()) << fit.error().to_string();
    EXPECT_NEAR(fit->matmul_efficiency, truth, 1e-3);
    EXPECT_LT(max_abs_error(fit->after), 1e-3);
    EXPECT_GT(max_abs_error(fit->before), 0.01);  // the catalog's MAMF (0.87 of peak) is not it
  }
}

// Times a faster GEMM produced than the GPU's measured maximum (A100: MAMF 0.869 of peak) fit to
// the maximum, not beyond: a stack cannot run GEMMs faster than the chip's best measured one.
TEST(PublishedRuns, FitStopsAtTheGpusMeasuredMaximum) {
  if (mist::testing::kSanitized) GTEST_SKIP() << "a fit of its own: the normal build runs it";
  auto runs = published_runs_from_json(runs_json(), "runs.json")->runs;
  TimeConstants k;
  k.perf.matmul_efficiency = 0.95;
  auto preds = run_errors(runs, k);
  ASSERT_TRUE(preds.has_value());
  for (size_t i = 0; i < runs.size(); ++i) runs[i].iteration_time_s = (*preds)[i].predicted_s;
  auto fit = fit_matmul_efficiency(runs);
  ASSERT_TRUE(fit.has_value()) << fit.error().to_string();
  const auto& g = runs[0].job.cluster.gpu;
  const double mamf = g.matmul_bf16_flops / g.bf16_flops;
  EXPECT_NEAR(fit->matmul_efficiency, mamf, 1e-4);
  EXPECT_GT(max_abs_error(fit->after), 0.01);  // what the cap costs on these made-up times
}

TEST(PublishedRuns, FitRefusesMixedGpusOrPrecisions) {
  Json j = runs_json();
  j["runs"][1]["cluster"]["gpu"] = "H100-SXM5-80GB";
  auto runs = published_runs_from_json(j, "runs.json");
  ASSERT_TRUE(runs.has_value()) << runs.error().to_string();
  auto fit = fit_matmul_efficiency(runs->runs);
  ASSERT_FALSE(fit.has_value());
  EXPECT_EQ(fit.error().path, "runs");
  EXPECT_NE(fit.error().message.find("one GPU at a time"), std::string::npos);
  j = runs_json();
  j["runs"][1]["training"]["precision"] = "fp16";
  fit = fit_matmul_efficiency(published_runs_from_json(j, "runs.json")->runs);
  ASSERT_FALSE(fit.has_value());
  EXPECT_NE(fit.error().message.find("precisions"), std::string::npos);
}

}  // namespace
}  // namespace mist::calibration
