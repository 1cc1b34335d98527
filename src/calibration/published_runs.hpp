// Published end-to-end measurements written as mist jobs (data/published/*.json), the time model's
// error on them, and the one-constant calibration `mist fit --runs` makes from them: the matmul
// efficiency that reproduces a software stack's iteration times (docs/time-model.md).
//
// File form:
//   {"published_runs_version": 1, "source": "...", "comment": "...",
//    "engine": "megatron" | "deepspeed" | "torchtitan", "stack": "...",   // optional
//    "models": {"gpt-22b": {mist model form}},          // optional; runs may also name catalog models
//    "runs": [{"name": "...", "model": "gpt-22b" | {model form},
//              "cluster": {...}, "training": {...},
//              "plan": {plan form; "stages" may be left out ...},
//              "every_stage": {"zero": 0, "ckpt_layers": "all" | N, "offload": {...}},  // ... then this
//              "iteration_time_s": 1.42,
//              "reported": {...}}]}                       // the source's own figures, kept, not read
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "analysis/time_model.hpp"
#include "core/json_fields.hpp"
#include "job/job.hpp"
#include "spec/engine.hpp"

namespace mist::calibration {

struct PublishedRun {
  std::string name;
  job::Job job;                 // as the source states it (no calibration files)
  double iteration_time_s = 0;  // measured
};

struct PublishedRuns {
  std::string source;
  // The software stack that ran them, when the file says ("engine": the --engine that selects a
  // fit to them; "stack": the stack in words). Written into the constants `mist fit --runs` makes.
  std::optional<spec::Engine> engine;
  std::string stack;
  std::vector<PublishedRun> runs;
};

// Every run is checked as `mist predict` checks a job (validate_plan); errors name the field under
// `what` ("runs.json.runs[3].plan.tp").
Result<PublishedRuns> published_runs_from_json(const Json& j, const std::string& what);
Result<PublishedRuns> load_published_runs(const std::string& path);

struct RunError {
  std::string name;
  double measured_s = 0, predicted_s = 0;
  // Throughput error, as TFLOP/s tables state it: measured time / predicted time − 1 (> 0: the
  // model is optimistic).
  double error() const { return measured_s / predicted_s - 1; }
};

// The model's prediction for every run under constants `k`.
Result<std::vector<RunError>> run_errors(const std::vector<PublishedRun>& runs, const analysis::TimeConstants& k = {});
double mean_abs_error(const std::vector<RunError>& e);
double max_abs_error(const std::vector<RunError>& e);

struct RunsFit {
  double matmul_efficiency = 0;    // fraction of the dense peak, for every GEMM of these runs' GPU
  double host_per_kernel_s = 0;    // the stack's host cost per kernel (fitted only when asked)
  bool fitted_host = false;
  std::vector<RunError> before;    // with `base` (the catalog's MAMF unless base says otherwise)
  std::vector<RunError> after;
};

// The matmul efficiency in [0.2, 1] that minimises the mean absolute error over `runs`: a scan
// then a golden-section search (the error is a sum of monotone terms in the efficiency). All runs
// must share one GPU and one precision (the constant is that device's in that precision).
Result<RunsFit> fit_matmul_efficiency(const std::vector<PublishedRun>& runs, const analysis::TimeConstants& base = {});

// The efficiency and the stack's host cost per kernel (hardware::PerfConstants::host_per_kernel_s,
// in [0, 200] µs) together, for runs where small layers are host-bound: a coarse grid over both,
// then alternating golden-section searches, each ending on values rounded to 1e-4 and 0.01 µs.
Result<RunsFit> fit_efficiency_and_host(const std::vector<PublishedRun>& runs,
                                        const analysis::TimeConstants& base = {});

// A deterministic half of `runs` (by a hash of each run's position and `seed`, the same on every
// platform): {fitted on, held out}. Where a source has no second source of the same stack and GPU,
// the fit is scored on the half it did not see.
std::pair<std::vector<PublishedRun>, std::vector<PublishedRun>> split_runs(const std::vector<PublishedRun>& runs,
                                                                           uint64_t seed);

}  // namespace mist::calibration
