// The event simulation's input built from the memory and time predictions of a plan; used by
// `mist simulate`, `mist predict --simulate` and the tuner's re-ranking of its best plans.
#pragma once

#include "analysis/memory_model.hpp"
#include "analysis/time_model.hpp"
#include "sim/pipeline_sim.hpp"

namespace mist::analysis {

double term_seconds(const std::vector<TimeTerm>& terms, const std::string& name);
double term_bytes(const StageMemory& s, const std::string& name);
sim::PipelineJob pipeline_job(const plan::Plan& p, const TimePrediction& t, const MemoryPrediction& m);

}  // namespace mist::analysis
