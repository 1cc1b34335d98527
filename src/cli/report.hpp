// Rendering predictions as text tables and JSON.
#pragma once

#include <string>

#include "analysis/memory_model.hpp"
#include "cli/job.hpp"
#include "core/json_fields.hpp"

namespace mist::cli {


std::string format_bytes(double bytes);  // "12.34 GiB", "512.0 MiB"
Json prediction_json(const Job& job, const analysis::MemoryPrediction& p);
std::string prediction_text(const Job& job, const analysis::MemoryPrediction& p);
std::string explanation_text(const Job& job, const analysis::MemoryPrediction& p);

}  // namespace mist::cli
