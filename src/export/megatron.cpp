#include "export/megatron.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "export/common.hpp"
#include "export/splits.hpp"

namespace mist::engines {

namespace {

const char* megatron_cp_comm(plan::CpComm c) {
  return c == plan::CpComm::kAllToAll    ? "a2a"
         : c == plan::CpComm::kAllGather ? "all_gather"
         : c == plan::CpComm::kA2aP2p    ? "a2a+p2p"
                                         : "p2p";
}

using detail::add;

// Names read from NVIDIA/Megatron-LM @ d98e8a64: megatron/training/arguments.py and the dataclass
// fields it turns into flags (TransformerConfig, ModelParallelConfig, TrainingConfig,
// CheckpointConfig, DistributedInitConfig, TokenizerConfig) through argument_utils.py.
constexpr std::array<FlagSpec, 90> kFlags{{
    {"--tensor-model-parallel-size", true},
    {"--pipeline-model-parallel-size", true},
    {"--context-parallel-size", true},
    {"--cp-comm-type", true, true},
    {"--hierarchical-context-parallel-sizes", true, true},
    {"--expert-model-parallel-size", true},
    {"--sequence-parallel", false},
    {"--num-layers-per-virtual-pipeline-stage", true},
    {"--num-virtual-stages-per-pipeline-rank", true},
    {"--decoder-first-pipeline-num-layers", true},
    {"--decoder-last-pipeline-num-layers", true},
    {"--pipeline-model-parallel-layout", true},
    {"--account-for-embedding-in-pipeline-split", false},
    {"--account-for-loss-in-pipeline-split", false},
    {"--cross-entropy-loss-fusion", false},
    {"--cross-entropy-fusion-impl", true},
    {"--micro-batch-size", true},
    {"--global-batch-size", true},
    {"--seq-length", true},
    {"--recompute-granularity", true},
    {"--recompute-method", true},
    {"--recompute-num-layers", true},
    {"--recompute-activations", false},
    {"--recompute-modules", true, true},
    {"--use-distributed-optimizer", false},
    {"--overlap-grad-reduce", false},
    {"--overlap-param-gather", false},
    {"--tp-comm-overlap", false},
    {"--no-gradient-accumulation-fusion", false},
    {"--use-megatron-fsdp", false},
    {"--use-torch-fsdp2", false},
    {"--data-parallel-sharding-strategy", true},
    {"--ckpt-format", true},
    {"--optimizer-cpu-offload", false},
    {"--use-precision-aware-optimizer", false},
    {"--optimizer-offload-fraction", true},
    {"--cpu-offloading-num-layers", true},
    {"--bf16", false},
    {"--fp16", false},
    {"--accumulate-allreduce-grads-in-fp32", false},  // arguments.py:3069 (fp16: otherwise fp16 gradients)
    {"--grad-reduce-in-bf16", false},                 // arguments.py:3053 (bf16: otherwise fp32 gradients)
    {"--fp8-format", true},  // TransformerConfig.fp8 (transformer_config.py:587)
    {"--fp8-recipe", true},  // TransformerConfig.fp8_recipe, default delayed (:594)
    {"--fp8-param-gather", false},  // arguments.py:2016 (DistributedDataParallelConfig.fp8_param_gather)
    {"--optimizer", true},
    {"--hidden-dropout", true},
    {"--attention-dropout", true},
    {"--num-layers", true},
    {"--hidden-size", true},
    {"--ffn-hidden-size", true},
    {"--num-attention-heads", true},
    {"--group-query-attention", false},
    {"--num-query-groups", true},
    {"--max-position-embeddings", true},
    {"--normalization", true},
    {"--swiglu", false},
    {"--position-embedding-type", true},
    {"--untie-embeddings-and-output-weights", false},
    {"--disable-bias-linear", false},
    {"--add-qkv-bias", false},
    {"--num-experts", true},
    {"--moe-router-topk", true},
    {"--moe-ffn-hidden-size", true},
    {"--moe-grouped-gemm", false},
    {"--moe-permute-fusion", false},
    {"--moe-token-dispatcher-type", true},
    {"--moe-router-dtype", true},  // TransformerConfig.moe_router_dtype (transformer_config.py:811)
    {"--moe-expert-capacity-factor", true},  // TransformerConfig.moe_expert_capacity_factor (:917)
    {"--moe-pad-expert-input-to-capacity", false},  // TransformerConfig.moe_pad_expert_input_to_capacity (:921)
    {"--expert-tensor-parallel-size", true},
    {"--moe-shared-expert-intermediate-size", true},
    {"--moe-shared-expert-gate", false},
    {"--kv-channels", true},
    {"--qk-layernorm", false},
    // gpt-oss (Megatron-Bridge's gpt_oss_bridge.py provider at 067f987d): arguments.py:2384-2393
    // and TransformerConfig's softmax_type (:170), glu_linear_offset (:231), activation_func_clamp_value
    // (:235); --quick-geglu sets quick_gelu with a GLU (argument_utils.py:323).
    {"--window-size", true},
    {"--window-attn-skip-freq", true},
    {"--softmax-type", true},
    {"--quick-geglu", false},
    {"--glu-linear-offset", true},
    {"--activation-func-clamp-value", true},
    {"--moe-layer-freq", true},  // arguments.py:327 moe_freq_type
    // Multi-head latent attention: TransformerConfig.multi_latent_attention and arguments.py:3548-3557.
    {"--multi-latent-attention", false},
    {"--q-lora-rank", true},
    {"--kv-lora-rank", true},
    {"--qk-head-dim", true},
    {"--qk-pos-emb-head-dim", true},
    {"--v-head-dim", true},
    {"--mtp-num-layers", true},  // TransformerConfig.mtp_num_layers (transformer_config.py:68)
    // ModelParallelConfig.overlap_moe_expert_parallel_comm (:343) and delay_wgrad_compute (:348).
    {"--overlap-moe-expert-parallel-comm", false},
    {"--delay-wgrad-compute", false},
}};

constexpr int64_t kMaxCount = int64_t{1} << 40;

// The MoE layer graph/lower_moe.cpp models: every block MoE (--moe-layer-freq 1, the default)
// after the model's first dense blocks (a pattern "([0]*k+[1]*n)"), grouped-GEMM experts behind
// the training's token dispatcher (all-to-all or all-gather).
void add_moe_options(std::vector<Option>& o, const spec::ModelSpec& m, const spec::TrainingSpec& t) {
  add(o, "--num-experts", m.num_experts);
  if (m.first_dense_layers > 0)
    add(o, "--moe-layer-freq", fmt::format("([0]*{}+[1]*{})", m.first_dense_layers, m.moe_layers()));
  add(o, "--moe-router-topk", m.experts_per_token);
  add(o, "--moe-ffn-hidden-size", m.moe_ffn_hidden_size);
  add(o, "--moe-grouped-gemm");
  add(o, "--moe-token-dispatcher-type", std::string(spec::to_string(t.moe_dispatcher)));
  if (t.moe_router_fp32) add(o, "--moe-router-dtype", std::string("fp32"));
  if (m.shared_expert_ffn_hidden_size > 0)
    add(o, "--moe-shared-expert-intermediate-size", m.shared_expert_ffn_hidden_size);
  if (m.shared_expert_gate) add(o, "--moe-shared-expert-gate");
}

// --moe-layer-freq as moe_freq_type reads it: an integer N (block i is MoE when i % N == 0) or a
// list expression of 0s and 1s ("([0]*3+[1]*58)", "[1,1,0]*2"): terms joined by '+', each a list
// or a parenthesised expression, optionally repeated by '*n'. nullopt: not of that form.
std::optional<std::vector<int>> layer_pattern(std::string_view text, int64_t layers) {
  std::string t;
  for (char ch : text)
    if (ch != ' ' && ch != '"' && ch != '\'') t += ch;
  if (!t.empty() && t.find('[') == std::string::npos) {
    int64_t n = 0;
    for (char ch : t) {
      if (ch < '0' || ch > '9' || n > layers) return std::nullopt;
      n = n * 10 + (ch - '0');
    }
    if (n < 1) return std::nullopt;
    std::vector<int> out;
    for (int64_t i = 0; i < layers; ++i) out.push_back(i % n == 0 ? 1 : 0);
    return out;
  }
  size_t at = 0;
  auto integer = [&]() -> std::optional<int64_t> {
    int64_t n = 0;
    const size_t from = at;
    while (at < t.size() && t[at] >= '0' && t[at] <= '9' && n <= 1'000'000) n = n * 10 + (t[at++] - '0');
    return at > from ? std::optional<int64_t>(n) : std::nullopt;
  };
  std::function<std::optional<std::vector<int>>()> expr = [&]() -> std::optional<std::vector<int>> {
    std::vector<int> out;
    while (true) {
      std::vector<int> atom;
      if (at < t.size() && t[at] == '(') {
        ++at;
        auto inner = expr();
        if (!inner || at >= t.size() || t[at] != ')') return std::nullopt;
        ++at;
        atom = *inner;
      } else if (at < t.size() && t[at] == '[') {
        ++at;
        while (at < t.size() && t[at] != ']') {
          auto v = integer();
          if (!v || *v > 1) return std::nullopt;
          atom.push_back(static_cast<int>(*v));
          if (at < t.size() && t[at] == ',') ++at;
        }
        if (at >= t.size()) return std::nullopt;
        ++at;
      } else {
        return std::nullopt;
      }
      int64_t times = 1;
      if (at < t.size() && t[at] == '*') {
        ++at;
        auto n = integer();
        if (!n) return std::nullopt;
        times = *n;
      }
      if (static_cast<int64_t>(out.size() + atom.size() * times) > 4 * layers + 16) return std::nullopt;
      for (int64_t i = 0; i < times; ++i) out.insert(out.end(), atom.begin(), atom.end());
      if (at < t.size() && t[at] == '+') {
        ++at;
        continue;
      }
      return out;
    }
  };
  auto out = expr();
  if (!out || at != t.size()) return std::nullopt;
  return out;
}

Result<void> check_layer_freq(const Flags& f, const spec::ModelSpec& m) {
  const std::string text = f.string("--moe-layer-freq").value_or("1");
  std::vector<int> want;
  for (int64_t i = 0; i < m.num_layers; ++i) want.push_back(i < m.first_dense_layers ? 0 : 1);
  const auto got = layer_pattern(text, m.num_layers);
  if (!got)
    return fail("--moe-layer-freq", fmt::format("\"{}\" is neither an integer nor a list pattern such as "
                                                "\"([0]*3+[1]*58)\"", text));
  if (got->size() != want.size())
    return fail("--moe-layer-freq", fmt::format("\"{}\" gives {} blocks but model {} has {}", text, got->size(),
                                                m.name, m.num_layers));
  if (*got != want)
    return fail("--moe-layer-freq",
                fmt::format("\"{}\" is not model {}'s layout: {} dense block{} first, then {} MoE blocks{}", text,
                            m.name, m.first_dense_layers, m.first_dense_layers == 1 ? "" : "s", m.moe_layers(),
                            f.has("--moe-layer-freq") ? "" : " (the default is 1: every block MoE)"));
  return {};
}

// An import's MoE flags against the model: what Megatron-LM would build must be what mist plans.
Result<void> check_moe_flags(const Flags& f, const spec::ModelSpec& m) {
  MIST_TRY(auto experts, f.integer("--num-experts", 1, int64_t{1} << 20));
  if (!m.is_moe()) {
    if (experts) return fail("--num-experts", fmt::format("model {} is dense (no experts)", m.name));
    return {};
  }
  if (!experts)
    return fail("--num-experts", fmt::format("is missing: model {} is a mixture of {} experts, which "
                                             "Megatron-LM would build as a dense model", m.name, m.num_experts));
  MIST_CHECK(detail::check_model_flag(f, "--num-experts", m.num_experts, m, "experts"));
  MIST_CHECK(check_layer_freq(f, m));
  MIST_TRY(auto topk, f.integer("--moe-router-topk", 1, int64_t{1} << 20));
  if (topk.value_or(2) != m.experts_per_token)  // Megatron's default top-k is 2
    return fail("--moe-router-topk", fmt::format("is {}{} but model {} routes each token to {} experts",
                                                 topk.value_or(2), topk ? "" : " (the default)", m.name,
                                                 m.experts_per_token));
  // --moe-ffn-hidden-size defaults to --ffn-hidden-size (validate_args).
  const bool own = f.has("--moe-ffn-hidden-size");
  MIST_CHECK(detail::check_model_flag(f, own ? "--moe-ffn-hidden-size" : "--ffn-hidden-size",
                                      m.moe_ffn_hidden_size, m, "units per expert"));
  MIST_TRY(auto shared, f.integer("--moe-shared-expert-intermediate-size", 1, int64_t{1} << 40));
  if (shared.value_or(0) != m.shared_expert_ffn_hidden_size)
    return fail("--moe-shared-expert-intermediate-size",
                fmt::format("is {} but model {} has a shared expert of {} units (0: none)", shared.value_or(0),
                            m.name, m.shared_expert_ffn_hidden_size));
  if (f.has("--moe-shared-expert-gate") != m.shared_expert_gate)
    return fail("--moe-shared-expert-gate", fmt::format("model {} {} its shared expert", m.name,
                                                        m.shared_expert_gate ? "gates" : "does not gate"));
  if (!f.has("--moe-grouped-gemm"))
    return fail("--moe-grouped-gemm", "is missing: mist models the experts as grouped GEMMs (without the flag "
                                      "Megatron-LM runs them one after another, SequentialMLP)");
  if (auto d = f.string("--moe-token-dispatcher-type"); d && *d != "alltoall" && *d != "allgather")
    return fail("--moe-token-dispatcher-type",
                fmt::format("is \"{}\": mist models the alltoall and allgather dispatchers (flex's DeepEP and "
                            "HybridEP kernels are not modelled)", *d));
  return {};
}

// An import's latent-attention flags against the model (Megatron's defaults where absent:
// arguments.py:3548-3557).
Result<void> check_mla_flags(const Flags& f, const spec::ModelSpec& m) {
  if (f.has("--multi-latent-attention") != m.is_mla())
    return fail("--multi-latent-attention", fmt::format("model {} {} latent attention", m.name,
                                                        m.is_mla() ? "has" : "has no"));
  if (!m.is_mla()) return {};
  struct Dim {
    const char* flag;
    int64_t fallback, want;
  };
  for (const Dim& d : {Dim{"--q-lora-rank", 0, m.q_lora_rank}, Dim{"--kv-lora-rank", 32, m.kv_lora_rank},
                       Dim{"--qk-head-dim", 128, m.qk_nope_head_dim}, Dim{"--qk-pos-emb-head-dim", 64, m.qk_rope_head_dim},
                       Dim{"--v-head-dim", 128, m.v_head_dim}}) {
    MIST_TRY(auto v, f.integer(d.flag, 1, 1 << 20));
    if (v.value_or(d.fallback) != d.want)
      return fail(d.flag, fmt::format("is {}{} but model {} has {}", v.value_or(d.fallback), v ? "" : " (the default)",
                                      m.name, d.want));
  }
  if (!f.has("--qk-layernorm"))
    return fail("--qk-layernorm", fmt::format("is missing: model {} normalises its query and key/value latents", m.name));
  return {};
}

// An import's attention window, sinks and activation against the model (gpt-oss's flags; a
// model without them must not get them either).
Result<void> check_gpt_oss_flags(const Flags& f, const spec::ModelSpec& m) {
  const std::string window = m.windowed_layers() > 0 ? fmt::format("{},0", m.sliding_window - 1) : "";
  auto given = f.string("--window-size");
  std::string w = given.value_or("");
  std::erase_if(w, [](char ch) { return ch == '(' || ch == ')' || ch == ' '; });
  if (w != window)
    return fail("--window-size", window.empty()
                                     ? fmt::format("is \"{}\" but model {} attends over the whole sequence", w, m.name)
                                     : fmt::format("is {} but model {} attends within a window of {} (--window-size {})",
                                                   given ? "\"" + w + "\"" : "missing", m.name, m.sliding_window,
                                                   window));
  MIST_TRY(auto skip, f.integer("--window-attn-skip-freq", 1, int64_t{1} << 20));
  if (!window.empty() && skip.value_or(0) != m.full_attention_interval)
    return fail("--window-attn-skip-freq",
                fmt::format("is {} but model {} {}", skip ? std::to_string(*skip) : "missing", m.name,
                            m.full_attention_interval > 0
                                ? fmt::format("attends fully every {} blocks", m.full_attention_interval)
                                : std::string("windows every block")));
  const std::string softmax = f.string("--softmax-type").value_or("vanilla");
  if ((softmax == "learnable") != m.attention_sinks || (softmax != "vanilla" && softmax != "learnable"))
    return fail("--softmax-type", fmt::format("is \"{}\" but model {} {}", softmax, m.name,
                                              m.attention_sinks ? "has learned attention sinks (learnable)"
                                                                : "has a plain softmax (vanilla)"));
  if (f.has("--quick-geglu") != (m.swiglu_limit > 0))
    return fail("--quick-geglu", fmt::format("model {} {}", m.name,
                                             m.swiglu_limit > 0 ? "has gpt-oss's clamped GLU experts"
                                                                : "has no quick-GELU GLU"));
  if (m.swiglu_limit > 0) {
    MIST_TRY(auto offset, f.number("--glu-linear-offset", 0, 1e9));
    if (offset.value_or(0) != 1.0)
      return fail("--glu-linear-offset", fmt::format("is {} but model {} adds 1 to the GLU's linear half",
                                                     offset.value_or(0), m.name));
    MIST_TRY(auto clamp, f.number("--activation-func-clamp-value", 0, 1e9));
    if (clamp.value_or(0) != m.swiglu_limit)
      return fail("--activation-func-clamp-value",
                  fmt::format("is {} but model {} clamps at {}", clamp ? fmt::format("{}", *clamp) : "missing",
                              m.name, m.swiglu_limit));
  }
  return {};
}

// The dtype Megatron-LM keeps and reduces gradients in without either gradient flag
// (arguments.py at d98e8a64, validate_args): bf16 turns --accumulate-allreduce-grads-in-fp32 on
// unless --grad-reduce-in-bf16; fp16 leaves it off, so the main gradients are fp16.
spec::Dtype megatron_grad_dtype(spec::Dtype precision) {
  return precision == spec::Dtype::kFp16 ? spec::Dtype::kFp16 : spec::Dtype::kFp32;
}

void add_model_options(std::vector<Option>& o, const spec::ModelSpec& m, const spec::TrainingSpec& t) {
  add(o, "--num-layers", m.num_layers);
  add(o, "--hidden-size", m.hidden_size);
  // A mixture of experts without dense blocks: Megatron's recipes give the expert width for both;
  // with dense first blocks --ffn-hidden-size is theirs (TransformerConfig.ffn_hidden_size).
  add(o, "--ffn-hidden-size",
      m.is_moe() && m.first_dense_layers == 0 ? m.moe_ffn_hidden_size : m.ffn_hidden_size);
  add(o, "--num-attention-heads", m.num_heads);
  // Qwen3: heads of their own size (Megatron's default kv_channels is hidden / heads) and q/k norms.
  if (m.is_mla()) {
    add(o, "--multi-latent-attention");
    if (m.q_lora_rank > 0) add(o, "--q-lora-rank", m.q_lora_rank);
    add(o, "--kv-lora-rank", m.kv_lora_rank);
    add(o, "--qk-head-dim", m.qk_nope_head_dim);
    add(o, "--qk-pos-emb-head-dim", m.qk_rope_head_dim);
    add(o, "--v-head-dim", m.v_head_dim);
    add(o, "--qk-layernorm");  // the latents' RMSNorms (TELayerNormColumnParallelLinear up projections)
  } else if (m.decoupled_head_dim()) {
    add(o, "--kv-channels", m.head_dim());
  }
  if (m.qk_norm && !m.is_mla()) add(o, "--qk-layernorm");
  if (m.is_moe()) add_moe_options(o, m, t);
  if (m.num_kv_heads != m.num_heads) {
    add(o, "--group-query-attention");
    add(o, "--num-query-groups", m.num_kv_heads);
  }
  add(o, "--max-position-embeddings", detail::position_embeddings(m, t));
  if (m.norm == spec::Norm::kRmsNorm) add(o, "--normalization", std::string("RMSNorm"));
  if (m.swiglu_limit > 0) {
    // gpt-oss's experts: (up + 1)·gate·sigmoid(1.702·gate), clamped: quick_gelu in a GLU with an
    // offset of 1 on the linear half.
    add(o, "--quick-geglu");
    add(o, "--glu-linear-offset", std::string("1.0"));
    add(o, "--activation-func-clamp-value", fmt::format("{}", m.swiglu_limit));
  } else if (m.mlp == spec::Mlp::kSwiGlu) {
    add(o, "--swiglu");
  }
  if (m.windowed_layers() > 0) {
    // Megatron's window is (left, right) keys besides the query's own: HF's sliding_window − 1.
    add(o, "--window-size", fmt::format("{},0", m.sliding_window - 1));
    if (m.full_attention_interval > 0) add(o, "--window-attn-skip-freq", m.full_attention_interval);
  }
  if (m.attention_sinks) add(o, "--softmax-type", std::string("learnable"));
  if (m.positions == spec::Positions::kRotary) add(o, "--position-embedding-type", std::string("rope"));
  if (!m.tie_word_embeddings) add(o, "--untie-embeddings-and-output-weights");
  if (!m.linear_bias) add(o, "--disable-bias-linear");
  if (m.qkv_bias && !m.linear_bias) add(o, "--add-qkv-bias");
}

// validate_args (arguments.py:1453-1479 at the commit): with tp > 1 or cp > 1 on GPUs before
// Blackwell it asserts CUDA_DEVICE_MAX_CONNECTIONS=1, except under Megatron-FSDP (ZeRO-2/3), where
// it only warns that FSDP wants more connections.
// With --overlap-moe-expert-parallel-comm it only warns (arguments.py:1455-1478), and the MoE
// README asks for more than one connection, which the overlap's communication stream needs.
bool needs_single_connection(const spec::ClusterSpec& c, const plan::Plan& p) {
  const double cc = c.gpu.compute_capability;
  return (p.tp > 1 || p.cp > 1) && cc > 0 && cc < 10 && p.stages.front().zero < 2 && !p.overlap_moe_a2a;
}

}  // namespace

std::span<const FlagSpec> megatron_flag_specs() { return kFlags; }

std::vector<EnvVar> megatron_environment(const spec::ClusterSpec& c, const plan::Plan& p) {
  if (needs_single_connection(c, p)) return {detail::single_device_connection()};
  if (p.overlap_moe_a2a) return {{"CUDA_DEVICE_MAX_CONNECTIONS", "32"}};
  return {};
}

std::vector<Option> megatron_options(const spec::ModelSpec& m, const spec::ClusterSpec&,
                                     const spec::TrainingSpec& t, const plan::Plan& p) {
  std::vector<Option> o;
  const int64_t v = p.virtual_pipeline_stages;
  add(o, "--tensor-model-parallel-size", p.tp);
  add(o, "--pipeline-model-parallel-size", p.pp);
  if (p.sequence_parallel) add(o, "--sequence-parallel");
  if (p.cp > 1) {
    // plan.cp_comm as Megatron spells it (arguments.py:3221, TransformerConfig.cp_comm_type): the
    // ring is Transformer Engine's p2p K/V exchange, Megatron's default.
    add(o, "--context-parallel-size", p.cp);
    add(o, "--cp-comm-type", std::string(megatron_cp_comm(p.cp_comm)));
    if (p.cp_comm == plan::CpComm::kA2aP2p)  // the all-to-all groups, then the ring over them
      add(o, "--hierarchical-context-parallel-sizes",
          std::vector<std::string>{std::to_string(p.cp_a2a), std::to_string(p.cp / p.cp_a2a)});
  }
  // Always both: Megatron's default expert tensor parallelism is tp, mist's plan field defaults to 1.
  if (m.is_moe()) {
    add(o, "--expert-model-parallel-size", p.ep);
    add(o, "--expert-tensor-parallel-size", p.etp);
  }
  ChunkLayers chunks;
  for (size_t i = 0; i < p.stages.size(); ++i) chunks.push_back(plan::stage_chunk_layers(p, i));
  const MegatronSplit split = megatron_split(chunks, t.mtp_layers);
  if (split.layout) {
    add(o, "--pipeline-model-parallel-layout", *split.layout);  // carries the virtual stages too
  } else {
    if (v > 1) add(o, "--num-virtual-stages-per-pipeline-rank", v);
    if (split.first) add(o, "--decoder-first-pipeline-num-layers", *split.first);
    if (split.last) add(o, "--decoder-last-pipeline-num-layers", *split.last);
    if (split.account_embedding) add(o, "--account-for-embedding-in-pipeline-split");
    if (split.account_loss) add(o, "--account-for-loss-in-pipeline-split");
  }
  add(o, "--micro-batch-size", p.micro_batch_size);
  add(o, "--global-batch-size", p.micro_batch_size * p.dp * p.grad_accum_steps);
  add(o, "--seq-length", t.seq_length);
  // TE's kernel is refused by Megatron-LM's command line (capability.cpp says so before export).
  if (t.cross_entropy_fusion == spec::CrossEntropyFusion::kNative) {
    add(o, "--cross-entropy-loss-fusion");
    add(o, "--cross-entropy-fusion-impl", std::string("native"));
  }
  const int64_t n = megatron_recompute_count(p);
  if (p.recompute == plan::Recompute::kSelective) {
    add(o, "--recompute-granularity", std::string("selective"));
    if (t.recompute_modules != spec::kRecomputeCoreAttn)
      add(o, "--recompute-modules", spec::recompute_module_names(t.recompute_modules));
  } else if (n > 0) {
    add(o, "--recompute-granularity", std::string("full"));
    add(o, "--recompute-method", std::string("block"));
    add(o, "--recompute-num-layers", n);
  }
  const auto& s0 = p.stages.front();
  if (s0.zero == 1) {
    add(o, "--use-distributed-optimizer");
  } else if (s0.zero >= 2) {
    add(o, "--use-megatron-fsdp");
    add(o, "--data-parallel-sharding-strategy", std::string(s0.zero == 2 ? "optim_grads" : "optim_grads_params"));
    add(o, "--ckpt-format", std::string("fsdp_dtensor"));  // Megatron-FSDP requires it
  }
  if (p.overlap_grad_reduce) add(o, "--overlap-grad-reduce");
  if (p.overlap_param_gather && p.overlap_grad_reduce && s0.zero >= 1) add(o, "--overlap-param-gather");
  if (p.overlap_tp_comm && p.tp > 1) add(o, "--tp-comm-overlap");
  if (p.overlap_moe_a2a) add(o, "--overlap-moe-expert-parallel-comm");
  if (!p.grad_accumulation_fusion) add(o, "--no-gradient-accumulation-fusion");
  if (s0.offload.optimizer_states > 0) {
    add(o, "--optimizer-cpu-offload");
    add(o, "--use-precision-aware-optimizer");  // the hybrid CPU/GPU optimizer runs on its code path
    add(o, "--optimizer-offload-fraction", detail::number_text(s0.offload.optimizer_states));
  }
  if (s0.offload.activations > 0)
    add(o, "--cpu-offloading-num-layers",
        static_cast<int64_t>(std::llround(s0.offload.activations * static_cast<double>(s0.num_layers))));
  detail::add_training_flags(o, t);
  if (t.grad_dtype != megatron_grad_dtype(t.precision))
    add(o, t.grad_dtype == spec::Dtype::kFp32 ? "--accumulate-allreduce-grads-in-fp32" : "--grad-reduce-in-bf16");
  if (m.is_moe() && t.moe_capacity_factor > 0) {
    add(o, "--moe-expert-capacity-factor", fmt::format("{}", t.moe_capacity_factor));
    if (t.moe_pad_to_capacity) add(o, "--moe-pad-expert-input-to-capacity");
  }
  if (t.fp8_training()) {
    // Transformer Engine's hybrid format: E4M3 activations and weights, E5M2 gradients.
    add(o, "--fp8-format", std::string("hybrid"));
    add(o, "--fp8-recipe", std::string(spec::to_string(t.fp8)));
    if (t.fp8_param_gather) add(o, "--fp8-param-gather");
  }
  if (t.mtp_layers > 0) add(o, "--mtp-num-layers", t.mtp_layers);  // --mtp-loss-scaling-factor: 0.1, cost-free
  add_model_options(o, m, t);
  return o;
}

std::vector<std::string> megatron_notes(const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                        const spec::TrainingSpec& t, const plan::Plan& p) {
  std::vector<std::string> notes;
  if (needs_single_connection(c, p))
    notes.push_back(detail::single_device_connection_note(
        fmt::format("Megatron-LM asserts it with tensor or context parallelism on GPUs before Blackwell ({} is sm_{})",
                    c.gpu.name, static_cast<int>(std::lround(c.gpu.compute_capability * 10)))));
  if (p.overlap_moe_a2a)
    notes.push_back("CUDA_DEVICE_MAX_CONNECTIONS=32: the MoE all-to-all overlap runs its communication on a stream "
                    "of its own and needs more than one connection (Megatron-LM's MoE README; validate_args only "
                    "warns), with torch 2.6 or later (TransformerConfig asserts it)");
  if (auto n = detail::position_embeddings_note(m, t)) notes.push_back(*n);
  notes.push_back(fmt::format("the vocabulary ({} entries) comes from the tokenizer (--tokenizer-type and its "
                              "files), padded with --make-vocab-size-divisible-by", m.vocab_size));
  if (m.parallel_block)
    notes.push_back("model.parallel_block: Megatron-LM's GPT model has no parallel attention/MLP block; the "
                    "flags give the shapes only");
  if (m.is_moe())
    notes.push_back("model: the prediction assumes tokens balanced across experts; training balances them only "
                    "approximately (--moe-aux-loss-coeff), so the slowest expert rank sets the pace");
  if (m.mtp_layers > 0 && t.mtp_layers == 0)
    notes.push_back(fmt::format("model: {}'s checkpoint holds {} multi-token prediction module{}; the plan trains "
                                "without {} (Megatron-LM's default): training.mtp_layers {} trains {} "
                                "(--mtp-num-layers, as Megatron-Bridge's recipes for it do)",
                                m.name, m.mtp_layers, m.mtp_layers > 1 ? "s" : "", m.mtp_layers > 1 ? "them" : "it",
                                m.mtp_layers, m.mtp_layers > 1 ? "them" : "it"));
  if (!t.flash_attention)
    notes.push_back("training.flash_attention = false: choose the attention kernel with --attention-backend");
  return notes;
}

Result<ImportedJob> import_megatron_flags(std::string_view text, const spec::ModelSpec& m,
                                          const spec::ClusterSpec& c) {
  MIST_TRY(Flags f, Flags::parse(text, kFlags, "--from-megatron"));
  ImportedJob out;
  plan::Plan& p = out.plan;
  const int64_t layers = m.num_layers;
  MIST_CHECK(detail::check_model_flag(f, "--num-layers", m.num_layers, m, "layers"));
  MIST_CHECK(detail::check_model_flag(f, "--hidden-size", m.hidden_size, m, "hidden units"));
  MIST_CHECK(detail::check_model_flag(f, "--num-attention-heads", m.num_heads, m, "attention heads"));
  if (!m.is_moe() || m.first_dense_layers > 0)
    MIST_CHECK(detail::check_model_flag(f, "--ffn-hidden-size", m.ffn_hidden_size, m,
                                        m.is_moe() ? "FFN units in its dense blocks" : "FFN units"));
  if (f.has("--group-query-attention"))
    MIST_CHECK(detail::check_model_flag(f, "--num-query-groups", m.num_kv_heads, m, "key/value heads"));
  MIST_CHECK(check_mla_flags(f, m));
  MIST_TRY(auto kv_channels, f.integer("--kv-channels", 1, 1 << 20));
  if (!m.is_mla() && kv_channels.value_or(m.hidden_size / m.num_heads) != m.head_dim())
    return fail("--kv-channels", fmt::format("gives heads of {} but model {} has heads of {}{}",
                                             kv_channels.value_or(m.hidden_size / m.num_heads), m.name,
                                             m.head_dim(), kv_channels ? "" : " (the default is hidden / heads)"));
  if (!m.is_mla() && f.has("--qk-layernorm") != m.qk_norm)
    return fail("--qk-layernorm", fmt::format("model {} {} its queries and keys per head", m.name,
                                              m.qk_norm ? "normalises" : "does not normalise"));
  MIST_CHECK(check_gpt_oss_flags(f, m));
  // --swiglu on a model without SwiGLU (a GELU MLP or GELU experts; gpt-oss's GLU is --quick-geglu) is
  // a contradiction; its absence is not (options often state the parallelism alone).
  if (f.has("--swiglu") && !(m.mlp == spec::Mlp::kSwiGlu && m.swiglu_limit == 0))
    return fail("--swiglu", fmt::format("is given but model {} has {}", m.name,
                                        m.mlp == spec::Mlp::kSwiGlu ? "gpt-oss's clamped GLU (--quick-geglu)"
                                        : m.is_moe()                ? "GELU experts"
                                                                    : "a GELU MLP"));

  MIST_TRY(auto tp, f.integer("--tensor-model-parallel-size", 1, 1024));
  MIST_TRY(auto pp, f.integer("--pipeline-model-parallel-size", 1, 100000));
  MIST_TRY(auto cp, f.integer("--context-parallel-size", 1, 1024));
  MIST_TRY(auto ep, f.integer("--expert-model-parallel-size", 1, 1 << 20));
  MIST_TRY(auto etp, f.integer("--expert-tensor-parallel-size", 1, 1024));
  if (auto comms = f.words("--cp-comm-type")) {
    // One type for every layer (a list of one, or of the same type for each layer).
    for (const auto& c : *comms)
      if (c != comms->front())
        return fail("--cp-comm-type", fmt::format("lists \"{}\" and \"{}\": mist models one type for every layer",
                                                  comms->front(), c));
    const std::string comm = comms->empty() ? "p2p" : comms->front();
    if (comm == "a2a") p.cp_comm = plan::CpComm::kAllToAll;
    else if (comm == "all_gather") p.cp_comm = plan::CpComm::kAllGather;
    else if (comm == "a2a+p2p") p.cp_comm = plan::CpComm::kA2aP2p;
    else if (comm != "p2p")
      return fail("--cp-comm-type", fmt::format("is \"{}\": Megatron-LM's types are p2p, a2a, all_gather and a2a+p2p",
                                                comm));
    if (cp.value_or(1) == 1) p.cp_comm = plan::CpComm::kRing;  // Megatron ignores it without CP
  }
  // a2a+p2p's groups (arguments.py: the sizes' product is cp): the all-to-all's, then the ring's.
  if (p.cp_comm == plan::CpComm::kA2aP2p) {
    const auto sizes = f.words("--hierarchical-context-parallel-sizes");
    int64_t a2a = 0, ring = 0;
    if (sizes && sizes->size() == 2) {
      const auto a = std::from_chars(sizes->at(0).data(), sizes->at(0).data() + sizes->at(0).size(), a2a);
      const auto r = std::from_chars(sizes->at(1).data(), sizes->at(1).data() + sizes->at(1).size(), ring);
      if (a.ec != std::errc() || r.ec != std::errc()) a2a = ring = 0;
    }
    if (a2a < 2 || ring < 2 || a2a * ring != cp.value_or(1))
      return fail("--hierarchical-context-parallel-sizes",
                  fmt::format("must give the all-to-all groups' size and the ring's, whose product is "
                              "--context-parallel-size {}, both above 1, for --cp-comm-type a2a+p2p",
                              cp.value_or(1)));
    p.cp_a2a = a2a;
  }
  if (!m.is_moe() && ep.value_or(1) > 1)
    return fail("--expert-model-parallel-size", fmt::format("is {} but model {} has no experts", *ep, m.name));
  p.tp = tp.value_or(1);
  p.pp = pp.value_or(1);
  MIST_CHECK(check_moe_flags(f, m));
  if (m.is_moe() && f.has("--moe-permute-fusion"))
    out.notes.push_back("--moe-permute-fusion: mist models Megatron-LM's unfused permutation (its default), which "
                        "keeps each routed row's int64 token index and the routing map's int64 argsort; "
                        "Transformer Engine's fused kernels keep an int32 row map instead, so the predicted MoE "
                        "activations are an upper bound by up to that difference, and the permutation's time is "
                        "that of the unfused kernels");
  if (m.is_moe()) {
    p.ep = ep.value_or(1);
    p.etp = etp.value_or(p.tp);  // Megatron's default: the experts split as the attention
  }
  MIST_TRY(const int64_t dp_cp, detail::data_parallel(p.tp, p.pp, c, "--tensor-model-parallel-size",
                                                      "--pipeline-model-parallel-size"));
  p.cp = cp.value_or(1);
  if (dp_cp % p.cp != 0)
    return fail("--context-parallel-size", fmt::format("{} does not divide the {} GPUs left by tensor and pipeline "
                                                       "parallelism", p.cp, dp_cp));
  p.dp = dp_cp / p.cp;
  if (auto ok = plan::check_experts(m, p.tp * p.cp, p.dp, p.ep, p.etp); !ok)
    return fail(ok.error().path == "plan.etp" ? "--expert-tensor-parallel-size" : "--expert-model-parallel-size",
                ok.error().message);
  p.sequence_parallel = f.has("--sequence-parallel");

  MIST_TRY(auto mbs, f.integer("--micro-batch-size", 1, 1'000'000'000));
  if (!mbs) return fail("--micro-batch-size", "is required (Megatron-LM asserts it)");
  p.micro_batch_size = *mbs;
  MIST_TRY(auto gbs, f.integer("--global-batch-size", 1, int64_t{1} << 50));
  const int64_t global = gbs.value_or(*mbs * p.dp);  // Megatron's default: one micro-batch
  MIST_TRY(p.grad_accum_steps, detail::grad_accum(global, *mbs, p.dp, "--global-batch-size"));
  out.training.global_batch_size = global;
  MIST_TRY(out.training.seq_length, f.integer("--seq-length", 1, int64_t{1} << 30));

  // The loss kernel (TransformerConfig cross_entropy_loss_fusion, cross_entropy_fusion_impl: "native"
  // by default; the impl alone changes nothing).
  if (f.has("--cross-entropy-loss-fusion")) {
    const std::string impl = f.string("--cross-entropy-fusion-impl").value_or("native");
    if (impl == "te")
      return fail("--cross-entropy-fusion-impl",
                  "te: Megatron-LM's validate_args refuses Transformer Engine's fused cross entropy (arguments.py:1697 "
                  "at d98e8a64, \"disabled due to stability issues\"); Megatron-Bridge's configs still run it: state "
                  "training.cross_entropy_fusion \"te\" to predict that");
    if (impl != "native")
      return fail("--cross-entropy-fusion-impl", fmt::format("is \"{}\"; Megatron-LM's are native and te", impl));
    out.training.cross_entropy_fusion = spec::CrossEntropyFusion::kNative;
  }

  // Multi-token prediction (arguments.py's checks at d98e8a64: rotary or no position embeddings).
  MIST_TRY(auto mtp, f.integer("--mtp-num-layers", 0, 64));
  out.training.mtp_layers = mtp.value_or(0);
  if (mtp.value_or(0) > 0 && m.positions == spec::Positions::kLearned)
    return fail("--mtp-num-layers", "needs rotary or no position embeddings (Megatron-LM asserts it)");

  // Pipeline split and virtual stages.
  MIST_TRY(auto first, f.integer("--decoder-first-pipeline-num-layers", 1, kMaxCount));
  MIST_TRY(auto last, f.integer("--decoder-last-pipeline-num-layers", 1, kMaxCount));
  MIST_TRY(auto per_chunk, f.integer("--num-layers-per-virtual-pipeline-stage", 1, kMaxCount));
  MIST_TRY(auto chunks, f.integer("--num-virtual-stages-per-pipeline-rank", 1, 1024));
  const auto layout = f.string("--pipeline-model-parallel-layout");
  if (int(layout.has_value()) + int(per_chunk.has_value()) + int(chunks.has_value()) > 1)
    return fail(layout ? "--pipeline-model-parallel-layout" : "--num-virtual-stages-per-pipeline-rank",
                "give only one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank "
                "and --pipeline-model-parallel-layout");
  // TransformerConfig's account_for_embedding/loss_in_pipeline_split: the embedding (the loss) counts
  // as a layer of the first (last) stage's split, and that stage builds one block fewer, in its
  // first (last) model chunk (transformer_block.py get_num_layers_to_build at d98e8a64).
  const bool account_emb = f.has("--account-for-embedding-in-pipeline-split");
  const bool account_loss = f.has("--account-for-loss-in-pipeline-split");
  const char* account_flag =
      account_emb ? "--account-for-embedding-in-pipeline-split" : "--account-for-loss-in-pipeline-split";
  if ((account_emb || account_loss) && per_chunk)
    return fail(account_flag, "use --num-virtual-stages-per-pipeline-rank with it; mist reads the chunk count from "
                              "the stage's even share only without it");
  if ((account_emb || account_loss) && (layout || first || last))
    return fail(account_flag, "cannot be set with --pipeline-model-parallel-layout or the first/last stage layer "
                              "counts (Megatron-LM refuses it)");
  std::vector<int64_t> split;
  ChunkLayers chunk_split;  // where the flags give each model chunk's blocks
  if (layout) {
    if (first || last)
      return fail("--pipeline-model-parallel-layout", "cannot be set with the first/last stage layer counts");
    MIST_TRY(auto ll, megatron_layers_from_layout(*layout, p.pp, layers, mtp.value_or(0)));
    split = ll.layers;
    chunk_split = ll.chunks;
    p.virtual_pipeline_stages = ll.virtual_stages;
  } else {
    if (first || last) {
      if (per_chunk)
        return fail("--num-layers-per-virtual-pipeline-stage",
                    "use --num-virtual-stages-per-pipeline-rank with uneven first/last stages");
      MIST_TRY(split, megatron_layers_from_first_last(layers, p.pp, first, last));
    } else if (account_emb || account_loss) {
      MIST_TRY(chunk_split, megatron_layers_accounting(layers, p.pp, account_emb, account_loss, chunks.value_or(1)));
      split = stage_totals(chunk_split);
    } else {
      if (layers % p.pp != 0)
        return fail("--pipeline-model-parallel-size",
                    fmt::format("the model's {} layers do not divide evenly over {} stages; give "
                                "--decoder-first-pipeline-num-layers or --decoder-last-pipeline-num-layers",
                                layers, p.pp));
      split.assign(static_cast<size_t>(p.pp), layers / p.pp);
    }
    if (per_chunk) {
      if (split[0] % *per_chunk != 0)
        return fail("--num-layers-per-virtual-pipeline-stage",
                    fmt::format("{} does not divide the {} layers of a stage", *per_chunk, split[0]));
      p.virtual_pipeline_stages = split[0] / *per_chunk;
    }
    if (chunks) p.virtual_pipeline_stages = *chunks;
  }
  const int64_t v = p.virtual_pipeline_stages;
  if (v > 1 && p.pp < 2)
    return fail("--num-virtual-stages-per-pipeline-rank", "an interleaved schedule needs pipeline parallelism");
  for (size_t i = 0; i < split.size(); ++i)
    if (chunk_split.empty() && split[i] % v != 0)
      return fail("--num-virtual-stages-per-pipeline-rank",
                  fmt::format("stage {} holds {} layers, not a multiple of {} virtual stages", i, split[i], v));
  p.stages = detail::plan_with_stages(split).stages;
  // Chunks of unequal size (the accounting flags or a layout under interleaving) are stated per stage.
  for (size_t i = 0; i < chunk_split.size() && v > 1; ++i)
    if (std::adjacent_find(chunk_split[i].begin(), chunk_split[i].end(), std::not_equal_to<>()) !=
        chunk_split[i].end())
      p.stages[i].chunk_layers = chunk_split[i];

  // Activation recompute (transformer_config.py rules).
  MIST_TRY(auto granularity, f.choice("--recompute-granularity", {"full", "selective"}));
  if (f.has("--recompute-activations")) granularity = "selective";  // arguments.py: the old switch
  MIST_TRY(auto method, f.choice("--recompute-method", {"uniform", "block"}));
  MIST_TRY(auto count, f.integer("--recompute-num-layers", 1, kMaxCount));
  if (granularity == "selective") {
    if (count) return fail("--recompute-num-layers", "must not be given with --recompute-granularity selective");
    p.recompute = plan::Recompute::kSelective;
    if (const auto mods = f.words("--recompute-modules")) {
      uint32_t bits = 0;
      for (const auto& name : *mods) {
        const uint32_t bit = spec::recompute_module_bit(name);
        if (!bit)
          return fail("--recompute-modules",
                      fmt::format("'{}' is not one of Megatron-LM's modules ({})", name,
                                  join(spec::recompute_module_names(~0u))));
        bits |= bit;
      }
      if (bits == 0) {
        p.recompute = plan::Recompute::kNone;
        out.notes.push_back("--recompute-modules lists no module: the selective recompute recomputes nothing");
      }
      if (bits) out.training.recompute_modules = bits;
    }
  } else if (granularity == "full") {
    if (!method) return fail("--recompute-method", "full recompute needs --recompute-method block or uniform");
    if (!count) return fail("--recompute-num-layers", "full recompute needs --recompute-num-layers");
    std::vector<int64_t> ckpt = *method == "block" ? megatron_ckpt_layers(p, *count) : split;
    for (size_t i = 0; i < ckpt.size(); ++i) p.stages[i].ckpt_layers = ckpt[i];
    if (*method == "uniform" && *count > 1)
      out.notes.push_back(fmt::format("--recompute-method uniform with {} layers per unit: every block recomputes; "
                                      "mist keeps one input per block, Megatron one per unit", *count));
  }

  // ZeRO: distributed optimizer (1) or Megatron-FSDP's sharding strategy (0..3).
  int zero = f.has("--use-distributed-optimizer") ? 1 : 0;
  if (f.has("--use-megatron-fsdp") && f.has("--use-torch-fsdp2"))
    return fail("--use-torch-fsdp2", "cannot be used together with --use-megatron-fsdp");
  if (f.has("--use-megatron-fsdp")) {
    MIST_TRY(auto strategy, f.choice("--data-parallel-sharding-strategy",
                                     {"no_shard", "optim", "optim_grads", "optim_grads_params"}));
    const std::string s = strategy.value_or("optim_grads_params");
    zero = s == "optim_grads_params" ? 3 : s == "optim_grads" ? 2 : s == "optim" ? 1 : 0;
  } else if (f.has("--use-torch-fsdp2")) {
    zero = 3;
    out.notes.push_back("--use-torch-fsdp2: read as ZeRO-3 (FSDP2 reshards parameters after forward)");
  }
  for (auto& s : p.stages) s.zero = zero;
  p.overlap_grad_reduce = f.has("--overlap-grad-reduce");
  p.overlap_param_gather = f.has("--overlap-param-gather");
  if (p.overlap_param_gather && zero == 0)
    return fail("--overlap-param-gather", "needs the distributed optimizer or Megatron-FSDP (Megatron-LM asserts it)");
  if (p.overlap_param_gather && !p.overlap_grad_reduce)
    return fail("--overlap-param-gather", "needs --overlap-grad-reduce (Megatron-LM asserts it)");
  p.overlap_tp_comm = f.has("--tp-comm-overlap");
  p.overlap_moe_a2a = f.has("--overlap-moe-expert-parallel-comm");
  p.grad_accumulation_fusion = !f.has("--no-gradient-accumulation-fusion");
  if (p.overlap_tp_comm && p.tp > 1 && !p.sequence_parallel)
    return fail("--tp-comm-overlap", "needs --sequence-parallel (Megatron-LM asserts it)");

  MIST_TRY(auto fraction, f.number("--optimizer-offload-fraction", 0, 1));
  if (f.has("--optimizer-cpu-offload")) {
    if (!f.has("--use-precision-aware-optimizer"))
      return fail("--optimizer-cpu-offload", "needs --use-precision-aware-optimizer (Megatron-LM asserts it)");
    if (zero == 0) return fail("--optimizer-cpu-offload", "needs the distributed optimizer (--use-distributed-optimizer)");
    for (auto& s : p.stages) s.offload.optimizer_states = fraction.value_or(1.0);  // argparse default 1.0
  } else if (fraction) {
    out.notes.push_back("--optimizer-offload-fraction has no effect without --optimizer-cpu-offload");
  }
  MIST_TRY(auto offloaded, f.integer("--cpu-offloading-num-layers", 0, kMaxCount));
  if (offloaded.value_or(0) > 0) {
    if (p.pp > 1) return fail("--cpu-offloading-num-layers", "Megatron-LM refuses CPU offloading with pipeline parallelism");
    if (granularity) return fail("--cpu-offloading-num-layers", "Megatron-LM refuses CPU offloading with recompute");
    if (*offloaded >= layers)
      return fail("--cpu-offloading-num-layers", fmt::format("must be below the model's {} layers", layers));
    p.stages[0].offload.activations = static_cast<double>(*offloaded) / static_cast<double>(layers);
  }

  MIST_TRY(out.training.precision, detail::precision_switches(f));
  const spec::Dtype precision = out.training.precision.value_or(spec::Dtype::kFp32);
  if (f.has("--accumulate-allreduce-grads-in-fp32") && f.has("--grad-reduce-in-bf16"))
    return fail("--grad-reduce-in-bf16", "cannot be given together with --accumulate-allreduce-grads-in-fp32");
  if (f.has("--grad-reduce-in-bf16") && precision != spec::Dtype::kBf16)
    return fail("--grad-reduce-in-bf16", "needs --bf16");
  out.training.grad_dtype = f.has("--accumulate-allreduce-grads-in-fp32") ? spec::Dtype::kFp32
                            : f.has("--grad-reduce-in-bf16")              ? spec::Dtype::kBf16
                                                                          : megatron_grad_dtype(precision);
  MIST_TRY(auto fp8_format, f.choice("--fp8-format", {"e4m3", "hybrid"}));
  MIST_TRY(auto fp8_recipe, f.choice("--fp8-recipe", {"tensorwise", "delayed", "mxfp8", "blockwise", "custom"}));
  if (fp8_recipe && !fp8_format) return fail("--fp8-recipe", "takes effect only with --fp8-format");
  if (fp8_format) {
    if (out.training.precision != spec::Dtype::kBf16)
      return fail("--fp8-format", "mist models FP8 training with --bf16 outside the FP8 GEMMs");
    const std::string r = fp8_recipe.value_or("delayed");  // Megatron's default
    if (r == "custom") return fail("--fp8-recipe", "custom quantization recipes are not modelled");
    out.training.fp8 = r == "tensorwise" ? spec::Fp8Recipe::kTensorwise
                       : r == "mxfp8"    ? spec::Fp8Recipe::kMxfp8
                       : r == "blockwise" ? spec::Fp8Recipe::kBlockwise
                                          : spec::Fp8Recipe::kDelayed;
    if (*fp8_format == "e4m3")
      out.notes.push_back("--fp8-format e4m3: modelled as hybrid (the GEMM rate and bytes are the same)");
  } else {
    out.training.fp8 = spec::Fp8Recipe::kNone;
  }
  // The token dispatcher: allgather when the flag is missing (TransformerConfig's default at d98e8a64).
  if (m.is_moe())
    out.training.moe_dispatcher = f.string("--moe-token-dispatcher-type").value_or("allgather") == "alltoall"
                                      ? spec::MoeDispatcher::kAllToAll
                                      : spec::MoeDispatcher::kAllGather;
  // The router's dtype (absent: the activation dtype).
  MIST_TRY(auto router_dtype, f.choice("--moe-router-dtype", {"fp32", "fp64"}));
  if (router_dtype == "fp64") return fail("--moe-router-dtype", "fp64 routing is not modelled (fp32 or the activation dtype)");
  if (m.is_moe()) out.training.moe_router_fp32 = router_dtype.has_value();
  // Token dropping (TransformerConfig's checks at d98e8a64: a negative factor means none; padding
  // needs a factor).
  MIST_TRY(auto capacity, f.number("--moe-expert-capacity-factor", -1e9, 64));
  const bool pad = f.has("--moe-pad-expert-input-to-capacity");
  const bool dropping = capacity && *capacity >= 0;
  if (pad && !dropping)
    return fail("--moe-pad-expert-input-to-capacity", "needs --moe-expert-capacity-factor (Megatron-LM raises it)");
  if (dropping && *capacity == 0)
    return fail("--moe-expert-capacity-factor", "0 would drop every token");
  if ((capacity || pad) && !m.is_moe()) {
    out.notes.push_back(fmt::format("--moe-expert-capacity-factor: {} has no experts, the flag has no effect", m.name));
  } else if (capacity || pad) {
    out.training.moe_capacity_factor = dropping ? *capacity : 0.0;
    out.training.moe_pad_to_capacity = pad;
  }
  // FP8 parameters (Megatron-LM's own checks, arguments.py at d98e8a64).
  out.training.fp8_param_gather = false;
  if (f.has("--fp8-param-gather")) {
    if (!fp8_format) return fail("--fp8-param-gather", "keeps the FP8 linears' weights in FP8: it needs --fp8-format");
    if (zero == 0 && !f.has("--use-torch-fsdp2"))
      return fail("--fp8-param-gather", "needs the distributed optimizer or FSDP (Megatron-LM asserts it)");
    if (f.has("--use-torch-fsdp2"))
      out.notes.push_back("--fp8-param-gather with --use-torch-fsdp2: Megatron-LM turns it off with Transformer "
                          "Engine 2.0 and later (bf16 all-gather), and so does mist");
    else if (f.has("--optimizer-cpu-offload") && out.training.fp8 != spec::Fp8Recipe::kDelayed)
      return fail("--fp8-param-gather", "with --optimizer-cpu-offload needs --fp8-recipe delayed (Megatron-LM asserts it)");
    else
      out.training.fp8_param_gather = true;
  }
  MIST_TRY(auto opt, f.choice("--optimizer", {"adam", "sgd", "muon", "dist_muon", "lion", "soap", "adaptive_muon"}));
  if (!opt || *opt == "adam") out.training.optimizer = spec::Optimizer::kAdamW;  // decoupled weight decay
  else if (*opt == "sgd") out.training.optimizer = spec::Optimizer::kSgd;
  else out.notes.push_back(fmt::format("--optimizer {}: mist models adam and sgd only", *opt));
  MIST_TRY(out.training.dropout, detail::dropout_flags(f));
  // TransformerConfig.__post_init__'s checks on the MoE all-to-all overlap (d98e8a64).
  if (p.overlap_moe_a2a) {
    constexpr const char* flag = "--overlap-moe-expert-parallel-comm";
    if (p.ep < 2) return fail(flag, "needs --expert-model-parallel-size above 1 (Megatron-LM asserts it)");
    if (out.training.moe_dispatcher == spec::MoeDispatcher::kAllGather)
      return fail(flag, "needs --moe-token-dispatcher-type alltoall or flex (Megatron-LM asserts it)");
    if (const auto why = megatron_moe_overlap_refusal(p, out.training.mtp_layers.value_or(0)))
      return fail(flag, "Megatron-LM " + *why);
  }
  if (f.has("--delay-wgrad-compute") && !p.overlap_moe_a2a)
    return fail("--delay-wgrad-compute", "needs --overlap-moe-expert-parallel-comm (Megatron-LM asserts it)");
  if (auto note = detail::ignored_note(f)) out.notes.push_back(*note);
  p = canonical(p);
  return out;
}

}  // namespace mist::engines
