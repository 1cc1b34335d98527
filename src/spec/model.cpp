// ModelSpec: parsing (Hugging Face config.json or mist's own form), validation, parameter counts.
#include "spec/model.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "spec/catalog.hpp"

namespace mist::spec {

namespace {

// Bounds generous for any real model and tight enough that the parameter count of a model inside
// them cannot overflow int64 (worst term L*3*h*f = 1e4 * 3 * 2^20 * 2^24 ~ 5e17).
constexpr int64_t kMaxLayers = 10000;
constexpr int64_t kMaxHidden = int64_t{1} << 20;
constexpr int64_t kMaxFfn = int64_t{1} << 24;
constexpr int64_t kMaxVocab = 100'000'000;
constexpr int64_t kMaxPositions = 100'000'000;
constexpr int64_t kMaxParameters = 1'000'000'000'000'000;  // 1e15
// Published models have at most a few hundred experts; the bound keeps E*3*h*f_e within int64.
constexpr int64_t kMaxExperts = 4096;

constexpr std::string_view kHfTypes =
    "\"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"falcon\", \"mixtral\", \"qwen2_moe\", \"qwen3_moe\", "
    "\"gpt_oss\", \"deepseek_v2\", \"deepseek_v3\"";

// Keys that configure experts in the Hugging Face configs of MoE models (Mixtral, Qwen-MoE,
// DeepSeek, gpt-oss, OLMoE, DBRX). Under a dense model_type they mean the model is not the dense
// model transformers would build, so they are refused rather than ignored.
constexpr std::string_view kExpertKeys[] = {
    "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts", "moe_num_experts"};

// LayerNorm has a gain and a bias per channel, RMSNorm only a gain.
int64_t norm_parameters(Norm n, int64_t h) { return n == Norm::kLayerNorm ? 2 * h : h; }

// Width of the K (or V) projection output, g*d; 0 for a spec with no heads (not yet validated).
int64_t kv_width(const ModelSpec& m) { return m.num_heads > 0 ? m.num_kv_heads * m.head_dim() : 0; }

// A readable name for a config.json without "_name_or_path": the folder it sits in
// (".../Llama-2-7b-hf/config.json" -> "Llama-2-7b-hf"), else the file stem.
std::string name_from_path(const std::string& what) {
  std::filesystem::path p(what);
  if (p.filename() == "config.json" && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  std::string stem = p.stem().string();
  return stem.empty() ? what : stem;
}

// --- Hugging Face config.json -------------------------------------------------------------------

// Fields shared by the HF readers: name, source and the vocabulary.
Result<ModelSpec> hf_common(const JsonFields& f, const std::string& what, std::string family) {
  ModelSpec m;
  m.family = std::move(family);
  m.name = what;  // load_model replaces it with the file's name
  if (f.has("_name_or_path") && f.raw("_name_or_path").is_string()) {
    std::string n = f.raw("_name_or_path").get<std::string>();
    if (!n.empty()) m.name = std::move(n);
  }
  m.source = "Hugging Face config.json (" + what + ")";
  MIST_TRY(m.vocab_size, f.integer("vocab_size", 1, kMaxVocab));
  return m;
}

// mist assumes a*d == h; configs that decouple them (Mistral-Nemo's head_dim 128 at h 5120 with
// 32 heads) would be silently miscounted, so they are rejected.
Result<void> check_head_dim(const JsonFields& f, const ModelSpec& m) {
  if (!f.has("head_dim") || m.num_heads <= 0) return {};
  MIST_TRY(int64_t d, f.integer("head_dim", 1, kMaxHidden));
  if (d * m.num_heads != m.hidden_size)
    return fail(f.field_path("head_dim"),
                fmt::format("unsupported: head_dim {} * num_attention_heads {} != hidden_size {} "
                            "(mist assumes heads * head_dim == hidden)",
                            d, m.num_heads, m.hidden_size));
  return {};
}

// A dense model_type whose config also configures experts (a Mixtral config relabelled "mistral").
Result<void> reject_expert_keys(const JsonFields& f, const std::string& type) {
  for (std::string_view key : kExpertKeys) {
    if (!f.has(key)) continue;
    const Json& v = f.raw(key);
    if (v.is_number() && v.get<double>() == 0) continue;  // some dense configs write 0 experts
    return fail(f.field_path(key),
                fmt::format("configures experts, but model_type \"{}\" is a dense model; a mixture of "
                            "experts needs its own model_type (mist reads \"mixtral\", \"qwen2_moe\", \"qwen3_moe\", \"gpt_oss\" "
                            "and \"deepseek_v3\")",
                            type));
  }
  return {};
}

// Qwen-MoE's layout knobs: mist lowers every block alike, so every block must be sparse.
Result<void> require_every_block_sparse(const JsonFields& f) {
  MIST_TRY(int64_t step, f.integer_or("decoder_sparse_step", 1, 1, kMaxLayers));
  if (step != 1)
    return fail(f.field_path("decoder_sparse_step"),
                fmt::format("unsupported: {} (only every {}th block sparse); mist models models whose "
                            "blocks are all MoE", step, step));
  return {};
}

// Qwen-MoE's mlp_only_layers: blocks with the dense MLP of intermediate_size. mist models dense
// blocks first (a prefix 0, 1, ..., k−1); returns k.
Result<int64_t> dense_prefix(const JsonFields& f) {
  if (!f.has("mlp_only_layers")) return int64_t{0};
  const Json& v = f.raw("mlp_only_layers");
  if (!v.is_array()) return fail(f.field_path("mlp_only_layers"), "must be a list of layer indices");
  std::vector<int64_t> layers;
  for (const auto& e : v) {
    if (!e.is_number_integer()) return fail(f.field_path("mlp_only_layers"), "must be a list of layer indices");
    layers.push_back(e.get<int64_t>());
  }
  std::sort(layers.begin(), layers.end());
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i] != static_cast<int64_t>(i))
      return fail(f.field_path("mlp_only_layers"),
                  "unsupported: dense blocks after MoE blocks (mist models dense blocks first: 0, 1, ..., k−1)");
  return static_cast<int64_t>(layers.size());
}

// Mistral and Mixtral: "sliding_window" (null: full attention). Qwen2 applies its window only with
// "use_sliding_window".
Result<int64_t> sliding_window(const JsonFields& f, const std::string& type) {
  if (type == "qwen2" || type == "qwen2_moe") {
    MIST_TRY(bool use, f.boolean_or("use_sliding_window", false));
    if (!use) return int64_t{0};
  } else if (type != "mistral" && type != "mixtral") {
    return int64_t{0};
  }
  return f.integer_or("sliding_window", 0, 1, kMaxPositions);
}

// LlamaConfig's names for the block count, the width and the heads (llama, mistral, qwen2, qwen3,
// gpt_oss and their MoE forms).
Result<void> read_layers_and_heads(const JsonFields& f, ModelSpec& m) {
  MIST_TRY(m.num_layers, f.integer("num_hidden_layers", 1, kMaxLayers));
  MIST_TRY(m.hidden_size, f.integer("hidden_size", 1, kMaxHidden));
  MIST_TRY(m.num_heads, f.integer("num_attention_heads", 1, kMaxHidden));
  MIST_TRY(m.num_kv_heads, f.integer_or("num_key_value_heads", m.num_heads, 1, kMaxHidden));
  return {};
}

Result<ModelSpec> from_gpt2(const JsonFields& f, const std::string& what) {
  MIST_TRY(ModelSpec m, hf_common(f, what, "gpt"));
  MIST_TRY(m.num_layers, f.integer("n_layer", 1, kMaxLayers));
  MIST_TRY(m.hidden_size, f.integer("n_embd", 1, kMaxHidden));
  MIST_TRY(m.num_heads, f.integer("n_head", 1, kMaxHidden));
  m.num_kv_heads = m.num_heads;
  // n_inner: null (the usual value) means 4 * n_embd, as in transformers' GPT2MLP.
  MIST_TRY(m.ffn_hidden_size, f.integer_or("n_inner", 4 * m.hidden_size, 1, kMaxFfn));
  MIST_TRY(m.max_position_embeddings, f.integer("n_positions", 1, kMaxPositions));
  m.norm = Norm::kLayerNorm;
  m.mlp = Mlp::kGelu;
  m.positions = Positions::kLearned;
  m.norms_per_block = 2;
  m.qkv_bias = true;  // GPT-2's Conv1D layers all carry biases
  m.linear_bias = true;
  MIST_TRY(m.tie_word_embeddings, f.boolean_or("tie_word_embeddings", true));
  return m;
}

// llama, mistral and qwen2 share LlamaConfig's field names.
Result<ModelSpec> from_llama(const JsonFields& f, const std::string& what,
                             const std::string& type) {
  MIST_TRY(ModelSpec m, hf_common(f, what, "llama"));
  MIST_SPEC_CHECK(read_layers_and_heads(f, m));
  MIST_TRY(m.ffn_hidden_size, f.integer("intermediate_size", 1, kMaxFfn));
  // Rotary models have no position table; 2048 is LlamaConfig's default context.
  MIST_TRY(m.max_position_embeddings,
           f.integer_or("max_position_embeddings", 2048, 1, kMaxPositions));
  MIST_SPEC_CHECK(check_head_dim(f, m));
  m.norm = Norm::kRmsNorm;
  m.mlp = Mlp::kSwiGlu;
  m.positions = Positions::kRotary;
  m.norms_per_block = 2;
  if (type == "qwen2") {
    m.qkv_bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without
  } else {
    // LlamaConfig: attention_bias puts biases on q, k, v and o; mlp_bias on gate, up and down.
    // mist has one flag for "the other projections", so either one sets linear_bias.
    MIST_TRY(bool attention_bias, f.boolean_or("attention_bias", false));
    MIST_TRY(bool mlp_bias, f.boolean_or("mlp_bias", false));
    m.qkv_bias = attention_bias;
    m.linear_bias = attention_bias || mlp_bias;
  }
  MIST_TRY(m.tie_word_embeddings, f.boolean_or("tie_word_embeddings", false));
  MIST_TRY(m.sliding_window, sliding_window(f, type));
  return m;
}

// MixtralConfig: LlamaConfig's attention, intermediate_size is each expert's width.
Result<ModelSpec> from_mixtral(const JsonFields& f, const std::string& what) {
  MIST_TRY(ModelSpec m, from_llama(f, what, "mixtral"));
  MIST_TRY(m.num_experts, f.integer_or("num_local_experts", 8, 1, kMaxExperts));  // MixtralConfig defaults
  MIST_TRY(m.experts_per_token, f.integer_or("num_experts_per_tok", 2, 1, m.num_experts));
  m.moe_ffn_hidden_size = m.ffn_hidden_size;
  m.ffn_hidden_size = 0;
  return m;
}

// Qwen2MoeConfig: Qwen2's attention (q, k, v biases); routed experts of moe_intermediate_size and
// a shared expert of shared_expert_intermediate_size behind a sigmoid gate (Qwen2MoeSparseMoeBlock).
Result<ModelSpec> from_qwen2_moe(const JsonFields& f, const std::string& what) {
  MIST_TRY(ModelSpec m, from_llama(f, what, "qwen2_moe"));
  MIST_SPEC_CHECK(require_every_block_sparse(f));
  m.qkv_bias = true;
  m.linear_bias = false;
  MIST_TRY(m.num_experts, f.integer_or("num_experts", 60, 1, kMaxExperts));  // Qwen2MoeConfig defaults
  MIST_TRY(m.experts_per_token, f.integer_or("num_experts_per_tok", 4, 1, m.num_experts));
  MIST_TRY(m.moe_ffn_hidden_size, f.integer_or("moe_intermediate_size", 1408, 1, kMaxFfn));
  MIST_TRY(m.shared_expert_ffn_hidden_size,
           f.integer_or("shared_expert_intermediate_size", 5632, 0, kMaxFfn));
  m.shared_expert_gate = m.shared_expert_ffn_hidden_size > 0;
  MIST_TRY(m.first_dense_layers, dense_prefix(f));
  if (m.first_dense_layers == 0) m.ffn_hidden_size = 0;  // intermediate_size is the dense blocks' width
  return m;
}

// Qwen3Config: Llama's layout with a head size of its own (head_dim, 128 by default, so a·d need
// not be h), an RMSNorm over each query and key head (q_norm, k_norm), no attention biases unless
// attention_bias.
Result<ModelSpec> from_qwen3(const JsonFields& f, const std::string& what, const std::string& type) {
  MIST_TRY(ModelSpec m, hf_common(f, what, "llama"));
  MIST_SPEC_CHECK(read_layers_and_heads(f, m));
  MIST_TRY(m.ffn_hidden_size, f.integer_or("intermediate_size", 22016, 1, kMaxFfn));
  MIST_TRY(m.max_position_embeddings, f.integer_or("max_position_embeddings", 32768, 1, kMaxPositions));
  MIST_TRY(int64_t d, f.integer_or("head_dim", 128, 2, kMaxHidden));
  // The same head size as h/a is the coupled layout: keep it unset, as for Llama.
  m.attention_head_dim = d * m.num_heads == m.hidden_size ? 0 : d;
  m.qk_norm = true;
  m.norm = Norm::kRmsNorm;
  m.mlp = Mlp::kSwiGlu;
  m.positions = Positions::kRotary;
  m.norms_per_block = 2;
  MIST_TRY(bool attention_bias, f.boolean_or("attention_bias", false));
  m.qkv_bias = attention_bias;
  m.linear_bias = attention_bias;
  MIST_TRY(m.tie_word_embeddings, f.boolean_or("tie_word_embeddings", false));
  MIST_TRY(bool use_window, f.boolean_or("use_sliding_window", false));
  if (use_window)
    return fail(f.field_path("use_sliding_window"),
                fmt::format("unsupported for {}: its sliding window applies to some layers only (max_window_layers), "
                            "which mist does not model",
                            type));
  return m;
}

// Qwen3MoeConfig: Qwen3's attention; every block a router over num_experts experts of
// moe_intermediate_size, top num_experts_per_tok, no shared expert.
Result<ModelSpec> from_qwen3_moe(const JsonFields& f, const std::string& what) {
  MIST_TRY(ModelSpec m, from_qwen3(f, what, "qwen3_moe"));
  MIST_SPEC_CHECK(require_every_block_sparse(f));
  MIST_TRY(m.num_experts, f.integer_or("num_experts", 128, 1, kMaxExperts));  // Qwen3MoeConfig defaults
  MIST_TRY(m.experts_per_token, f.integer_or("num_experts_per_tok", 8, 1, m.num_experts));
  MIST_TRY(m.moe_ffn_hidden_size, f.integer_or("moe_intermediate_size", 768, 1, kMaxFfn));
  MIST_TRY(m.first_dense_layers, dense_prefix(f));
  if (m.first_dense_layers == 0) m.ffn_hidden_size = 0;  // intermediate_size is the dense blocks' width
  return m;
}

// GptOssConfig (transformers' gpt_oss): Qwen3-like attention with a head size of its own (64
// heads of 64 on h 2880), biases on q, k, v and o (attention_bias), a learned sink logit per head,
// sliding-window attention on the blocks layer_types marks "sliding_attention"; every block a
// router (with bias) over num_local_experts experts of intermediate_size, each expert's gate_up and
// down projections biased, the clamped SwiGLU of swiglu_limit; no q/k norm, no shared expert.
Result<ModelSpec> from_gpt_oss(const JsonFields& f, const std::string& what) {
  MIST_TRY(ModelSpec m, hf_common(f, what, "llama"));
  MIST_SPEC_CHECK(read_layers_and_heads(f, m));
  MIST_TRY(m.max_position_embeddings, f.integer_or("max_position_embeddings", 131072, 1, kMaxPositions));
  MIST_TRY(int64_t d, f.integer_or("head_dim", 64, 2, kMaxHidden));
  m.attention_head_dim = d * m.num_heads == m.hidden_size ? 0 : d;
  m.norm = Norm::kRmsNorm;
  m.mlp = Mlp::kSwiGlu;
  m.positions = Positions::kRotary;
  m.norms_per_block = 2;
  MIST_TRY(bool attention_bias, f.boolean_or("attention_bias", true));
  m.qkv_bias = attention_bias;
  // The router's and the experts' biases are unconditional in GptOssTopKRouter and GptOssExperts;
  // mist's one flag for them also covers o_proj's, so a config without attention biases is refused.
  if (!attention_bias)
    return fail(f.field_path("attention_bias"),
                "unsupported: false (gpt-oss without attention biases; mist ties o_proj's bias to the experts' biases)");
  m.linear_bias = true;
  m.attention_sinks = true;
  MIST_TRY(m.tie_word_embeddings, f.boolean_or("tie_word_embeddings", false));
  MIST_TRY(m.num_experts, f.integer_or("num_local_experts", 128, 1, kMaxExperts));
  MIST_TRY(m.experts_per_token, f.integer_or("num_experts_per_tok", 4, 1, m.num_experts));
  MIST_TRY(m.moe_ffn_hidden_size, f.integer_or("intermediate_size", 2880, 1, kMaxFfn));
  m.ffn_hidden_size = 0;
  MIST_TRY(m.swiglu_limit, f.number_or("swiglu_limit", 7.0, 0.0, 1e9));
  MIST_TRY(m.sliding_window, f.integer_or("sliding_window", 128, 0, kMaxPositions));
  // layer_types: "sliding_attention" or "full_attention" per block; mist takes the pattern of a
  // full-attention block every N (GptOssConfig's default: alternating, the 2nd, 4th, ... full).
  if (!f.has("layer_types")) {
    m.full_attention_interval = 2;
    return m;
  }
  const Json& types = f.raw("layer_types");
  if (!types.is_array() || static_cast<int64_t>(types.size()) != m.num_layers)
    return fail(f.field_path("layer_types"),
                fmt::format("must be a list of num_hidden_layers ({}) strings", m.num_layers));
  std::vector<int64_t> full;
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string t = types[i].is_string() ? types[i].get<std::string>() : "";
    if (t == "full_attention") {
      full.push_back(static_cast<int64_t>(i) + 1);
    } else if (t != "sliding_attention") {
      return fail(fmt::format("{}[{}]", f.field_path("layer_types"), i),
                  "must be \"sliding_attention\" or \"full_attention\"");
    }
  }
  if (full.empty()) {
    m.full_attention_interval = 0;
  } else if (static_cast<int64_t>(full.size()) == m.num_layers) {
    m.sliding_window = 0;
  } else {
    const int64_t n = full.front();
    for (size_t i = 0; i < full.size(); ++i)
      if (full[i] != n * static_cast<int64_t>(i + 1) || (i + 1 == full.size() && m.num_layers - full[i] >= n))
        return fail(f.field_path("layer_types"),
                    fmt::format("unsupported pattern: mist models a full-attention block every N blocks "
                                "(the Nth, 2Nth, ...); block {} breaks it", full[i]));
    m.full_attention_interval = n;
  }
  return m;
}

