// Qwen3's attention in ModelSpec: a head size of its own (a·d need not be h) and per-head q/k
// RMSNorm, read from Qwen3 and Qwen3-MoE configs, written in mist's form, counted as published.
#include <gtest/gtest.h>

#include "spec/model.hpp"
#include "spec_checks.hpp"

namespace mist::spec {
namespace {

using mist::testing::parse;
using testing::expect_same_shape;

// The fields of Qwen/Qwen3-30B-A3B's config.json.
constexpr std::string_view kQwen3Moe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
  "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32,
  "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151936})";

// The fields of Qwen/Qwen3-8B's config.json.
constexpr std::string_view kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "head_dim": 128, "hidden_size": 4096,
  "intermediate_size": 12288, "max_position_embeddings": 40960, "model_type": "qwen3", "num_attention_heads": 32,
  "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "tie_word_embeddings": false,
  "use_sliding_window": false, "vocab_size": 151936})";

TEST(Qwen3Config, ReadsTheCatalogShapes) {
  auto moe = model_from_json(parse(kQwen3Moe), "model");
  ASSERT_TRUE(moe.has_value()) << moe.error().to_string();
  expect_same_shape(*moe, *catalog_model("qwen3-30b-a3b"));
  EXPECT_EQ(moe->head_dim(), 128);
  EXPECT_EQ(moe->query_width(), 4096);  // 32 heads of 128 on h = 2048
  EXPECT_TRUE(moe->decoupled_head_dim());
  EXPECT_TRUE(moe->qk_norm);
  auto dense = model_from_json(parse(kQwen3), "model");
  ASSERT_TRUE(dense.has_value()) << dense.error().to_string();
  expect_same_shape(*dense, *catalog_model("qwen3-8b"));
  EXPECT_FALSE(dense->decoupled_head_dim());  // 32 heads of 128 = h
  EXPECT_EQ(dense->attention_head_dim, 0);
  // mist's form keeps head_dim and qk_norm, written only when set.
  auto back = model_from_json(model_to_json(*moe), "roundtrip");
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  expect_same_shape(*back, *moe);
  EXPECT_FALSE(model_to_json(*catalog_model("llama3-8b")).contains("head_dim"));
  EXPECT_FALSE(model_to_json(*catalog_model("llama3-8b")).contains("qk_norm"));
}

TEST(Qwen3Config, RefusesWhatItCannotLower) {
  Json j = parse(kQwen3);
  j["use_sliding_window"] = true;
  auto r = model_from_json(j, "model");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path, "model.use_sliding_window");
  j = parse(kQwen3);
  j["num_experts"] = 8;  // expert keys under the dense type
  r = model_from_json(j, "model");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path, "model.num_experts");
  EXPECT_NE(r.error().message.find("qwen3_moe"), std::string::npos) << r.error().to_string();
  j = parse(kQwen3Moe);
  j["mlp_only_layers"] = Json::array({0, 2});  // a dense block after an MoE one
  r = model_from_json(j, "model");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path, "model.mlp_only_layers");
  // Only Megatron-Core's implementation is modelled.
  EXPECT_NE(megatron_core_only(*catalog_model("qwen3-8b")), "");
  EXPECT_EQ(megatron_core_only(*catalog_model("llama3-8b")), "");
}

// mlp_only_layers [0, k): the first k blocks have the dense MLP of intermediate_size; the counts
// add k dense blocks and k fewer MoE blocks; mist's form keeps first_dense_layers and the width.
TEST(Qwen3Config, DenseFirstBlocks) {
  Json j = parse(kQwen3Moe);
  j["mlp_only_layers"] = Json::array({1, 0});
  auto m = model_from_json(j, "model");
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  EXPECT_EQ(m->first_dense_layers, 2);
  EXPECT_EQ(m->ffn_hidden_size, 6144);
  EXPECT_EQ(m->moe_layers(), 46);
  const ModelSpec all_moe = *catalog_model("qwen3-30b-a3b");
  // A dense block: the same attention and norms, an MLP of 3·2048·6144 instead of router and experts.
  const int64_t attention_norms = 2 * 2048 * 4096 + 2 * 2048 * 512 + 2 * 128 + 2 * 2048;
  EXPECT_EQ(m->dense_block_parameters(), attention_norms + 3 * 2048 * 6144);
  EXPECT_EQ(m->num_parameters(),
            all_moe.num_parameters() - 2 * all_moe.block_parameters() + 2 * m->dense_block_parameters());
  EXPECT_EQ(m->num_active_parameters(),
            all_moe.num_active_parameters() - 2 * all_moe.active_block_parameters() + 2 * m->dense_block_parameters());
  auto back = model_from_json(model_to_json(*m), "roundtrip");
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(back->first_dense_layers, 2);
  EXPECT_EQ(back->num_parameters(), m->num_parameters());
  // mist's form: dense blocks need their width, and at least one MoE block must remain.
  Json f = model_to_json(*m);
  f.erase("ffn_hidden_size");
  auto r = model_from_json(f, "model");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path, "model.ffn_hidden_size");
  f = model_to_json(*m);
  f["first_dense_layers"] = 48;
  r = model_from_json(f, "model");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path, "model.first_dense_layers");
  Json dense = model_to_json(*catalog_model("llama3-8b"));
  dense["first_dense_layers"] = 2;
  r = model_from_json(dense, "model");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path, "model.first_dense_layers");
}

// Published counts (Qwen3 Technical Report, arXiv 2505.09388, Tables 1 and 2), to the precision
// they are published with (or 0.2%): Qwen3-8B 8.2B; Qwen3-30B-A3B 30.5B total, 3.3B activated;
// Qwen3-235B-A22B 235B, 22B. By hand for 30B-A3B: 48 blocks of attention 2·2048·4096 +
// 2·2048·512, q/k norms 2·128, router 2048·128, 128 experts of 3·2048·768 and two RMSNorms,
// plus the untied embedding and head and the final norm.
TEST(Qwen3Models, ParameterCountsMatchPublishedOnes) {
  EXPECT_NEAR(static_cast<double>(catalog_model("qwen3-8b")->num_parameters()), 8.2e9, 0.05e9);
  const ModelSpec a3b = *catalog_model("qwen3-30b-a3b");
  EXPECT_NEAR(static_cast<double>(a3b.num_parameters()), 30.5e9, 0.05e9);
  // 3,353,032,704 by the formula: the report's "3.3B" is it cut, not rounded, to one decimal (the
  // other figures agree either way).
  EXPECT_GE(static_cast<double>(a3b.num_active_parameters()), 3.3e9);
  EXPECT_LT(static_cast<double>(a3b.num_active_parameters()), 3.4e9);
  const int64_t attn = 2 * 2048 * 4096 + 2 * 2048 * 512 + 2 * 128, common = attn + 2048 * 128 + 2 * 2048;
  const int64_t expert = 3 * 2048 * 768, outside = 2 * 151936 * 2048 + 2048;
  EXPECT_EQ(a3b.num_parameters(), 48 * (common + 128 * expert) + outside);
  EXPECT_EQ(a3b.num_active_parameters(), 48 * (common + 8 * expert) + outside);
  const ModelSpec big = *catalog_model("qwen3-235b-a22b");
  EXPECT_NEAR(static_cast<double>(big.num_parameters()), 235e9, 0.5e9);
  EXPECT_NEAR(static_cast<double>(big.num_active_parameters()), 22e9, 0.5e9);
}

}  // namespace
}  // namespace mist::spec
