// torchtitan's published Llama 3.1 8B FSDP runs on 8 and 128 H100 (96 GB, 500 W) through the
// default path: --engine torchtitan, no constants file. No fit has seen these runs: the calibration
// is the PyTorch-FSDP fit of llm-foundry's A100 runs, moved to H100 by the GPUs' MAMF fractions;
// the rest is physics (torchtitan's lowering and selective policy, the power limit's clock).
#include <cmath>

#include <gtest/gtest.h>

#include "job/prepare.hpp"
#include "spec/catalog.hpp"
#include "../common/csv.hpp"

namespace mist::job {
namespace {

struct Row {
  int64_t gpus = 0, local_batch = 0;
  double tokens_per_s = 0, reserved_gib = 0;
};

// The rows with or without torch.compile, with or without Float8.
std::vector<Row> rows_with(bool compile, bool float8 = false) {
  std::vector<Row> rows;
  for (const auto& r : testing::read_csv(std::string(MIST_TEST_DATA_DIR) + "/groundtruth/torchtitan_h100_fsdp.csv")) {
    if (r.at("compile") != (compile ? "1" : "0") || r.at("float8") != (float8 ? "1" : "0")) continue;
    rows.push_back({std::stoll(r.at("gpus")), std::stoll(r.at("local_batch")), std::stod(r.at("tps_per_gpu")),
                    std::stod(r.at("memory_gib"))});
  }
  return rows;
}

std::vector<Row> eager_rows() { return rows_with(false); }

Job job_of(const Row& r, bool compile = false) {
  Job j;
  j.model = *spec::catalog_model("llama3-8b");
  j.cluster = *spec::cluster_from_json(Json{{"gpu", "H100-SXM5-96GB"}, {"nodes", r.gpus / 8}, {"gpus_per_node", 8}},
                                       "cluster");
  j.training.global_batch_size = r.gpus * r.local_batch;
  j.training.seq_length = 8192;
  j.training.precision = spec::Dtype::kBf16;
  j.training.flash_attention = true;
  j.training.dropout = false;
  j.training.compile = compile;
  // torchtitan 9dec370 (the rows' commit, 2024-12) left the loss's torch.compile commented out.
  if (compile) j.training.compile_loss = false;
  j.plan = plan::uniform_plan(j.model, r.gpus, 1, 1, r.local_batch, 1,
                              {.num_layers = 0, .zero = 3, .ckpt_layers = 0, .offload = {}});
  j.plan.recompute = plan::Recompute::kSelective;  // torchtitan's op-level policy
  return j;
}

TEST(TorchtitanH100, EagerFsdpRowsWithoutAFitOfTheirOwn) {
  const auto rows = eager_rows();
  ASSERT_EQ(rows.size(), 2u);
  for (const Row& r : rows) {
    auto p = predict(job_of(r), {.engine = spec::Engine::kTorchtitan});
    ASSERT_TRUE(p.has_value()) << p.error().to_string();
    const double tps = p->time.tokens_per_s / static_cast<double>(r.gpus);
    // 2026-12-01: +6.5% (8 GPUs), +5.4% (128); the target is 8%.
    EXPECT_LT(std::fabs(tps / r.tokens_per_s - 1), 0.08) << r.gpus << " GPUs: " << tps << " tokens/s";
    // The reserved peak (the caching allocator replayed on the iteration's allocations, expandable
    // segments as torchtitan runs) within the 5% of the published max reserved: 2026-12-02
    // +1.0% (8 GPUs), +2.4% (128). The allocated peak lies below it.
    const auto& st = p->memory.stages.at(0);
    EXPECT_TRUE(st.expandable_segments);
    const double gib = st.reserved_bytes / (1024.0 * 1024 * 1024);
    EXPECT_LT(std::fabs(gib / r.reserved_gib - 1), 0.05) << r.gpus << " GPUs: " << gib << " GiB";
    EXPECT_LT(st.peak_allocated_bytes, st.reserved_bytes) << r.gpus << " GPUs";
    EXPECT_GT(st.peak_bytes, st.reserved_bytes) << r.gpus << " GPUs: the context and NCCL come on top";
    EXPECT_EQ(p->calibration.kind, "stack");
  }
}

// The torch.compile rows, which no fit has seen either: the blocks lowered as compiled (one kernel
// per elementwise chain; w2's output not kept, as AOTAutograd's partitioner does), the rest as the
// eager rows.
TEST(TorchtitanH100, CompiledBlocksFasterAndSmallerAsMeasured) {
  const auto rows = rows_with(true);
  ASSERT_EQ(rows.size(), 2u);
  for (const Row& r : rows) {
    auto compiled = predict(job_of(r, true), {.engine = spec::Engine::kTorchtitan});
    auto eager = predict(job_of(r, false), {.engine = spec::Engine::kTorchtitan});
    ASSERT_TRUE(compiled.has_value() && eager.has_value());
    const double tps = compiled->time.tokens_per_s / static_cast<double>(r.gpus);
    // 2026-12-02: +9.2% (8 GPUs: 7,283 against 6,667), +6.8% (128: 6,959 against 6,514);
    // 2026-12-07: +1.2% (6,744), −6.6% (6,084).
    EXPECT_LT(std::fabs(tps / r.tokens_per_s - 1), 0.10) << r.gpus << " GPUs: " << tps << " tokens/s";
    EXPECT_GT(compiled->time.tokens_per_s, 1.1 * eager->time.tokens_per_s);  // measured +16%
    // 2026-12-02: +2.9% (79.2 GiB against 77.0), +4.2% (64.6 against 62.0).
    const double gib = compiled->memory.stages.at(0).reserved_bytes / (1024.0 * 1024 * 1024);
    EXPECT_LT(std::fabs(gib / r.reserved_gib - 1), 0.05) << r.gpus << " GPUs: " << gib << " GiB";
    EXPECT_LT(compiled->memory.stages.at(0).reserved_bytes, eager->memory.stages.at(0).reserved_bytes);
  }
}

// The Float8 rows (issue 17: tokens/s within 8%, reserved memory within 5%): torchao's tensorwise
// Float8Linear under torch.compile, the weights cast at every use, the same plans.
TEST(TorchtitanH100, Float8RowsWithoutAFitOfTheirOwn) {
  const auto rows = rows_with(true, true);
  ASSERT_EQ(rows.size(), 2u);
  for (const Row& r : rows) {
    Job j = job_of(r, true);
    j.training.fp8 = spec::Fp8Recipe::kTensorwise;
    auto p = predict(j, {.engine = spec::Engine::kTorchtitan});
    ASSERT_TRUE(p.has_value()) << p.error().to_string();
    const double tps = p->time.tokens_per_s / static_cast<double>(r.gpus);
    // 2026-12-07: +4.7% (8 GPUs: 8,933 against 8,532), −6.8% (128: 7,810 against 8,380).
    EXPECT_LT(std::fabs(tps / r.tokens_per_s - 1), 0.08) << r.gpus << " GPUs: " << tps << " tokens/s";
    // 2026-12-07: +3.1% (79.2 GiB against 76.8), +4.5% (64.6 against 61.8).
    const double gib = p->memory.stages.at(0).reserved_bytes / (1024.0 * 1024 * 1024);
    EXPECT_LT(std::fabs(gib / r.reserved_gib - 1), 0.05) << r.gpus << " GPUs: " << gib << " GiB";
  }
}

// torch.compile is modelled as torchtitan applies it; the other stacks refuse it by name.
TEST(TorchtitanH100, CompileIsRefusedForOtherStacks) {
  const Row r{8, 2, 0, 0};
  for (auto e : {spec::Engine::kMegatron, spec::Engine::kDeepSpeed}) {
    auto p = predict(job_of(r, true), {.engine = e});
    ASSERT_FALSE(p.has_value());
    EXPECT_EQ(p.error().path, "training.compile");
  }
}

// A stack's matmul efficiency moves to another GPU with the two GPUs' MAMF fractions; on its own
// GPU it applies as fitted.
TEST(TorchtitanH100, StackFitMovesWithTheMamfFraction) {
  const Row r{8, 2, 0, 0};
  auto h100 = prepare(job_of(r), {.engine = spec::Engine::kTorchtitan});
  ASSERT_TRUE(h100.has_value()) << h100.error().to_string();
  Job a100 = job_of(r);
  a100.cluster = *spec::cluster_from_json(Json{{"gpu", "A100-SXM4-40GB"}, {"nodes", 1}, {"gpus_per_node", 8}}, "c");
  auto on_a100 = prepare(a100, {.engine = spec::Engine::kTorchtitan});
  ASSERT_TRUE(on_a100.has_value()) << on_a100.error().to_string();
  const auto h = *spec::catalog_gpu("H100-SXM5-96GB"), a = *spec::catalog_gpu("A100-SXM4-40GB");
  const double ratio = (h.matmul_bf16_flops / h.bf16_flops) / (a.matmul_bf16_flops / a.bf16_flops);
  EXPECT_NEAR(h100->constants().perf.matmul_efficiency / on_a100->constants().perf.matmul_efficiency, ratio, 1e-12);
  EXPECT_LT(ratio, 0.95);
  EXPECT_NE(h100->calibration().note.find("MAMF fractions"), std::string::npos) << h100->calibration().note;
  EXPECT_EQ(on_a100->calibration().note.find("MAMF fractions"), std::string::npos) << on_a100->calibration().note;
}

}  // namespace
}  // namespace mist::job
