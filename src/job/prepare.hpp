// The input boundary of the spine (docs/architecture.md): reads the files a job names (the op-time
// constants `mist fit` wrote, the profile database of measured op times) into values and checks the
// job once. Below it no file path travels: analysis, hardware, tuner and sim see values only.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "analysis/prediction.hpp"
#include "analysis/prepared_job.hpp"
#include "core/json_fields.hpp"
#include "job/job.hpp"
#include "spec/engine.hpp"
#include "profile/op_source.hpp"

namespace mist::job {

// The calibration files read, once; prepare() applies them to any number of jobs (the GPU advisor
// prepares one job per cell).
struct CalibrationData {
  std::shared_ptr<const profile::OpTable> profile;  // null: analytical op times
  std::optional<Json> time_constants;               // the constants file, not yet applied
  std::string time_constants_path;                  // where it was read from, for reports
};

// Errors name the field: "cluster.profile_db: cannot read ...", "cluster.time_constants: ...".
Result<CalibrationData> read_calibration(const spec::CalibrationFiles& files);

struct PrepareOptions {
  // The software stack the job trains with: it selects the shipped fit of that stack (stacks.hpp).
  spec::Engine engine = spec::Engine::kMegatron;
  bool uncalibrated = false;  // the physics alone (--uncalibrated)
  // The share of each GPU's memory a plan must leave free (PreparedJob::with_memory_headroom):
  // tune and gpus keep analysis::kMemoryBand by default (--headroom), predict none.
  double memory_headroom = 0;
};

// The time model's constants, in order of precedence: the cluster's own time_constants file (a fit
// for another GPU is refused); the shipped fit of the job's stack for its GPU or the nearest
// generation (stacks.hpp); the physics alone. Then checks what no plan can change.
Result<analysis::PreparedJob> prepare(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                      const spec::TrainingSpec& training, const CalibrationData& calibration = {},
                                      const PrepareOptions& options = {});
// read_calibration + prepare; the job's plan is not read.
Result<analysis::PreparedJob> prepare(const Job& job, const PrepareOptions& options = {});

// prepare, then analysis::predict of the job's plan: what `mist predict` computes for one plan.
Result<analysis::Prediction> predict(const Job& job, const PrepareOptions& options = {});

}  // namespace mist::job
