// A job without its plan, checked once and ready to predict any plan (docs/architecture.md, "the
// spine"): the model, the cluster's hardware and the training settings; the time model's constants
// as values (fitted constants and measured op times already read: job::prepare reads the files, no
// path reaches this layer); and the lowering of the model with its memory model, built once per
// (sequence parallelism, recompute mode) and shared by every plan predicted, by every layout the
// tuner visits, and by copies made with other constants.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "analysis/memory_model.hpp"
#include "analysis/time_model.hpp"
#include "graph/layer.hpp"
#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/engine.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::analysis {

// Where the time model's constants came from, for reports (a description, not a file to read).
struct Calibration {
  std::string constants_source;  // e.g. "cluster.time_constants (path)"; "" = the built-in defaults
  // "stack": a shipped fit of the job's software stack; "file": the cluster's time_constants file;
  // "none": the physics alone (--uncalibrated, or no fit applies).
  std::string kind = "none";
  std::string engine;       // the stack asked for ("megatron", ...)
  std::string stack;        // the stack the fit is of, in words
  std::string fitted_gpu;   // the GPU the fit's runs ran on
  std::string note;         // why this calibration (or none)
  std::string source;       // the published source of the runs
  int runs = 0;             // runs fitted on, and their mean |error| after the fit
  double mean_error = 0;
  int held_out_runs = 0;    // runs of another source scored with the fit
  double held_out_mean_error = 0, held_out_max_error = 0;
  // The stack's settings this job took because its files left them out (job/stacks.hpp,
  // "stack_settings"), in words for reports, and where they come from; and the one a plan takes
  // when predicted or tuned: TP communication overlapped with its GEMMs when tp > 1 with sequence
  // parallelism (a prediction that applies it adds it to `settings`).
  std::vector<std::string> settings;
  std::string settings_why;
  bool overlap_tp_comm = false;
};

// The model lowered into layers and its stage memory model for one (sequence parallelism, recompute,
// expert parallelism, expert tensor parallelism).
struct Lowering {
  graph::LoweredModel model;
  StageMemoryModel memory;
};

class PreparedJob {
 public:
  // Checks what no plan can change (the training precision on this GPU).
  // `engine`: the software stack, whose implementation of the model the lowering follows (its
  // projections, loss and selective recompute policy: graph::lowering_options).
  static Result<PreparedJob> create(spec::ModelSpec model, spec::ClusterSpec cluster, spec::TrainingSpec training,
                                    TimeConstants constants = {}, Calibration calibration = {},
                                    spec::Engine engine = spec::Engine::kMegatron);

  const spec::ModelSpec& model() const { return inputs_->model; }
  const spec::ClusterSpec& cluster() const { return inputs_->cluster; }
  const spec::TrainingSpec& training() const { return inputs_->training; }
  spec::Engine engine() const { return inputs_->engine; }
  const TimeConstants& constants() const { return constants_; }
  const Calibration& calibration() const { return calibration_; }

  // The same job with other time-model constants (fits try many); the lowering stays shared.
  PreparedJob with_constants(TimeConstants constants) const;

  // The share of each GPU's memory a plan must leave free to count as fitting (tune and gpus keep
  // the memory band, kMemoryBand, by default; predict none): a plan fits when every stage's peak is
  // at most usable_memory_bytes().
  PreparedJob with_memory_headroom(double fraction) const;
  // The same job on `nodes` nodes of the same GPUs (a new lowering cache: the cluster is an input).
  PreparedJob with_nodes(int64_t nodes) const;
  double memory_headroom() const { return headroom_; }
  // Whether predictions replay PyTorch's caching allocator on each stage's allocation trace
  // (reserved_memory.hpp: the reserved peak, and fits judged on it; the default) or take the memory
  // model's closed-form estimate of its reserve, as the tuner's search does (its oracle tests
  // compare searches on that one criterion).
  PreparedJob with_allocator_replay(bool on) const;
  bool allocator_replay() const { return replay_allocator_; }
  double usable_memory_bytes() const { return cluster().gpu.memory_bytes * (1 - headroom_); }

  // Built on first use, then shared (thread-safe); valid for the life of every copy of the job.
  // `sequence_parallel` is the plan's, already reduced to tp > 1.
  Result<const Lowering*> lowering(bool sequence_parallel, plan::Recompute recompute) const;
  // The lowering plan `p` runs: its sequence parallelism (tp > 1), recompute mode and, for a
  // mixture of experts, which dispatcher collectives its ep and etp need, and whether cp > 1 splits
  // the sequence.
  Result<const Lowering*> lowering(const plan::Plan& p) const;

 private:
  struct Inputs {
    spec::ModelSpec model;
    spec::ClusterSpec cluster;
    spec::TrainingSpec training;
    spec::Engine engine;
  };
  struct Cache;
  Result<const Lowering*> lowering_with(bool sequence_parallel, plan::Recompute recompute, bool expert_parallel,
                                        bool expert_tensor_parallel, bool one_local_expert,
                                        bool context_parallel, plan::CpComm cp_comm, int64_t cp_a2a = 1) const;
  PreparedJob(std::shared_ptr<const Inputs> inputs, std::shared_ptr<Cache> cache, TimeConstants constants,
              Calibration calibration)
      : inputs_(std::move(inputs)), cache_(std::move(cache)), constants_(std::move(constants)),
        calibration_(std::move(calibration)) {}

  std::shared_ptr<const Inputs> inputs_;
  std::shared_ptr<Cache> cache_;  // shared by copies: the lowering does not depend on the constants
  TimeConstants constants_;
  Calibration calibration_;
  double headroom_ = 0;
  bool replay_allocator_ = true;
};

// The GEMM rate the time model assumes for this job and where it came from: the first thing to
// doubt in a predicted time (docs/time-model.md, "Checks against published runs").
struct MatmulRate {
  double flops = 0;
  std::string source;
  bool calibrated = false;  // a fitted matmul efficiency, not the catalog's figure
};
MatmulRate matmul_rate(const PreparedJob& job);

}  // namespace mist::analysis
