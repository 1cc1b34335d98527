// Mixtures of experts in ModelSpec: Hugging Face configs, mist's form, validation and the total and
// active parameter counts.
#include <gtest/gtest.h>

#include "spec/model.hpp"
#include "spec_checks.hpp"

namespace mist::spec {
namespace {

using mist::testing::expect_error;
using mist::testing::parse;
using testing::expect_same_shape;
using testing::model;

// The fields of mistralai/Mixtral-8x7B-v0.1's config.json.
constexpr std::string_view kMixtral = R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
  "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
  "output_router_logits": false, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "vocab_size": 32000})";

// The fields of Qwen/Qwen1.5-MoE-A2.7B's config.json.
constexpr std::string_view kQwenMoe = R"({
  "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21, "model_type": "qwen2_moe",
  "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936, "decoder_sparse_step": 1,
  "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4,
  "num_experts": 60, "norm_topk_prob": false, "output_router_logits": false, "router_aux_loss_coef": 0.001})";

// `text` with one key replaced (or removed when `value` is empty).
std::string with(std::string_view text, const std::string& key, const std::string& value) {
  Json j = parse(text);
  if (value.empty()) {
    j.erase(key);
  } else {
    j[key] = parse(value);
  }
  return j.dump();
}

TEST(MoeConfig, MixtralIsTheCatalogEntry) {
  auto m = model(kMixtral);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  EXPECT_TRUE(m->is_moe());
  EXPECT_EQ(m->num_experts, 8);
  EXPECT_EQ(m->experts_per_token, 2);
  EXPECT_EQ(m->moe_ffn_hidden_size, 14336);
  EXPECT_EQ(m->ffn_hidden_size, 0);
  expect_same_shape(*m, *catalog_model("mixtral-8x7b"));
}

TEST(MoeConfig, QwenMoeHasAGatedSharedExpert) {
  auto m = model(kQwenMoe);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  EXPECT_EQ(m->num_experts, 60);
  EXPECT_EQ(m->experts_per_token, 4);
  EXPECT_EQ(m->moe_ffn_hidden_size, 1408);
  EXPECT_EQ(m->shared_expert_ffn_hidden_size, 5632);
  EXPECT_TRUE(m->shared_expert_gate);
  EXPECT_TRUE(m->qkv_bias);
  EXPECT_EQ(m->sliding_window, 0);  // use_sliding_window is false
  expect_same_shape(*m, *catalog_model("qwen1.5-moe-a2.7b"));
}

// A Mixtral config relabelled as a dense type is refused at the expert key, never planned dense.
TEST(MoeConfig, ExpertKeysUnderADenseTypeAreRefused) {
  for (const char* type : {"\"mistral\"", "\"llama\"", "\"qwen2\""})
    expect_error(model(with(kMixtral, "model_type", type)), "model.num_local_experts", "dense");
  expect_error(model(with(with(kQwenMoe, "model_type", "\"qwen2\""), "num_experts", "")),
               "model.num_experts_per_tok", "dense");
  // Zero experts in a dense config is a dense model.
  auto dense = model(with(with(with(with(with(kMixtral, "model_type", "\"mistral\""), "num_local_experts", "0"),
                                    "num_experts_per_tok", ""), "sliding_window", ""), "max_position_embeddings", "4096"));
  ASSERT_TRUE(dense.has_value()) << dense.error().to_string();
  EXPECT_FALSE(dense->is_moe());
  EXPECT_EQ(dense->ffn_hidden_size, 14336);
}

TEST(MoeConfig, LayoutsMistCannotLowerAreRefused) {
  expect_error(model(with(kQwenMoe, "decoder_sparse_step", "2")), "model.decoder_sparse_step", "unsupported");
  expect_error(model(with(kQwenMoe, "mlp_only_layers", "[1, 2]")), "model.mlp_only_layers", "dense blocks after");
  EXPECT_TRUE(model(with(kQwenMoe, "mlp_only_layers", "[]")).has_value());
  expect_error(model(with(kMixtral, "num_experts_per_tok", "9")), "model.num_experts_per_tok", "at most 8");
  // A Mixtral config relabelled deepseek_v3 lacks the latent attention's keys.
  expect_error(model(with(kMixtral, "model_type", "\"deepseek_v3\"")), "model.kv_lora_rank", "");
}

