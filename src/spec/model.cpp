// ModelSpec: parsing (Hugging Face config.json or mist's own form), validation, parameter counts.
#include "spec/model.hpp"

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

constexpr std::string_view kHfTypes = "\"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"falcon\"";

// LayerNorm has a gain and a bias per channel, RMSNorm only a gain.
int64_t norm_parameters(Norm n, int64_t h) { return n == Norm::kLayerNorm ? 2 * h : h; }

// Width of the K (or V) projection output, g*d; 0 for a spec with no heads (not yet validated).
int64_t kv_width(const ModelSpec& m) {
  return m.num_heads > 0 ? m.num_kv_heads * (m.hidden_size / m.num_heads) : 0;
}

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
  MIST_TRY(m.num_layers, f.integer("num_hidden_layers", 1, kMaxLayers));
  MIST_TRY(m.hidden_size, f.integer("hidden_size", 1, kMaxHidden));
  MIST_TRY(m.num_heads, f.integer("num_attention_heads", 1, kMaxHidden));
  MIST_TRY(m.num_kv_heads, f.integer_or("num_key_value_heads", m.num_heads, 1, kMaxHidden));
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
  if (type == "gpt2") return from_gpt2(f, what);
  if (type == "llama" || type == "mistral" || type == "qwen2") return from_llama(f, what, type);
  if (type == "falcon") return from_falcon(f, what);
  return fail(f.field_path("model_type"),
              fmt::format("unsupported model_type \"{}\" (supported: {})", type, kHfTypes));
}

// --- mist's own form ----------------------------------------------------------------------------

Result<ModelSpec> from_mist(const JsonFields& f) {
  MIST_SPEC_CHECK(f.reject_unknown(
      {"name", "family", "source", "num_layers", "hidden_size", "num_heads", "num_kv_heads",
       "ffn_hidden_size", "vocab_size", "max_position_embeddings", "norm", "mlp", "positions",
       "parallel_block", "norms_per_block", "qkv_bias", "linear_bias", "tie_word_embeddings"}));
  ModelSpec m;
  MIST_TRY(m.name, f.string("name"));
  MIST_TRY(m.family, f.choice("family", {"gpt", "llama", "falcon"}));
  MIST_TRY(m.source, f.string_or("source", ""));
  MIST_TRY(m.num_layers, f.integer("num_layers", 1, kMaxLayers));
  MIST_TRY(m.hidden_size, f.integer("hidden_size", 1, kMaxHidden));
  MIST_TRY(m.num_heads, f.integer("num_heads", 1, kMaxHidden));
  MIST_TRY(m.num_kv_heads, f.integer_or("num_kv_heads", m.num_heads, 1, kMaxHidden));
  MIST_TRY(m.ffn_hidden_size, f.integer("ffn_hidden_size", 1, kMaxFfn));
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
  return m;
}

}  // namespace

// Per block (h hidden, f ffn, g kv heads, d head dim):
//   attention  q h*h + k,v 2*h*g*d + o h*h   (+ qkv bias h + 2*g*d, + o bias h)
//   MLP        GELU 2*h*f (+ f + h bias); SwiGLU gate/up/down 3*h*f (+ 2*f + h bias)
//   norms      norms_per_block * (LayerNorm 2h | RMSNorm h)
int64_t ModelSpec::block_parameters() const {
  const int64_t h = hidden_size, f = ffn_hidden_size, kv = kv_width(*this);
  int64_t attn = 2 * h * h + 2 * h * kv;
  if (qkv_bias) attn += h + 2 * kv;
  if (linear_bias) attn += h;
  int64_t ffn = mlp == Mlp::kGelu ? 2 * h * f : 3 * h * f;
  if (linear_bias) ffn += (mlp == Mlp::kGelu ? f : 2 * f) + h;
  return attn + ffn + norms_per_block * norm_parameters(norm, h);
}

// L blocks + word embedding V*h + learned position table (GPT) + final norm + LM head unless tied.
int64_t ModelSpec::num_parameters() const {
  const int64_t h = hidden_size;
  int64_t n = num_layers * block_parameters() + vocab_size * h + norm_parameters(norm, h);
  if (positions == Positions::kLearned) n += max_position_embeddings * h;
  if (!tie_word_embeddings) n += vocab_size * h;
  return n;
}

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
  MIST_SPEC_CHECK(in_range("ffn_hidden_size", m.ffn_hidden_size, kMaxFfn));
  MIST_SPEC_CHECK(in_range("vocab_size", m.vocab_size, kMaxVocab));
  MIST_SPEC_CHECK(in_range("max_position_embeddings", m.max_position_embeddings, kMaxPositions));
  MIST_SPEC_CHECK(in_range("norms_per_block", m.norms_per_block, 2));
  if (m.hidden_size % m.num_heads != 0)
    return fail(at("num_heads"),
                fmt::format("must divide hidden_size ({} % {} = {})", m.hidden_size, m.num_heads,
                            m.hidden_size % m.num_heads));
  if (m.num_heads % m.num_kv_heads != 0)
    return fail(at("num_kv_heads"), fmt::format("must divide num_heads ({} % {} = {})", m.num_heads,
                                                m.num_kv_heads, m.num_heads % m.num_kv_heads));
  // A sequential block needs a norm before attention and one before the MLP.
  if (m.norms_per_block == 1 && !m.parallel_block)
    return fail(at("norms_per_block"), "1 (a shared norm) requires parallel_block true");
  // Within the bounds above the count fits int64 (see kMaxFfn).
  if (int64_t n = m.num_parameters(); n > kMaxParameters)
    return fail(path, fmt::format("model has {:.3g} parameters, more than the 1e15 mist accepts",
                                  static_cast<double>(n)));
  return {};
}

Result<ModelSpec> model_from_json(const Json& j, const std::string& what) {
  MIST_TRY(JsonFields f, JsonFields::of(j, what));
  ModelSpec m;
  if (f.has("model_type")) {
    MIST_TRY(m, from_hf(f, what));
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
  return Json{{"name", m.name},
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
}

Result<ModelSpec> load_model(const std::string& name_or_path) {
  for (const auto& name : model_catalog_names())
    if (name == name_or_path) return catalog_model(name);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name_or_path, ec)) {
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
