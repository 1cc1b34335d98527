// What `mist export --to E` offers in place of a plan engine E cannot run: a plan E runs that fits
// in memory, or why there is none. The nearest plan (engines::nearest_expressible: the fewest
// fields changed) may no longer fit, because what E lacks was saving memory (weights offloaded under
// ZeRO-1, say); so E's own search (`mist tune --engine E`) runs too, and the faster of the two
// that fit is offered. Memory is judged as `tune` judges it (its default headroom, E's calibration).
#pragma once

#include <optional>

#include "analysis/prediction.hpp"
#include "api/failure.hpp"
#include "export/capability.hpp"
#include "job/job.hpp"
#include "tuner/tuner.hpp"

namespace mist::api {

struct ExportFallback {
  engines::Nearest nearest;
  // The nearest plan's prediction, when E runs it (a training setting no plan changes can stop it).
  std::optional<analysis::Prediction> nearest_prediction;
  double nearest_shortfall_bytes = 0;       // its worst stage's GPU memory short of the usable (0: fits)
  double nearest_host_shortfall_bytes = 0;  // its offloaded state short of a node's host memory
  std::optional<tuner::Candidate> best;     // E's fastest fitting plan from its search
  std::optional<tuner::Candidate> closest;  // nothing of E's fits: the plan that misses by the least
  std::string search_refusal;               // the search refused the job: why ("PATH: reason")
  std::optional<plan::Plan> offered;        // the faster of the two that fit; none when neither does
  bool offered_is_nearest = false;

  bool nearest_fits() const {
    return nearest_prediction && nearest_shortfall_bytes <= 0 && nearest_host_shortfall_bytes <= 0;
  }
};

// `job`'s plan is one E refuses (engines::runs is false).
Outcome<ExportFallback> export_fallback(const job::Job& job, engines::Engine e);

}  // namespace mist::api
