#include "export/deepspeed.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "export/common.hpp"
#include "export/splits.hpp"

namespace mist::engines {

namespace {

using detail::add;

// Megatron-DeepSpeed @ f4157bea megatron/arguments.py; --deepspeed and --deepspeed_config come
// from DeepSpeed @ 38327e07 deepspeed/__init__.py (add_config_arguments).
constexpr std::array<FlagSpec, 41> kFlags{{
    {"--deepspeed", false},
    {"--deepspeed_config", true},
    {"--tensor-model-parallel-size", true},
    {"--pipeline-model-parallel-size", true},
    {"--no-pipeline-parallel", false},
    {"--num-layers-per-virtual-pipeline-stage", true},
    {"--sequence-parallel", false},
    {"--ds-sequence-parallel-size", true},
    {"--use-flash-attn-v2", false},
    {"--use-flash-attn", false},
    {"--use-flash-attn-v1", false},
    {"--use-flash-attn-triton", false},
    {"--use-flash-attn-builder", false},
    {"--micro-batch-size", true},
    {"--global-batch-size", true},
    {"--seq-length", true},
    {"--zero-stage", true},
    {"--recompute-granularity", true},
    {"--recompute-method", true},
    {"--recompute-num-layers", true},
    {"--recompute-activations", false},
    {"--checkpoint-activations", false},
    {"--checkpoint-num-layers", true},
    {"--deepspeed-activation-checkpointing", false},
    {"--cpu-optimizer", false},
    {"--bf16", false},
    {"--fp16", false},
    {"--optimizer", true},
    {"--hidden-dropout", true},
    {"--attention-dropout", true},
    {"--num-layers", true},
    {"--hidden-size", true},
    {"--ffn-hidden-size", true},
    {"--num-attention-heads", true},
    {"--num-key-value-heads", true},
    {"--max-position-embeddings", true},
    {"--normalization", true},
    {"--swiglu", false},
    {"--use-rotary-position-embeddings", false},
    {"--untie-embeddings-and-output-weights", false},
    {"--disable-bias-linear", false},
}};

// DeepSpeed @ 38327e07: runtime/constants.py, runtime/zero/config.py, runtime/zero/offload_config.py.
constexpr std::array<std::string_view, 16> kKeys{
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "bf16.enabled",
    "bfloat16.enabled",
    "fp16.enabled",
    "optimizer.type",
    "zero_optimization.stage",
    "zero_optimization.overlap_comm",
    "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_optimizer.ratio",
    "zero_optimization.offload_param.device",
    "zero_optimization.offload_param.pin_memory",
    "zero_optimization.cpu_offload",
    "activation_checkpointing.cpu_checkpointing",
};

constexpr int64_t kMaxCount = int64_t{1} << 40;

// Megatron-DeepSpeed's switches to flash attention (arguments.py:927-935; --use-flash-attn is -v1).
constexpr std::array<std::string_view, 5> kFlashFlags{"--use-flash-attn-v2", "--use-flash-attn", "--use-flash-attn-v1",
                                                      "--use-flash-attn-triton", "--use-flash-attn-builder"};

// "auto" is what Hugging Face's Trainer fills in; read as not given.
bool is_auto(const JsonFields& f, std::string_view key, std::vector<std::string>& notes) {
  if (!f.has(key) || !f.raw(key).is_string() || f.raw(key) != "auto") return false;
  notes.push_back(f.field_path(key) + ": \"auto\" (filled in by the Hugging Face Trainer) read as not given");
  return true;
}

Result<std::optional<int64_t>> int_key(const JsonFields& f, std::string_view key, std::vector<std::string>& notes) {
  if (!f.has(key) || is_auto(f, key, notes)) return std::optional<int64_t>{};
  MIST_TRY(int64_t v, f.integer(key, 1, int64_t{1} << 50));
  return std::optional<int64_t>{v};
}

Result<bool> section_enabled(const JsonFields& f, std::string_view section, std::vector<std::string>& notes) {
  if (!f.has(section)) return false;
  MIST_TRY(auto s, JsonFields::of(f.raw(section), f.field_path(section)));
  if (!s.has("enabled") || is_auto(s, "enabled", notes)) return false;
  return s.boolean("enabled");
}

// Offload device of a zero_optimization subsection: true when offloaded (cpu or nvme).
Result<bool> offloaded(const JsonFields& zero, std::string_view section, std::vector<std::string>& notes) {
  if (!zero.has(section) || zero.raw(section).is_null()) return false;
  MIST_TRY(auto s, JsonFields::of(zero.raw(section), zero.field_path(section)));
  MIST_TRY(std::string device, s.choice_or("device", "none", {"none", "cpu", "nvme"}));
  if (device == "nvme") notes.push_back(s.field_path("device") + ": NVMe offload read as host offload");
  return device != "none";
}

void add_model_options(std::vector<Option>& o, const spec::ModelSpec& m, const spec::TrainingSpec& t) {
  add(o, "--num-layers", m.num_layers);
  add(o, "--hidden-size", m.hidden_size);
  add(o, "--ffn-hidden-size", m.ffn_hidden_size);
  add(o, "--num-attention-heads", m.num_heads);
  if (m.num_kv_heads != m.num_heads) add(o, "--num-key-value-heads", m.num_kv_heads);
  add(o, "--max-position-embeddings", detail::position_embeddings(m, t));
  if (m.norm == spec::Norm::kRmsNorm) add(o, "--normalization", std::string("rmsnorm"));
  if (m.mlp == spec::Mlp::kSwiGlu) add(o, "--swiglu");
  if (m.positions == spec::Positions::kRotary) add(o, "--use-rotary-position-embeddings");
  if (!m.tie_word_embeddings) add(o, "--untie-embeddings-and-output-weights");
  if (!m.linear_bias) add(o, "--disable-bias-linear");
}

// validate_args (megatron/arguments.py:386-407 at the commit) turns sequence parallelism off at
// tp = 1 and raises on CUDA without CUDA_DEVICE_MAX_CONNECTIONS=1 when it is on.
bool needs_single_connection(const plan::Plan& p) { return p.sequence_parallel && p.tp > 1; }

// --ds-sequence-parallel-size `sp` (DeepSpeed-Ulysses) against what Megatron-DeepSpeed runs with it:
// tp = pp = 1 (initialize_model_parallel asserts it, megatron/core/parallel_state.py:146), the
// plain model (GPTModelPipe's get_batch_pipe does not split the sequence over the SP ranks), as
// many key/value heads as heads and sp dividing them (ParallelAttention, megatron/model/
// transformer.py:618, :729), sp dividing the GPUs left (`dp_sp`).
Result<void> check_ulysses(const spec::ModelSpec& m, int64_t tp, int64_t pp, bool pipe, int64_t sp, int64_t dp_sp) {
  if (sp == 1) return {};
  const std::string_view flag = "--ds-sequence-parallel-size";
  if (tp > 1 || pp > 1)
    return fail(std::string(flag), fmt::format("{} with tensor × pipeline parallel size {}·{}: Megatron-DeepSpeed "
                                               "runs DeepSpeed-Ulysses without either (initialize_model_parallel "
                                               "asserts tp = pp = 1)", sp, tp, pp));
  if (pipe)
    return fail(std::string(flag), "needs --no-pipeline-parallel: the pipeline model's batches (get_batch_pipe) are "
                                   "not split over the sequence-parallel ranks");
  if (m.num_kv_heads != m.num_heads)
    return fail(std::string(flag), fmt::format("model {} has {} key/value heads for {} heads: Megatron-DeepSpeed's "
                                               "Ulysses attention asserts as many of each", m.name, m.num_kv_heads,
                                               m.num_heads));
  if (m.num_heads % sp != 0)
    return fail(std::string(flag), fmt::format("{} does not divide model {}'s {} heads (Megatron-DeepSpeed asserts "
                                               "num_attention_heads % sp == 0: each rank attends with heads / sp)",
                                               sp, m.name, m.num_heads));
  if (dp_sp % sp != 0)
    return fail(std::string(flag), fmt::format("{} does not divide the {} GPUs left by tensor and pipeline parallelism",
                                               sp, dp_sp));
  return {};
}

}  // namespace

std::span<const FlagSpec> megatron_deepspeed_flag_specs() { return kFlags; }

std::vector<EnvVar> megatron_deepspeed_environment(const plan::Plan& p) {
  if (needs_single_connection(p)) return {detail::single_device_connection()};
  return {};
}
std::span<const std::string_view> deepspeed_config_keys() { return kKeys; }

Json deepspeed_config(const spec::TrainingSpec& t, const plan::Plan& p) {
  Json cfg{{"train_batch_size", p.micro_batch_size * p.dp * p.grad_accum_steps},
           {"train_micro_batch_size_per_gpu", p.micro_batch_size},
           {"gradient_accumulation_steps", p.grad_accum_steps}};
  if (t.precision == spec::Dtype::kBf16) cfg["bf16"] = {{"enabled", true}};
  if (t.precision == spec::Dtype::kFp16) cfg["fp16"] = {{"enabled", true}};
  const auto& s0 = p.stages.front();
  Json zero{{"stage", s0.zero}};
  if (s0.zero >= 2) zero["overlap_comm"] = p.overlap_grad_reduce;
  if (s0.offload.optimizer_states > 0) {
    Json off{{"device", "cpu"}, {"pin_memory", true}};
    if (s0.offload.optimizer_states < 1) off["ratio"] = s0.offload.optimizer_states;
    zero["offload_optimizer"] = off;
  }
  if (s0.offload.weights > 0) zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  cfg["zero_optimization"] = zero;
  return cfg;
}

std::vector<Option> megatron_deepspeed_options(const spec::ModelSpec& m, const spec::TrainingSpec& t,
                                               const plan::Plan& p, const std::string& config_path) {
  std::vector<Option> o;
  add(o, "--deepspeed");
  add(o, "--deepspeed_config", config_path);
  add(o, "--tensor-model-parallel-size", p.tp);
  add(o, "--pipeline-model-parallel-size", p.pp);
  if (p.pp == 1) add(o, "--no-pipeline-parallel");  // the plain model: ZeRO-2/3 and block recompute work
  if (p.sequence_parallel) add(o, "--sequence-parallel");
  if (p.cp > 1) {
    // DeepSpeed-Ulysses (cp_comm a2a, tp = pp = 1: capability.cpp ulysses_rules) over flash
    // attention, which mist's context parallelism assumes (plan::check_cp); without a flash flag
    // Megatron-DeepSpeed runs its CoreAttention, the s×s scores in memory.
    add(o, "--ds-sequence-parallel-size", p.cp);
    add(o, "--use-flash-attn-v2");
  }
  add(o, "--micro-batch-size", p.micro_batch_size);
  add(o, "--global-batch-size", p.micro_batch_size * p.dp * p.grad_accum_steps);
  add(o, "--seq-length", t.seq_length);
  add(o, "--zero-stage", static_cast<int64_t>(p.stages.front().zero));
  const int64_t ckpt = p.stages.front().ckpt_layers;
  if (p.recompute == plan::Recompute::kSelective) {
    add(o, "--recompute-granularity", std::string("selective"));
  } else if (ckpt > 0 && p.pp == 1) {
    add(o, "--recompute-granularity", std::string("full"));
    add(o, "--recompute-method", std::string("block"));
    add(o, "--recompute-num-layers", ckpt);
  } else if (ckpt > 0) {
    // The pipeline checkpoints every `interval` layers (gpt_model.py GPTModelPipe).
    add(o, "--checkpoint-activations");
    add(o, "--checkpoint-num-layers", int64_t{1});
    add(o, "--deepspeed-activation-checkpointing");
  }
  // ZeRO-Offload runs the step on the host: DeepSpeed raises ZeRORuntimeException for any client
  // optimizer but its CPU Adam while zero_force_ds_cpu_optimizer is true, its default
  // (runtime/engine.py:1369-1372); --cpu-optimizer makes Megatron-DeepSpeed build DeepSpeedCPUAdam
  // (megatron/optimizer/__init__.py:83).
  if (p.stages.front().offload.optimizer_states > 0) add(o, "--cpu-optimizer");
  detail::add_training_flags(o, t);
  add_model_options(o, m, t);
  return o;
}

std::vector<std::string> deepspeed_notes(const spec::ModelSpec& m, const spec::TrainingSpec& t, const plan::Plan& p) {
  std::vector<std::string> notes{fmt::format(
      "the JSON alone runs data parallelism and ZeRO; tensor{} pipeline parallelism and recompute come "
      "from the model code: the Megatron-DeepSpeed flags give them", p.cp > 1 ? ", sequence and" : " and")};
  if (needs_single_connection(p))
    notes.push_back(detail::single_device_connection_note(
        "Megatron-DeepSpeed raises without it when sequence parallelism is on"));
  if (auto n = detail::position_embeddings_note(m, t)) notes.push_back(*n);
  if (p.cp > 1)
    notes.push_back(fmt::format(
        "--ds-sequence-parallel-size {}: DeepSpeed-Ulysses (deepspeed/sequence/layer.py DistributedAttention), q, k, "
        "v and the output moved between sequence- and head-sharded by all-to-alls, each rank attending over the "
        "whole sequence with {} of the {} heads; gradients are reduced, and ZeRO shards, over the dp·sp = {} ranks "
        "(the sequence-data-parallel group); train_batch_size counts the dp = {} data-parallel ranks only",
        p.cp, m.num_heads / p.cp, m.num_heads, plan::grad_dp(p), p.dp));
  if (p.pp > 1) {
    std::vector<std::string> layers;
    for (const auto& s : p.stages) layers.push_back(std::to_string(s.num_layers));
    notes.push_back(fmt::format("blocks per stage {}: DeepSpeed's PipelineModule partitions them with "
                                "partition_method 'type:transformer', which Megatron-DeepSpeed's GPTModelPipe "
                                "sets (megatron/model/gpt_model.py); no flag or config key chooses another",
                                fmt::join(layers, ", ")));
  }
  if (m.qkv_bias && !m.linear_bias)
    notes.push_back("model.qkv_bias: Megatron-DeepSpeed has no QKV-only bias; the flags give the other shapes");
  if (m.parallel_block)
    notes.push_back("model.parallel_block: Megatron-DeepSpeed's GPT model has no parallel attention/MLP block");
  // DeepSpeed keeps fp16 gradients under fp16 (communication_data_type defaults to the model's dtype,
  // engine.py; the fp16 optimizer accumulates in the parameters' .grad) and accumulates bf16 ones in
  // fp32 (data_types.grad_accum_dtype).
  const spec::Dtype ds_grads = t.precision == spec::Dtype::kFp16 ? spec::Dtype::kFp16 : spec::Dtype::kFp32;
  if (t.grad_dtype != ds_grads)
    notes.push_back(fmt::format("training.grad_dtype {}: DeepSpeed's default under {} is {}; set "
                                "data_types.grad_accum_dtype and communication_data_type to {} in the config",
                                spec::to_string(t.grad_dtype), spec::to_string(t.precision), spec::to_string(ds_grads),
                                spec::to_string(t.grad_dtype)));
  return notes;
}

Result<ImportedJob> import_deepspeed(const Json& config, std::string_view text, const spec::ModelSpec& m,
                                     const spec::ClusterSpec& c, const std::string& what) {
  MIST_TRY(Flags f, Flags::parse(text, kFlags, "--megatron-flags"));
  const bool with_flags = !text.empty() && text.find_first_not_of(" \t\n") != std::string_view::npos;
  ImportedJob out;
  plan::Plan& p = out.plan;
  const int64_t layers = m.num_layers;
  MIST_CHECK(detail::check_model_flag(f, "--num-layers", m.num_layers, m, "layers"));
  MIST_CHECK(detail::check_model_flag(f, "--hidden-size", m.hidden_size, m, "hidden units"));
  MIST_CHECK(detail::check_model_flag(f, "--num-attention-heads", m.num_heads, m, "attention heads"));
  MIST_CHECK(detail::check_model_flag(f, "--ffn-hidden-size", m.ffn_hidden_size, m, "FFN units"));
  MIST_CHECK(detail::check_model_flag(f, "--num-key-value-heads", m.num_kv_heads, m, "key/value heads"));

  MIST_TRY(auto tp, f.integer("--tensor-model-parallel-size", 1, 1024));
  MIST_TRY(auto pp, f.integer("--pipeline-model-parallel-size", 1, 100000));
  MIST_TRY(auto sp, f.integer("--ds-sequence-parallel-size", 1, 1024));
  p.tp = tp.value_or(1);
  p.pp = pp.value_or(1);
  const bool pipe = with_flags && !f.has("--no-pipeline-parallel");  // GPTModelPipe on DeepSpeed's engine
  if (f.has("--no-pipeline-parallel") && p.pp > 1)
    return fail("--no-pipeline-parallel", "needs --pipeline-model-parallel-size 1");
  if (f.has("--num-layers-per-virtual-pipeline-stage") && pipe)
    return fail("--num-layers-per-virtual-pipeline-stage", "DeepSpeed's pipeline engine has no interleaved schedule");
  MIST_TRY(const int64_t dp_sp, detail::data_parallel(p.tp, p.pp, c, "--tensor-model-parallel-size",
                                                      "--pipeline-model-parallel-size"));
  MIST_CHECK(check_ulysses(m, p.tp, p.pp, pipe, sp.value_or(1), dp_sp));
  p.cp = sp.value_or(1);
  if (p.cp > 1) p.cp_comm = plan::CpComm::kAllToAll;
  p.dp = dp_sp / p.cp;
  p.sequence_parallel = f.has("--sequence-parallel");

  // Batch: DeepSpeed derives the third of batch = micro batch × accumulation × dp from two.
  MIST_TRY(auto root, JsonFields::of(config, what));
  MIST_TRY(auto batch, int_key(root, "train_batch_size", out.notes));
  MIST_TRY(auto micro, int_key(root, "train_micro_batch_size_per_gpu", out.notes));
  MIST_TRY(auto accum, int_key(root, "gradient_accumulation_steps", out.notes));
  MIST_TRY(auto flag_micro, f.integer("--micro-batch-size", 1, 1'000'000'000));
  MIST_TRY(auto flag_batch, f.integer("--global-batch-size", 1, int64_t{1} << 50));
  if (micro && flag_micro && *micro != *flag_micro)
    return fail("--micro-batch-size", fmt::format("is {} but {} is {}", *flag_micro,
                                                  root.field_path("train_micro_batch_size_per_gpu"), *micro));
  if (batch && flag_batch && *batch != *flag_batch)
    return fail("--global-batch-size", fmt::format("is {} but {} is {}", *flag_batch, root.field_path("train_batch_size"),
                                                   *batch));
  if (!micro) micro = flag_micro;
  if (!batch) batch = flag_batch;
  const std::string batch_key = root.field_path("train_batch_size");
  if (micro && accum) {
    MIST_TRY(int64_t given, detail::product(*micro, *accum, batch_key));
    MIST_CHECK(detail::product(given, p.dp, batch_key));
  }
  if (batch && micro && accum) {
    if (*batch != *micro * *accum * p.dp)
      return fail(batch_key, fmt::format("is {} but micro batch × accumulation × dp = {}·{}·{} = {}", *batch, *micro,
                                         *accum, p.dp, *micro * *accum * p.dp));
  } else if (batch && micro) {
    MIST_TRY(accum, detail::grad_accum(*batch, *micro, p.dp, batch_key));
  } else if (batch && accum) {
    MIST_TRY(int64_t per_micro, detail::product(*accum, p.dp, batch_key));
    if (*batch % per_micro != 0)
      return fail(batch_key, fmt::format("is not a multiple of accumulation × dp = {}", *accum * p.dp));
    micro = *batch / (*accum * p.dp);
  } else if (micro) {
    accum = accum.value_or(1);
  } else if (batch) {
    accum = 1;
    MIST_TRY(auto one, detail::grad_accum(*batch, 1, p.dp, batch_key));
    micro = one;
  } else {
    return fail(batch_key, "give train_batch_size or train_micro_batch_size_per_gpu");
  }
  p.micro_batch_size = *micro;
  p.grad_accum_steps = *accum;
  MIST_TRY(int64_t per_rank, detail::product(*micro, *accum, batch_key));
  MIST_TRY(out.training.global_batch_size, detail::product(per_rank, p.dp, batch_key));
  MIST_TRY(out.training.seq_length, f.integer("--seq-length", 1, int64_t{1} << 30));

  // Precision and optimizer.
  MIST_TRY(bool bf16, section_enabled(root, "bf16", out.notes));
  MIST_TRY(bool bf16_old, section_enabled(root, "bfloat16", out.notes));
  MIST_TRY(bool fp16, section_enabled(root, "fp16", out.notes));
  if ((bf16 || bf16_old) && fp16) return fail(root.field_path("fp16"), "cannot be enabled together with bf16");
  out.training.precision = fp16 ? spec::Dtype::kFp16 : bf16 || bf16_old ? spec::Dtype::kBf16 : spec::Dtype::kFp32;
  if (with_flags) {
    MIST_TRY(auto flag_precision, detail::precision_switches(f));
    if (flag_precision != out.training.precision)
      return fail(f.has("--fp16") ? "--fp16" : f.has("--bf16") ? "--bf16" : root.field_path("bf16"),
                  "the flags and the config give different precisions");
    MIST_TRY(out.training.dropout, detail::dropout_flags(f));
  }
  if (root.has("optimizer")) {
    MIST_TRY(auto opt, JsonFields::of(root.raw("optimizer"), root.field_path("optimizer")));
    MIST_TRY(std::string type, opt.string("type"));
    std::string lower;
    for (char ch : type) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower.find("adam") != std::string::npos) out.training.optimizer = spec::Optimizer::kAdamW;
    else if (lower == "sgd") out.training.optimizer = spec::Optimizer::kSgd;
    else out.notes.push_back(opt.field_path("type") + ": mist models Adam and SGD only");
  } else if (with_flags) {
    MIST_TRY(auto opt, f.choice("--optimizer", {"adam", "sgd"}));
    out.training.optimizer = opt == "sgd" ? spec::Optimizer::kSgd : spec::Optimizer::kAdamW;
  }

  // ZeRO and offload (zero/config.py validators).
  int zero = 0;
  bool overlap_comm = false;
  double optimizer_offload = 0, weight_offload = 0;
  if (root.has("zero_optimization")) {
    MIST_TRY(auto z, JsonFields::of(root.raw("zero_optimization"), root.field_path("zero_optimization")));
    MIST_TRY(int64_t stage, z.integer_or("stage", 0, 0, 3));
    zero = static_cast<int>(stage);
    MIST_TRY(overlap_comm, z.boolean_or("overlap_comm", zero == 3));  // zero/config.py's default
    MIST_TRY(bool opt_off, offloaded(z, "offload_optimizer", out.notes));
    MIST_TRY(bool legacy, z.boolean_or("cpu_offload", false));
    if (opt_off) {
      MIST_TRY(auto o, JsonFields::of(z.raw("offload_optimizer"), z.field_path("offload_optimizer")));
      MIST_TRY(optimizer_offload, o.number_or("ratio", 1.0, 0, 1));
      if (optimizer_offload < 1 && zero != 3)
        return fail(o.field_path("ratio"), "a ratio below 1 needs stage 3 (DeepSpeed asserts it)");
    } else if (legacy) {
      optimizer_offload = 1;
    }
    MIST_TRY(bool param_off, offloaded(z, "offload_param", out.notes));
    if (param_off) {
      if (zero != 3) return fail(z.field_path("offload_param"), "is valid with stage 3 only");
      weight_offload = 1;
    }
    if (optimizer_offload > 0 && zero == 0)
      return fail(z.field_path("offload_optimizer"), "is valid with stages 1, 2 and 3 only");
  }
  MIST_TRY(auto flag_zero, f.integer("--zero-stage", 0, 3));
  if (flag_zero && *flag_zero != zero)
    return fail("--zero-stage", fmt::format("is {} but {}.zero_optimization.stage is {}", *flag_zero, what, zero));
  if (pipe && zero >= 2)
    return fail(what + ".zero_optimization.stage", "DeepSpeed's pipeline engine runs ZeRO 0 or 1 only; give "
                                                   "--no-pipeline-parallel with one stage");

  // Split: DeepSpeed partitions the blocks itself.
  std::vector<int64_t> split{layers};
  if (p.pp > 1) {
    split = deepspeed_pipe_layers(layers, p.pp, out.training.precision != spec::Dtype::kFp32);
    if (split.empty())
      return fail("--pipeline-model-parallel-size", fmt::format("leaves a stage without layers ({} layers)", layers));
  }
  p.stages = detail::plan_with_stages(split).stages;
  // Below ZeRO-2 gradients are reduced after backward; under ZeRO-3 parameters are prefetched.
  p.overlap_grad_reduce = zero >= 2 && overlap_comm;
  p.overlap_param_gather = zero == 3;
  for (auto& s : p.stages) {
    s.zero = zero;
    s.offload.weights = weight_offload;
    s.offload.optimizer_states = optimizer_offload;
  }

  // Recompute.
  MIST_TRY(auto granularity, f.choice("--recompute-granularity", {"full", "selective"}));
  if (f.has("--recompute-activations")) granularity = "selective";
  MIST_TRY(auto method, f.choice("--recompute-method", {"uniform", "block"}));
  MIST_TRY(auto count, f.integer("--recompute-num-layers", 1, kMaxCount));
  MIST_TRY(auto interval, f.integer("--checkpoint-num-layers", 1, kMaxCount));
  const bool every = f.has("--checkpoint-activations") || (granularity == "full" && method == "uniform");
  if (granularity == "selective") {
    if (f.has("--checkpoint-activations"))
      return fail("--checkpoint-activations", "mist recomputes selectively or fully, not both");
    p.recompute = plan::Recompute::kSelective;
  } else if (every) {
    for (auto& s : p.stages) s.ckpt_layers = s.num_layers;
    if (interval.value_or(1) > 1 || count.value_or(1) > 1)
      out.notes.push_back("recompute in units of several layers: every block recomputes; mist keeps one input per block");
  } else if (granularity == "full") {
    if (!method) return fail("--recompute-method", "full recompute needs --recompute-method block or uniform");
    if (pipe) out.notes.push_back("--recompute-method block: Megatron-DeepSpeed's pipeline ignores it; no recompute");
    else if (!count) return fail("--recompute-num-layers", "full recompute needs --recompute-num-layers");
    else p.stages[0].ckpt_layers = std::min(*count, layers);
  }
  if (root.has("activation_checkpointing")) {
    MIST_TRY(auto ac, JsonFields::of(root.raw("activation_checkpointing"), root.field_path("activation_checkpointing")));
    MIST_TRY(bool cpu, ac.boolean_or("cpu_checkpointing", false));
    if (cpu) out.notes.push_back(ac.field_path("cpu_checkpointing") + ": offloaded checkpoint inputs are not modelled");
  }
  if (with_flags && optimizer_offload > 0 && !f.has("--cpu-optimizer"))
    out.notes.push_back(what + ".zero_optimization.offload_optimizer without --cpu-optimizer: DeepSpeed refuses "
                        "Megatron-DeepSpeed's GPU Adam under ZeRO-Offload (ZeRORuntimeException, "
                        "zero_force_ds_cpu_optimizer); read as offloaded");
  const bool flash = std::any_of(kFlashFlags.begin(), kFlashFlags.end(), [&](auto flag) { return f.has(flag); });
  if (p.cp > 1 && !flash)
    out.notes.push_back("--ds-sequence-parallel-size without --use-flash-attn-v2 (or -v1, -triton, -builder): "
                        "Megatron-DeepSpeed then attends with CoreAttention, the s×s scores in memory; mist's context "
                        "parallelism is modelled on flash attention (training.flash_attention)");
  if (!with_flags)
    out.notes.push_back("without Megatron-DeepSpeed flags: data parallelism only; recompute is the model code's "
                        "choice and is taken as none");
  if (auto note = detail::ignored_note(f)) out.notes.push_back(*note);
  p.grad_accumulation_fusion = p.grad_accum_steps == 1;  // its engine adds micro-batch gradients separately
  p.async_tp_backward = false;                           // Megatron-DeepSpeed turns it off under --deepspeed
  p = canonical(p);
  return out;
}

Result<ImportedJob> import_deepspeed_file(const std::string& path, std::string_view megatron_flags,
                                          const spec::ModelSpec& m, const spec::ClusterSpec& c) {
  MIST_TRY(Json j, read_json_file(path));
  auto r = import_deepspeed(j, megatron_flags, m, c);
  if (!r && !r.error().path.starts_with("--")) r.error().message += " (in " + path + ")";
  return r;
}

}  // namespace mist::engines
