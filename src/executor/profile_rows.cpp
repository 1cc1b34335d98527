#include "executor/profile_rows.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include "graph/lower.hpp"
#include "profile/op_source.hpp"

namespace mist::executor {

spec::TrainingSpec run_training(const BlockRun& r) {
  spec::TrainingSpec t;
  t.global_batch_size = r.micro_batch;
  t.seq_length = r.seq_length;
  t.precision = r.dtype;
  t.grad_dtype = spec::Dtype::kFp32;  // the executor's main_grad, as Megatron's
  t.optimizer = spec::Optimizer::kAdamW;
  t.flash_attention = r.flash_attention;
  t.dropout = r.dropout;
  if (r.moe_allgather) t.moe_dispatcher = spec::MoeDispatcher::kAllGather;
  t.moe_router_fp32 = r.moe_router_fp32;
  t.recompute_modules = r.recompute_modules;
  t.cross_entropy_fusion = r.cross_entropy_fusion;
  return t;
}

std::optional<plan::CpComm> run_cp_comm(const BlockRun& r) {
  switch (r.cp_exchange) {
    case graph::CpExchange::kRing: return plan::CpComm::kRing;
    case graph::CpExchange::kAllToAll: return plan::CpComm::kAllToAll;
    case graph::CpExchange::kAllGather: return plan::CpComm::kAllGather;
    case graph::CpExchange::kA2aP2p: return plan::CpComm::kA2aP2p;
    case graph::CpExchange::kGatherRing: break;
  }
  return std::nullopt;
}

spec::ClusterSpec cpu_cluster() {
  // The figures of examples/cluster_cpu.json (docs/profile.md says where each comes from); they
  // matter only for ops the profile lacks.
  spec::ClusterSpec c;
  c.gpu.name = "cpu";
  c.gpu.vendor = "cpu";
  c.gpu.source = "this machine (examples/cluster_cpu.json)";
  c.gpu.fp32_flops = 0.1664e12;
  c.gpu.bf16_flops = 0.3328e12;
  c.gpu.mem_bw = 10.7e9;
  c.gpu.sm_count = 2;
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  c.gpu.memory_bytes = ram;
  c.gpu.default_gpus_per_node = 1;
  c.host_memory_bytes = ram;
  return c;
}

std::string profile_source(int threads, bool thread_cpu_clock) {
  std::string model = "unknown CPU";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  std::replace(model.begin(), model.end(), ',', ' ');
  return fmt::format("mist executor; LibTorch; {} thread{}; {}; {}", threads, threads == 1 ? "" : "s",
                     thread_cpu_clock ? "thread CPU time" : "wall time", model);
}

std::string today() {
  return fmt::format("{:%Y-%m-%d}", std::chrono::floor<std::chrono::days>(std::chrono::system_clock::now()));
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double x = p * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(x));
  const size_t j = std::min(i + 1, v.size() - 1);
  return v[i] + (x - static_cast<double>(i)) * (v[j] - v[i]);
}

Result<std::vector<profile::Measurement>> profile_rows(const BlockRun& r, const BlockMeasurement& m,
                                                       const std::string& source, const std::string& date) {
  // A profile row's shape key names no cp: rows of a rank's s/cp tokens would pass for the whole
  // sequence's.
  if (r.cp != 1) return fail("run.cp", "op times of a context-parallel rank have no profile shape key yet");
  if (r.ep != 1 || r.etp != 1)
    return fail(r.ep != 1 ? "run.ep" : "run.etp", "op times of an expert-parallel rank have no profile shape key yet");
  const auto t = run_training(r);
  const auto lm = graph::lower(r.model, r.seq_length, graph::lowering_options(t, false));
  const graph::Layer& L = r.layer == graph::LayerKind::kBlock       ? lm.block
                          : r.layer == graph::LayerKind::kEmbedding ? lm.embedding
                                                                    : lm.head;
  sym::Bindings at = lm.dims;
  at["b"] = static_cast<double>(r.micro_batch);
  at["t"] = 1;
  const std::string shape = profile::shape_key(r.layer, at);
  std::vector<profile::Measurement> rows;
  for (const auto& ot : m.times) {
    if (ot.seconds.empty()) continue;
    // The whole layer's rows are named after the layer ("block", "embedding", "head"): the
    // embedding and the head share a shape key.
    std::string op = ot.op, kind = "layer";
    if (ot.op == "block") {
      op = L.name;
    } else {
      auto it = std::find_if(L.ops.begin(), L.ops.end(), [&](const graph::Op& o) { return o.name == ot.op; });
      if (it == L.ops.end()) return fail("op", fmt::format("'{}' is not an op of the lowered {}", ot.op, L.name));
      kind = graph::to_string(it->kind);
    }
    profile::Measurement row{"cpu", op, shape, spec::to_string(r.dtype), ot.phase, kind,
                             percentile(ot.seconds, 0.5), percentile(ot.seconds, 0.1), percentile(ot.seconds, 0.9),
                             static_cast<int64_t>(ot.seconds.size()), source, date};
    // A kernel faster than the clock's resolution reads 0 s: keep it at one clock tick.
    for (double* v : {&row.median_s, &row.p10_s, &row.p90_s}) *v = std::max(*v, 1e-9);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace mist::executor
