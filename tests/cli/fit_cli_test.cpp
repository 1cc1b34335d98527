// `mist fit` through the command line: on op times measured on this machine's CPU it fits
// constants that predict held-out shapes better than the defaults; bad input names the field; a
// cluster's "time_constants" applies the written file.
#include <cmath>
#include <filesystem>
#include <vector>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../common/sanitized.hpp"
#include "core/json_fields.hpp"
#include "hardware/perf_model.hpp"
#include "spec/catalog.hpp"
#include "profile/csv_rows.hpp"
#include "profile/database.hpp"
#include "run_mist.hpp"

namespace mist::cli::testing {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(MIST_TEST_DATA_DIR) + "/fit/";

std::string write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return (dir / name).string();
}

// The fp32 rows of `mist profile` (full sweep, one thread) on this machine, 2026-11-30.
std::string cpu_db(const fs::path& dir) {
  const auto db = (dir / "cpu.db").string();
  auto r = mist({"profile", "import", "--db", db, kData + "cpu_profile_fp32.csv"});
  EXPECT_EQ(r.code, 0) << r.err;
  return db;
}

TEST(FitCli, FittedConstantsPredictHeldOutCpuShapesBetterThanTheDefaults) {
  const auto dir = scratch_dir("fit-cli");
  const auto db = cpu_db(dir);
  const auto out = (dir / "cpu_constants.json").string();
  auto r = mist({"fit", "--profile-db", db, "--gpu", kData + "cpu_one_core.json", "--device", "cpu", "--test-every",
                 "3", "--out", out, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["gpu"], "cpu-one-core");
  EXPECT_EQ(j["dtype"], "fp32");
  ASSERT_TRUE(j.contains("matmul_efficiency"));
  const auto& fit = j["fit"];
  EXPECT_GT(fit["rows"].get<int>(), 100);
  EXPECT_GT(fit["held_out_rows"].get<int>(), 30);
  // The real check: on shapes the fit never saw, the fitted constants beat the defaults.
  EXPECT_LT(fit["held_out_median_rel_error"].get<double>(), fit["held_out_median_rel_error_defaults"].get<double>());
  EXPECT_LE(fit["median_rel_error"].get<double>(), fit["median_rel_error_defaults"].get<double>());
  ASSERT_TRUE(fs::exists(out));

  // A cluster of this "GPU" that names the constants file predicts with them.
  Json gpu;
  std::ifstream(kData + "cpu_one_core.json") >> gpu;
  const auto plain = write(dir, "cluster.json", Json{{"gpu", gpu}, {"nodes", 1}, {"gpus_per_node", 1}}.dump());
  const auto fitted = write(dir, "cluster_fitted.json",
                            Json{{"gpu", gpu}, {"nodes", 1}, {"gpus_per_node", 1}, {"time_constants", "cpu_constants.json"}}.dump());
  const auto training = write(dir, "training.json",
                              Json{{"global_batch_size", 1}, {"seq_length", 128}, {"precision", "fp32"},
                                   {"optimizer", "adamw"}, {"flash_attention", false}}.dump());
  const auto plan = write(dir, "plan.json", Json{{"dp", 1}, {"tp", 1}, {"pp", 1}, {"micro_batch_size", 1},
                                                 {"grad_accum_steps", 1}, {"stages", {{{"num_layers", 24}}}}}.dump());
  const std::string model = "gpt3-1.3b";
  auto a = mist({"predict", "--model", model, "--cluster", plain, "--training", training, "--plan", plan, "--json"});
  auto b = mist({"predict", "--model", model, "--cluster", fitted, "--training", training, "--plan", plan, "--json"});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NE(Json::parse(a.out)["iteration_time_s"], Json::parse(b.out)["iteration_time_s"]);

  // A constants file fitted for another GPU is refused, naming the field.
  const auto other = write(dir, "cluster_other.json",
                           Json{{"gpu", "A100-SXM4-80GB"}, {"nodes", 1}, {"gpus_per_node", 1}, {"time_constants", "cpu_constants.json"}}.dump());
  auto c = mist({"predict", "--model", model, "--cluster", other, "--training", training, "--plan", plan});
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("cluster.time_constants.gpu"), std::string::npos) << c.err;
  const auto missing = write(dir, "cluster_missing.json",
                             Json{{"gpu", gpu}, {"nodes", 1}, {"gpus_per_node", 1}, {"time_constants", "nope.json"}}.dump());
  c = mist({"predict", "--model", model, "--cluster", missing, "--training", training, "--plan", plan});
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("cluster.time_constants"), std::string::npos) << c.err;
  fs::remove_all(dir);
}

