// A job's inputs as a user gives them: a catalog name or a file path (the command line), or JSON
// already parsed (the Python module's dicts), read by the same parsers either way.
#pragma once

#include <optional>
#include <string>

#include "core/json_fields.hpp"
#include "job/job.hpp"
#include "job/prepare.hpp"

namespace mist::api {

// One input: `json` when given, parsed as the file would be, its errors naming the field from the
// input's root ("training.seq_length") with no file; else `name_or_path`: a catalog name where the
// input has a catalog (the model), else a JSON file.
struct Input {
  std::string name_or_path;
  std::optional<Json> json;
  // What gave it ("--training", or the Python argument "training"): an error about the file
  // itself (a directory, no such file, malformed JSON) is reported under it,
  // "--training: examples: is a directory, not a JSON file". Empty: under the file's name alone.
  std::string option = {};
};

struct JobInputs {
  Input model, cluster, training;
  std::optional<Input> plan;  // none: the plan is left default (tune, gpus)
};

// An error about the file itself (its path is the file) put under the input's option.
void name_the_option(Error& e, const Input& in);

Result<spec::ModelSpec> load_model(const Input& in);
// The cluster and the files it names (profile_db, time_constants), which job::prepare reads. In a
// file a relative name is relative to the file; in JSON, to the working directory.
Result<spec::ClusterFile> load_cluster(const Input& in);
Result<spec::TrainingSpec> load_training(const Input& in);
Result<plan::Plan> load_plan(const Input& in);
// Model, cluster, training, then the plan, stopping at the first error.
Result<job::Job> load_job(const JobInputs& in);

// --engine (the software stack, default megatron), --uncalibrated and --headroom: the calibration
// and memory headroom job::prepare uses.
struct Calibration {
  std::string engine = "megatron";
  bool uncalibrated = false;
  double headroom = 0;  // predict: none; tune and gpus: analysis::kMemoryBand unless given
};

// Errors name the option: "--engine: ...".
Result<job::PrepareOptions> prepare_options(const Calibration& c);

// prepare_options, then job::predict of the job's plan with the switches its file left out as
// the engine runs them (engines::take_engine_switches, listed in engine_switches): what `mist
// predict`, `explain` and `simulate` compute.
Result<analysis::Prediction> predict(const job::Job& job, const Calibration& c);

}  // namespace mist::api
