// A prediction as the JSON object `mist predict --json` prints (docs/cli.md lists the fields);
// `tune --json` carries the same object for its best plan.
#pragma once

#include "analysis/prediction.hpp"
#include "core/json_fields.hpp"
#include "job/job.hpp"

namespace mist::api {

Json prediction_json(const job::Job& job, const analysis::Prediction& p);
// The calibration a prediction used: {"kind", "engine", "note", and for a stack fit "stack",
// "fitted_gpu", "source", "runs", "mean_rel_error", "held_out", "stack_settings"}.
Json calibration_json(const analysis::Calibration& c);

}  // namespace mist::api