// DeepseekV3Config (transformers' deepseek_v3; DeepSeek-V2's deepseek_v2 shares it): multi-head
// latent attention; the first first_k_dense_replace blocks dense (intermediate_size), the others a
// router over n_routed_experts experts of moe_intermediate_size, top num_experts_per_tok, plus
// n_shared_experts shared experts (one SwiGLU of n_shared·moe_intermediate_size, ungated). The
// router's sigmoid scores, group-limited top-k and score-correction bias change no size mist counts
// beyond the bias (E per block); the multi-token-prediction module (num_nextn_predict_layers) is
// not part of the model mist plans (docs/specs.md).
Result<ModelSpec> from_deepseek(const JsonFields& f, const std::string& what) {
  MIST_TRY(ModelSpec m, hf_common(f, what, "llama"));
  MIST_SPEC_CHECK(read_layers_and_heads(f, m));
  m.num_kv_heads = m.num_heads;  // per-head keys and values out of the latent
  MIST_TRY(m.max_position_embeddings, f.integer_or("max_position_embeddings", 4096, 1, kMaxPositions));
  m.norm = Norm::kRmsNorm;
  m.mlp = Mlp::kSwiGlu;
  m.positions = Positions::kRotary;
  m.norms_per_block = 2;
  MIST_TRY(bool attention_bias, f.boolean_or("attention_bias", false));
  if (attention_bias)
    return fail(f.field_path("attention_bias"), "unsupported: biases on the latent attention's projections");
  MIST_TRY(m.tie_word_embeddings, f.boolean_or("tie_word_embeddings", false));
  if (f.has("q_lora_rank") && !f.raw("q_lora_rank").is_null()) {
    MIST_TRY(m.q_lora_rank, f.integer("q_lora_rank", 1, kMaxHidden));
  }
  MIST_TRY(m.kv_lora_rank, f.integer("kv_lora_rank", 1, kMaxHidden));
  MIST_TRY(m.qk_nope_head_dim, f.integer("qk_nope_head_dim", 1, kMaxHidden));
  MIST_TRY(m.qk_rope_head_dim, f.integer("qk_rope_head_dim", 2, kMaxHidden));
  MIST_TRY(m.v_head_dim, f.integer("v_head_dim", 1, kMaxHidden));
  MIST_TRY(m.num_experts, f.integer("n_routed_experts", 1, kMaxExperts));
  MIST_TRY(m.experts_per_token, f.integer("num_experts_per_tok", 1, m.num_experts));
  MIST_TRY(m.moe_ffn_hidden_size, f.integer("moe_intermediate_size", 1, kMaxFfn));
  MIST_TRY(int64_t shared, f.integer_or("n_shared_experts", 0, 0, kMaxExperts));
  m.shared_expert_ffn_hidden_size = shared * m.moe_ffn_hidden_size;
  MIST_TRY(int64_t freq, f.integer_or("moe_layer_freq", 1, 1, kMaxLayers));
  if (freq != 1)
    return fail(f.field_path("moe_layer_freq"),
                fmt::format("unsupported: {} (an MoE block every {} blocks); mist models dense blocks first, then "
                            "MoE blocks", freq, freq));
  MIST_TRY(m.first_dense_layers, f.integer_or("first_k_dense_replace", 0, 0, m.num_layers - 1));
  MIST_TRY(m.ffn_hidden_size, f.integer("intermediate_size", 1, kMaxFfn));
  if (m.first_dense_layers == 0) m.ffn_hidden_size = 0;
  MIST_TRY(int64_t mtp, f.integer_or("num_nextn_predict_layers", 0, 0, kMaxLayers));
  m.mtp_layers = mtp;
  return m;
}