TEST(FitCli, BadInputExitsNamingTheField) {
  const auto dir = scratch_dir("fit-cli-bad");
  auto r = mist({"fit", "--profile-db", (dir / "missing.db").string(), "--gpu", "A100-SXM4-80GB"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--profile-db"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "missing.db"));  // not created
  const auto empty = (dir / "empty.db").string();
  ASSERT_TRUE(profile::Database::open(empty).has_value());
  r = mist({"fit", "--profile-db", empty, "--gpu", "A100-SXM4-80GB"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--device"), std::string::npos) << r.err;  // no rows for this device

  const auto db = cpu_db(dir);
  r = mist({"fit", "--profile-db", db, "--gpu", "Z900-NOPE"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--gpu"), std::string::npos) << r.err;
  r = mist({"fit", "--profile-db", db, "--gpu", (dir / "no_such_gpu.json").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--gpu"), std::string::npos) << r.err;
  r = mist({"fit", "--profile-db", db, "--gpu", kData + "cpu_one_core.json", "--device", "cpu", "--dtype", "fp64"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--dtype"), std::string::npos) << r.err;

  // Only memory-bound rows: nothing to fit the matmul rate from.
  std::ifstream in(kData + "cpu_profile_fp32.csv");
  std::string line, text;
  std::getline(in, line);
  text = line + "\n";
  while (std::getline(in, line))
    if (line.find(",layernorm,") != std::string::npos) text += line + "\n";
  const auto norms = (dir / "norms.db").string();
  ASSERT_EQ(mist({"profile", "import", "--db", norms, write(dir, "norms.csv", text)}).code, 0);
  // Rows with absurd shape keys are skipped, not lowered.
  const std::string odd = std::string(profile::kCsvHeader) +
                          "\ncpu,mlp.fc1,linear,b=1e300;s=1;h=1;a=1;g=1;f=1;t=1,fp32,forward,1,1,1,1,x,2026-11-30\n"
                          "cpu,mlp.fc1,linear,b=1.5;s=1;h=1;a=1;g=1;f=1;t=1,fp32,forward,1,1,1,1,x,2026-11-30\n";
  ASSERT_EQ(mist({"profile", "import", "--db", norms, write(dir, "odd.csv", odd)}).code, 0);
  r = mist({"fit", "--profile-db", norms, "--gpu", kData + "cpu_one_core.json", "--device", "cpu"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--profile-db.rows"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no GEMM rows"), std::string::npos) << r.err;
  fs::remove_all(dir);
}


const std::string kPublished = std::string(MIST_SOURCE_DIR) + "/data/published/";

// `mist fit --runs`: the fitted efficiency reproduces the runs better than the catalog's MAMF, is
// scored on held-out runs, and the written file changes what `mist predict` says.
TEST(FitCli, RunsFitTheMatmulEfficiencyAndScoreHeldOutRuns) {
  if (mist::testing::kSanitized) GTEST_SKIP() << "about 50 predictions of 18 runs: normal build only";
  const auto dir = scratch_dir("fit-cli-runs");
  const auto out = (dir / "a100.json").string();
  auto r = mist({"fit", "--runs", kPublished + "korthikanti_2022_a100.json", "--test-runs",
                 kPublished + "sc21_table1_a100.json", "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("matmul_efficiency"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("held out"), std::string::npos) << r.out;
  auto file = read_json_file(out);
  ASSERT_TRUE(file.has_value()) << file.error().to_string();
  const double e = (*file)["matmul_efficiency"].get<double>();
  EXPECT_GT(e, 0.5);
  EXPECT_LT(e, 0.87);  // below the catalog's MAMF: every run was slower than it says
  EXPECT_LT((*file)["fit"]["held_out"]["mean_rel_error"].get<double>(),
            (*file)["fit"]["held_out"]["mean_rel_error_defaults"].get<double>());

  // The file in a cluster: a lower GEMM rate, a longer iteration.
  const auto plain = write(dir, "cluster.json", R"({"gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8})");
  const auto fitted = write(dir, "fitted.json", R"({"gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8,
                                                   "time_constants": ")" + out + R"("})");
  auto predict = [&](const std::string& cluster, bool uncalibrated) {
    std::vector<std::string> args = {"predict", "--model", "gpt3-13b", "--cluster", cluster, "--training",
                                     kExamples + "training_gpt.json", "--plan", kExamples + "plan_gpt13b_2x8.json",
                                     "--json"};
    if (uncalibrated) args.push_back("--uncalibrated");
    auto p = mist(args);
    EXPECT_EQ(p.code, 0) << p.err;
    return Json::parse(p.out);
  };
  // The physics alone against the cluster's own constants file (which wins over the stack's fit).
  const Json a = predict(plain, true), b = predict(fitted, false);
  EXPECT_EQ(a["calibration"]["kind"], "none");
  EXPECT_EQ(b["calibration"]["kind"], "file");
  EXPECT_GT(b["iteration_time_s"].get<double>(), a["iteration_time_s"].get<double>() * 1.03);
  // The prediction says which GEMM rate it used.
  EXPECT_NEAR(a["matmul_tflops"].get<double>(), 271.2, 0.05);  // the catalog's MAMF
  EXPECT_NE(a["matmul_rate_source"].get<std::string>().find("MAMF"), std::string::npos);
  EXPECT_NEAR(b["matmul_tflops"].get<double>(), 312 * e, 1e-6);
  EXPECT_NE(b["matmul_rate_source"].get<std::string>().find("time_constants"), std::string::npos);
  fs::remove_all(dir);
}

TEST(FitCli, RunsBadInputExitsNamingTheField) {
  const auto dir = scratch_dir("fit-cli-runs-bad");
  const auto k = kPublished + "korthikanti_2022_a100.json";
  auto expect = [](const Outcome& r, const std::string& field) {
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.err.find(field), std::string::npos) << r.err;
  };
  expect(mist({"fit", "--runs", (dir / "missing.json").string()}), "--runs");
  const auto bad = write(dir, "bad.json", R"({"published_runs_version": 1, "source": "x", "runs": [{}]})");
  expect(mist({"fit", "--runs", bad}), "runs[0].name");
  expect(mist({"fit", "--runs", k, "--profile-db", (dir / "x.db").string()}), "--profile-db");
  expect(mist({"fit", "--runs", k, "--gpu", "A100-SXM4-80GB"}), "--runs");
  expect(mist({"fit", "--test-runs", k, "--profile-db", (dir / "x.db").string(), "--gpu", "A100-SXM4-80GB"}),
         "--test-runs");
  expect(mist({"fit"}), "--profile-db");
  // Held-out runs must be of the fitted GPU and precision.
  auto h100 = read_json_file(k);
  ASSERT_TRUE(h100.has_value());
  for (auto& run : (*h100)["runs"]) run["cluster"]["gpu"] = "H100-SXM5-80GB";
  expect(mist({"fit", "--runs", k, "--test-runs", write(dir, "h100.json", h100->dump())}), "--test-runs");
  fs::remove_all(dir);
}

// A GEMM sweep: a table the model timed with a tile cost of 150 and 70% of the peak gives them back
// (and writes them to the constants file); bad tables exit 2 naming the line and column.
TEST(FitCli, GemmTableFitsTheTilesFixedCost) {
  const auto dir = scratch_dir("fit-cli-gemm-table");
  std::string table = "# a synthetic sweep\n#\n#   \nb,m,n,k,flops_per_s\n";
  const auto h100 = *spec::catalog_gpu("H100-SXM5-80GB");
  hardware::PerfConstants truth;
  truth.matmul_efficiency = 0.7;
  truth.gemm_k_overhead = 150;
  for (int mn : {4096, 8192})
    for (int k : {512, 1024, 2048, 4096, 8192}) {
      const double seconds = hardware::gemm_time(h100, spec::Dtype::kBf16, 1, mn, mn, k, truth);
      table += fmt::format("1,{},{},{},{:.9e}\n", mn, mn, k, 2.0 * mn * mn * k / seconds);
    }
  const auto file = write(dir, "sweep.csv", table);
  const auto out = (dir / "k.json").string();
  auto r = mist({"fit", "--gemm-table", file, "--gpu", "H100-SXM5-80GB", "--out", out});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = read_json_file(out);
  ASSERT_TRUE(j.has_value());
  EXPECT_NEAR((*j)["gemm_k_overhead"].get<double>(), 150, 0.5);
  EXPECT_NEAR((*j)["matmul_efficiency"].get<double>(), 0.7, 1e-3);
  EXPECT_EQ((*j)["fit"]["source"], "a synthetic sweep");

  auto expect = [](const Outcome& o, const std::string& field) {
    EXPECT_EQ(o.code, 2) << o.out;
    EXPECT_NE(o.err.find(field), std::string::npos) << o.err;
  };
  expect(mist({"fit", "--gemm-table", file}), "--gpu");
  expect(mist({"fit", "--gemm-table", (dir / "missing.csv").string(), "--gpu", "H100-SXM5-80GB"}), "--gemm-table");
  expect(mist({"fit", "--gemm-table", write(dir, "h.csv", "b,m,n,seconds\n1,2,3,1e-3\n"), "--gpu", "H100-SXM5-80GB"}),
         "no column 'k'");
  expect(mist({"fit", "--gemm-table", write(dir, "z.csv", "b,m,n,k,seconds\n1,64,64,0,1e-3\n"), "--gpu",
               "H100-SXM5-80GB"}),
         "line 2.k");
  expect(mist({"fit", "--gemm-table", write(dir, "t.csv", "b,m,n,k,seconds\n1,64,64,64,fast\n"), "--gpu",
               "H100-SXM5-80GB"}),
         "line 2.seconds");
  expect(mist({"fit", "--gemm-table", file, "--gpu", "H100-SXM5-80GB", "--dtype", "fp8"}), "--dtype");
  expect(mist({"fit", "--gemm-table", file, "--gpu", "H100-SXM5-80GB", "--runs", kPublished + "sc21_table1_a100.json"}),
         "--gemm-table");
  fs::remove_all(dir);
}

// The default tiles' fixed cost is what `mist fit --gemm-table` gives on XLA's measured H100 bf16
// GEMM table (data/measured/); B200's table, another generation, gives one within 20% of it.
TEST(FitCli, DefaultTileCostIsTheOneMeasuredOnH100) {
  const std::string measured = std::string(MIST_SOURCE_DIR) + "/data/measured/";
  auto fit = [&](const std::string& file, const std::string& gpu) {
    auto r = mist({"fit", "--gemm-table", measured + file, "--gpu", gpu, "--json"});
    EXPECT_EQ(r.code, 0) << r.err;
    return Json::parse(r.out);
  };
  const auto h100 = fit("xla_gemm_h100_bf16.csv", "H100-SXM5-80GB");
  EXPECT_NEAR(h100["gemm_k_overhead"].get<double>(), hardware::PerfConstants{}.gemm_k_overhead, 0.5);
  EXPECT_LT(h100["fit"]["median_rel_error"].get<double>(), 0.04);  // 2.9% (the default rate and costs: 9.3%)
  const auto b200 = fit("xla_gemm_b200_bf16.csv", "B200-SXM-180GB");
  EXPECT_NEAR(b200["gemm_k_overhead"].get<double>() / h100["gemm_k_overhead"].get<double>(), 1, 0.2);
}

}  // namespace
}  // namespace mist::cli::testing
