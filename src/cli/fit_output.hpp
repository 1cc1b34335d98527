// What the three ways of `mist fit` (--profile-db, --runs, --gemm-table) share: the date a fit is
// stamped with and writing / printing the constants file.
#pragma once

#include <optional>
#include <string>

#include "core/json_fields.hpp"
#include "core/result.hpp"
#include "spec/training.hpp"

namespace mist::cli {

// "fp32", "bf16" or "fp16"; else an error naming --dtype.
Result<spec::Dtype> parse_dtype(const std::string& s);

// Today in UTC, YYYY-MM-DD (the constants file's "fit.date").
std::string fit_date();

// Writes `constants` to `path` when one is given and, with `json`, prints it as the whole output.
// Returns the exit status when the command is done (JSON printed, or `path` not writable: exit 2
// naming --out); nullopt when the caller goes on to print its report.
std::optional<int> emit_constants(const Json& constants, const std::string& path, bool json, std::string& out,
                                  std::string& err);

}  // namespace mist::cli
