#include "spec/engine_fields.hpp"

#include <fmt/format.h>

namespace mist::spec {

std::vector<Error> engine_training_refusals(const TrainingSpec& t, Engine e, std::optional<bool> selective) {
  std::vector<Error> out;
  const bool tt = e == Engine::kTorchtitan;
  const char* name = display_name(e);
  if (t.compile && !tt)
    out.push_back({"training.compile",
                   fmt::format("mist models torch.compile as torchtitan applies it (each block compiled); {} runs "
                               "eager kernels, fused by its own extensions; only torchtitan runs it (--engine torchtitan)",
                               name)});
  if (e == Engine::kMegatron) return out;
  if (t.fp8_param_gather)
    out.push_back({"training.fp8_param_gather",
                   fmt::format("mist models FP8 weights as Megatron-LM keeps them (--fp8-param-gather, Transformer "
                               "Engine's FP8 parameters); {}; only Megatron-LM runs it (--engine megatron)",
                               tt ? "torchtitan all-gathers float8 weights only with torchao's tensorwise recipe "
                                    "(enable_fsdp_float8_all_gather), which torchtitan b5bcd76c does not have"
                                  : "Megatron-DeepSpeed has no FP8 parameters")});
  if (t.mtp_layers > 0)
    out.push_back({"training.mtp_layers",
                   fmt::format("mist models multi-token prediction as Megatron-Core runs it (--mtp-num-layers); {}; "
                               "only Megatron-LM runs it (--engine megatron)",
                               tt ? "torchtitan b5bcd76c trains no multi-token prediction modules"
                                  : "Megatron-DeepSpeed has no multi-token prediction")});
  if (t.cross_entropy_fusion != CrossEntropyFusion::kNone)
    out.push_back({"training.cross_entropy_fusion",
                   fmt::format("names Megatron-LM's loss kernels (--cross-entropy-loss-fusion); {} computes its loss "
                               "with {}; only Megatron-LM runs them (--engine megatron)",
                               name, tt ? "F.cross_entropy" : "Megatron's unfused kernel")});
  if (t.recompute_modules != kRecomputeCoreAttn && selective.value_or(true))
    out.push_back({"training.recompute_modules",
                   fmt::format("names Megatron-LM's recompute modules (--recompute-modules); {}'s selective recompute "
                               "is {}; only Megatron-LM runs them (--engine megatron)",
                               name, tt ? "its op-level policy" : "the attention core only")});
  return out;
}

}  // namespace mist::spec
