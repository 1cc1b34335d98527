// TrainingSpec: the JSON form and the dtype helpers.
#include "spec/training.hpp"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "spec/catalog.hpp"

namespace mist::spec {

namespace {

constexpr int64_t kMaxGlobalBatch = 1'000'000'000;
constexpr int64_t kMaxSeqLength = 10'000'000;
// The busiest expert rank's load, and an expert's capacity, over the balanced share: beyond 64
// no routing of the models mist knows is plausible (a rank of ep 64 taking every token).
constexpr double kMaxMoeFactor = 64.0;
// Multi-token prediction depths: DeepSeek-V3 trains one; Megatron-LM sets no bound.
constexpr int64_t kMaxMtpLayers = 64;

// Megatron's module names; the i-th is RecomputeModule bit 1 << i.
constexpr std::string_view kRecomputeModules[] = {"core_attn", "layernorm",      "mlp",        "moe",
                                                  "moe_act",   "shared_experts", "mla_up_proj"};
static_assert(kRecomputeCoreAttn == 1u << 0 && kRecomputeLayernorm == 1u << 1 && kRecomputeMlp == 1u << 2 &&
                  kRecomputeMoe == 1u << 3 && kRecomputeMoeAct == 1u << 4 && kRecomputeSharedExperts == 1u << 5 &&
                  kRecomputeMlaUpProj == 1u << 6 && std::size(kRecomputeModules) == 7,
              "kRecomputeModules lists the RecomputeModule bits in order");

Dtype parse_dtype(const std::string& s) {
  if (s == "fp32") return Dtype::kFp32;
  if (s == "fp16") return Dtype::kFp16;
  return Dtype::kBf16;
}

Fp8Recipe parse_recipe(const std::string& s) {
  if (s == "delayed") return Fp8Recipe::kDelayed;
  if (s == "blockwise") return Fp8Recipe::kBlockwise;
  if (s == "mxfp8") return Fp8Recipe::kMxfp8;
  if (s == "rowwise") return Fp8Recipe::kRowwise;
  return Fp8Recipe::kTensorwise;
}

}  // namespace

Result<TrainingSpec> training_from_json(const Json& j, const std::string& what) {
  MIST_TRY(JsonFields f, JsonFields::of(j, what));
  MIST_SPEC_CHECK(f.reject_unknown({"global_batch_size", "seq_length", "precision", "fp8_recipe", "optimizer",
                                    "flash_attention", "dropout", "grad_dtype", "compile", "compile_loss",
                                    "fp8_param_gather", "moe_load_imbalance", "moe_capacity_factor",
                                    "moe_pad_to_capacity", "moe_token_dispatcher", "moe_router_dtype", "mtp_layers",
                                    "recompute_modules", "cross_entropy_fusion"}));
  TrainingSpec t;
  MIST_TRY(t.global_batch_size, f.integer("global_batch_size", 1, kMaxGlobalBatch));
  MIST_TRY(t.seq_length, f.integer("seq_length", 1, kMaxSeqLength));
  MIST_TRY(std::string precision, f.choice_or("precision", "bf16", {"fp32", "fp16", "bf16", "fp8"}));
  MIST_TRY(std::string recipe, f.choice_or("fp8_recipe", "tensorwise",
                                           {"tensorwise", "delayed", "blockwise", "mxfp8", "rowwise"}));
  if (f.has("fp8_recipe") && precision != "fp8")
    return fail(f.field_path("fp8_recipe"), fmt::format("applies to \"precision\": \"fp8\" only, and precision is \"{}\"",
                                                        precision));
  MIST_TRY(t.fp8_param_gather, f.boolean_or("fp8_param_gather", false));
  if (t.fp8_param_gather && precision != "fp8")
    return fail(f.field_path("fp8_param_gather"),
                fmt::format("keeps the FP8 linears' weights in FP8, so it needs \"precision\": \"fp8\"; precision is \"{}\"",
                            precision));
  MIST_TRY(t.moe_load_imbalance, f.number_or("moe_load_imbalance", 1.0, 1.0, kMaxMoeFactor));
  MIST_TRY(t.moe_capacity_factor, f.number_or("moe_capacity_factor", 0.0, 0.0, kMaxMoeFactor));
  if (f.has("moe_capacity_factor") && t.moe_capacity_factor <= 0)
    return fail(f.field_path("moe_capacity_factor"), "must be above 0 (leave it out for dropless routing)");
  MIST_TRY(t.moe_pad_to_capacity, f.boolean_or("moe_pad_to_capacity", false));
  if (t.moe_pad_to_capacity && t.moe_capacity_factor <= 0)
    return fail(f.field_path("moe_pad_to_capacity"), "pads each expert to its capacity: it needs \"moe_capacity_factor\"");
  MIST_TRY(std::string dispatcher, f.choice_or("moe_token_dispatcher", "alltoall", {"alltoall", "allgather"}));
  t.moe_dispatcher = dispatcher == "allgather" ? MoeDispatcher::kAllGather : MoeDispatcher::kAllToAll;
  if (f.has("moe_router_dtype")) {
    MIST_TRY(std::string router, f.choice("moe_router_dtype", {"fp32"}));  // left out: the activation dtype
    t.moe_router_fp32 = router == "fp32";
  }
  MIST_TRY(t.mtp_layers, f.integer_or("mtp_layers", 0, 0, kMaxMtpLayers));
  MIST_TRY(std::string ce, f.choice_or("cross_entropy_fusion", "none", {"none", "native", "te"}));
  t.cross_entropy_fusion = ce == "te"       ? CrossEntropyFusion::kTe
                           : ce == "native" ? CrossEntropyFusion::kNative
                                            : CrossEntropyFusion::kNone;
  if (f.has("recompute_modules")) {
    MIST_TRY(auto modules, f.choices("recompute_modules", kRecomputeModules));
    if (modules.empty())
      return fail(f.field_path("recompute_modules"),
                  "is empty: selective recompute needs at least one module (leave the field out for "
                  "Megatron's default [\"core_attn\"])");
    t.recompute_modules = 0;
    for (const auto& name : modules) t.recompute_modules |= recompute_module_bit(name);
  }
  MIST_TRY(std::string grad, f.choice_or("grad_dtype", "fp32", {"fp32", "fp16", "bf16"}));
  MIST_TRY(std::string optimizer, f.choice_or("optimizer", "adamw", {"adamw", "sgd"}));
  MIST_TRY(t.flash_attention, f.boolean_or("flash_attention", true));
  MIST_TRY(t.dropout, f.boolean_or("dropout", false));
  MIST_TRY(t.compile, f.boolean_or("compile", false));
  if (f.has("compile_loss")) {
    MIST_TRY(bool loss, f.boolean_or("compile_loss", true));
    if (loss && !t.compile)
      return fail(f.field_path("compile_loss"),
                  "compiles the loss with torch.compile, which needs \"compile\": true (torchtitan compiles its "
                  "components only under compile.enable)");
    if (t.compile) t.compile_loss = loss;  // false without compile says nothing more
  }
  t.precision = parse_dtype(precision);  // fp8: bf16 outside the linears' GEMMs
  if (precision == "fp8") t.fp8 = parse_recipe(recipe);
  t.grad_dtype = parse_dtype(grad);
  t.grad_dtype_stated.value = f.has("grad_dtype");
  t.optimizer = optimizer == "adamw" ? Optimizer::kAdamW : Optimizer::kSgd;
  // fp32 training has no 16-bit copy of anything, so its gradients are fp32 too; mixed precision
  // keeps gradients in fp32 (the default) or in the training dtype, never in the other 16-bit one.
  if (t.precision == Dtype::kFp32 && t.grad_dtype != Dtype::kFp32)
    return fail(f.field_path("grad_dtype"),
                fmt::format("must be \"fp32\" when precision is \"fp32\", got \"{}\"", grad));
  if (t.fp8_training() && grad == "fp16")
    return fail(f.field_path("grad_dtype"), "must be \"fp32\" or \"bf16\" under fp8 training (bf16 outside the GEMMs)");
  if (t.grad_dtype != Dtype::kFp32 && t.grad_dtype != t.precision)
    return fail(f.field_path("grad_dtype"),
                fmt::format("must be \"fp32\" or the training precision \"{}\", got \"{}\"",
                            precision, grad));
  return t;
}

Json training_to_json(const TrainingSpec& t) {
  Json j{{"global_batch_size", t.global_batch_size},
         {"seq_length", t.seq_length},
         {"precision", t.fp8_training() ? "fp8" : to_string(t.precision)},
         {"grad_dtype", to_string(t.grad_dtype)},
         {"optimizer", to_string(t.optimizer)},
         {"flash_attention", t.flash_attention},
         {"dropout", t.dropout},
         {"compile", t.compile}};
  if (t.compile && t.compile_loss) j["compile_loss"] = *t.compile_loss;
  if (t.fp8_training()) j["fp8_recipe"] = to_string(t.fp8);
  if (t.fp8_param_gather) j["fp8_param_gather"] = true;
  if (t.moe_load_imbalance != 1.0) j["moe_load_imbalance"] = t.moe_load_imbalance;
  if (t.moe_capacity_factor > 0) j["moe_capacity_factor"] = t.moe_capacity_factor;
  if (t.moe_pad_to_capacity) j["moe_pad_to_capacity"] = true;
  if (t.moe_dispatcher != MoeDispatcher::kAllToAll) j["moe_token_dispatcher"] = to_string(t.moe_dispatcher);
  if (t.moe_router_fp32) j["moe_router_dtype"] = "fp32";
  if (t.mtp_layers > 0) j["mtp_layers"] = t.mtp_layers;
  if (t.recompute_modules != kRecomputeCoreAttn) j["recompute_modules"] = recompute_module_names(t.recompute_modules);
  if (t.cross_entropy_fusion != CrossEntropyFusion::kNone) j["cross_entropy_fusion"] = to_string(t.cross_entropy_fusion);
  return j;
}

double TrainingSpec::moe_load_factor() const {
  if (moe_capacity_factor <= 0) return moe_load_imbalance;
  return moe_pad_to_capacity ? moe_capacity_factor : std::min(moe_load_imbalance, moe_capacity_factor);
}

Result<TrainingSpec> load_training(const std::string& path) {
  return load_json_as(path, "training", training_from_json);
}

int dtype_bytes(Dtype d) { return d == Dtype::kFp32 ? 4 : d == Dtype::kFp8 ? 1 : 2; }

const char* to_string(Dtype d) {
  switch (d) {
    case Dtype::kFp32: return "fp32";
    case Dtype::kFp16: return "fp16";
    case Dtype::kBf16: return "bf16";
    case Dtype::kFp8: return "fp8";
  }
  return "?";
}

const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::kNone: return "none";
    case Fp8Recipe::kTensorwise: return "tensorwise";
    case Fp8Recipe::kDelayed: return "delayed";
    case Fp8Recipe::kBlockwise: return "blockwise";
    case Fp8Recipe::kMxfp8: return "mxfp8";
    case Fp8Recipe::kRowwise: return "rowwise";
  }
  return "?";
}

const char* to_string(MoeDispatcher d) { return d == MoeDispatcher::kAllGather ? "allgather" : "alltoall"; }
const char* to_string(CrossEntropyFusion f) {
  return f == CrossEntropyFusion::kTe ? "te" : f == CrossEntropyFusion::kNative ? "native" : "none";
}

std::vector<std::string> recompute_module_names(uint32_t mask) {
  std::vector<std::string> out;
  for (size_t i = 0; i < std::size(kRecomputeModules); ++i)
    if (mask & (1u << i)) out.emplace_back(kRecomputeModules[i]);
  return out;
}

uint32_t recompute_module_bit(std::string_view name) {
  for (size_t i = 0; i < std::size(kRecomputeModules); ++i)
    if (kRecomputeModules[i] == name) return 1u << i;
  return 0;
}

std::string precision_name(const TrainingSpec& t) {
  return t.fp8_training() ? fmt::format("fp8 ({})", to_string(t.fp8)) : std::string(to_string(t.precision));
}

const char* to_string(Optimizer o) { return o == Optimizer::kAdamW ? "adamw" : "sgd"; }

}  // namespace mist::spec
