// `mist tune` as a call: the request (the command's options), the run (everything the command
// prints, as values) and its JSON (`tune --json`, docs/cli.md).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analysis/prediction.hpp"
#include "api/failure.hpp"
#include "api/inputs.hpp"
#include "tuner/tuner.hpp"

namespace mist::api {

inline constexpr int kMaxTop = 100;  // --top

struct TuneRequest {
  std::string space = "mist";  // --space: mist, megatron or deepspeed
  std::string engine;          // --engine: only plans it runs, with its calibration ("" or "mist": none)
  std::string solver = "dp";   // --solver: dp or milp
  std::string virtual_stages;  // --virtual-stages "1,2,4" ("": the space's)
  // --compare-to: Megatron-LM flags, or a DeepSpeed JSON file (a name ending in .json) with
  // --compare-megatron-flags for its TP/PP.
  std::string compare_to, compare_megatron_flags;
  bool exhaustive = false, no_rerank = false, no_offload = false;
  int top = 5;
  double milp_time_limit = 10;
  // --uncalibrated and --headroom; its engine is set from `engine` (megatron's for mist).
  Calibration calibration{.engine = "megatron", .uncalibrated = false, .headroom = analysis::kMemoryBand};
  std::function<void(double fraction)> progress;  // may be empty
};

// The user's current configuration (--compare-to), predicted like the tuned plan.
struct CurrentConfig {
  plan::Plan plan;
  analysis::Prediction prediction;
  std::vector<std::string> import_notes;
};

struct TuneRun {
  job::Job job;           // as tuned: --compare-to's training settings replace the file's
  tuner::TuneOptions options;
  std::string space;      // its name as printed: the engine's, else the space's
  tuner::TuneResult result;
  // Nothing fits: the nodes of the same kind that would give a fitting plan (tuner::nodes_to_fit),
  // nullopt when not even 16 times the job's.
  std::optional<int64_t> nodes_to_fit;
  std::optional<CurrentConfig> current;  // with --compare-to, when a plan fits

  bool fits() const { return !result.best.empty(); }
  job::Job best_job() const;  // the job with the best plan (fits() only)
};

// "1,2,4": interleaved chunks per stage to try (errors name --virtual-stages).
Result<std::vector<int64_t>> parse_virtual_stages(const std::string& text);
// The tuner's options from the request (without its progress function); errors name the option.
Result<tuner::TuneOptions> tune_options(const TuneRequest& r);

// Loads nothing: the job (its plan ignored) comes loaded (api::load_job). A search the tuner
// refuses is a Failure of kind kSearch.
Outcome<TuneRun> tune(job::Job job, const TuneRequest& r);

// What `tune --json` prints: {plan, prediction, simulated_time_s, alternatives, space, stats,
// compare_to} when a plan fits, else {fits: false, space, stats, closest, gpus_to_fit}.
Json tune_json(const TuneRun& run);

}  // namespace mist::api
