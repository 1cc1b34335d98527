// `mist tune --compare-to`: the user's current configuration (Megatron-LM flags, or a DeepSpeed
// JSON file with Megatron-DeepSpeed flags for its TP/PP) as a plan of the job being tuned. The
// flags also state or imply training settings (Megatron-LM's dropout defaults to 0.1, its precision
// to fp32 without --bf16); where they differ from the training file the file's stand, unless
// `job_from_flags`, so that the comparison answers the user's question about the user's job.
#pragma once

#include <string>
#include <vector>

#include "export/exchange.hpp"
#include "job/job.hpp"

namespace mist::api {

// A training setting the flags imply otherwise than the training file: "dropout", "true", "false".
struct JobDifference {
  std::string field, flags, training_file;
};

struct CurrentImport {
  engines::ImportedJob imported;         // its plan fitted to `training` (notes say what changed)
  spec::TrainingSpec training;           // the training the tune and the comparison use
  std::vector<JobDifference> differences;
  bool job_from_flags = false;           // the flags' settings replaced the file's
};

// `compare_to`: Megatron-LM flags, or a DeepSpeed JSON file (a name ending in .json) with
// `megatron_flags` for its TP/PP. With the training file's settings kept and another global batch
// in the flags, the configuration's gradient accumulation is set to give the file's global batch
// (an error naming `option`, the command's flag that gave the configuration, when its
// micro-batch · dp does not divide it).
Result<CurrentImport> import_current(const std::string& compare_to, const std::string& megatron_flags,
                                     bool job_from_flags, const job::Job& job,
                                     const std::string& option = "--compare-to");

// [{"field": ..., "flags": ..., "training_file": ...}, ...] as the JSON outputs carry them.
Json differences_json(const std::vector<JobDifference>& differences);

}  // namespace mist::api
