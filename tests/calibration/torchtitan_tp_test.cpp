// torchtitan's published runs with tensor parallelism (Llama 3.1 70B and 8B on H100) and with FSDP on
// H200 (data/published/torchtitan_tp_fsdp_h100_h200.json), through the default path: --engine
// torchtitan, no constants file. No fit has seen them. What they check: DTensor's sequence
// parallelism (the gathered input kept, torchao's float8 TP gathering in FP8), loss parallelism's
// decomposed cross entropy, and the loss under torch.compile (torchtitan compiles it since 2025).
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <optional>

#include <gtest/gtest.h>

#include "calibration/published_runs.hpp"
#include "core/json_fields.hpp"
#include "job/prepare.hpp"

namespace mist::calibration {
namespace {

const std::string kFile = std::string(MIST_SOURCE_DIR) + "/data/published/torchtitan_tp_fsdp_h100_h200.json";

struct Scored {
  std::string name;
  bool context_parallel = false;
  double tps_error = 0;                  // predicted / measured tokens/s per GPU - 1
  std::optional<double> memory_error;    // predicted / measured reserved peak - 1, where published
};

std::string fmt_percent(double e) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100 * e);
  return b;
}

std::vector<Scored> scored() {
  auto runs = load_published_runs(kFile);
  EXPECT_TRUE(runs.has_value()) << runs.error().to_string();
  const auto raw = read_json_file(kFile);
  EXPECT_TRUE(raw.has_value());
  std::vector<Scored> out;
  if (!runs || !raw) return out;
  EXPECT_EQ(runs->engine, spec::Engine::kTorchtitan);
  for (size_t i = 0; i < runs->runs.size(); ++i) {
    const auto& r = runs->runs[i];
    auto p = job::predict(r.job, {.engine = spec::Engine::kTorchtitan});
    EXPECT_TRUE(p.has_value()) << r.name << ": " << p.error().to_string();
    if (!p) continue;
    Scored s{r.name, r.job.plan.cp > 1, r.iteration_time_s / p->time.iteration_time_s - 1, std::nullopt};
    const Json& reported = raw->at("runs").at(i).at("reported");
    if (reported.contains("memory_gib")) {
      double reserved = 0;
      for (const auto& st : p->memory.stages) reserved = std::max(reserved, st.reserved_bytes);
      s.memory_error = reserved / (1024.0 * 1024 * 1024) / reported.at("memory_gib").get<double>() - 1;
    }
    out.push_back(s);
  }
  return out;
}

TEST(TorchtitanPublished, TensorParallelAndH200Runs) {
  const auto runs = scored();
  ASSERT_EQ(runs.size(), 14u);
  double sum = 0;
  int memory_rows = 0, timed = 0;
  for (const auto& r : runs) {
    SCOPED_TRACE(r.name);
    std::printf("| %s | %+.1f%% | %s |\n", r.name.c_str(), 100 * r.tps_error,
                r.memory_error ? fmt_percent(*r.memory_error).c_str() : "");
    if (r.memory_error) {
      ++memory_rows;
      // 2026-12-07: H200 −0.9% and −2.4% (+40% with the loss eager, as mist had torchtitan's loss
      // before); 70B TP −9.0% and −3.2% (−23% and −18% before loss parallelism's temporaries and the
      // kept gathered inputs); 405B −10% (interleaved) to −25% (CP 8), −45% to −53% before
      // torchtitan's FSDP under PP was read as ZeRO-1 (the stage's whole weights and fp32 gradients).
      const double bound = r.name.find("H200") != std::string::npos  ? 0.05
                           : r.name.find("405B") != std::string::npos ? 0.26
                                                                      : 0.10;
      EXPECT_LT(std::fabs(*r.memory_error), bound);
    }
    // The context-parallel runs are issue 17's known gap (+17% to +30%, docs/time-model.md).
    if (r.context_parallel) continue;
    ++timed;
    sum += std::fabs(r.tps_error);
    // 2026-12-07, as tokens/s: −9.9% (70B float8 of 2024-12) to +4.5% (8B bf16 with TP); before
    // DTensor's sequence parallelism was told apart from Megatron's, the 70B TP runs were 6-17%
    // slow in mist.
    EXPECT_LT(std::fabs(r.tps_error), 0.11);
  }
  EXPECT_EQ(memory_rows, 10);
  EXPECT_EQ(timed, 11);
  EXPECT_LE(sum / static_cast<double>(timed), 0.065);
}

}  // namespace
}  // namespace mist::calibration
