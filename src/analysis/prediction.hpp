// What mist predicts for a plan of a prepared job: per-stage memory and the iteration time. The one
// entry point that the command line, the tuner, the GPU advisor, the simulation, the published-run
// checks, the executor's validation and the benchmarks all call.
#pragma once

#include "analysis/memory_model.hpp"
#include "analysis/prepared_job.hpp"
#include "analysis/time_model.hpp"
#include "plan/plan.hpp"

namespace mist::analysis {

struct Prediction {
  MemoryPrediction memory;
  TimePrediction time;
  MatmulRate matmul_rate;   // the GEMM rate the time model assumed, and its source
  Calibration calibration;  // the constants' provenance: which fit, on how many runs, its error
};

// Checks the plan against the job (plan::validate_plan; the error names the rule), then predicts.
Result<Prediction> predict(const PreparedJob& job, const plan::Plan& p);

}  // namespace mist::analysis
