// The software stack a job trains with: the engines mist exports to (src/export) and whose measured
// runs calibrate the time model (src/job, src/calibration). An input like the model and the cluster.
#pragma once

#include <span>
#include <string_view>

#include "core/result.hpp"

namespace mist::spec {

enum class Engine {
  kMegatron,    // NVIDIA Megatron-LM / Megatron-Core: command-line flags
  kDeepSpeed,   // DeepSpeed JSON config, with Megatron-DeepSpeed flags for TP/PP/recompute
  kTorchtitan,  // torchtitan: --section.field overrides
};

const char* to_string(Engine e);      // "megatron", "deepspeed", "torchtitan"
const char* display_name(Engine e);   // "Megatron-LM", ...
Result<Engine> engine_from_string(std::string_view name);
std::span<const Engine> all_engines();

}  // namespace mist::spec