// FalconConfig (transformers), including the 7B layout (multi-query, one shared norm) and the
// 40B "new decoder architecture" (grouped KV heads, separate attention and MLP norms).
Result<ModelSpec> from_falcon(const JsonFields& f, const std::string& what) {
  MIST_TRY(ModelSpec m, hf_common(f, what, "falcon"));
  MIST_TRY(bool alibi, f.boolean_or("alibi", false));
  if (alibi)
    return fail(f.field_path("alibi"),
                "unsupported: ALiBi attention biases are not modelled (mist supports rotary "
                "positions for Falcon)");
  MIST_TRY(m.hidden_size, f.integer("hidden_size", 1, kMaxHidden));
  // Older Falcon configs (RefinedWeb era) spell the counts n_layer / n_head.
  const char* layers_key = f.has("num_hidden_layers") ? "num_hidden_layers" : "n_layer";
  const char* heads_key = f.has("num_attention_heads") ? "num_attention_heads" : "n_head";
  MIST_TRY(m.num_layers, f.integer(layers_key, 1, kMaxLayers));
  MIST_TRY(m.num_heads, f.integer(heads_key, 1, kMaxHidden));
  MIST_TRY(bool new_arch, f.boolean_or("new_decoder_architecture", false));
  MIST_TRY(bool multi_query, f.boolean_or("multi_query", true));  // FalconConfig's default
  if (new_arch) {
    MIST_TRY(m.num_kv_heads, f.integer_or("num_kv_heads", m.num_heads, 1, kMaxHidden));
  } else {
    m.num_kv_heads = multi_query ? 1 : m.num_heads;
  }
  MIST_TRY(m.ffn_hidden_size, f.integer_or("ffn_hidden_size", 4 * m.hidden_size, 1, kMaxFfn));
  MIST_TRY(m.max_position_embeddings,
           f.integer_or("max_position_embeddings", 2048, 1, kMaxPositions));
  MIST_SPEC_CHECK(check_head_dim(f, m));
  MIST_TRY(bool parallel_attn, f.boolean_or("parallel_attn", true));
  // FalconDecoderLayer: the new architecture is always parallel with ln_attn + ln_mlp (unless
  // num_ln_in_parallel_attn says 1); the old one shares input_layernorm when parallel, else adds
  // post_attention_layernorm.
  m.parallel_block = new_arch || parallel_attn;
  if (new_arch) {
    MIST_TRY(m.norms_per_block, f.integer_or("num_ln_in_parallel_attn", 2, 1, 2));
  } else {
    m.norms_per_block = parallel_attn ? 1 : 2;
  }
  MIST_TRY(bool bias, f.boolean_or("bias", false));
  m.qkv_bias = bias;
  m.linear_bias = bias;
  m.norm = Norm::kLayerNorm;
  m.mlp = Mlp::kGelu;
  m.positions = Positions::kRotary;
  MIST_TRY(m.tie_word_embeddings, f.boolean_or("tie_word_embeddings", true));
  return m;
}


