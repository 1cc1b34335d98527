// Per-GPU memory of every pipeline stage, as named terms that each carry a formula over the
// stage's knobs. The formulas are built once per job (StageMemoryModel) and compiled; predicting a
// plan binds the knobs of each stage and evaluates them. docs/memory-model.md explains each term.
//
// Knob symbols (besides the shape symbols s, h, a, g, f, V of graph/layer.hpp):
//   b micro-batch   t tensor-parallel degree   d data-parallel degree
//   l blocks in the stage   c of them fully recomputed   p micro-batches in flight (1F1B)
//   zw, zg, zo  ZeRO shard factors of weights, gradients, optimizer states (d or 1)
//   wo, go, oo, ao  offloaded fractions of weights, gradients, optimizer states, activations
//   E, H  1 if the stage holds the embedding / the LM head     T 1 if it holds a tied head copy
//   Q 1 if there are several pipeline stages   W, G, O, A  1 if weights are sharded or offloaded,
//   gradients are sharded or offloaded, optimizer states / activations are offloaded
//   C_ctx, C_blas, C_nccl  framework overheads in bytes (overheads.hpp)
#pragma once

#include <array>
#include <string>
#include <vector>

#include "graph/layer.hpp"
#include "graph/liveness.hpp"
#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"
#include "symbolic/program.hpp"

