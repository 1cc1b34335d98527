#include "api/export_fallback.hpp"

#include <algorithm>

#include "analysis/pipeline_job.hpp"
#include "api/tune.hpp"
#include "export/exchange.hpp"

namespace mist::api {

Outcome<ExportFallback> export_fallback(const job::Job& job, engines::Engine e) {
  ExportFallback f;
  f.nearest = engines::nearest_expressible(job.plan, e, &job.training, &job.model);
  TuneRequest request;  // `mist tune --engine E`'s defaults
  request.engine = engines::to_string(e);
  request.calibration.engine = request.engine;
  MIST_TRY(auto prepare, prepare_options(request.calibration));
  MIST_TRY(auto prepared, job::prepare(job, prepare));

  job::Job near = job;
  near.plan = f.nearest.plan;
  double near_time = 0;
  if (engines::runs(e, near)) {
    MIST_TRY(auto pred, analysis::predict(prepared, near.plan));
    for (const auto& s : pred.memory.stages)
      f.nearest_shortfall_bytes = std::max(f.nearest_shortfall_bytes, s.peak_bytes - s.usable_bytes);
    f.nearest_host_shortfall_bytes = std::max(0.0, pred.memory.host_bytes_per_node - pred.memory.host_capacity_bytes);
    MIST_TRY(auto sim, sim::simulate(analysis::pipeline_job(near.plan, pred.time, pred.memory)));
    near_time = sim.makespan;
    f.nearest_prediction = std::move(pred);
  }

  MIST_TRY(auto options, tune_options(request));
  if (auto result = tuner::tune(prepared, options); !result) {
    f.search_refusal = result.error().to_string();
  } else if (!result->best.empty()) {
    f.best = std::move(result->best.front());
  } else {
    f.closest = std::move(result->closest);
  }

  if (f.nearest_fits() && (!f.best || near_time <= f.best->simulated_time_s)) {
    f.offered = f.nearest.plan;
    f.offered_is_nearest = true;
  } else if (f.best) {
    f.offered = f.best->plan;
    f.offered_is_nearest = f.best->plan == f.nearest.plan;
  }
  return f;
}

}  // namespace mist::api
