// `mist tune`'s text: the plans found (each with its gap and the engines that run it), the legend,
// the best plan in words and what put it ahead of the runner-up, each engine's best plan, the
// --compare-to comparison, then the best plan's prediction (its JSON: api::tune_json).
#pragma once

#include <string>

#include "api/tune.hpp"

namespace mist::cli {

// A run where a plan fits.
std::string tune_text(const api::TuneRun& run);
// A run where none does: what to say on stderr (after "mist: ", one line, no newline).
std::string no_fit_text(const api::TuneRun& run);

}  // namespace mist::cli
