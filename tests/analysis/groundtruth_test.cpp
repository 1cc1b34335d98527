// Predicted throughput against published Megatron-LM runs (tests/data/groundtruth/).
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "analysis/memory_model.hpp"
#include "analysis/time_model.hpp"
#include "test_jobs.hpp"

namespace mist::analysis {
namespace {

std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::map<std::string, std::string>> rows;
  std::vector<std::string> header;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    if (header.empty()) {
      header = cells;
      continue;
    }
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(row);
  }
  return rows;
}

using mist::testing::gpt;

struct Row {
  std::string name;
  double published, predicted;
};

double mape(const std::vector<Row>& rows, double* worst) {
  double sum = 0;
  *worst = 0;
  for (const auto& r : rows) {
    const double e = std::fabs(r.predicted - r.published) / r.published;
    sum += e;
    *worst = std::max(*worst, e);
  }
  return sum / rows.size();
}

// Narayanan et al. SC21, Table 1: A100-80GB, fp16, full recomputation, seq 2048, vocab 51200.
// The paper's FLOP count (Eq. 3, recomputation included) converts iteration time to TFLOP/s.
TEST(GroundTruth, Sc21Table1) {
  const auto rows = read_csv(std::string(MIST_TEST_DATA_DIR) + "/groundtruth/sc21_table1.csv");
  ASSERT_EQ(rows.size(), 10u);
  std::vector<Row> results;
  std::string table = "| model | tp | pp | dp | mb | v | published TFLOP/s | mist | error |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const int64_t L = std::stoll(r.at("layers")), h = std::stoll(r.at("hidden")), a = std::stoll(r.at("heads"));
    const int64_t tp = std::stoll(r.at("tp")), pp = std::stoll(r.at("pp")), dp = std::stoll(r.at("dp"));
    const int64_t gpus = std::stoll(r.at("gpus")), B = std::stoll(r.at("global_batch"));
    const int64_t mb = std::stoll(r.at("micro_batch")), lpvs = std::stoll(r.at("layers_per_virtual_stage"));
    const int64_t s = 2048, V = 51200;
    const auto m = gpt(L, h, a, V, s);
    spec::ClusterSpec c = *spec::cluster_from_json(
        Json{{"gpu", "A100-SXM4-80GB"}, {"nodes", gpus / 8}, {"gpus_per_node", 8}}, "cluster");
    spec::TrainingSpec t;
    t.global_batch_size = B;
    t.seq_length = s;
    t.precision = spec::Dtype::kFp16;
    t.grad_dtype = spec::Dtype::kFp16;  // Megatron 2021 reduced fp16 gradients
    t.flash_attention = false;
    t.dropout = true;
    plan::StagePlan st;
    st.ckpt_layers = L;  // full recomputation of every layer
    auto p = plan::uniform_plan(m, dp, tp, pp, mb, B / (dp * mb), st);
    for (auto& x : p.stages) x.ckpt_layers = x.num_layers;
    p.virtual_pipeline_stages = lpvs > 0 ? L / pp / lpvs : 1;
    // The paper's script uses PyTorch DDP (overlapped all-reduce) without pipelining and
    // Megatron's local DDP (all-reduce after backward) with it.
    p.overlap_grad_reduce = pp == 1;
    // Megatron-LM 2021 added each micro-batch's gradients into main_grad with a separate kernel
    // (local DDP hook; PyTorch DDP's AccumulateGrad likewise): gradient accumulation fusion came in 2022.
    TimeConstants k;
    p.grad_accumulation_fusion = false;
    auto pred = predict_time(m, c, t, p, k);
    ASSERT_TRUE(pred.has_value()) << pred.error().to_string();
    const double flops = 96.0 * B * s * L * double(h) * h * (1 + s / (6.0 * h) + V / (16.0 * L * h));
    const double tflops = flops / pred->iteration_time_s / gpus / 1e12;
    const double published = std::stod(r.at("tflops_per_gpu"));
    results.push_back({r.at("params_b") + "B", published, tflops});
    table += fmt::format("| {}B | {} | {} | {} | {} | {} | {} | {:.1f} | {:+.1f}% |\n", r.at("params_b"), tp, pp, dp, mb,
                         p.virtual_pipeline_stages, published, tflops, 100 * (tflops - published) / published);
  }
  double worst = 0;
  const double err = mape(results, &worst);
  std::cout << table << fmt::format("MAPE {:.1f}%, worst {:.1f}%\n", 100 * err, 100 * worst);
  // Issue 3's target is MAPE <= 6% and no row worse than 12%; with the catalog's MAMF the model is
  // not there (docs/time-model.md: 13.1% / 17.9%, uniformly optimistic: the GEMM rate of the 2021
  // stack at these shapes is unmeasured). These bounds guard it against regressions.
  EXPECT_LE(err, 0.135);
  EXPECT_LE(worst, 0.185);
}

}  // namespace
}  // namespace mist::analysis

