// `mist gpus` as a call: the request (the command's options), the comparison, and its JSON
// (`gpus --json`, docs/gpus.md).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "advisor/advisor.hpp"
#include "api/failure.hpp"
#include "api/inputs.hpp"

namespace mist::api {

inline constexpr int kMaxThreads = 64;       // --threads
inline constexpr int kMaxGpusPerNode = 64;   // --gpus-per-node

struct GpusRequest {
  std::vector<std::string> candidates;        // --candidates: GPU types (catalog names)
  std::vector<int64_t> counts = {8, 16, 64};  // --gpus
  double tokens = 1e12;                       // --tokens
  std::string prices;                         // --prices: a file replacing built-in prices ("": none)
  std::string space = "mist", engine;         // --space, --engine ("" or "mist": the whole space)
  std::string profile_db;                     // --profile-db ("": analytical op times)
  std::optional<int64_t> gpus_per_node;       // --gpus-per-node (none: the catalog's per GPU type)
  int threads = 2;                            // --threads
  bool fast = false;                          // --fast
  // --uncalibrated and --headroom; its engine is set from `engine` (megatron's for mist).
  Calibration calibration{.engine = "megatron", .uncalibrated = false, .headroom = analysis::kMemoryBand};
  std::function<void(size_t done, size_t total)> progress;  // may be empty

  std::string space_name() const;  // as printed: the engine's, else the space's
};

// The advisor's options from the request (prices, calibration files read); errors name the option.
// A malformed built-in price table is a Failure of kind kInternal.
Outcome<advisor::AdvisorOptions> gpus_options(const GpusRequest& r);
// gpus_options, then advisor::compare_gpus. A job that fits nowhere is not a failure: every row
// says what it lacks and smallest_fitting is empty.
Outcome<advisor::Comparison> gpus(const spec::ModelSpec& model, const spec::TrainingSpec& training,
                                  const GpusRequest& r);
// What `gpus --json` prints: {model, tokens, space, fast, rows, smallest_fitting}.
Json gpus_json(const spec::ModelSpec& model, const GpusRequest& r, const advisor::Comparison& cmp);

}  // namespace mist::api
