// What exporters produce and importers return: engine options, configs, imported plans.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json_fields.hpp"
#include "export/capability.hpp"
#include "export/engine.hpp"
#include "job/job.hpp"
#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::engines {

// One command-line option as the engine spells it: "--micro-batch-size" "4", or a switch
// ("--sequence-parallel", no value), or a tyro subcommand ("activation-checkpoint:full").
struct Option {
  std::string name;
  std::optional<std::string> value;
  bool several = false;  // value holds several arguments, separated by spaces (argparse's nargs)
  bool operator==(const Option&) const = default;
};

// Options one per line, continued with " \" so the text pastes into a shell.
std::string render_options(const std::vector<Option>& options);

// An environment variable the engine asserts or reads at launch ("CUDA_DEVICE_MAX_CONNECTIONS" "1").
struct EnvVar {
  std::string name;
  std::string value;
  bool operator==(const EnvVar&) const = default;
};

// "export NAME=VALUE" lines, one per variable (nothing when there are none); the importers skip them.
std::string render_environment(const std::vector<EnvVar>& environment);

// A plan in an engine's terms.
struct Exported {
  Engine engine = Engine::kMegatron;
  std::vector<Option> options;  // Megatron-LM flags, Megatron-DeepSpeed flags or torchtitan overrides
  std::vector<EnvVar> environment;  // what the launch must set (the notes say why)
  Json config;                  // the DeepSpeed JSON config (null for the others)
  std::vector<std::string> notes;  // what the options do not carry (model shape, vocabulary, ...)
};

// An export either succeeds or is refused with the reasons and, where a plan can fix them, the
// nearest plan the engine can run.
struct ExportResult {
  std::optional<Exported> exported;
  std::vector<Error> reasons;
  std::optional<Nearest> nearest;
};

struct ExportOptions {
  std::string deepspeed_config_path = "ds_config.json";  // what --deepspeed_config names
};

// Training settings an engine configuration states (the rest of the TrainingSpec is not there).
struct TrainingOverrides {
  std::optional<int64_t> global_batch_size;
  std::optional<int64_t> seq_length;
  std::optional<spec::Dtype> precision;
  std::optional<spec::Dtype> grad_dtype;  // the gradients' dtype the options imply (stated)
  std::optional<spec::Fp8Recipe> fp8;  // kNone: the flags train without FP8
  std::optional<spec::Optimizer> optimizer;
  std::optional<bool> dropout;
  std::optional<bool> compile;
  std::optional<bool> compile_loss;  // torchtitan's --compile.components holding "loss"
  std::optional<bool> fp8_param_gather;
  std::optional<double> moe_capacity_factor;  // 0: dropless
  std::optional<bool> moe_pad_to_capacity;
  std::optional<spec::MoeDispatcher> moe_dispatcher;  // Megatron-LM's --moe-token-dispatcher-type
  std::optional<bool> moe_router_fp32;                // Megatron-LM's --moe-router-dtype fp32
  std::optional<int64_t> mtp_layers;  // Megatron-LM's --mtp-num-layers (absent: 0)
  std::optional<uint32_t> recompute_modules;  // Megatron-LM's --recompute-modules (spec::RecomputeModule bits)
  // Megatron-LM's --cross-entropy-loss-fusion with --cross-entropy-fusion-impl (absent: none).
  std::optional<spec::CrossEntropyFusion> cross_entropy_fusion;
  // `base` with the stated settings replacing its own.
  spec::TrainingSpec applied_to(spec::TrainingSpec base) const;
};

// A plan read from an engine configuration, the training settings it implies, and notes on what
// was approximated or ignored.
struct ImportedJob {
  plan::Plan plan;
  TrainingOverrides training;
  std::vector<std::string> notes;
};

// Exports `p` for engine `e` after checking it against the job; a job that is invalid
// (validate_plan) is an error, a plan the engine cannot run is a refusal (ExportResult::reasons).
Result<ExportResult> export_plan(Engine e, const job::Job& job, const ExportOptions& o = {});

// Whether export_plan exports `job`'s plan (valid for the job) to `e` rather than refusing it: the
// engine takes the model and can express the plan with the job's training settings.
bool runs(Engine e, const job::Job& job);
// The engines that run `job`'s plan (runs), in all_engines() order; empty for a plan only mist's
// space has.
std::vector<Engine> runnable_on(const job::Job& job);

}  // namespace mist::engines