Result<ModelSpec> from_hf(const JsonFields& f, const std::string& what) {
  MIST_TRY(std::string type, f.string("model_type"));
  if (type == "mixtral") return from_mixtral(f, what);
  if (type == "qwen2_moe") return from_qwen2_moe(f, what);
  if (type == "qwen3_moe") return from_qwen3_moe(f, what);
  if (type == "gpt_oss") return from_gpt_oss(f, what);
  if (type == "deepseek_v3" || type == "deepseek_v2") return from_deepseek(f, what);
  if (type == "gpt2" || type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3" ||
      type == "falcon")
    MIST_SPEC_CHECK(reject_expert_keys(f, type));
  if (type == "qwen3") return from_qwen3(f, what, type);
  if (type == "gpt2") return from_gpt2(f, what);
  if (type == "llama" || type == "mistral" || type == "qwen2") return from_llama(f, what, type);
  if (type == "falcon") return from_falcon(f, what);
  return fail(f.field_path("model_type"),
              fmt::format("unsupported model_type \"{}\" (supported: {})", type, kHfTypes));
}

// The config's key for each ModelSpec field a reader fills from a differently named key, so that a
// validation error names the field as the user wrote it ("n_head", not "num_heads"). Fields read
// under their own name (hidden_size, vocab_size, head_dim, ...) are left out.
using KeyNames = std::vector<std::pair<std::string_view, std::string>>;

