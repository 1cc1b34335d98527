// The training settings an imported configuration's flags imply otherwise than the training file
// (tune --compare-to, predict/explain --from-megatron), as the text outputs say them.
#pragma once

#include <string>
#include <vector>

#include "api/compare_to.hpp"

namespace mist::cli {

// "your configuration's flags imply other training settings: dropout true (the training file:
// false);\n  <used> with the training file's (--job-from-flags for the flags')\n"; "" when none.
// `used` says what was done with them: "tuned and compared", "predicted".
std::string job_differences_text(const std::vector<api::JobDifference>& differences, bool job_from_flags,
                                 const std::string& used);

}  // namespace mist::cli