namespace mist::analysis {
namespace {

// Megatron-Core r0.8.0 on H100 (README scaling table): bf16, seq 4096, vocab 131072, DP/TP/PP
// communication overlap. Unstated settings assumed (docs/time-model.md): micro-batch 1, no
// recomputation, sequence parallelism with TP, flash attention, distributed optimizer (ZeRO-1).
TEST(GroundTruth, MegatronCoreH100) {
  const auto rows = read_csv(std::string(MIST_TEST_DATA_DIR) + "/groundtruth/megatron_core_h100.csv");
  ASSERT_EQ(rows.size(), 9u);
  std::vector<Row> results;
  std::string table =
      "| model | tp | pp | dp | recompute | published TFLOP/s | mist | error | MFU |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const int64_t L = std::stoll(r.at("layers")), h = std::stoll(r.at("hidden")), a = std::stoll(r.at("heads"));
    const int64_t tp = std::stoll(r.at("tp")), pp = std::stoll(r.at("pp")), dp = std::stoll(r.at("dp"));
    const int64_t gpus = std::stoll(r.at("gpus")), B = std::stoll(r.at("global_batch"));
    const int64_t s = 4096, V = 131072;
    auto m = gpt(L, h, a, V, s);
    spec::ClusterSpec c = *spec::cluster_from_json(
        Json{{"gpu", "H100-SXM5-80GB"}, {"nodes", gpus / 8}, {"gpus_per_node", 8}}, "cluster");
    spec::TrainingSpec t;
    t.global_batch_size = B;
    t.seq_length = s;
    t.precision = spec::Dtype::kBf16;
    t.grad_dtype = spec::Dtype::kFp32;
    t.flash_attention = true;
    t.dropout = false;
    plan::StagePlan st;
    st.zero = 1;
    auto p = plan::uniform_plan(m, dp, tp, pp, 1, B / dp, st);
    p.sequence_parallel = tp > 1;
    p.overlap_tp_comm = tp > 1;  // --tp-comm-overlap
    // The least recomputation that fits in memory: none, selective, then full on every layer.
    std::string recompute = "none";
    for (int level = 0; level < 3; ++level) {
      p.recompute = level == 1 ? plan::Recompute::kSelective : plan::Recompute::kNone;
      for (auto& x : p.stages) x.ckpt_layers = level == 2 ? x.num_layers : 0;
      recompute = level == 0 ? "none" : level == 1 ? "selective" : "full";
      auto mem = predict_memory(m, c, t, p);
      ASSERT_TRUE(mem.has_value()) << mem.error().to_string();
      if (mem->fits) break;
    }
    auto pred = predict_time(m, c, t, p);
    ASSERT_TRUE(pred.has_value()) << pred.error().to_string();
    // The table's TFLOP/s count the model FLOPs without recomputation (Megatron's formula:
    // 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) for GPT with a 4h MLP).
    const double flops = 72.0 * B * s * L * double(h) * h * (1 + s / (6.0 * h) + V / (12.0 * L * h));
    const double tflops = flops / pred->iteration_time_s / gpus / 1e12;
    const double published = std::stod(r.at("tflops_per_gpu"));
    results.push_back({r.at("model"), published, tflops});
    table += fmt::format("| {} | {} | {} | {} | {} | {} | {:.1f} | {:+.1f}% | {:.1f}% |\n", r.at("model"), tp, pp, dp,
                         recompute, published, tflops, 100 * (tflops - published) / published, 100 * pred->mfu);
  }
  double worst = 0;
  const double err = mape(results, &worst);
  std::cout << table << fmt::format("MAPE {:.1f}%, worst {:.1f}%\n", 100 * err, 100 * worst);
  // Issue 3's target is MAPE <= 10%; today's accuracy (12.0% / 18.0%, 2026-11-30) is guarded
  // here (docs/time-model.md).
  EXPECT_LE(err, 0.125);
  EXPECT_LE(worst, 0.185);
}

}  // namespace
}  // namespace mist::analysis

