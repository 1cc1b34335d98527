// `mist gpus`: which GPU type, how many, at what cost. For each (GPU type, count) the tuner finds
// the fastest plan that fits; its throughput gives the time to train a token budget, and a price
// per GPU-hour gives the cost. Rows are marked on the time-vs-cost Pareto set and sorted by the
// cost to finish (docs/gpus.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "advisor/prices.hpp"
#include "job/prepare.hpp"
#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"
#include "tuner/space.hpp"

namespace mist::advisor {

struct AdvisorOptions {
  std::vector<std::string> gpus;          // candidate GPU types (catalog names)
  std::vector<int64_t> counts = {8, 16, 64};  // GPU counts to try for each type
  double tokens = 1e12;                   // training budget
  std::optional<int64_t> gpus_per_node;   // node shape; default: the catalog's per GPU type
  tuner::SearchSpace space;               // what the tuner searches in every cell
  std::optional<engines::Engine> engine;  // only plans this engine runs (tuner::TuneOptions::engine)
  job::PrepareOptions prepare;            // the stack whose calibration every cell uses
  std::vector<GpuPrice> prices;           // US$ per GPU-hour by GPU type (may miss some)
  int threads = 2;                        // cells tuned at once (the tuner is re-entrant)
  // Measured op times for every cell's cluster (docs/profile.md): exact rows for a GPU type that
  // has them, Habitat-scaled rows of another GPU type otherwise; read once (job::read_calibration).
  // Empty: analytical op times. A constants file is per GPU type and not taken here.
  job::CalibrationData calibration;
  // Called after each cell with (cells done, cells in all), from the worker threads but never
  // two at once. May be empty.
  std::function<void(size_t done, size_t total)> progress;
};

// Money for one cell; all zero when there is no price.
struct Costs {
  double usd_per_hour = 0;              // price × GPUs
  double usd_per_million_tokens = 0;
  double usd_total = 0;                 // time to train × price × GPUs
};

// What the network does to a cluster of several nodes of a GPU without a scale-up link
// (link_GBps 0: L4, L40S, A10G, H100 PCIe): tensor parallelism stays inside a node, over PCIe,
// and everything between nodes (pipeline sends, gradient reduction, ZeRO gathers) crosses the
// NIC share of each GPU. The time of every row is predicted with these bandwidths.
struct PcieOnlyNetwork {
  double pcie_bytes_per_s = 0;        // host link inside a node, per GPU, one direction
  double inter_node_bytes_per_s = 0;  // NIC share per GPU across nodes, one direction
  // Of the predicted iteration (feasible rows), what the first and last micro-batches leave
  // exposed (gradient reduction and ZeRO gathers over the NIC, the optimizer step):
  // TimePrediction::exposed_delta_s / iteration_time_s.
  double exposed_share = 0;
};

struct Row {
  std::string gpu;
  int64_t num_gpus = 0, nodes = 0, gpus_per_node = 0;
  bool feasible = false;
  std::string reason;                   // why not, when infeasible
  double shortfall_bytes = 0;           // GPU memory the closest plan lacks on its worst stage
  double host_shortfall_bytes = 0;      // host memory per node it lacks
  std::optional<plan::Plan> plan;       // the tuned plan (feasible) or the closest one
  double iteration_time_s = 0, tokens_per_s = 0, mfu = 0, peak_memory_bytes = 0;
  double time_to_train_s = 0;           // tokens / tokens_per_s
  std::optional<GpuPrice> price;
  Costs cost;
  bool pareto = false;                  // not dominated in (time to train, total cost)
  std::optional<PcieOnlyNetwork> pcie_only;  // more than one node of a GPU without NVLink
  double tune_seconds = 0;
};

struct Comparison {
  std::vector<Row> rows;                            // sorted by sort_rows
  std::map<std::string, int64_t> smallest_fitting;  // GPU type -> fewest GPUs that fit (if any)
};

// The cluster of `count` GPUs of type `gpu`: full nodes of the catalog's (or the given) node
// size, or one partial node below it. A count above the node size that is not a multiple of it
// is rejected (field "--gpus"), not rounded: the user asked for that count.
Result<spec::ClusterSpec> cluster_for(const std::string& gpu, int64_t count, std::optional<int64_t> gpus_per_node);

// A catalog GPU by name; an unknown name lists the closest catalog names.
Result<spec::GpuSpec> resolve_gpu(const std::string& name);

Costs costs(double tokens_per_s, double tokens, int64_t num_gpus, double usd_per_gpu_hour);

// Marks `pareto` on feasible, priced rows that no other such row beats in both time to train
// and total cost (ties in both keep both).
void mark_pareto(std::vector<Row>& rows);
// Feasible priced rows by total cost, then feasible unpriced rows by time to train, then
// infeasible rows by GPU type and count.
void sort_rows(std::vector<Row>& rows);

// Tunes every (GPU type, count) cell. Invalid options (unknown GPU, bad count, node shape) are
// errors; a cell that cannot run the job (too little memory, no bf16, no layout) is a row with
// feasible = false and the reason.
Result<Comparison> compare_gpus(const spec::ModelSpec& m, const spec::TrainingSpec& t, const AdvisorOptions& o);

}  // namespace mist::advisor
