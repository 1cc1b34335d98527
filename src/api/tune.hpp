// `mist tune` as a call: the request (the command's options), the run (everything the command
// prints, as values) and its JSON (`tune --json`, docs/cli.md).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analysis/iteration_breakdown.hpp"
#include "analysis/prediction.hpp"
#include "api/compare_to.hpp"
#include "api/failure.hpp"
#include "api/inputs.hpp"
#include "tuner/tuner.hpp"

namespace mist::api {

inline constexpr int kMaxTop = 100;  // --top

// How far `tune` has got: the search under way ("mist" for the requested space, else the engine
// whose best plan is being searched) and its progress.
struct TuneProgress {
  std::string search;
  tuner::Progress at;
};

struct TuneRequest {
  std::string space = "mist";  // --space: mist, megatron or deepspeed
  std::string engine;          // --engine: only plans it runs, with its calibration ("" or "mist": none)
  std::string solver = "dp";   // --solver: dp or milp
  std::string virtual_stages;  // --virtual-stages "1,2,4" ("": the space's)
  // --compare-to: Megatron-LM flags, or a DeepSpeed JSON file (a name ending in .json) with
  // --compare-megatron-flags for its TP/PP.
  std::string compare_to, compare_megatron_flags;
  // --job-from-flags: the training settings --compare-to's flags state replace the training file's
  // (by default the file's stand and the differences are reported).
  bool job_from_flags = false;
  bool exhaustive = false, no_rerank = false, no_offload = false;
  // --no-engines: without --engine, skip each engine's own search (TuneRun::engines).
  bool no_engines = false;
  int top = 5;
  double milp_time_limit = 10;
  // --uncalibrated and --headroom; its engine is set from `engine` (megatron's for mist).
  Calibration calibration{.engine = "megatron", .uncalibrated = false, .headroom = analysis::kMemoryBand};
  std::function<void(const TuneProgress&)> progress;  // may be empty
};

// The user's current configuration (--compare-to), predicted like the tuned plan.
struct CurrentConfig {
  plan::Plan plan;
  analysis::Prediction prediction;
  std::vector<std::string> import_notes;
  std::vector<JobDifference> job_differences;  // the flags' training settings that differ from the file's
  bool job_from_flags = false;                 // whether the flags' replaced the file's (--job-from-flags)
};

// One engine's best plan, as `mist tune --engine E` finds it (that engine's knobs and splits, its
// stack's calibration), next to the plan of the full space.
struct EngineBest {
  engines::Engine engine = engines::Engine::kMegatron;
  std::optional<tuner::Candidate> best;  // none when the engine runs no plan that fits
  std::string calibration;               // the stack whose calibration timed it ("none": the physics)
  // The full space's best plan timed with the same calibration (closed form, and simulated when the
  // list is re-ranked by the simulation): gap() compares like with like.
  double mist_plan_time_s = 0, mist_plan_simulated_s = 0;
  std::string reason;                    // no plan: why (the search's refusal, or what the closest lacks)
  double shortfall_bytes = 0;            // no plan fits: the closest plan's, on its worst stage

  // How much slower the engine's plan is than the full space's, both with this engine's calibration,
  // by the time the lists are ordered by (simulated when re-ranked, else closed form); 0.1 = 10%.
  double gap() const {
    if (!best) return 0;
    if (best->simulated_time_s > 0 && mist_plan_simulated_s > 0)
      return best->simulated_time_s / mist_plan_simulated_s - 1;
    return best->iteration_time_s / mist_plan_time_s - 1;
  }
};

// One term of the best plan's iteration against the runner-up's (analysis::iteration_breakdown).
struct TermDifference {
  analysis::TimeTerm best, runner_up;
  double difference_s() const { return runner_up.seconds - best.seconds; }  // > 0: the best spends less
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
  // The engines that run each listed plan (engines::runnable_on), parallel to result.best.
  std::vector<std::vector<engines::Engine>> runnable_on;
  // Without --engine or --no-engines, in the mist space: every engine's best (all_engines() order).
  std::vector<EngineBest> engines;
  // What separates the best plan from the runner-up, largest difference first (none with one plan).
  std::vector<TermDifference> decided_by;

  bool fits() const { return !result.best.empty(); }
  job::Job best_job() const;  // the job with the best plan (fits() only)
  // The time the list is ordered by: the simulation's when re-ranked, else the closed form's.
  double ranked_time_s(const tuner::Candidate& c) const;
  // How much slower the i-th listed plan is than the first, by ranked_time_s (0.1 = 10%).
  double gap(size_t i) const { return ranked_time_s(result.best[i]) / ranked_time_s(result.best[0]) - 1; }
};

// "1,2,4": interleaved chunks per stage to try (errors name --virtual-stages).
Result<std::vector<int64_t>> parse_virtual_stages(const std::string& text);
// The tuner's options from the request (without its progress function); errors name the option.
Result<tuner::TuneOptions> tune_options(const TuneRequest& r);

// Loads nothing: the job (its plan ignored) comes loaded (api::load_job). A search the tuner
// refuses is a Failure of kind kSearch.
Outcome<TuneRun> tune(job::Job job, const TuneRequest& r);

// What `tune --json` prints: {plan, runnable_on, prediction, simulated_time_s, alternatives, engines,
// decided_by, space, stats, compare_to} when a plan fits, else {fits: false, space, stats, closest,
// gpus_to_fit} (docs/cli.md).
Json tune_json(const TuneRun& run);

}  // namespace mist::api
