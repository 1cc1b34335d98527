// GpuSpec and ClusterSpec: JSON forms (units in the keys), converted to SI once, here.
#include "spec/cluster.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "core/units.hpp"
#include "spec/catalog.hpp"

namespace mist::spec {

namespace {

using units::kGB;
using units::kGiB;
using units::kMiB;
using units::kMicrosecond;
using units::kTB;
using units::kTFLOPS;

// Upper bounds that no real device approaches; they catch unit mistakes (bytes for GiB).
constexpr double kMaxTflops = 1e5;
constexpr double kMaxGBps = 1e5;
constexpr double kMaxTBps = kMaxGBps / 1e3;
constexpr double kMaxGiB = 1e5;
constexpr double kMaxMiB = 1 << 20;
constexpr double kMaxLatencyUs = 1e6;
constexpr int64_t kMaxNodes = 100000;
constexpr int64_t kMaxGpusPerNode = 64;
constexpr int64_t kMaxNvlinkDomain = 1152;  // NVIDIA's largest announced NVLink domain is 576 GPUs

// Defaults when a cluster file does not give latencies: one step of an NCCL ring. NVLink's is
// fitted with hardware::CommConstants to all-reduce times measured on an 8×A100 NVSwitch node
// (docs/time-model.md, "Communication"); PCIe's and one InfiniBand/RoCE hop's are estimates
// (docs/specs.md).
constexpr double kNvlinkLatencyUs = 2.4;
constexpr double kPcieLatencyUs = 5;
constexpr double kInterNodeLatencyUs = 5;

// A number field of the GPU form: JSON key, member, unit, bounds. `positive` fields must be > 0;
// the others may be 0 ("not supported": bf16 on V100, no NVLink on L4).
struct GpuNumber {
  std::string_view key;
  double GpuSpec::*member;
  double unit;
  double hi;
  bool positive;
};

const std::array<GpuNumber, 15> kGpuNumbers = {{
    {"memory_GiB", &GpuSpec::memory_bytes, kGiB, kMaxGiB, true},
    {"fp32_TFLOPS", &GpuSpec::fp32_flops, kTFLOPS, kMaxTflops, true},
    {"tf32_TFLOPS", &GpuSpec::tf32_flops, kTFLOPS, kMaxTflops, false},
    {"fp16_TFLOPS", &GpuSpec::fp16_flops, kTFLOPS, kMaxTflops, false},
    {"bf16_TFLOPS", &GpuSpec::bf16_flops, kTFLOPS, kMaxTflops, false},
    {"fp8_TFLOPS", &GpuSpec::fp8_flops, kTFLOPS, kMaxTflops, false},
    {"mem_bw_TBps", &GpuSpec::mem_bw, kTB, kMaxTBps, true},
    {"link_GBps", &GpuSpec::link_bw, kGB, kMaxGBps, false},
    {"compute_capability", &GpuSpec::compute_capability, 1.0, 100.0, false},
    {"context_MiB", &GpuSpec::cuda_context_bytes, kMiB, kMaxMiB, false},
    {"blas_workspace_MiB", &GpuSpec::blas_workspace_bytes, kMiB, kMaxMiB, false},
    {"default_inter_node_GBps", &GpuSpec::default_inter_node_bw, kGB, kMaxGBps, true},
    {"default_host_memory_GiB", &GpuSpec::default_host_memory_bytes, kGiB, kMaxGiB, true},
    {"sm_count", &GpuSpec::sm_count, 1.0, 100000.0, true},
    {"matmul_bf16_TFLOPS", &GpuSpec::matmul_bf16_flops, kTFLOPS, kMaxTflops, false},
}};

constexpr double kMinNonZero = 1e-9;

// A number in {0} ∪ [1e-9, hi] (or [1e-9, hi] when `positive`), returned in SI units.
Result<double> read_number(const JsonFields& f, std::string_view key, double unit, double hi,
                           bool positive) {
  MIST_TRY(double x, f.number(key, -std::numeric_limits<double>::max(), hi));
  if (positive && x <= 0)
    return fail(f.field_path(key), fmt::format("must be positive, got {:g}", x));
  if (x < 0) return fail(f.field_path(key), fmt::format("must not be negative, got {:g}", x));
  // Rates this small (1e-9 of the field's unit: a kilobyte or kiloFLOP per second) describe no
  // real hardware and turn times into infinities (found by fuzz/predict_fuzzer.cpp).
  if (x > 0 && x < kMinNonZero)
    return fail(f.field_path(key), fmt::format("must be {}at least {:g}, got {:g}", positive ? "" : "0 or ",
                                               kMinNonZero, x));
  return x * unit;
}

// The optional board-power fields: tdp_W, power_limit_W (at most the TDP) and idle_W (below the limit).
Result<void> read_power(const JsonFields& f, GpuSpec& g) {
  constexpr double kMaxWatts = 100000;
  constexpr std::array<std::pair<std::string_view, double GpuSpec::*>, 3> kFields = {
      {{"tdp_W", &GpuSpec::tdp_watts},
       {"power_limit_W", &GpuSpec::power_limit_watts},
       {"idle_W", &GpuSpec::idle_watts}}};
  for (const auto& [key, member] : kFields)
    if (f.has(key)) {
      MIST_TRY(g.*member, read_number(f, key, 1.0, kMaxWatts, /*positive=*/true));
    }
  if (g.power_limit_watts > 0 && g.tdp_watts <= 0)
    return fail(f.field_path("power_limit_W"), "needs tdp_W, the power the GPU's peak figures hold at");
  if (g.tdp_watts > 0 && g.power_limit_watts > g.tdp_watts)
    return fail(f.field_path("power_limit_W"),
                fmt::format("is {:g} W, above the TDP of {:g} W (a GPU cannot be run above its TDP)",
                            g.power_limit_watts, g.tdp_watts));
  const double limit = g.power_limit_watts > 0 ? g.power_limit_watts : g.tdp_watts;
  if (g.idle_watts > 0 && limit > 0 && g.idle_watts >= limit)
    return fail(f.field_path("idle_W"),
                fmt::format("is {:g} W, not below the power limit of {:g} W", g.idle_watts, limit));
  return {};
}

Result<double> read_number_or(const JsonFields& f, std::string_view key, double fallback_si,
                              double unit, double hi) {
  if (!f.has(key)) return fallback_si;
  return read_number(f, key, unit, hi, /*positive=*/true);
}

// The GPU field of a cluster: a catalog name, or an object naming a catalog entry with
// overrides, or (for a GPU mist does not know) an object giving every field.
Result<GpuSpec> cluster_gpu(const JsonFields& f) {
  const std::string path = f.field_path("gpu");
  if (!f.has("gpu")) return fail(path, "is required but missing");
  const Json& g = f.raw("gpu");
  if (g.is_string()) {
    auto gpu = catalog_gpu(g.get<std::string>());
    if (!gpu) return fail(path, gpu.error().message);
    return gpu;
  }
  if (!g.is_object())
    return fail(path,
                "must be a GPU name from the catalog or an object {\"name\": ..., overrides}");
  MIST_TRY(JsonFields gf, JsonFields::of(g, path));
  MIST_TRY(std::string name, gf.string("name"));
  auto base = catalog_gpu(name);
  if (base) return detail::gpu_from_json(g, path, &*base);
  // Not in the catalog: accepted only as a complete definition.
  auto full = detail::gpu_from_json(g, path, nullptr);
  if (!full)
    return fail(gf.field_path("name"), base.error().message +
                                           "; a GPU outside the catalog must give every field (" +
                                           full.error().to_string() + ")");
  return full;
}

}  // namespace

namespace detail {

Result<GpuSpec> gpu_from_json(const Json& j, const std::string& path, const GpuSpec* base) {
  MIST_TRY(JsonFields f, JsonFields::of(j, path));
  MIST_SPEC_CHECK(f.reject_unknown({"name", "vendor", "source", "memory_GiB", "compute_capability",
                                    "fp32_TFLOPS", "tf32_TFLOPS", "fp16_TFLOPS", "bf16_TFLOPS",
                                    "fp8_TFLOPS", "mem_bw_TBps", "link_GBps", "pcie_gen",
                                    "default_gpus_per_node", "context_MiB", "blas_workspace_MiB",
                                    "default_inter_node_GBps", "default_host_memory_GiB", "sm_count",
                                    "matmul_bf16_TFLOPS", "tdp_W", "power_limit_W", "idle_W",
                                    "default_gpus_per_pcie_switch", "default_host_memory_GBps"}));
  GpuSpec g = base ? *base : GpuSpec{};
  MIST_TRY(g.name, f.string("name"));
  if (g.name.empty()) return fail(f.field_path("name"), "must not be empty");
  if (!base || f.has("vendor")) {
    MIST_TRY(g.vendor, f.choice("vendor", {"nvidia", "amd", "cpu"}));
  }
  if (!base || f.has("source")) {
    MIST_TRY(g.source, f.string("source"));
  }
  for (const GpuNumber& n : kGpuNumbers) {
    if (base && !f.has(n.key)) continue;  // keep the catalog's value
    MIST_TRY(g.*n.member, read_number(f, n.key, n.unit, n.hi, n.positive));
  }
  MIST_CHECK(read_power(f, g));
  if (!base || f.has("pcie_gen")) {
    MIST_TRY(int64_t gen, f.integer("pcie_gen", 1, 6));
    g.pcie_gen = static_cast<int>(gen);
  }
  if (!base || f.has("default_gpus_per_node")) {
    MIST_TRY(int64_t n, f.integer("default_gpus_per_node", 1, kMaxGpusPerNode));
    g.default_gpus_per_node = static_cast<int>(n);
  }
  // The host side is optional even for a GPU outside the catalog (a switch of its own, no DRAM bound).
  if (f.has("default_gpus_per_pcie_switch")) {
    MIST_TRY(int64_t n, f.integer("default_gpus_per_pcie_switch", 1, kMaxGpusPerNode));
    g.default_gpus_per_pcie_switch = static_cast<int>(n);
  }
  if (f.has("default_host_memory_GBps")) {
    MIST_TRY(g.default_host_memory_bw, read_number(f, "default_host_memory_GBps", kGB, kMaxGBps, /*positive=*/false));
  }
  return g;
}

}  // namespace detail

Json gpu_to_json(const GpuSpec& g) {
  Json j{{"name", g.name},
         {"vendor", g.vendor},
         {"source", g.source},
         {"pcie_gen", g.pcie_gen},
         {"default_gpus_per_node", g.default_gpus_per_node},
         {"default_gpus_per_pcie_switch", g.default_gpus_per_pcie_switch},
         {"default_host_memory_GBps", detail::in_unit(g.default_host_memory_bw, kGB)}};
  for (const GpuNumber& n : kGpuNumbers)
    j[std::string(n.key)] = detail::in_unit(g.*n.member, n.unit);
  if (g.tdp_watts > 0) j["tdp_W"] = g.tdp_watts;
  if (g.power_limit_watts > 0) j["power_limit_W"] = g.power_limit_watts;
  if (g.idle_watts > 0) j["idle_W"] = g.idle_watts;
  return j;
}

double pcie_x16_bw(int gen) {
  // One direction, x16, after line encoding (GB/s): Gen1 4, Gen2 8, Gen3 16, Gen4 31, Gen5 63,
  // Gen6 121 (64 GT/s PAM4 with FLIT overhead).
  constexpr std::array<double, 7> kGBps = {0, 4, 8, 16, 31, 63, 121};
  if (gen < 1 || gen > 6) return 0;
  return kGBps[static_cast<size_t>(gen)] * kGB;
}

Result<ClusterFile> cluster_file_from_json(const Json& j, const std::string& what) {
  MIST_TRY(JsonFields f, JsonFields::of(j, what));
  MIST_SPEC_CHECK(f.reject_unknown({"gpu", "nodes", "gpus_per_node", "intra_node_GBps",
                                    "intra_node_latency_us", "inter_node_GBps",
                                    "inter_node_latency_us", "pcie_GBps", "host_memory_GiB",
                                    "gpus_per_pcie_switch", "host_memory_GBps", "nvlink_domain",
                                    "profile_db", "time_constants"}));
  ClusterFile file;
  ClusterSpec& c = file.cluster;
  MIST_TRY(c.gpu, cluster_gpu(f));
  MIST_TRY(c.nodes, f.integer("nodes", 1, kMaxNodes));
  MIST_TRY(c.gpus_per_node,
           f.integer_or("gpus_per_node", c.gpu.default_gpus_per_node, 1, kMaxGpusPerNode));
  const bool nvlink = c.gpu.link_bw > 0;
  const double pcie = pcie_x16_bw(c.gpu.pcie_gen);
  MIST_TRY(c.intra_node_bw,
           read_number_or(f, "intra_node_GBps", nvlink ? c.gpu.link_bw : pcie, kGB, kMaxGBps));
  MIST_TRY(c.intra_node_latency,
           read_number_or(f, "intra_node_latency_us",
                          (nvlink ? kNvlinkLatencyUs : kPcieLatencyUs) * kMicrosecond, kMicrosecond,
                          kMaxLatencyUs));
  MIST_TRY(c.inter_node_bw,
           read_number_or(f, "inter_node_GBps", c.gpu.default_inter_node_bw, kGB, kMaxGBps));
  MIST_TRY(c.inter_node_latency,
           read_number_or(f, "inter_node_latency_us", kInterNodeLatencyUs * kMicrosecond,
                          kMicrosecond, kMaxLatencyUs));
  MIST_TRY(c.pcie_bw, read_number_or(f, "pcie_GBps", pcie, kGB, kMaxGBps));
  MIST_TRY(c.host_memory_bytes,
           read_number_or(f, "host_memory_GiB", c.gpu.default_host_memory_bytes, kGiB, kMaxGiB));
  // A node smaller than the GPU's usual one keeps at most its own GPUs behind a switch.
  MIST_TRY(c.gpus_per_pcie_switch,
           f.integer_or("gpus_per_pcie_switch",
                        std::min<int64_t>(c.gpu.default_gpus_per_pcie_switch, c.gpus_per_node), 1,
                        c.gpus_per_node));
  MIST_TRY(c.host_memory_bw, read_number_or(f, "host_memory_GBps", c.gpu.default_host_memory_bw, kGB, kMaxGBps));
  MIST_TRY(c.nvlink_domain, f.integer_or("nvlink_domain", c.gpus_per_node, 1, kMaxNvlinkDomain));
  if (c.nvlink_domain % c.gpus_per_node != 0)
    return fail(f.field_path("nvlink_domain"),
                fmt::format("must be a whole number of nodes: a multiple of gpus_per_node ({}); got {}",
                            c.gpus_per_node, c.nvlink_domain));
  if (c.nvlink_domain > c.gpus_per_node && c.gpu.link_bw <= 0)
    return fail(f.field_path("nvlink_domain"),
                fmt::format("spans {} GPUs, but {} has no NVLink (link_GBps 0): only a node's GPUs share a "
                            "fabric", c.nvlink_domain, c.gpu.name));
  if (c.spans_domains() && c.num_gpus() % c.nvlink_domain != 0) {
    // The GPUs a job would use in each domain: the most, whole nodes, that fill whole domains.
    int64_t used = c.gpus_per_node;
    for (int64_t d = c.nvlink_domain; d >= c.gpus_per_node; d -= c.gpus_per_node)
      if (c.num_gpus() % d == 0) {
        used = d;
        break;
      }
    return fail(f.field_path("nvlink_domain"),
                fmt::format("the cluster's {} GPUs do not fill whole NVLink domains of {}: give the GPUs the job uses "
                            "in each domain ({} would make {} domains of {})",
                            c.num_gpus(), c.nvlink_domain, used, c.num_gpus() / used, used));
  }
  CalibrationFiles& files = file.files;
  MIST_TRY(files.profile_db, f.string_or("profile_db", ""));
  if (f.has("profile_db") && files.profile_db.empty())
    return fail(f.field_path("profile_db"), "must name a profile database file (docs/profile.md)");
  MIST_TRY(files.time_constants, f.string_or("time_constants", ""));
  if (f.has("time_constants") && files.time_constants.empty())
    return fail(f.field_path("time_constants"), "must name a constants file written by mist fit (docs/time-model.md)");
  return file;
}

Result<ClusterSpec> cluster_from_json(const Json& j, const std::string& what) {
  MIST_TRY(ClusterFile file, cluster_file_from_json(j, what));
  for (const auto& [key, value] : {std::pair{"profile_db", &file.files.profile_db},
                                   std::pair{"time_constants", &file.files.time_constants}})
    if (!value->empty())
      return fail(what + "." + key, "names a file, which only a cluster file given with --cluster may do");
  return file.cluster;
}

Json cluster_to_json(const ClusterSpec& c, const CalibrationFiles& files) {
  using detail::in_unit;
  Json j{{"gpu", gpu_to_json(c.gpu)},
              {"nodes", c.nodes},
              {"gpus_per_node", c.gpus_per_node},
              {"intra_node_GBps", in_unit(c.intra_node_bw, kGB)},
              {"intra_node_latency_us", in_unit(c.intra_node_latency, kMicrosecond)},
              {"inter_node_GBps", in_unit(c.inter_node_bw, kGB)},
              {"inter_node_latency_us", in_unit(c.inter_node_latency, kMicrosecond)},
              {"pcie_GBps", in_unit(c.pcie_bw, kGB)},
              {"host_memory_GiB", in_unit(c.host_memory_bytes, kGiB)},
              {"gpus_per_pcie_switch", c.gpus_per_pcie_switch}};
  if (c.host_memory_bw > 0) j["host_memory_GBps"] = in_unit(c.host_memory_bw, kGB);
  if (c.nvlink_gpus() != c.gpus_per_node) j["nvlink_domain"] = c.nvlink_gpus();
  if (!files.profile_db.empty()) j["profile_db"] = files.profile_db;
  if (!files.time_constants.empty()) j["time_constants"] = files.time_constants;
  return j;
}

Result<ClusterFile> load_cluster(const std::string& path) {
  MIST_TRY(auto c, load_json_as(path, "cluster", cluster_file_from_json));
  // A relative file name names a file next to the cluster file.
  for (std::string* f : {&c.files.profile_db, &c.files.time_constants})
    if (!f->empty() && std::filesystem::path(*f).is_relative())
      *f = (std::filesystem::path(path).parent_path() / *f).string();
  return c;
}

}  // namespace mist::spec