namespace mist::analysis {

struct MemoryTermDef {
  std::string name;         // JSON key, e.g. "optimizer_states"
  std::string description;  // one line for `mist explain`
  std::string display;      // the formula as written in terms of the named quantities below
  sym::Expr formula;        // the same, fully expanded over the symbols
  bool allocated = true;    // seen by the framework's allocator (torch max_memory_allocated)
};

// A named sub-expression the displayed formulas refer to (P_blk, A_blk, ...).
struct NamedQuantity {
  std::string name, description;
  sym::Expr formula;
  bool is_bytes = true;  // false for parameter counts
};

struct StageMemoryModel {
  std::vector<MemoryTermDef> terms;  // the peak is their sum
  std::vector<NamedQuantity> quantities;
  sym::Expr peak;
  sym::Expr block_activation;             // one non-recomputed block, one micro-batch
  sym::Expr block_activation_recomputed;  // one fully recomputed block: its input
  sym::Expr host_bytes;                   // what offloading keeps in host memory
  std::vector<std::string> inputs;        // program input order: shape symbols, then knobs
  sym::Program program;                   // outputs: terms, peak, block terms, host bytes
  graph::LayerActivations block, embedding, head;
  graph::LayerActivations dense_block;  // a mixture of experts' first dense blocks (LoweredModel::dense_blocks > 0)
};

Result<StageMemoryModel> build_stage_memory_model(const graph::LoweredModel& lm,
                                                  const spec::TrainingSpec& training,
                                                  plan::Recompute recompute);

// Bytes of optimizer state per parameter (before sharding): AdamW keeps m and v in fp32, plus an
// fp32 master copy under mixed precision; SGD keeps momentum (plus the master copy).
int optimizer_bytes_per_param(const spec::TrainingSpec& t);

struct MemoryTerm {
  std::string name, description, display, formula;
  double bytes = 0;      // the value (a parameter count when !is_bytes)
  bool is_bytes = true;
};

struct StageMemory {
  int index = 0;
  int64_t num_layers = 0, ckpt_layers = 0;
  double in_flight = 0;  // micro-batches whose activations the stage holds at its peak
  std::vector<MemoryTerm> terms;
  std::vector<MemoryTerm> quantities;  // the named quantities at this stage's knob values
  double peak_bytes = 0;            // everything on the GPU at the stage's peak
  double peak_allocated_bytes = 0;  // the part a framework allocator reports as allocated
  // What PyTorch's caching allocator holds at its peak (torch.cuda.max_memory_reserved): the
  // replay of the iteration's allocations through its rules (reserved_memory.hpp).
  // peak_bytes is this plus what lives outside the allocator (CUDA context, NCCL buffers).
  double reserved_bytes = 0;
  double replayed_allocated_bytes = 0;  // the allocated peak of that replay
  // The closed-form peak, the allocator's reserve estimated (allocator_reserve's formula): what the
  // tuner's search judges plans on before they are predicted.
  double estimated_peak_bytes = 0;
  bool expandable_segments = false;  // the allocator setting the reserve was replayed with
  // Cache releases the allocator needs to stay within the usable memory (0 when it never gets
  // there): a plan that fits only this way runs, slower.
  int64_t allocator_retries = 0;
  double capacity_bytes = 0;
  double usable_bytes = 0;  // the capacity less the job's memory headroom: what `fits` is judged on
  bool fits = false;
  double block_activation_bytes = 0;
  double block_activation_bytes_recomputed = 0;
  double host_bytes = 0;
  sym::Bindings knobs;  // the knob values used
};

struct MemoryPrediction {
  std::vector<StageMemory> stages;
  bool fits = false;             // every stage fits its GPU and offloads fit host memory
  double host_bytes_per_node = 0;
  double host_capacity_bytes = 0;
  bool host_fits = true;
};

class PreparedJob;
// The memory of every stage of `p`, a plan that predict() (analysis/prediction.hpp) has checked.
Result<MemoryPrediction> stage_memory(const PreparedJob& job, const plan::Plan& p);

// Micro-batches (in units of a whole stage) whose activations stage `i` holds at its peak under
// 1F1B, or interleaved 1F1B when virtual_pipeline_stages > 1.
double in_flight_micro_batches(const plan::Plan& p, int stage);
// Micro-batches whose LM head (and multi-token prediction) activations the last stage holds at its
// peak: one under 1F1B and interleaved 1F1B alike, where the blocks' count grows with the chunks.
double head_in_flight_micro_batches(const plan::Plan& p);

// The knobs a stage setting and its layout set, in this order: what the tuner's specialised memory
// programs take as inputs (everything else is folded into them). The one home of the knob vector.
// zwx, zgx, zox: the ZeRO factors of the expert weights over the expert data-parallel group.
// ph: the micro-batches whose head activations the last stage holds (head_in_flight_micro_batches).
inline constexpr std::array<const char*, 21> kSettingKnobs = {"l", "c",  "zw", "zg", "zo",  "wo",  "go",
                                                              "oo", "ao", "W",  "G",  "O",   "A",   "p",
                                                              "b", "d",  "C_nccl", "zwx", "zgx", "zox", "ph"};
// Their values for setting `st` of a stage of `layout` that holds `in_flight` micro-batches
// (in_flight_micro_batches) with `nccl_bytes` of NCCL buffers; allocation-free (the tuner's hot path).
std::array<double, kSettingKnobs.size()> setting_knob_values(const plan::Plan& layout, const plan::StagePlan& st,
                                                             double in_flight, double nccl_bytes);
// The same, for many settings of one stage: what the layout fixes (data-parallel degrees, the
// micro-batch, in-flight count, NCCL buffers) is worked out once, at construction.
class SettingKnobs {
 public:
  SettingKnobs(const plan::Plan& layout, double in_flight, double nccl_bytes);
  std::array<double, kSettingKnobs.size()> operator()(const plan::StagePlan& st) const;

 private:
  int64_t grad_dp_, expert_dp_;
  double in_flight_, head_in_flight_, micro_batch_, nccl_bytes_;
};

// The values of every input of StageMemoryModel::program for stage `index` of plan `p` run with
// the settings `st` (which need not be p.stages[index]: the tuner tries many): the model's shapes,
// setting_knob_values, and what the stage's position and the cluster fix. `nccl_bytes` is
// nccl_buffer_bytes(p, c), the same for every stage.
sym::Bindings stage_knobs(const graph::LoweredModel& lm, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                          const plan::Plan& p, const plan::StagePlan& st, int index, double nccl_bytes);

// Binds the lowering's parallel degrees of plan `p`: t (tp), cp, ep and etp. The one home of the rule
// for the memory model, the time model and the allocation trace.
void bind_parallel_degrees(sym::Bindings& at, const plan::Plan& p);

}  // namespace mist::analysis
