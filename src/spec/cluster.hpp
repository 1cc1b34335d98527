// GpuSpec and ClusterSpec: the hardware a plan runs on. All quantities in SI base units.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_fields.hpp"

namespace mist::spec {

struct GpuSpec {
  std::string name;               // catalog spelling, e.g. "A100-SXM4-80GB"
  std::string source;             // where the figures come from
  double memory_bytes = 0;        // device memory capacity (what the driver reports as total)
  double fp32_flops = 0;          // dense peak FLOP/s per precision; 0 = not supported
  double tf32_flops = 0;
  double fp16_flops = 0;
  double bf16_flops = 0;
  double fp8_flops = 0;
  double mem_bw = 0;              // HBM/GDDR bytes/s
  double link_bw = 0;             // scale-up link (NVLink/XGMI) bytes/s per GPU, one direction; 0 = PCIe only
  int pcie_gen = 4;               // host link generation (x16)
  double compute_capability = 0;  // NVIDIA sm_XY as X.Y (8.0 = Ampere); 0 for non-NVIDIA
  double sm_count = 0;            // streaming multiprocessors (AMD: compute units): GEMM wave size
  double matmul_bf16_flops = 0;   // measured achievable bf16 matmul FLOP/s (MAMF); 0 = not measured
  // Board power (W): the rated TDP the datasheet peaks and the MAMF hold at, the limit the GPU is
  // run at (a site may cap it below the TDP), and what it draws idle. 0 = not known (no cap applied).
  double tdp_watts = 0;
  double power_limit_watts = 0;   // 0 = the TDP
  double idle_watts = 0;
  std::string vendor;             // "nvidia", "amd" or "cpu"
  int default_gpus_per_node = 8;  // node shape when a cluster does not say
  // Framework overheads that depend on the device (see docs/memory-model.md):
  double cuda_context_bytes = 0;      // driver context + loaded kernel images
  double blas_workspace_bytes = 0;    // cuBLAS workspace per (handle, stream)
  // Defaults for clusters built from this GPU when the cluster file does not say:
  double default_inter_node_bw = 0;       // bytes/s per GPU, one direction (NIC share)
  double default_host_memory_bytes = 0;   // CPU memory per node
  // The node's host side (docs/time-model.md, "Host copies"): GPUs behind each PCIe switch, which
  // share its x16 uplink to the CPU (1: a link of its own), and the node's DRAM bandwidth, all
  // sockets (0: not known, no bound).
  int default_gpus_per_pcie_switch = 1;
  double default_host_memory_bw = 0;

  bool operator==(const GpuSpec&) const = default;
};

struct ClusterSpec {
  GpuSpec gpu;
  int64_t nodes = 1;
  int64_t gpus_per_node = 1;
  double intra_node_bw = 0;        // bytes/s per GPU, one direction, between GPUs of a node
  double intra_node_latency = 0;   // seconds
  double inter_node_bw = 0;        // bytes/s per GPU, one direction, across nodes
  double inter_node_latency = 0;   // seconds
  double pcie_bw = 0;              // host<->device bytes/s per GPU, one direction
  double host_memory_bytes = 0;    // CPU memory per node
  int64_t gpus_per_pcie_switch = 1;  // GPUs sharing one x16 uplink to the host (each uplink = pcie_bw)
  double host_memory_bw = 0;       // the node's DRAM bytes/s, all sockets, peak; 0 = not known
  // GPUs joined by one NVLink/NVSwitch fabric (the scale-up domain): a whole number of nodes (an
  // NVL72 rack: 18 trays of 4 GPUs), or 0 for the node itself. Groups inside it talk at
  // intra_node_bw; the network (inter_node_bw) joins domains. The host side stays per node.
  int64_t nvlink_domain = 0;

  int64_t num_gpus() const { return nodes * gpus_per_node; }
  // The GPUs of one NVLink domain: at least the node's (a cluster built in code that changes its
  // node size after reading a file keeps a domain no smaller than its node).
  int64_t nvlink_gpus() const { return std::max(nvlink_domain, gpus_per_node); }
  // Whether the cluster spans more than one NVLink domain (its network carries traffic).
  bool spans_domains() const { return num_gpus() > nvlink_gpus(); }
  bool operator==(const ClusterSpec&) const = default;
};

// The files a cluster file may name besides its hardware: measured op times and fitted op-time
// constants. Paths stay at the input boundary: job::prepare reads them into values once, and no
// library below it sees a path.
struct CalibrationFiles {
  std::string profile_db;      // measured op times (docs/profile.md); "" = analytical only
  std::string time_constants;  // op-time constants fitted by `mist fit` (docs/time-model.md); "" = defaults

  bool empty() const { return profile_db.empty() && time_constants.empty(); }
  bool operator==(const CalibrationFiles&) const = default;
};

// What a cluster file holds: the hardware and the files it names.
struct ClusterFile {
  ClusterSpec cluster;
  CalibrationFiles files;
};

// A cluster from a JSON file path; see docs/specs.md for the fields. Relative file names are
// relative to the cluster file.
Result<ClusterFile> load_cluster(const std::string& path);
Result<ClusterFile> cluster_file_from_json(const Json& j, const std::string& what);
// The hardware alone: a cluster that names files where none can be read (a published run, a
// generated cell) is refused, naming the field.
Result<ClusterSpec> cluster_from_json(const Json& j, const std::string& what);
Json cluster_to_json(const ClusterSpec& c, const CalibrationFiles& files = {});
// A GPU in the catalog form of data/gpus.json (every field; units in the keys).
Json gpu_to_json(const GpuSpec& g);

std::vector<std::string> gpu_catalog_names();
Result<GpuSpec> catalog_gpu(const std::string& name);
// Every entry of data/gpus.json in file order, or why the embedded
// catalog is malformed. Parsed once; the reference stays valid for the life of the program.
const Result<std::vector<GpuSpec>>& gpu_catalog();
// Host link bandwidth of a PCIe generation, x16, one direction, bytes/s (Gen3 16, Gen4 31, Gen5 63 GB/s).
double pcie_x16_bw(int gen);

}  // namespace mist::spec
