// Megatron-LM (NVIDIA/Megatron-LM @ kMegatronSource.commit): plans to command-line flags and back.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "export/exchange.hpp"
#include "export/flags.hpp"

namespace mist::engines {

// The flags for a plan Megatron-LM can run (expressible(p, Engine::kMegatron) holds), in the order
// parallelism, batch, recompute, ZeRO, offload, precision, model shape.
std::vector<Option> megatron_options(const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                     const spec::TrainingSpec& t, const plan::Plan& p);
// The environment the launch needs: CUDA_DEVICE_MAX_CONNECTIONS=1 where validate_args asserts it.
std::vector<EnvVar> megatron_environment(const spec::ClusterSpec& c, const plan::Plan& p);
// What the flags do not carry, and why the environment and any raised value are there.
std::vector<std::string> megatron_notes(const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                        const spec::TrainingSpec& t, const plan::Plan& p);

// A Megatron-LM command line (or just its flags) as a plan for `m` on `c`, with the training
// settings the flags state: --global-batch-size (default micro batch × dp), --seq-length,
// --bf16/--fp16, --optimizer, dropout. Flags that do not change the plan are ignored (listed in
// the notes); a flag with a bad value, or one mist's plans cannot hold, is an error naming it.
Result<ImportedJob> import_megatron_flags(std::string_view flags, const spec::ModelSpec& m,
                                          const spec::ClusterSpec& c);

// Every flag the exporter writes or the importer reads.
std::span<const FlagSpec> megatron_flag_specs();

}  // namespace mist::engines