// A sliding window is read from the config and kept in mist's form.
TEST(MoeConfig, SlidingWindowIsKept) {
  auto m = model(with(kMixtral, "sliding_window", "4096"));
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  EXPECT_EQ(m->sliding_window, 4096);
  auto back = model_from_json(model_to_json(*m), "roundtrip");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->sliding_window, 4096);
  EXPECT_EQ(model(kMixtral)->sliding_window, 0);  // null: full attention
}

TEST(MoeMistForm, ValidationNamesTheField) {
  Json base = model_to_json(*catalog_model("mixtral-8x7b"));
  auto edit = [&](const std::string& key, const std::string& value) {
    Json j = base;
    if (value.empty()) j.erase(key); else j[key] = parse(value);
    return model_from_json(j, "model");
  };
  expect_error(edit("ffn_hidden_size", "14336"), "model.ffn_hidden_size", "must be at most 0");
  expect_error(edit("experts_per_token", "0"), "model.experts_per_token", "between 1 and num_experts");
  expect_error(edit("moe_ffn_hidden_size", "0"), "model.moe_ffn_hidden_size", "between 1");
  expect_error(edit("shared_expert_gate", "true"), "model.shared_expert_gate", "shared expert");
  // GELU experts (Megatron's MoE layer benchmark): fc1 and fc2, one h·f_e matrix fewer per expert.
  auto gelu = edit("mlp", "\"gelu\"");
  ASSERT_TRUE(gelu.has_value()) << gelu.error().to_string();
  const auto mixtral = *catalog_model("mixtral-8x7b");
  const int64_t per_expert = mixtral.hidden_size * mixtral.moe_ffn_hidden_size;
  EXPECT_EQ(mixtral.block_parameters() - gelu->block_parameters(), mixtral.num_experts * per_expert);
  EXPECT_EQ(mixtral.active_block_parameters() - gelu->active_block_parameters(), mixtral.experts_per_token * per_expert);
  Json clamped = base;
  clamped["mlp"] = "gelu";
  clamped["swiglu_limit"] = 7.0;
  expect_error(model_from_json(clamped, "model"), "model.swiglu_limit", "SwiGLU");
  EXPECT_TRUE(edit("linear_bias", "true").has_value());  // gpt-oss's biased experts
  expect_error(edit("full_attention_interval", "2"), "model.full_attention_interval", "needs a sliding_window");
  expect_error(edit("full_attention_interval", "33"), "model.full_attention_interval", "between 1 and num_layers");
  expect_error(edit("swiglu_limit", "-1"), "model.swiglu_limit", "");
  // Expert settings on a dense model are refused, not ignored.
  Json dense = model_to_json(*catalog_model("llama3-8b"));
  dense["experts_per_token"] = 2;
  expect_error(model_from_json(dense, "model"), "model.experts_per_token", "num_experts is 0");
}

