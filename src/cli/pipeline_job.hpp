// The event simulation's input built from the memory and time predictions of a plan; shared by
// `mist simulate` and `mist predict --simulate`.
#pragma once

#include "analysis/memory_model.hpp"
#include "analysis/time_model.hpp"
#include "cli/job.hpp"
#include "sim/pipeline_sim.hpp"

namespace mist::cli {

double term_seconds(const std::vector<analysis::TimeTerm>& terms, const std::string& name);
double term_bytes(const analysis::StageMemory& s, const std::string& name);
sim::PipelineJob pipeline_job(const Job& job, const analysis::TimePrediction& t, const analysis::MemoryPrediction& m);

}  // namespace mist::cli
