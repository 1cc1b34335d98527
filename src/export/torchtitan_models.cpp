#include "export/torchtitan_models.hpp"

#include <array>
#include <cctype>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mist::engines {

namespace {

// torchtitan/models/llama3/__init__.py (llama3_configs; hidden_dim from compute_ffn_hidden_dim) and
// config_registry.py (llama3_8b, llama3_70b, llama3_405b) at the commit. The 1B and 3B flavors have
// no config function there, so --config cannot name them.
constexpr std::array<TorchtitanModel, 3> kModels{{
    {"llama3", "llama3_8b", "8B", 32, 4096, 32, 8, 14336, 128256, false},
    {"llama3", "llama3_70b", "70B", 80, 8192, 64, 8, 28672, 128256, false},
    {"llama3", "llama3_405b", "405B", 126, 16384, 128, 8, 53248, 128256, false},
}};

// What separates `m` from torchtitan's llama3 block (RMSNorm twice, SwiGLU, rotary, no biases).
std::vector<std::string> differences_from_llama3(const spec::ModelSpec& m) {
  std::vector<std::string> d;
  if (m.norm != spec::Norm::kRmsNorm) d.push_back("LayerNorm");
  if (m.mlp != spec::Mlp::kSwiGlu) d.push_back("a GELU MLP");
  if (m.positions != spec::Positions::kRotary) d.push_back("learned positions");
  if (m.linear_bias || m.qkv_bias) d.push_back("biases");
  if (m.parallel_block) d.push_back("a parallel attention/MLP block");
  if (m.norms_per_block != 2) d.push_back("one norm per block");
  return d;
}

std::string config_name(std::string_view model_name) {
  std::string out = "mist_";
  for (char c : model_name)
    out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
                                                        : '_';
  return out;
}

}  // namespace

std::optional<TorchtitanModel> torchtitan_model(const spec::ModelSpec& m) {
  if (!differences_from_llama3(m).empty()) return std::nullopt;
  for (const auto& t : kModels)
    if (t.num_layers == m.num_layers && t.hidden_size == m.hidden_size && t.num_heads == m.num_heads &&
        t.num_kv_heads == m.num_kv_heads && t.ffn_hidden_size == m.ffn_hidden_size && t.vocab_size == m.vocab_size &&
        t.tie_word_embeddings == m.tie_word_embeddings)
      return t;
  return std::nullopt;
}

std::optional<TorchtitanModel> torchtitan_config(std::string_view config) {
  for (const auto& t : kModels)
    if (t.config == config) return t;
  return std::nullopt;
}

TorchtitanMissingModel torchtitan_missing_model(const spec::ModelSpec& m) {
  if (auto d = differences_from_llama3(m); !d.empty())
    return {std::nullopt,
            fmt::format("torchtitan has no model for {}: its dense decoders (llama3, qwen3) have RMSNorm, SwiGLU, "
                        "rotary positions and no biases, and {} has {}; the model needs its own folder under "
                        "torchtitan/models (model, parallelize and config_registry, as torchtitan/models/README.md "
                        "describes), then --module and --config name it",
                        m.name, m.name, fmt::join(d, ", "))};
  const std::string config = config_name(m.name);
  return {config,
          fmt::format("torchtitan registers no config for {} (its llama3 configs are llama3_8b, llama3_70b and "
                      "llama3_405b): add a flavor \"{}\" to llama3_configs in torchtitan/models/llama3/__init__.py "
                      "built as _8b is, with dim={}, n_layers={}, n_heads={}, n_kv_heads={}, vocab_size={}, "
                      "enable_weight_tying={}, hidden_dim={} given directly (not compute_ffn_hidden_dim), and "
                      "rope=ComplexRoPE.Config(dim={}, max_context_length={}) with the rotary theta and scaling of "
                      "the model's own config, and a "
                      "function {}() to torchtitan/models/llama3/config_registry.py as llama3_8b() is, with "
                      "model_registry(\"{}\"); the export's --config names it",
                      m.name, m.name, m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads, m.vocab_size,
                      m.tie_word_embeddings ? "True" : "False", m.ffn_hidden_size, m.head_dim(),
                      m.max_position_embeddings, config, m.name)};
}

}  // namespace mist::engines
