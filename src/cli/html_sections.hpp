// The pieces every report shares (html_report.cpp, html_search_report.cpp): the job in words, the
// prediction's figures, the memory bars and the timeline from mist's results.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "analysis/prediction.hpp"
#include "cli/job.hpp"
#include "html/report.hpp"
#include "sim/pipeline_sim.hpp"

namespace mist::cli {

inline constexpr const char* kGenerator =
    "Written by mist (--html): inline SVG, no script, nothing fetched; docs/report.md says what each chart shows.";

using Summary = std::vector<std::pair<std::string, std::string>>;

// model, cluster, training.
Summary job_summary(const Job& job);
// iteration time (closed form, band, simulated), throughput, memory (worst stage), calibration.
void append_prediction_summary(Summary& s, const analysis::Prediction& pred, const sim::SimResult& sim);

// Weights, gradients, optimizer states, activations and the rest of each stage's peak.
html::MemoryChart memory_chart(const analysis::MemoryPrediction& m);
html::Table memory_table(const analysis::MemoryPrediction& m);
// The simulation's tasks: compute as forward and backward, the other streams as communication and
// copies; the whole iteration, then, past 12 micro-batches, a close-up of the pipeline filling.
std::vector<html::TimelineChart> timeline_charts(const sim::PipelineJob& pj, const sim::SimResult& r);

}  // namespace mist::cli
