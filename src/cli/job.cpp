#include "cli/job.hpp"

#include "cli/commands.hpp"

namespace mist::cli {

void add_job_options(CLI::App* cmd, JobArgs& a, bool with_plan) {
  cmd->add_option("--model", a.model,
                  "catalog name (mist list models) or a JSON file: a Hugging Face config.json or mist's model form")
      ->required();
  cmd->add_option("--cluster", a.cluster, "cluster JSON file: {\"gpu\": NAME, \"nodes\": N, \"gpus_per_node\": M, ...}")
      ->required();
  cmd->add_option("--training", a.training, "training JSON file: global_batch_size, seq_length, precision, ...")
      ->required();
  if (with_plan)
    cmd->add_option("--plan", a.plan, "plan JSON file: dp, tp, pp, micro_batch_size, grad_accum_steps, stages, ...")
        ->required();
}

void add_calibration_options(CLI::App* cmd, CalibrationArgs& a, bool with_engine) {
  if (with_engine)
    cmd->add_option("--engine", a.engine,
                    "the software stack you train with: megatron, deepspeed or torchtitan; selects the time model's "
                    "calibration fitted to published runs of that stack")
        ->capture_default_str();
  cmd->add_flag("--uncalibrated", a.uncalibrated, "the physics alone: no stack calibration");
}

void add_headroom_option(CLI::App* cmd, CalibrationArgs& a) {
  a.headroom = analysis::kMemoryBand;
  cmd->add_option("--headroom", a.headroom,
                  "share of each GPU's memory a chosen plan leaves free: the band of the predicted reserved peak "
                  "(0 for none)")
      ->capture_default_str();
}

Result<Job> load_job(const JobArgs& a) {
  api::JobInputs in{.model = {a.model, {}, "--model"},
                    .cluster = {a.cluster, {}, "--cluster"},
                    .training = {a.training, {}, "--training"},
                    .plan = {}};
  if (!a.plan.empty()) in.plan = api::Input{a.plan, {}, "--plan"};
  return api::load_job(in);
}

int invalid_input(std::string& err, const Error& e) { return failed(err, api::Failure(e)); }

int failed(std::string& err, const api::Failure& f) {
  err += "mist: " + f.message() + "\n";
  return f.kind == api::Failure::Kind::kInternal ? kExitInternal : kExitInvalidInput;
}

}  // namespace mist::cli
