#include "cli/job_differences.hpp"

#include <fmt/format.h>

#include "core/json_fields.hpp"

namespace mist::cli {

std::string job_differences_text(const std::vector<api::JobDifference>& differences, bool job_from_flags,
                                 const std::string& used) {
  if (differences.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& d : differences) parts.push_back(fmt::format("{} {} (the training file: {})", d.field, d.flags, d.training_file));
  return fmt::format("your configuration's flags imply other training settings: {};\n  {}\n", join(parts),
                     job_from_flags ? used + " with the flags' settings (--job-from-flags)"
                                    : used + " with the training file's (--job-from-flags for the flags')");
}

}  // namespace mist::cli