KeyNames hf_key_names(const JsonFields& f, const std::string& type) {
  if (type == "gpt2")
    return {{"num_layers", "n_layer"}, {"hidden_size", "n_embd"}, {"num_heads", "n_head"}, {"num_kv_heads", "n_head"},
            {"ffn_hidden_size", "n_inner"}, {"max_position_embeddings", "n_positions"}};
  if (type == "falcon")
    return {{"num_layers", f.has("num_hidden_layers") ? "num_hidden_layers" : "n_layer"},
            {"num_heads", f.has("num_attention_heads") ? "num_attention_heads" : "n_head"},
            {"norms_per_block", "num_ln_in_parallel_attn"}};
  KeyNames k{{"num_layers", "num_hidden_layers"}, {"num_heads", "num_attention_heads"},
             {"num_kv_heads", "num_key_value_heads"}, {"ffn_hidden_size", "intermediate_size"},
             {"experts_per_token", "num_experts_per_tok"}, {"moe_ffn_hidden_size", "moe_intermediate_size"}};
  auto set = [&](std::string_view field, std::string key) {
    for (auto& [f, name] : k)
      if (f == field) {
        name = std::move(key);
        return;
      }
    k.emplace_back(field, std::move(key));
  };
  if (type == "mixtral" || type == "gpt_oss") {
    set("num_experts", "num_local_experts");
    set("moe_ffn_hidden_size", "intermediate_size");  // each expert's width
  }
  if (type == "gpt_oss") set("full_attention_interval", "layer_types");
  if (type == "qwen2_moe" || type == "qwen3_moe") {
    set("shared_expert_ffn_hidden_size", "shared_expert_intermediate_size");
    set("first_dense_layers", "mlp_only_layers");
  }
  if (type == "deepseek_v3" || type == "deepseek_v2") {
    set("num_kv_heads", "num_attention_heads");  // keys and values per head, out of the latent
    set("num_experts", "n_routed_experts");
    set("shared_expert_ffn_hidden_size", "n_shared_experts");
    set("first_dense_layers", "first_k_dense_replace");
    set("mtp_layers", "num_nextn_predict_layers");
  }
  return k;
}

// `e` with every field name of `names` replaced by the config's: in its path (`root`.field) and,
// word by word, in its message.
Error with_config_names(Error e, const std::string& root, const KeyNames& names) {
  auto rename = [&](std::string_view word) -> std::string_view {
    for (const auto& [mist_key, config_key] : names)
      if (word == mist_key) return config_key;
    return word;
  };
  const std::string prefix = root.empty() ? "" : root + ".";
  if (e.path.starts_with(prefix) && e.path.size() > prefix.size())
    e.path = prefix + std::string(rename(std::string_view(e.path).substr(prefix.size())));
  std::string out;
  auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t i = 0; i < e.message.size();) {
    size_t j = i;
    while (j < e.message.size() && is_word(e.message[j])) ++j;
    if (j == i) {
      out += e.message[i++];
      continue;
    }
    out += rename(std::string_view(e.message).substr(i, j - i));
    i = j;
  }
  e.message = std::move(out);
  return e;
}

// --- mist's own form ----------------------------------------------------------------------------

Result<ModelSpec> from_mist(const JsonFields& f) {
  MIST_SPEC_CHECK(f.reject_unknown(
      {"name", "family", "source", "num_layers", "hidden_size", "num_heads", "num_kv_heads",
       "ffn_hidden_size", "vocab_size", "max_position_embeddings", "norm", "mlp", "positions",
       "parallel_block", "norms_per_block", "qkv_bias", "linear_bias", "tie_word_embeddings",
       "num_experts", "experts_per_token", "moe_ffn_hidden_size", "shared_expert_ffn_hidden_size",
       "shared_expert_gate", "first_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
       "qk_rope_head_dim", "v_head_dim", "mtp_layers", "sliding_window", "full_attention_interval", "attention_sinks", "swiglu_limit",
       "head_dim", "qk_norm"}));
  ModelSpec m;
  MIST_TRY(m.name, f.string("name"));
  MIST_TRY(m.family, f.choice("family", {"gpt", "llama", "falcon"}));
  MIST_TRY(m.source, f.string_or("source", ""));
  MIST_TRY(m.num_layers, f.integer("num_layers", 1, kMaxLayers));
  MIST_TRY(m.hidden_size, f.integer("hidden_size", 1, kMaxHidden));
  MIST_TRY(m.num_heads, f.integer("num_heads", 1, kMaxHidden));
  MIST_TRY(m.num_kv_heads, f.integer_or("num_kv_heads", m.num_heads, 1, kMaxHidden));
  MIST_TRY(m.num_experts, f.integer_or("num_experts", 0, 0, kMaxExperts));
  MIST_TRY(m.first_dense_layers, f.integer_or("first_dense_layers", 0, 0, kMaxLayers));
  MIST_TRY(m.q_lora_rank, f.integer_or("q_lora_rank", 0, 0, kMaxHidden));
  MIST_TRY(m.kv_lora_rank, f.integer_or("kv_lora_rank", 0, 0, kMaxHidden));
  MIST_TRY(m.qk_nope_head_dim, f.integer_or("qk_nope_head_dim", 0, 0, kMaxHidden));
  MIST_TRY(m.qk_rope_head_dim, f.integer_or("qk_rope_head_dim", 0, 0, kMaxHidden));
  MIST_TRY(m.v_head_dim, f.integer_or("v_head_dim", 0, 0, kMaxHidden));
  MIST_TRY(m.mtp_layers, f.integer_or("mtp_layers", 0, 0, kMaxLayers));
  // A mixture of experts has a dense MLP width only for its first dense blocks.
  MIST_TRY(m.ffn_hidden_size, !m.is_moe()                  ? f.integer("ffn_hidden_size", 1, kMaxFfn)
                              : m.first_dense_layers == 0 ? f.integer_or("ffn_hidden_size", 0, 0, 0)
                                                          : f.integer("ffn_hidden_size", 1, kMaxFfn));
  MIST_TRY(m.experts_per_token, f.integer_or("experts_per_token", 0, 0, kMaxExperts));
  MIST_TRY(m.moe_ffn_hidden_size, f.integer_or("moe_ffn_hidden_size", 0, 0, kMaxFfn));
  MIST_TRY(m.shared_expert_ffn_hidden_size, f.integer_or("shared_expert_ffn_hidden_size", 0, 0, kMaxFfn));
  MIST_TRY(m.shared_expert_gate, f.boolean_or("shared_expert_gate", false));
  MIST_TRY(m.sliding_window, f.integer_or("sliding_window", 0, 0, kMaxPositions));
  MIST_TRY(m.full_attention_interval, f.integer_or("full_attention_interval", 0, 0, kMaxLayers));
  MIST_TRY(m.attention_sinks, f.boolean_or("attention_sinks", false));
  MIST_TRY(m.swiglu_limit, f.number_or("swiglu_limit", 0.0, 0.0, 1e9));
  MIST_TRY(m.vocab_size, f.integer("vocab_size", 1, kMaxVocab));
  MIST_TRY(m.max_position_embeddings, f.integer("max_position_embeddings", 1, kMaxPositions));
  MIST_TRY(std::string norm, f.choice("norm", {"layernorm", "rmsnorm"}));
  MIST_TRY(std::string mlp, f.choice("mlp", {"gelu", "swiglu"}));
  MIST_TRY(std::string positions, f.choice("positions", {"learned", "rotary"}));
  m.norm = norm == "layernorm" ? Norm::kLayerNorm : Norm::kRmsNorm;
  m.mlp = mlp == "gelu" ? Mlp::kGelu : Mlp::kSwiGlu;
  m.positions = positions == "learned" ? Positions::kLearned : Positions::kRotary;
  MIST_TRY(m.parallel_block, f.boolean_or("parallel_block", false));
  MIST_TRY(m.norms_per_block, f.integer_or("norms_per_block", 2, 1, 2));
  MIST_TRY(m.qkv_bias, f.boolean_or("qkv_bias", false));
  MIST_TRY(m.linear_bias, f.boolean_or("linear_bias", false));
  MIST_TRY(m.tie_word_embeddings, f.boolean_or("tie_word_embeddings", false));
  MIST_TRY(m.attention_head_dim, f.integer_or("head_dim", 0, 0, kMaxHidden));
  MIST_TRY(m.qk_norm, f.boolean_or("qk_norm", false));
  return m;
}

}  // namespace

