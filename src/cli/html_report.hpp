// `--html FILE` on predict, simulate, tune and gpus: the report's values (src/html) from the
// command's results, and the file written.
#pragma once

#include <optional>
#include <string>

#include "api/gpus.hpp"
#include "api/tune.hpp"
#include "cli/job.hpp"
#include "html/report.hpp"
#include "sim/pipeline_sim.hpp"

namespace mist::cli {

// A plan in words: "dp 2 × tp 4 (sequence parallel) × pp 2; micro-batch 2, 128 per iteration;
// stage 0: 20 blocks, ZeRO 1, 6 recomputed; ...".
std::string plan_one_line(const plan::Plan& p);

// predict and simulate: the job, the prediction and the simulation of its pipeline.
html::Report prediction_report(const std::string& command, const Job& job, const analysis::Prediction& pred,
                               const sim::PipelineJob& pj, const sim::SimResult& sim);
// tune (a plan fits): the chosen plan as prediction_report draws it, then the candidates.
html::Report tune_report(const api::TuneRun& run, const sim::PipelineJob& pj, const sim::SimResult& sim);
// gpus: the comparison's cells.
html::Report gpus_report(const spec::ModelSpec& model, const spec::TrainingSpec& training,
                         const api::GpusRequest& request, const advisor::Comparison& cmp);

// Writes the page. Fails with "mist: invalid input: --html: cannot write FILE: REASON" in `err`
// and returns kExitInvalidInput; kExitOk when written.
int write_html(const std::string& path, const html::Report& r, std::string& err);

}  // namespace mist::cli
