// job::prepare, the input boundary: the files a cluster names are read into values once, errors name
// the field, and the prepared job predicts what a job prepared from the values directly predicts.
#include "job/prepare.hpp"
#include "job/stacks.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "spec/catalog.hpp"

namespace mist::job {
namespace {

namespace fs = std::filesystem;

Job example() {
  Job j;
  j.model = *spec::catalog_model("gpt3-13b");
  j.cluster = *spec::cluster_from_json(Json{{"gpu", "A100-SXM4-80GB"}, {"nodes", 2}, {"gpus_per_node", 8}}, "cluster");
  j.training.global_batch_size = 512;
  j.training.seq_length = 2048;
  j.training.precision = spec::Dtype::kBf16;
  j.plan = plan::uniform_plan(j.model, 2, 4, 2, 2, 128, {.num_layers = 0, .zero = 1, .ckpt_layers = 0, .offload = {}});
  j.plan.sequence_parallel = true;
  return j;
}

fs::path scratch() {
  const auto dir = fs::temp_directory_path() / ("mist-prepare-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

TEST(Prepare, ConstantsFileIsReadOnceIntoValues) {
  const auto dir = scratch();
  std::ofstream(dir / "k.json") << R"({"time_constants_version": 1, "gpu": "A100-SXM4-80GB", "device": "A100",
                                       "dtype": "bf16", "matmul_efficiency": 0.5, "fit": {}})";
  Job j = example();
  j.files.time_constants = (dir / "k.json").string();
  auto prepared = prepare(j);
  ASSERT_TRUE(prepared) << prepared.error().to_string();
  EXPECT_EQ(prepared->constants().perf.matmul_efficiency, 0.5);
  EXPECT_EQ(prepared->calibration().constants_source, "cluster.time_constants (" + j.files.time_constants + ")");
  // The file is not read again: removed, the prepared job still predicts, and with the constants.
  fs::remove_all(dir);
  auto calibrated = analysis::predict(*prepared, j.plan);
  ASSERT_TRUE(calibrated) << calibrated.error().to_string();
  EXPECT_TRUE(calibrated->matmul_rate.calibrated);
  EXPECT_DOUBLE_EQ(calibrated->matmul_rate.flops, 0.5 * j.cluster.gpu.bf16_flops);
  // The same as a job prepared from those values, and slower than the catalog's MAMF.
  analysis::TimeConstants k;
  k.perf.matmul_efficiency = 0.5;
  auto direct = analysis::predict(*analysis::PreparedJob::create(j.model, j.cluster, j.training, k), j.plan);
  ASSERT_TRUE(direct);
  EXPECT_EQ(direct->time.iteration_time_s, calibrated->time.iteration_time_s);
  auto plain = predict(example(), {.engine = spec::Engine::kMegatron, .uncalibrated = true});
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->matmul_rate.calibrated);
  EXPECT_LT(plain->time.iteration_time_s, calibrated->time.iteration_time_s);
}

TEST(Prepare, UnreadableFilesAreErrorsNamingTheField) {
  Job j = example();
  j.files.time_constants = "/nonexistent/k.json";
  auto missing = prepare(j);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().path, "cluster.time_constants");
  j.files = {.profile_db = "/nonexistent/ops.db", .time_constants = ""};
  auto no_db = prepare(j);
  ASSERT_FALSE(no_db);
  EXPECT_EQ(no_db.error().path, "cluster.profile_db");
  EXPECT_FALSE(fs::exists("/nonexistent/ops.db"));  // not created by trying
  // A constants file fitted for another GPU is refused, naming its field.
  const auto dir = scratch();
  std::ofstream(dir / "h100.json")
      << R"({"time_constants_version": 1, "gpu": "H100-SXM5-80GB", "matmul_efficiency": 0.6})";
  j.files = {.profile_db = "", .time_constants = (dir / "h100.json").string()};
  auto other = prepare(j);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().path, "cluster.time_constants.gpu");
  fs::remove_all(dir);
}

TEST(Prepare, ChecksWhatNoPlanCanChange) {
  Job j = example();
  j.cluster = *spec::cluster_from_json(Json{{"gpu", "V100-SXM2-32GB"}, {"nodes", 2}, {"gpus_per_node", 8}}, "cluster");
  auto bf16_on_volta = prepare(j);
  ASSERT_FALSE(bf16_on_volta);
  EXPECT_NE(bf16_on_volta.error().to_string().find("bf16"), std::string::npos) << bf16_on_volta.error().to_string();
}

// Copies with other constants share the lowering: one build per (sequence parallelism, recompute).
TEST(Prepare, LoweringIsBuiltOncePerVariantAndShared) {
  Job j = example();
  auto prepared = prepare(j);
  ASSERT_TRUE(prepared);
  auto a = prepared->lowering(true, plan::Recompute::kNone);
  auto b = prepared->lowering(true, plan::Recompute::kNone);
  auto c = prepared->lowering(true, plan::Recompute::kSelective);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  analysis::TimeConstants k;
  k.perf.matmul_efficiency = 0.3;
  const auto other = prepared->with_constants(k);
  EXPECT_EQ(*other.lowering(true, plan::Recompute::kNone), *a);
  EXPECT_EQ(other.constants().perf.matmul_efficiency, 0.3);
  EXPECT_NE(prepared->constants().perf.matmul_efficiency, 0.3);  // the original keeps its own
}

