// DeepSpeed (microsoft/DeepSpeed @ kDeepSpeedSource.commit): plans to a JSON config and back. Tensor
// and pipeline parallelism, DeepSpeed-Ulysses' sequence parallelism (plan.cp with cp_comm a2a) and
// recompute live in the model code; mist speaks Megatron-DeepSpeed's flags for them
// (microsoft/Megatron-DeepSpeed @ kMegatronDeepSpeedSource.commit).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "export/exchange.hpp"
#include "export/flags.hpp"

namespace mist::engines {

// The JSON config for a plan DeepSpeed can run (expressible(p, Engine::kDeepSpeed, ..., &t)).
Json deepspeed_config(const spec::TrainingSpec& t, const plan::Plan& p);
// The Megatron-DeepSpeed flags that go with it (--deepspeed_config names `config_path`).
std::vector<Option> megatron_deepspeed_options(const spec::ModelSpec& m, const spec::TrainingSpec& t,
                                               const plan::Plan& p, const std::string& config_path);
// The environment the launch needs: CUDA_DEVICE_MAX_CONNECTIONS=1 with sequence parallelism.
std::vector<EnvVar> megatron_deepspeed_environment(const plan::Plan& p);
// What the flags and the JSON do not carry; with pp > 1, the split DeepSpeed's partition makes.
std::vector<std::string> deepspeed_notes(const spec::ModelSpec& m, const spec::TrainingSpec& t, const plan::Plan& p);

// A DeepSpeed config (and, when not empty, the Megatron-DeepSpeed flags launched with it) as a
// plan for `m` on `c`. Without flags the job is data-parallel only and recompute, which the model
// code decides, is taken as none. Errors name the JSON key (`what`.zero_optimization.stage) or flag.
Result<ImportedJob> import_deepspeed(const Json& config, std::string_view megatron_flags, const spec::ModelSpec& m,
                                     const spec::ClusterSpec& c, const std::string& what = "deepspeed");
Result<ImportedJob> import_deepspeed_file(const std::string& path, std::string_view megatron_flags,
                                          const spec::ModelSpec& m, const spec::ClusterSpec& c);

// Every Megatron-DeepSpeed flag the exporter writes or the importer reads.
std::span<const FlagSpec> megatron_deepspeed_flag_specs();
// Every DeepSpeed config key (dotted) the exporter writes or the importer reads.
std::span<const std::string_view> deepspeed_config_keys();

}  // namespace mist::engines
