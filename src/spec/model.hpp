// ModelSpec: the architecture of a decoder-only transformer, as mist lowers it.
// Loaded from a Hugging Face config.json (gpt2, llama, mistral, qwen2, falcon), from mist's own
// JSON form (the catalog entries in data/models.json use it), or by catalog name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json_fields.hpp"

namespace mist::spec {

enum class Norm { kLayerNorm, kRmsNorm };
enum class Mlp { kGelu, kSwiGlu };  // GELU MLP (h->f->h) or gated SwiGLU (h->2f->h)
enum class Positions { kLearned, kRotary };

struct ModelSpec {
  std::string name;     // catalog name or the HF "_name_or_path"/file name
  std::string family;   // "gpt", "llama" (llama, mistral, qwen2) or "falcon"
  std::string source;   // where the shapes come from (paper, model card, config.json path)

  int64_t num_layers = 0;          // transformer blocks, L
  int64_t hidden_size = 0;         // h
  int64_t num_heads = 0;           // a (query heads)
  int64_t num_kv_heads = 0;        // g (key/value heads; == a without GQA, 1 for MQA)
  int64_t ffn_hidden_size = 0;     // f (intermediate size; per branch for SwiGLU)
  int64_t vocab_size = 0;          // V
  int64_t max_position_embeddings = 0;  // learned position table rows (GPT); context limit

  Norm norm = Norm::kLayerNorm;
  Mlp mlp = Mlp::kGelu;
  Positions positions = Positions::kLearned;
  bool parallel_block = false;     // Falcon: attention and MLP read the same normed input
  int64_t norms_per_block = 2;     // 1 for Falcon-7B (shared norm), 2 otherwise
  bool qkv_bias = false;           // bias on the QKV projection (gpt2, qwen2)
  bool linear_bias = false;        // bias on the other projections (gpt2)
  bool tie_word_embeddings = false;

  int64_t head_dim() const { return hidden_size / num_heads; }
  // Parameter count of the whole model (embedding, blocks, final norm, LM head; tied head once).
  int64_t num_parameters() const;
  int64_t block_parameters() const;
  bool operator==(const ModelSpec&) const = default;
};

// A model given on the command line: a catalog name ("llama2-7b") or a JSON file path
// (a Hugging Face config.json or mist's own form).
Result<ModelSpec> load_model(const std::string& name_or_path);
// From parsed JSON; `what` names the source in errors ("model" or the file path).
Result<ModelSpec> model_from_json(const Json& j, const std::string& what);
// Mist's own form, as written by this function and read back by model_from_json.
Json model_to_json(const ModelSpec& m);
// Checks shapes: positive sizes, heads dividing hidden, kv heads dividing heads, etc.
Result<void> validate_model(const ModelSpec& m, const std::string& path);

std::vector<std::string> model_catalog_names();
Result<ModelSpec> catalog_model(const std::string& name);
// Every entry of data/models.json in file order, or why the embedded
// catalog is malformed. Parsed once; the reference stays valid for the life of the program.
const Result<std::vector<ModelSpec>>& model_catalog();

const char* to_string(Norm n);
const char* to_string(Mlp m);
const char* to_string(Positions p);

}  // namespace mist::spec