// Per block (h hidden, f ffn, a heads, g kv heads, d head dim, h/a unless head_dim is set):
//   attention  q h*a*d + k,v 2*h*g*d + o a*d*h   (+ qkv bias a*d + 2*g*d, + o bias h; + q/k norms 2*d)
//   MLP        GELU 2*h*f (+ f + h bias); SwiGLU gate/up/down 3*h*f (+ 2*f + h bias)
//   norms      norms_per_block * (LayerNorm 2h | RMSNorm h)
//   MoE        router h*E + experts E * 3*h*f_e + shared expert 3*h*f_s (+ its gate h)
//              (+ with linear_bias: router E, each expert 2*f_e + h, the shared expert 2*f_s + h);
//              GELU experts 2*h*f_e and 2*h*f_s (+ f_e + h, f_s + h biases)
//   sinks      a (one logit per query head)
namespace {

// The block without its routed experts (attention, norms, dense MLP or router and shared expert),
// and one routed expert.
struct BlockCounts {
  int64_t common = 0, expert = 0;
};

// Multi-head latent attention: q (h·r_q + its RMSNorm r_q + r_q·a·(d_n + d_r), or h·a·(d_n + d_r)
// without the bottleneck), kv down h·(r_kv + d_r), its RMSNorm r_kv, kv up r_kv·a·(d_n + d_v), out
// a·d_v·h; no biases.
int64_t mla_parameters(const ModelSpec& m) {
  const int64_t h = m.hidden_size, a = m.num_heads, dqk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  const int64_t q = m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * dqk : h * a * dqk;
  const int64_t kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank +
                     m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim);
  return q + kv + a * m.v_head_dim * h;
}

BlockCounts block_counts(const ModelSpec& m, bool dense_mlp = false) {
  const int64_t h = m.hidden_size, f = m.ffn_hidden_size, kv = kv_width(m), q = m.num_heads > 0 ? m.query_width() : 0;
  int64_t attn = 2 * h * q + 2 * h * kv;
  if (m.qkv_bias) attn += q + 2 * kv;
  if (m.linear_bias) attn += h;
  if (m.is_mla()) attn = mla_parameters(m);
  if (m.qk_norm) attn += 2 * norm_parameters(Norm::kRmsNorm, m.head_dim());  // q_norm, k_norm: one d each
  if (m.attention_sinks) attn += m.num_heads;
  const int64_t norms = m.norms_per_block * norm_parameters(m.norm, h);
  if (m.is_moe() && !dense_mlp) {
    // The experts and the shared expert are of the model's MLP kind: SwiGLU (gate, up, down) or
    // GELU (fc1, fc2; Megatron without --swiglu, as its MoE layer benchmark runs).
    const int64_t fs = m.shared_expert_ffn_hidden_size, fe = m.moe_ffn_hidden_size;
    const int64_t mats = m.mlp == Mlp::kGelu ? 2 : 3, in_biases = m.mlp == Mlp::kGelu ? 1 : 2;
    int64_t shared = mats * h * fs + (m.shared_expert_gate ? h : 0);
    int64_t router = h * m.num_experts, expert = mats * h * fe;
    if (m.linear_bias) {
      router += m.num_experts;
      expert += in_biases * fe + h;
      if (fs > 0) shared += in_biases * fs + h;
    }
    return {attn + norms + router + shared, expert};
  }
  int64_t ffn = m.mlp == Mlp::kGelu ? 2 * h * f : 3 * h * f;
  if (m.linear_bias) ffn += (m.mlp == Mlp::kGelu ? f : 2 * f) + h;
  return {attn + ffn + norms, 0};
}

// Embedding, learned position table, final norm and the LM head unless tied.
int64_t outside_blocks(const ModelSpec& m) {
  const int64_t h = m.hidden_size;
  int64_t n = m.vocab_size * h + norm_parameters(m.norm, h);
  if (m.positions == Positions::kLearned) n += m.max_position_embeddings * h;
  if (!m.tie_word_embeddings) n += m.vocab_size * h;
  return n;
}

}  // namespace

int64_t ModelSpec::windowed_layers() const {
  if (sliding_window <= 0) return 0;
  return full_attention_interval > 0 ? num_layers - num_layers / full_attention_interval : num_layers;
}

int64_t ModelSpec::block_parameters() const {
  BlockCounts c = block_counts(*this);
  return c.common + num_experts * c.expert;
}

int64_t ModelSpec::active_block_parameters() const {
  BlockCounts c = block_counts(*this);
  return c.common + experts_per_token * c.expert;
}

int64_t ModelSpec::dense_block_parameters() const { return block_counts(*this, true).common; }

// L blocks (the first dense ones of a mixture of experts apart) + word embedding V*h + learned
// position table (GPT) + final norm + LM head unless tied.
int64_t ModelSpec::num_parameters() const {
  const int64_t k = is_moe() ? first_dense_layers : 0;
  return (num_layers - k) * block_parameters() + k * dense_block_parameters() + outside_blocks(*this);
}

// The embedding row a token reads is one of V*h, but by the usual convention (the model cards'
// "activated parameters") the embedding and head count whole.
int64_t ModelSpec::num_active_parameters() const {
  const int64_t k = is_moe() ? first_dense_layers : 0;
  return (num_layers - k) * active_block_parameters() + k * dense_block_parameters() + outside_blocks(*this);
}