// An invalid plan is refused by the one entry point, naming the rule.
TEST(Prepare, PredictChecksThePlan) {
  Job j = example();
  j.plan.dp = 3;
  auto r = predict(j);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path.rfind("plan", 0), 0u) << r.error().to_string();
}

}  // namespace
}  // namespace mist::job

namespace mist::job {
namespace {

spec::GpuSpec gpu(const std::string& name) { return *spec::catalog_gpu(name); }

// The shipped fits: Megatron's on A100 (2022) and H100 (Megatron-Core), FSDP's on A100-40GB.
TEST(StackFits, TheJobsStackOnItsGpuElseTheNearestGenerationElseNone) {
  const auto& fits = stack_fits();
  ASSERT_TRUE(fits) << fits.error().to_string();
  ASSERT_GE(fits->size(), 2u);
  using spec::Dtype;
  using spec::Engine;
  auto a100 = choose_stack_fit(*fits, Engine::kMegatron, gpu("A100-SXM4-80GB"), Dtype::kBf16);
  ASSERT_TRUE(a100.fit);
  EXPECT_TRUE(a100.same_gpu);
  EXPECT_EQ(a100.fit->gpu, "A100-SXM4-80GB");  // fitted in fp16: bf16 runs on the same tensor cores
  auto h200 = choose_stack_fit(*fits, Engine::kMegatron, gpu("H200-SXM-141GB"), Dtype::kBf16);
  ASSERT_TRUE(h200.fit);
  EXPECT_FALSE(h200.same_gpu);
  EXPECT_EQ(h200.fit->gpu, "H100-SXM5-80GB");  // Hopper, like the H200
  EXPECT_NE(h200.note.find("same generation"), std::string::npos) << h200.note;
  auto a100_40 = choose_stack_fit(*fits, Engine::kMegatron, gpu("A100-SXM4-40GB"), Dtype::kBf16);
  ASSERT_TRUE(a100_40.fit);
  EXPECT_EQ(a100_40.fit->gpu, "A100-SXM4-80GB");
  auto b200 = choose_stack_fit(*fits, Engine::kMegatron, gpu("B200-SXM-180GB"), Dtype::kBf16);
  ASSERT_TRUE(b200.fit);
  EXPECT_EQ(b200.fit->gpu, "H100-SXM5-80GB");  // the nearest generation with a fit
  EXPECT_NE(b200.note.find("nearest generation"), std::string::npos) << b200.note;
  // None across vendors, and none for fp32 (the fits are of 16-bit tensor-core GEMMs).
  EXPECT_FALSE(choose_stack_fit(*fits, Engine::kMegatron, gpu("MI300X-192GB"), Dtype::kBf16).fit);
  const auto fp32 = choose_stack_fit(*fits, Engine::kMegatron, gpu("A100-SXM4-80GB"), Dtype::kFp32);
  EXPECT_FALSE(fp32.fit);
  EXPECT_NE(fp32.note.find("fp32"), std::string::npos);
  // Every fit states where its runs came from and how well it fits them.
  for (const auto& f : *fits) {
    EXPECT_FALSE(f.source.empty()) << f.gpu;
    EXPECT_GT(f.runs, 0) << f.gpu;
    EXPECT_LT(f.mean_error, 0.15) << f.gpu;
  }
}

TEST(StackFits, PrepareAppliesTheStackFitUnlessUncalibratedOrTheClusterHasItsOwn) {
  Job j = example();  // GPT-3 13B on 2x8 A100, bf16
  auto calibrated = prepare(j);
  ASSERT_TRUE(calibrated) << calibrated.error().to_string();
  EXPECT_EQ(calibrated->calibration().kind, "stack");
  EXPECT_EQ(calibrated->calibration().engine, "megatron");
  EXPECT_GT(calibrated->constants().perf.matmul_efficiency, 0);
  EXPECT_GT(calibrated->calibration().held_out_runs, 0);
  auto physics = prepare(j, {.engine = spec::Engine::kMegatron, .uncalibrated = true});
  ASSERT_TRUE(physics);
  EXPECT_EQ(physics->calibration().kind, "none");
  EXPECT_EQ(physics->constants().perf.matmul_efficiency, 0);
  // The fitted efficiency is below the catalog's MAMF: calibrated, the same plan is slower.
  auto slow = analysis::predict(*calibrated, j.plan), fast = analysis::predict(*physics, j.plan);
  ASSERT_TRUE(slow && fast);
  EXPECT_GT(slow->time.iteration_time_s, fast->time.iteration_time_s);
  EXPECT_EQ(slow->calibration.kind, "stack");
  // The cluster's own constants file wins over the stack's, and --uncalibrated with it is an error.
  const auto dir = scratch();
  std::ofstream(dir / "k.json")
      << R"({"time_constants_version": 1, "gpu": "A100-SXM4-80GB", "matmul_efficiency": 0.4})";
  j.files.time_constants = (dir / "k.json").string();
  auto own = prepare(j);
  ASSERT_TRUE(own);
  EXPECT_EQ(own->calibration().kind, "file");
  EXPECT_EQ(own->constants().perf.matmul_efficiency, 0.4);
  auto both = prepare(j, {.engine = spec::Engine::kMegatron, .uncalibrated = true});
  ASSERT_FALSE(both);
  EXPECT_EQ(both.error().path, "--uncalibrated");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mist::job
