// ModelSpec: the architecture of a decoder-only transformer, as mist lowers it.
// Loaded from a Hugging Face config.json (gpt2, llama, mistral, qwen2, qwen3, falcon; mixtral,
// qwen2_moe, qwen3_moe and gpt_oss for mixtures of experts), from mist's own JSON form (the catalog entries in data/models.json use
// it), or by catalog name.
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
  // Bias on the other projections (gpt2); with experts, on the attention's output projection, the
  // router and each expert's two projections (gpt-oss).
  bool linear_bias = false;
  bool tie_word_embeddings = false;
  // Qwen3's attention: a head size of its own (head_dim; 0: hidden_size / num_heads, so the query
  // width a·d may differ from h; Megatron's --kv-channels), and an RMSNorm over each head of the
  // queries and keys before the rotary embedding (Megatron's --qk-layernorm).
  int64_t attention_head_dim = 0;
  bool qk_norm = false;

  // Mixture of experts: with num_experts > 0 every block's MLP is a router over num_experts SwiGLU
  // experts of moe_ffn_hidden_size units each, of which every token uses experts_per_token (top-k,
  // weighted by the router's probabilities), plus, when shared_expert_ffn_hidden_size > 0, one
  // shared SwiGLU expert every token passes through (Qwen2-MoE gates it with sigmoid(x·w), a
  // 1-unit linear). 0 experts: the dense MLP above. first_dense_layers k > 0: the first k blocks
  // have the dense MLP of ffn_hidden_size instead (DeepSeek's first_k_dense_replace, Qwen-MoE's
  // mlp_only_layers [0, k)); else ffn_hidden_size is unused (0).
  int64_t num_experts = 0;                    // E
  int64_t experts_per_token = 0;              // k
  int64_t moe_ffn_hidden_size = 0;            // f_e, per expert and per SwiGLU branch
  int64_t shared_expert_ffn_hidden_size = 0;  // f_s, 0 without a shared expert
  bool shared_expert_gate = false;
  int64_t first_dense_layers = 0;             // k
  // Multi-head latent attention (DeepSeek-V2/V3; Megatron's --multi-latent-attention), when
  // kv_lora_rank > 0: queries through a rank-q_lora_rank bottleneck (0: a direct projection), keys
  // and values from one compressed kv_lora_rank vector per token plus a shared rotary key of
  // qk_rope_head_dim; every head attends with qk_nope_head_dim + qk_rope_head_dim and returns
  // v_head_dim. num_kv_heads is then num_heads and head_dim unused.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // Multi-token-prediction modules the checkpoint has (DeepSeek-V3's num_nextn_predict_layers): kept
  // for reference, not counted or planned (mist plans training without them, Megatron's default).
  int64_t mtp_layers = 0;
  // Sliding-window attention (Mistral, Mixtral, gpt-oss): each token attends to the last
  // sliding_window positions; 0 for full causal attention. full_attention_interval N > 0: every Nth
  // block (the Nth, 2Nth, ...) attends over the whole sequence and the others use the window
  // (gpt-oss: 2, alternating; Megatron's --window-attn-skip-freq); 0: every block uses it.
  int64_t sliding_window = 0;
  int64_t full_attention_interval = 0;
  // gpt-oss: a learned logit per query head that joins every softmax's denominator (attention
  // sinks; Megatron's --softmax-type learnable), and SwiGLU experts of its own form,
  // (up + 1) · gate · sigmoid(1.702 · gate) with gate and up clamped at swiglu_limit (0: plain SwiGLU).
  bool attention_sinks = false;
  double swiglu_limit = 0;

  bool is_moe() const { return num_experts > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  // Blocks of num_layers that attend within sliding_window (all, some, or none).
  int64_t windowed_layers() const;
  // The query/key head size (MLA: qk_nope_head_dim + qk_rope_head_dim).
  int64_t head_dim() const {
    if (is_mla()) return qk_nope_head_dim + qk_rope_head_dim;
    return attention_head_dim > 0 ? attention_head_dim : hidden_size / num_heads;
  }
  int64_t query_width() const { return num_heads * head_dim(); }  // a·d, the attention's inner width
  // The attention output's width, a·d_v (MLA: a·v_head_dim; else a·d).
  int64_t value_width() const { return is_mla() ? num_heads * v_head_dim : query_width(); }
  // a·d differs from h (the attention projects h -> a·d -> h).
  bool decoupled_head_dim() const { return query_width() != hidden_size; }
  // Parameter count of the whole model (embedding, blocks, final norm, LM head; tied head once).
  int64_t num_parameters() const;
  // Parameters one token's forward pass uses: all of them for a dense model; the router, the
  // experts_per_token routed experts and the shared expert (not the other experts) for MoE.
  int64_t num_active_parameters() const;
  // One MoE block (a dense model's block), and one of the first_dense_layers dense blocks.
  int64_t block_parameters() const;
  int64_t active_block_parameters() const;
  int64_t dense_block_parameters() const;
  // Blocks with the routed experts: num_layers − first_dense_layers (0 for a dense model).
  int64_t moe_layers() const { return is_moe() ? num_layers - first_dense_layers : 0; }
  bool operator==(const ModelSpec&) const = default;
};

// What of `m` mist lowers only as Megatron-Core runs it (a mixture of experts; Qwen3's attention,
// with its own head size and q/k RMSNorm), in words for an error; "" when every stack's
// implementation is modelled. The one home of the rule for predictions and exports.
std::string megatron_core_only(const ModelSpec& m);

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