namespace {

// The expert fields of a mixture of experts, and what mist's MoE block assumes.
template <class At>
Result<void> validate_experts(const ModelSpec& m, const At& at) {
  if (m.num_experts > kMaxExperts)
    return fail(at("num_experts"), fmt::format("must be at most {}, got {}", kMaxExperts, m.num_experts));
  if (m.experts_per_token < 1 || m.experts_per_token > m.num_experts)
    return fail(at("experts_per_token"), fmt::format("must be between 1 and num_experts ({}), got {}",
                                                     m.num_experts, m.experts_per_token));
  if (m.moe_ffn_hidden_size < 1 || m.moe_ffn_hidden_size > kMaxFfn)
    return fail(at("moe_ffn_hidden_size"),
                fmt::format("must be between 1 and {}, got {}", kMaxFfn, m.moe_ffn_hidden_size));
  if (m.shared_expert_ffn_hidden_size < 0 || m.shared_expert_ffn_hidden_size > kMaxFfn)
    return fail(at("shared_expert_ffn_hidden_size"),
                fmt::format("must be between 0 and {}, got {}", kMaxFfn, m.shared_expert_ffn_hidden_size));
  if (m.first_dense_layers < 0 || m.first_dense_layers >= m.num_layers)
    return fail(at("first_dense_layers"), fmt::format("must be between 0 and num_layers − 1 ({}), got {}",
                                                      m.num_layers - 1, m.first_dense_layers));
  if (m.first_dense_layers == 0 && m.ffn_hidden_size != 0)
    return fail(at("ffn_hidden_size"),
                fmt::format("must be 0 for a mixture of experts without dense blocks (the expert width is "
                            "moe_ffn_hidden_size), got {}", m.ffn_hidden_size));
  if (m.first_dense_layers > 0 && (m.ffn_hidden_size < 1 || m.ffn_hidden_size > kMaxFfn))
    return fail(at("ffn_hidden_size"), fmt::format("must be between 1 and {} (the width of the {} dense blocks), got {}",
                                                   kMaxFfn, m.first_dense_layers, m.ffn_hidden_size));
  if (m.parallel_block)
    return fail(at("parallel_block"), "a parallel attention/MLP block with experts is not modelled");
  return {};
}

}  // namespace

Result<void> validate_model(const ModelSpec& m, const std::string& path) {
  auto at = [&](std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  };
  auto in_range = [&](std::string_view key, int64_t v, int64_t hi) -> Result<void> {
    if (v < 1) return fail(at(key), fmt::format("must be at least 1, got {}", v));
    if (v > hi) return fail(at(key), fmt::format("must be at most {}, got {}", hi, v));
    return {};
  };
  if (m.name.empty()) return fail(at("name"), "must not be empty");
  if (m.family != "gpt" && m.family != "llama" && m.family != "falcon")
    return fail(at("family"),
                fmt::format("must be one of \"gpt\", \"llama\", \"falcon\", got \"{}\"", m.family));
  MIST_SPEC_CHECK(in_range("num_layers", m.num_layers, kMaxLayers));
  MIST_SPEC_CHECK(in_range("hidden_size", m.hidden_size, kMaxHidden));
  MIST_SPEC_CHECK(in_range("num_heads", m.num_heads, m.hidden_size));
  MIST_SPEC_CHECK(in_range("num_kv_heads", m.num_kv_heads, m.num_heads));
  if (m.is_moe()) {
    MIST_SPEC_CHECK(validate_experts(m, at));
  } else {
    MIST_SPEC_CHECK(in_range("ffn_hidden_size", m.ffn_hidden_size, kMaxFfn));
    // Expert settings without experts would be ignored: refuse them.
    for (auto [key, v] : {std::pair{"experts_per_token", m.experts_per_token},
                          std::pair{"first_dense_layers", m.first_dense_layers},
                          std::pair{"moe_ffn_hidden_size", m.moe_ffn_hidden_size},
                          std::pair{"shared_expert_ffn_hidden_size", m.shared_expert_ffn_hidden_size}})
      if (v != 0) return fail(at(key), fmt::format("is {} but num_experts is 0 (a dense model)", v));
  }
  if (m.shared_expert_gate && m.shared_expert_ffn_hidden_size == 0)
    return fail(at("shared_expert_gate"), "needs a shared expert (shared_expert_ffn_hidden_size > 0)");
  if (m.sliding_window < 0)
    return fail(at("sliding_window"), fmt::format("must be 0 (none) or positive, got {}", m.sliding_window));
  if (m.full_attention_interval < 0 || m.full_attention_interval > m.num_layers)
    return fail(at("full_attention_interval"),
                fmt::format("must be 0 (every block windowed) or between 1 and num_layers ({}), got {}",
                            m.num_layers, m.full_attention_interval));
  if (m.full_attention_interval > 0 && m.sliding_window == 0)
    return fail(at("full_attention_interval"), "needs a sliding_window (the other blocks' window)");
  if (m.is_mla()) {
    for (auto [key, v] : {std::pair{"qk_nope_head_dim", m.qk_nope_head_dim}, std::pair{"v_head_dim", m.v_head_dim}})
      if (v < 1) return fail(at(key), fmt::format("must be at least 1 with latent attention (kv_lora_rank), got {}", v));
    if (m.qk_rope_head_dim < 2 || m.qk_rope_head_dim % 2 != 0)
      return fail(at("qk_rope_head_dim"), fmt::format("must be even and at least 2 (the rotary half), got {}",
                                                      m.qk_rope_head_dim));
    if (m.num_kv_heads != m.num_heads)
      return fail(at("num_kv_heads"), "must equal num_heads with latent attention (every head's keys come out of the latent)");
    if (m.attention_head_dim != 0 || m.qk_norm || m.qkv_bias || m.attention_sinks || m.windowed_layers() > 0)
      return fail(at("kv_lora_rank"), "latent attention with head_dim, qk_norm, qkv_bias, sinks or a window is not modelled");
  } else {
    for (auto [key, v] : {std::pair{"q_lora_rank", m.q_lora_rank}, std::pair{"qk_nope_head_dim", m.qk_nope_head_dim},
                          std::pair{"qk_rope_head_dim", m.qk_rope_head_dim}, std::pair{"v_head_dim", m.v_head_dim}})
      if (v != 0) return fail(at(key), fmt::format("is {} but kv_lora_rank is 0 (no latent attention)", v));
  }
  if (m.mtp_layers < 0)
    return fail(at("mtp_layers"), fmt::format("must be 0 or positive, got {}", m.mtp_layers));
  if (m.swiglu_limit < 0 || (m.swiglu_limit > 0 && m.mlp != Mlp::kSwiGlu))
    return fail(at("swiglu_limit"), "must be 0, or positive with a SwiGLU MLP");
  MIST_SPEC_CHECK(in_range("vocab_size", m.vocab_size, kMaxVocab));
  MIST_SPEC_CHECK(in_range("max_position_embeddings", m.max_position_embeddings, kMaxPositions));
  MIST_SPEC_CHECK(in_range("norms_per_block", m.norms_per_block, 2));
  if (m.attention_head_dim < 0 || m.attention_head_dim > kMaxHidden)
    return fail(at("head_dim"), fmt::format("must be 0 (hidden_size / num_heads) or between 1 and {}, got {}",
                                            kMaxHidden, m.attention_head_dim));
  if (m.attention_head_dim == 0 && !m.is_mla() && m.hidden_size % m.num_heads != 0)
    return fail(at("num_heads"),
                fmt::format("must divide hidden_size ({} % {} = {})", m.hidden_size, m.num_heads,
                            m.hidden_size % m.num_heads));
  if (m.num_heads % m.num_kv_heads != 0)
    return fail(at("num_kv_heads"), fmt::format("must divide num_heads ({} % {} = {})", m.num_heads,
                                                m.num_kv_heads, m.num_heads % m.num_kv_heads));
  // A sequential block needs a norm before attention and one before the MLP.
  if (m.norms_per_block == 1 && !m.parallel_block)
    return fail(at("norms_per_block"), "1 (a shared norm) requires parallel_block true");
  // Routed experts can pass int64 within the bounds above: check their count in floating point
  // first. Dense blocks fit int64 within the bounds (see kMaxFfn).
  const double experts = static_cast<double>(m.num_layers) * static_cast<double>(m.num_experts) * 3.0 *
                         static_cast<double>(m.hidden_size) * static_cast<double>(m.moe_ffn_hidden_size);
  if (experts > static_cast<double>(kMaxParameters))
    return fail(path, fmt::format("model has {:.3g} expert parameters, more than the 1e15 mist accepts", experts));
  if (int64_t n = m.num_parameters(); n > kMaxParameters)
    return fail(path, fmt::format("model has {:.3g} parameters, more than the 1e15 mist accepts",
                                  static_cast<double>(n)));
  return {};
}

