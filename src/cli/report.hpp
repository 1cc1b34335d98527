// Rendering predictions as text tables (their JSON: api/prediction_json.hpp).
#pragma once

#include <string>

#include "analysis/prediction.hpp"
#include "api/prediction_json.hpp"
#include "cli/job.hpp"
#include "core/json_fields.hpp"

namespace mist::cli {

using analysis::Prediction;

std::string format_bytes(double bytes);  // "12.34 GiB", "512.0 MiB"
std::string format_seconds(double s);    // "1.234 s", "12.3 ms", "45 µs"
// "6.74B params", or for a mixture of experts "46.70B params, 12.88B active: 8 experts, top 2".
std::string parameter_summary(const spec::ModelSpec& m);
// " cp 4" when the plan splits sequences, then " ep 8 etp 1" when it splits experts (either degree
// above 1); "" for neither.
std::string extra_degrees_text(const plan::Plan& p);

using api::prediction_json;
// The calibration a prediction used, in one line of text (its JSON: api::calibration_json).
std::string calibration_text(const analysis::Calibration& c);
std::string prediction_text(const Job& job, const Prediction& p);
std::string explanation_text(const Job& job, const Prediction& p);

}  // namespace mist::cli
