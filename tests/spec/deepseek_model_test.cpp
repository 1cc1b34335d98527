// DeepSeek-V3 in ModelSpec: multi-head latent attention, dense first blocks and shared experts read
// from its Hugging Face config, written in mist's form and counted.
#include <gtest/gtest.h>

#include "spec/model.hpp"
#include "spec_checks.hpp"

namespace mist::spec {
namespace {

using mist::testing::expect_error;
using mist::testing::parse;
using testing::expect_same_shape;

// The keys of deepseek-ai/DeepSeek-V3's config.json (as Megatron-Bridge 067f987d's
// tests/unit_tests/models/deepseek/test_deepseek_bridges.py copies it) that mist reads, with the
// routing keys it does not (they change no size).
constexpr std::string_view kDeepSeekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "first_k_dense_replace": 3,
  "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
  "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": false,
  "topk_group": 4, "topk_method": "noaux_tc", "v_head_dim": 128, "vocab_size": 129280})";

TEST(DeepSeekConfig, ReadsAsTheCatalogEntry) {
  auto m = model_from_json(parse(kDeepSeekV3), "model");
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  const ModelSpec cat = *catalog_model("deepseek-v3");
  expect_same_shape(*m, cat);
  EXPECT_EQ(m->num_parameters(), cat.num_parameters());
  EXPECT_TRUE(m->is_mla());
  EXPECT_EQ(m->head_dim(), 192);
  EXPECT_EQ(m->value_width(), 128 * 128);
  EXPECT_EQ(m->first_dense_layers, 3);
  EXPECT_EQ(m->shared_expert_ffn_hidden_size, 2048);
  EXPECT_EQ(m->mtp_layers, 1);
  auto back = model_from_json(model_to_json(*m), "roundtrip");
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(back->num_parameters(), m->num_parameters());
  EXPECT_EQ(back->kv_lora_rank, 512);
  // Without the query bottleneck (DeepSeek-V2-Lite: q_lora_rank null) one projection from h.
  Json lite = parse(kDeepSeekV3);
  lite["q_lora_rank"] = nullptr;
  auto l = model_from_json(lite, "model");
  ASSERT_TRUE(l.has_value()) << l.error().to_string();
  EXPECT_EQ(l->q_lora_rank, 0);
  const int64_t direct = int64_t{7168} * 128 * 192, bottleneck = 7168 * 1536 + 1536 + 1536 * int64_t{128} * 192;
  EXPECT_EQ(l->num_parameters(), m->num_parameters() + 61 * (direct - bottleneck));
}

TEST(DeepSeekConfig, RefusesWhatItCannotLower) {
  Json j = parse(kDeepSeekV3);
  j["moe_layer_freq"] = 2;
  expect_error(model_from_json(j, "model"), "model.moe_layer_freq", "dense blocks first");
  j = parse(kDeepSeekV3);
  j["attention_bias"] = true;
  expect_error(model_from_json(j, "model"), "model.attention_bias", "unsupported");
  j = parse(kDeepSeekV3);
  j.erase("kv_lora_rank");
  expect_error(model_from_json(j, "model"), "model.kv_lora_rank", "");
  Json f = model_to_json(*catalog_model("deepseek-v3"));
  f["qk_rope_head_dim"] = 63;
  expect_error(model_from_json(f, "model"), "model.qk_rope_head_dim", "even");
  f = model_to_json(*catalog_model("llama3-8b"));
  f["v_head_dim"] = 128;
  expect_error(model_from_json(f, "model"), "model.v_head_dim", "kv_lora_rank is 0");
}

// Counts. By hand per block: MLA q down 7168·1536, its RMSNorm 1536, q up 1536·128·192, kv down
// 7168·576, its RMSNorm 512, kv up 512·128·256, out 128·128·7168 (187,107,328); two RMSNorms; the
// 3 dense blocks' MLP 3·7168·18432; the 58 MoE blocks' router 7168·256, 256 routed and 1 shared
// expert of 3·7168·2048. Outside: embedding and head 2·129280·7168, the final norm. The total is
// the technical report's 671B within 0.2%. Activated, the same count gives 37.55B against the
// report's "37B" and the weights README's 36.7B (embedding and head included): 2.3% above the
// latter, a difference not resolved (docs/specs.md).
TEST(DeepSeekModels, CountsAsPublished) {
  const ModelSpec m = *catalog_model("deepseek-v3");
  const int64_t mla = 7168 * 1536 + 1536 + 1536 * int64_t{128} * 192 + 7168 * 576 + 512 + 512 * int64_t{128} * 256 +
                      int64_t{128} * 128 * 7168;
  EXPECT_EQ(mla, 187'107'328);
  const int64_t norms = 2 * 7168, expert = 3 * int64_t{7168} * 2048;
  EXPECT_EQ(m.dense_block_parameters(), mla + norms + 3 * int64_t{7168} * 18432);
  EXPECT_EQ(m.block_parameters(), mla + norms + 7168 * 256 + 257 * expert);
  EXPECT_EQ(m.active_block_parameters(), mla + norms + 7168 * 256 + 9 * expert);
  EXPECT_NEAR(static_cast<double>(m.num_parameters()), 671e9, 0.002 * 671e9);
  EXPECT_EQ(m.num_active_parameters(),
            3 * m.dense_block_parameters() + 58 * m.active_block_parameters() + 2 * int64_t{129280} * 7168 + 7168);
}

}  // namespace
}  // namespace mist::spec