// Total and active counts against the published ones, to the precision they are published with
// (or 0.2%, whichever is wider): Mixtral 46.7B/12.9B (Jiang et al. 2024), Mixtral 8x22B 141B/39B
// (Mistral AI), Qwen1.5-MoE 14.3B/2.7B (Qwen team), Qwen2-57B-A14B 57.4B/14.2B (Qwen2 report).
TEST(MoeModels, ParameterCountsMatchPublishedOnes) {
  struct Row {
    const char* name;
    double total, total_unit, active, active_unit;  // published value and its last digit's unit
  };
  const Row rows[] = {{"mixtral-8x7b", 46.7e9, 0.1e9, 12.9e9, 0.1e9},
                      {"mixtral-8x22b", 141e9, 1e9, 39e9, 1e9},
                      {"qwen1.5-moe-a2.7b", 14.3e9, 0.1e9, 2.7e9, 0.1e9},
                      {"qwen2-57b-a14b", 57.4e9, 0.1e9, 14.2e9, 0.1e9}};
  for (const Row& r : rows) {
    const ModelSpec m = *catalog_model(r.name);
    EXPECT_NEAR(static_cast<double>(m.num_parameters()), r.total, std::max(0.002 * r.total, r.total_unit / 2))
        << r.name;
    EXPECT_NEAR(static_cast<double>(m.num_active_parameters()), r.active,
                std::max(0.002 * r.active, r.active_unit / 2))
        << r.name;
  }
  // Exact, from the formula by hand: 32 blocks of attention 2·4096² + 2·4096·1024, 8 experts of
  // 3·4096·14336, router 4096·8 and two RMSNorms, plus the untied embedding and head and the final
  // norm. It is the tensor total of the model's safetensors (46,702,792,704).
  const ModelSpec mixtral = *catalog_model("mixtral-8x7b");
  EXPECT_EQ(mixtral.num_parameters(), 46'702'792'704);
  EXPECT_EQ(mixtral.num_active_parameters(), int64_t{32} * (41'943'040 + 2 * 176'160'768 + 32'768 + 8'192) + 262'148'096);
  // A dense model is all active.
  const ModelSpec llama = *catalog_model("llama3-8b");
  EXPECT_EQ(llama.num_active_parameters(), llama.num_parameters());
}

// gpt-oss, against the model card's 116.83B / 5.13B and 20.91B / 3.61B. The card counts as active
// the unembedding but not the input embedding (a lookup, not a matmul), so its active figure is
// mist's (which counts both whole, as the other model cards do) less one V·h table.
TEST(MoeModels, GptOssCountsMatchTheModelCard) {
  struct Row {
    const char* name;
    double total, active;
  };
  for (const Row& r : {Row{"gpt-oss-120b", 116.83e9, 5.13e9}, Row{"gpt-oss-20b", 20.91e9, 3.61e9}}) {
    const ModelSpec m = *catalog_model(r.name);
    EXPECT_NEAR(static_cast<double>(m.num_parameters()), r.total, 0.005e9) << r.name;
    const double embedding = static_cast<double>(m.vocab_size * m.hidden_size);
    EXPECT_NEAR(static_cast<double>(m.num_active_parameters()) - embedding, r.active, 0.005e9) << r.name;
  }
  // Exact, by hand: per block attention q 2880·4096 + 4096, k and v 2·(2880·512 + 512), o 4096·2880
  // + 2880, sinks 64; router 2880·128 + 128; 128 experts of gate_up 2880·5760 + 5760 and down
  // 2880·2880 + 2880; two RMSNorms 2·2880. Outside: embedding and head 2·201088·2880, final norm.
  const ModelSpec m = *catalog_model("gpt-oss-120b");
  EXPECT_EQ(m.block_parameters(), 26'550'144 + 368'768 + 128 * int64_t{24'891'840} + 5'760);
  EXPECT_EQ(m.num_parameters(), 116'829'156'672);
  EXPECT_EQ(m.windowed_layers(), 18);
}

// The fields of openai/gpt-oss-20b's config.json that mist reads (layer_types alternating, from
// sliding; its quantization_config and rope_scaling ignored).
constexpr std::string_view kGptOss20b = R"({
  "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0, "head_dim": 64,
  "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096, "intermediate_size": 2880,
  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
  "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
  "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
  "rms_norm_eps": 1e-05, "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
  "swiglu_limit": 7.0, "tie_word_embeddings": false, "vocab_size": 201088})";

// The config reads as the catalog entry (same shapes and counts), and layer_types patterns mist
// cannot express are refused naming the key.
TEST(MoeConfig, GptOssReadsAsTheCatalogEntry) {
  auto m = model(kGptOss20b);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  const ModelSpec cat = *catalog_model("gpt-oss-20b");
  EXPECT_EQ(m->num_parameters(), cat.num_parameters());
  EXPECT_EQ(m->full_attention_interval, 2);
  EXPECT_EQ(m->sliding_window, 128);
  EXPECT_TRUE(m->attention_sinks);
  EXPECT_EQ(m->swiglu_limit, 7.0);
  EXPECT_EQ(m->head_dim(), 64);
  auto back = model_from_json(model_to_json(*m), "roundtrip");
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(back->num_parameters(), m->num_parameters());
  EXPECT_EQ(back->full_attention_interval, 2);
  Json j = parse(kGptOss20b);
  j["layer_types"][3] = "sliding_attention";  // full at 2, 6, 8, ...: no single interval
  expect_error(model_from_json(j, "model"), "model.layer_types", "every N blocks");
  j["layer_types"][3] = "windowed";
  expect_error(model_from_json(j, "model"), "model.layer_types[3]", "sliding_attention");
  j = parse(kGptOss20b);
  j["layer_types"].erase(0);
  expect_error(model_from_json(j, "model"), "model.layer_types", "num_hidden_layers (24)");
  j = parse(kGptOss20b);
  j["attention_bias"] = false;
  expect_error(model_from_json(j, "model"), "model.attention_bias", "unsupported");
  j = parse(kGptOss20b);
  for (auto& t : j["layer_types"]) t = "sliding_attention";
  EXPECT_EQ(model_from_json(j, "model")->windowed_layers(), 24);
}

}  // namespace
}  // namespace mist::spec
