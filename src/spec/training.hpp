// TrainingSpec: what is trained, independent of how it is parallelised.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_fields.hpp"
#include "core/stated.hpp"

namespace mist::spec {

// kFp8: the operands of the GEMMs of FP8 training (its linears), never the precision of weights,
// activations or gradients, which stay bf16 (TrainingSpec::fp8).
enum class Dtype { kFp32, kFp16, kBf16, kFp8 };
// FP8 training's scaling recipe: Transformer Engine's tensorwise (current scaling), delayed
// (amax history) and blockwise (1×128 activations, 128×128 weights, DeepSeek-V3's) recipes and
// MXFP8 (Blackwell's 32-element blocks); torchao's tensorwise and rowwise float8 (torchtitan).
enum class Fp8Recipe { kNone, kTensorwise, kDelayed, kBlockwise, kMxfp8, kRowwise };
enum class Optimizer { kAdamW, kSgd };
// How a mixture of experts moves tokens to their experts' ranks: Megatron-LM's all-to-all token
// dispatcher, or its all-gather one (the default of --moe-token-dispatcher-type).
enum class MoeDispatcher { kAllToAll, kAllGather };
// Megatron-LM's loss kernel (--cross-entropy-loss-fusion, --cross-entropy-fusion-impl): kNone its
// vocab-parallel cross entropy on an fp32 copy of the logits, kept for backward; kNative the same
// statements under its jit fuser (fused_cross_entropy.py: the same fp32 copy kept); kTe Transformer
// Engine's parallel_cross_entropy, which writes the gradient into the bf16 logits in forward and
// keeps them, with no fp32 copy.
enum class CrossEntropyFusion { kNone, kNative, kTe };
// Megatron-LM's --recompute-modules: what its selective recompute (a plan's "recompute":
// "selective" under Megatron) runs again in backward, one bit each (TrainingSpec::recompute_modules).
// Two kinds: a checkpoint keeps a module's inputs and replays it when its backward starts
// (core_attn, mlp, moe, shared_experts); CheckpointWithoutOutput also frees the output its
// consumers saved, and restores it when the gradient reaches the module named in graph::Op
// (layernorm, moe_act, mla_up_proj).
enum RecomputeModule : uint32_t {
  kRecomputeCoreAttn = 1u << 0,       // the attention core (Megatron's default)
  kRecomputeLayernorm = 1u << 1,      // norms Transformer Engine does not fuse into a linear
  kRecomputeMlp = 1u << 2,            // a dense block's MLP, its fused norm included
  kRecomputeMoe = 1u << 3,            // a whole MoE layer: router, dispatcher, experts, shared expert
  kRecomputeMoeAct = 1u << 4,         // the routed experts' activation
  kRecomputeSharedExperts = 1u << 5,  // the shared expert's MLP
  kRecomputeMlaUpProj = 1u << 6,      // latent attention's up projections and rotary embedding
};
inline constexpr uint32_t kRecomputeWithoutOutput = kRecomputeLayernorm | kRecomputeMoeAct | kRecomputeMlaUpProj;

struct TrainingSpec {
  int64_t global_batch_size = 0;  // sequences per iteration
  int64_t seq_length = 0;         // s
  Dtype precision = Dtype::kBf16;   // weights and activations; fp16/bf16 = mixed precision
  Dtype grad_dtype = Dtype::kFp32;  // gradients are kept and reduced in this dtype
  Stated grad_dtype_stated;          // false: the file left grad_dtype out
  Optimizer optimizer = Optimizer::kAdamW;
  bool flash_attention = true;
  bool dropout = false;
  bool compile = false;  // torch.compile of the model's blocks (torchtitan's compile.enable)
  // torch.compile of the loss too (torchtitan's compile.components holding "loss", its default
  // since 2025-04: b5bcd76c's CompileConfig). Unset: as `compile`. false: the loss runs eager, as
  // torchtitan did before (9dec370, 2024-12, left it commented out). compiled_loss() is the rule.
  std::optional<bool> compile_loss;
  bool compiled_loss() const { return compile && compile_loss.value_or(true); }
  // "precision": "fp8": the linears' GEMMs run in FP8 with this recipe, everything else as bf16
  // (precision is then kBf16). kNone: no FP8.
  Fp8Recipe fp8 = Fp8Recipe::kNone;
  // "fp8_param_gather": the FP8 linears' weights are kept in FP8 (one byte per parameter; the fp32
  // master copy stays in the optimizer) and all-gathered in FP8: Megatron-LM's --fp8-param-gather.
  bool fp8_param_gather = false;
  // Mixtures of experts: the routed rows the busiest expert-parallel rank computes, as a multiple
  // of the balanced share (1: balanced, as the published MoE benchmark rows force it). The step
  // waits for that rank: its expert GEMMs, its share of the all-to-alls and its expert activations.
  double moe_load_imbalance = 1.0;
  // Megatron-LM's --moe-expert-capacity-factor (0: dropless): no expert takes more than this
  // multiple of its balanced share (the rest are dropped); with moe_pad_to_capacity
  // (--moe-pad-expert-input-to-capacity) every expert computes exactly that many rows.
  double moe_capacity_factor = 0;
  bool moe_pad_to_capacity = false;
  // "moe_token_dispatcher": "alltoall" (the default: what the published MoE recipes run) or
  // "allgather" (Megatron-LM's default): graph::LoweringOptions::moe_allgather.
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // "moe_router_dtype": "fp32" (Megatron-LM's --moe-router-dtype fp32, which Megatron-Bridge sets for
  // DeepSeek, Qwen3-MoE, GLM and Kimi): the router's logits and the routing probabilities in fp32;
  // left out, the activation dtype (graph::LoweringOptions::moe_router_fp32).
  bool moe_router_fp32 = false;
  // Multi-token prediction depths trained beside the next-token loss (DeepSeek-V3's MTP modules;
  // Megatron-LM's --mtp-num-layers): each a projection of the next token's embedding and the
  // hidden state, one more block of the model's last kind and the shared LM head's loss, on the
  // last pipeline stage (graph::LoweringOptions::mtp_layers). 0: none, Megatron-LM's default.
  int64_t mtp_layers = 0;
  // "recompute_modules": ["core_attn", "layernorm", ...] (RecomputeModule bits). A list replaces
  // Megatron's default ["core_attn"], as --recompute-modules does.
  uint32_t recompute_modules = kRecomputeCoreAttn;
  // "cross_entropy_fusion": "none" (Megatron-LM's default), "native" or "te".
  CrossEntropyFusion cross_entropy_fusion = CrossEntropyFusion::kNone;

