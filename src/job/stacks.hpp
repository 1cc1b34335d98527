// The calibrations mist ships: each software stack's time-model constants fitted on one GPU to
// published runs of that stack (`mist fit --runs`, data/published/*.time_constants.json, embedded),
// and the rule that picks one for a job: the job's stack on its GPU, else on the nearest generation
// of the same vendor, in a precision of the same tensor cores; else none (the physics alone).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json_fields.hpp"
#include "spec/cluster.hpp"
#include "spec/engine.hpp"
#include "spec/training.hpp"

namespace mist::job {

struct StackFit {
  spec::Engine engine = spec::Engine::kMegatron;
  std::string stack;   // the stack in words ("Megatron-Core with Transformer Engine (NeMo 24.09-24.11)")
  std::string gpu;     // catalog name of the GPU the runs ran on
  spec::Dtype dtype = spec::Dtype::kBf16;
  std::string source;  // the published source of the runs
  std::string runs_file;
  int runs = 0;              // runs fitted on
  double mean_error = 0;     // their mean |relative error| after the fit
  int held_out_runs = 0;     // runs of another source scored with the fit (0: none)
  double held_out_mean_error = 0, held_out_max_error = 0;
  std::string held_out_file;
  Json constants;            // the constants file as written by `mist fit --runs`
  // "stack_settings": how the stack's runs were configured where that differs from mist's defaults,
  // applied to jobs whose files leave the setting out (the constants were fitted with it).
  std::optional<spec::Dtype> grad_dtype;  // gradients kept and reduced in this dtype
  bool overlap_tp_comm = false;           // TP collectives pipelined with their GEMMs (tp > 1, SP)
  std::string settings_why;               // where the settings come from
};

// Every shipped fit, in file order; parsed once from the embedded files (a malformed one is a bug
// of the build, reported as an error).
const Result<std::vector<StackFit>>& stack_fits();

// The fit for `engine` that applies to `gpu` training in `precision`, and why it is that one, or
// why none is.
struct StackChoice {
  const StackFit* fit = nullptr;  // null: no fit applies
  bool same_gpu = false;
  std::string note;  // e.g. "fitted on H100-SXM5-80GB, applied to H200-SXM-141GB (same generation, sm_90)"
};
StackChoice choose_stack_fit(const std::vector<StackFit>& fits, spec::Engine engine, const spec::GpuSpec& gpu,
                             spec::Dtype precision);

}  // namespace mist::job