namespace mist::analysis {
namespace {

// Korthikanti et al. 2022, Table 5: Megatron-LM (2022) on A100-80GB, fp16, data parallel size 1,
// full recomputation (tensor parallel all-reduce) against selective recomputation with sequence
// parallelism. Iteration times; MFU with the paper's model FLOPs (72·B·s·l·h²·(...)).
TEST(GroundTruth, Korthikanti2022) {
  const auto rows = read_csv(std::string(MIST_TEST_DATA_DIR) + "/groundtruth/korthikanti_2022.csv");
  ASSERT_EQ(rows.size(), 8u);
  std::vector<Row> results;
  std::string table =
      "| model | tp | pp | mb | v | recompute | published s | mist s | error |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const int64_t L = std::stoll(r.at("layers")), h = std::stoll(r.at("hidden")), a = std::stoll(r.at("heads"));
    const int64_t tp = std::stoll(r.at("tp")), pp = std::stoll(r.at("pp")), dp = std::stoll(r.at("dp"));
    const int64_t gpus = std::stoll(r.at("gpus")), B = std::stoll(r.at("global_batch"));
    const int64_t mb = std::stoll(r.at("micro_batch")), v = std::stoll(r.at("virtual_stages"));
    const bool selective = r.at("recompute") == "selective";
    const int64_t s = 2048, V = 51200;
    const auto m = gpt(L, h, a, V, s);
    spec::ClusterSpec c = *spec::cluster_from_json(
        Json{{"gpu", "A100-SXM4-80GB"}, {"nodes", (gpus + 7) / 8}, {"gpus_per_node", 8}}, "cluster");
    spec::TrainingSpec t;
    t.global_batch_size = B;
    t.seq_length = s;
    t.precision = spec::Dtype::kFp16;
    t.grad_dtype = spec::Dtype::kFp16;
    t.flash_attention = false;
    t.dropout = true;
    plan::StagePlan st;
    auto p = plan::uniform_plan(m, dp, tp, pp, mb, B / (dp * mb), st);
    p.virtual_pipeline_stages = static_cast<int>(v);
    p.sequence_parallel = selective;
    p.recompute = selective ? plan::Recompute::kSelective : plan::Recompute::kNone;
    for (auto& x : p.stages) x.ckpt_layers = selective ? 0 : x.num_layers;
    auto pred = predict_time(m, c, t, p);
    ASSERT_TRUE(pred.has_value()) << pred.error().to_string();
    const double published = std::stod(r.at("iteration_time_s"));
    // Compared as throughput (published / predicted time), like the other tables.
    results.push_back({r.at("model") + " " + r.at("recompute"), 1.0, published / pred->iteration_time_s});
    table += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.2f} | {:+.1f}% |\n", r.at("model"), tp, pp, mb, v,
                         r.at("recompute"), published, pred->iteration_time_s,
                         100 * (published / pred->iteration_time_s - 1));
  }
  double worst = 0;
  const double err = mape(results, &worst);
  std::cout << table << fmt::format("MAPE {:.1f}%, worst {:.1f}%\n", 100 * err, 100 * worst);
  // With the catalog's MAMF (2026-11-30): 7.5% / 13.3%, every row optimistic.
  EXPECT_LE(err, 0.08);
  EXPECT_LE(worst, 0.14);
}

}  // namespace
}  // namespace mist::analysis