  bool mixed_precision() const { return precision != Dtype::kFp32; }
  bool fp8_training() const { return fp8 != Fp8Recipe::kNone; }
  // The routed rows of the busiest expert rank over the balanced share: the imbalance, bounded by
  // the capacity factor (exactly the factor when padded to it).
  double moe_load_factor() const;
  bool moe_routing_stated() const {
    return moe_load_imbalance != 1.0 || moe_capacity_factor > 0 || moe_dispatcher != MoeDispatcher::kAllToAll ||
           moe_router_fp32;
  }
  bool operator==(const TrainingSpec&) const = default;
};

Result<TrainingSpec> load_training(const std::string& path);
Result<TrainingSpec> training_from_json(const Json& j, const std::string& what);
Json training_to_json(const TrainingSpec& t);

int dtype_bytes(Dtype d);
const char* to_string(Dtype d);
const char* to_string(Optimizer o);
const char* to_string(Fp8Recipe r);
const char* to_string(MoeDispatcher d);  // "alltoall", "allgather"
const char* to_string(CrossEntropyFusion f);  // "none", "native", "te"
// Megatron's names of the modules in `mask`, in its order ("core_attn", "layernorm", "mlp", "moe",
// "moe_act", "shared_experts", "mla_up_proj"); the bit of one name (0: not a module).
std::vector<std::string> recompute_module_names(uint32_t mask);
uint32_t recompute_module_bit(std::string_view name);

// The precision as a user wrote it: "bf16", or "fp8 (tensorwise)" for FP8 training.
std::string precision_name(const TrainingSpec& t);

}  // namespace mist::spec