std::string megatron_core_only(const ModelSpec& m) {
  if (m.is_moe()) return "is a mixture of experts";
  if (m.qk_norm || m.decoupled_head_dim()) return "has Qwen3's attention (its own head size, q/k RMSNorm)";
  if (m.attention_sinks) return "has attention sinks";
  if (m.is_mla()) return "has multi-head latent attention";
  return {};
}

Result<ModelSpec> model_from_json(const Json& j, const std::string& what) {
  MIST_TRY(JsonFields f, JsonFields::of(j, what));
  ModelSpec m;
  if (f.has("model_type")) {
    MIST_TRY(m, from_hf(f, what));
    // from_hf read model_type, so it is a string here.
    if (auto ok = validate_model(m, what); !ok)
      return std::unexpected(with_config_names(ok.error(), what, hf_key_names(f, f.raw("model_type").get<std::string>())));
    return m;
  } else if (f.has("family")) {
    MIST_TRY(m, from_mist(f));
  } else {
    return fail(what,
                "not a model: neither a Hugging Face config.json (no \"model_type\") nor mist's "
                "model form (no \"family\")");
  }
  MIST_SPEC_CHECK(validate_model(m, what));
  return m;
}

Json model_to_json(const ModelSpec& m) {
  Json j{{"name", m.name},
              {"family", m.family},
              {"source", m.source},
              {"num_layers", m.num_layers},
              {"hidden_size", m.hidden_size},
              {"num_heads", m.num_heads},
              {"num_kv_heads", m.num_kv_heads},
              {"ffn_hidden_size", m.ffn_hidden_size},
              {"vocab_size", m.vocab_size},
              {"max_position_embeddings", m.max_position_embeddings},
              {"norm", to_string(m.norm)},
              {"mlp", to_string(m.mlp)},
              {"positions", to_string(m.positions)},
              {"parallel_block", m.parallel_block},
              {"norms_per_block", m.norms_per_block},
              {"qkv_bias", m.qkv_bias},
              {"linear_bias", m.linear_bias},
              {"tie_word_embeddings", m.tie_word_embeddings}};
  // Written only when set, so that a dense model's form is what it was before experts existed.
  if (m.is_moe()) {
    j["num_experts"] = m.num_experts;
    j["experts_per_token"] = m.experts_per_token;
    j["moe_ffn_hidden_size"] = m.moe_ffn_hidden_size;
    j["shared_expert_ffn_hidden_size"] = m.shared_expert_ffn_hidden_size;
    j["shared_expert_gate"] = m.shared_expert_gate;
    if (m.first_dense_layers > 0) j["first_dense_layers"] = m.first_dense_layers;
  }
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  if (m.full_attention_interval > 0) j["full_attention_interval"] = m.full_attention_interval;
  if (m.attention_sinks) j["attention_sinks"] = true;
  if (m.is_mla()) {
    j["q_lora_rank"] = m.q_lora_rank;
    j["kv_lora_rank"] = m.kv_lora_rank;
    j["qk_nope_head_dim"] = m.qk_nope_head_dim;
    j["qk_rope_head_dim"] = m.qk_rope_head_dim;
    j["v_head_dim"] = m.v_head_dim;
  }
  if (m.mtp_layers > 0) j["mtp_layers"] = m.mtp_layers;
  if (m.swiglu_limit > 0) j["swiglu_limit"] = m.swiglu_limit;
  if (m.attention_head_dim > 0) j["head_dim"] = m.attention_head_dim;
  if (m.qk_norm) j["qk_norm"] = true;
  return j;
}

Result<ModelSpec> load_model(const std::string& name_or_path) {
  for (const auto& name : model_catalog_names())
    if (name == name_or_path) return catalog_model(name);
  std::error_code ec;
  // A directory is read (and refused, saying so) by load_json_as.
  if (!std::filesystem::exists(name_or_path, ec)) {
    return fail(name_or_path, "not a catalog model (known: " + join(model_catalog_names()) +
                                  ") and no such file");
  }
  MIST_TRY(ModelSpec m, load_json_as(name_or_path, "model", model_from_json));
  // A config.json without "_name_or_path" is named after its folder or file.
  if (m.name == "model") m.name = name_from_path(name_or_path);
  if (m.source == "Hugging Face config.json (model)") m.source = "Hugging Face config.json (" + name_or_path + ")";
  return m;
}

const char* to_string(Norm n) { return n == Norm::kLayerNorm ? "layernorm" : "rmsnorm"; }
const char* to_string(Mlp m) { return m == Mlp::kGelu ? "gelu" : "swiglu"; }
const char* to_string(Positions p) { return p == Positions::kLearned ? "learned" : "rotary"; }

}  // namespace mist::spec
