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

// The rows without torch.compile or Float8 (those are not modelled yet).
std::vector<Row> eager_rows() {
  std::vector<Row> rows;
  for (const auto& r : testing::read_csv(std::string(MIST_TEST_DATA_DIR) + "/groundtruth/torchtitan_h100_fsdp.csv")) {
    if (r.at("compile") != "0" || r.at("float8") != "0") continue;
    rows.push_back({std::stoll(r.at("gpus")), std::stoll(r.at("local_batch")), std::stod(r.at("tps_per_gpu")),
                    std::stod(r.at("memory_gib"))});
  }
  return rows;
}

Job job_of(const Row& r) {
  Job j;
  j.model = *spec::catalog_model("llama3-8b");
  j.cluster = *spec::cluster_from_json(Json{{"gpu", "H100-SXM5-96GB"}, {"nodes", r.gpus / 8}, {"gpus_per_node", 8}},
                                       "cluster");
  j.training.global_batch_size = r.gpus * r.local_batch;
  j.training.seq_length = 8192;
  j.training.precision = spec::Dtype::kBf16;
  j.training.flash_attention = true;
  j.training.dropout = false;
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
