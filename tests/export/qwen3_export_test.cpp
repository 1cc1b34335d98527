// Qwen3's attention in the Megatron-LM export: --kv-channels (heads of their own size) and
// --qk-layernorm, their round trip through the importer and its refusals; the other engines refuse.
#include <gtest/gtest.h>

#include "export/exchange.hpp"
#include "export/megatron.hpp"
#include "export_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::engines {
namespace {

using mist::testing::expect_error;
using testing::cluster;
using testing::command;
using testing::model;
using testing::training;
using testing::value;
using testing::without_token;

// dp 4 tp 2 pp 2 on 16 GPUs; a30b's 128 experts over ep 8.
plan::Plan qwen3_plan(const spec::ModelSpec& m) {
  auto p = testing::plan(4, 2, {m.num_layers / 2, m.num_layers / 2}, 1, 32, /*zero=*/1);
  p.sequence_parallel = true;
  if (m.is_moe()) p.ep = 8;
  return p;
}

TEST(Qwen3Export, MegatronGetsTheAttentionFlagsAndTheyRoundTrip) {
  for (const char* name : {"qwen3-30b-a3b", "qwen3-8b"}) {
    const auto m = model(name);
    auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), training(128, 4096), qwen3_plan(m), {}});
    ASSERT_TRUE(r && r->exported) << name << (r ? "" : ": " + r.error().to_string());
    const auto& o = r->exported->options;
    // 30B-A3B: 32 heads of 128 on h 2048; 8B's heads are h/a = 128, Megatron's default.
    EXPECT_EQ(value(o, "--kv-channels"), m.decoupled_head_dim() ? std::optional<std::string>("128") : std::nullopt)
        << name;
    EXPECT_TRUE(value(o, "--qk-layernorm").has_value()) << name;
    auto back = import_megatron_flags(command(o), m, cluster(2, 8));
    ASSERT_TRUE(back) << name << ": " << back.error().to_string();
    EXPECT_EQ(back->plan.tp, 2);
    EXPECT_EQ(back->plan.ep, m.is_moe() ? 8 : 1);
  }
}

TEST(Qwen3Export, ImportRefusesAnotherAttention) {
  const auto m = model("qwen3-30b-a3b");
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), training(128, 4096), qwen3_plan(m), {}});
  ASSERT_TRUE(r && r->exported);
  const std::string cmd = command(r->exported->options);
  auto read_back = [&](const std::string& c) { return import_megatron_flags(c, m, cluster(2, 8)); };
  expect_error(read_back(without_token(cmd, " --kv-channels 128")), "--kv-channels", "hidden / heads");
  expect_error(read_back(without_token(cmd, " --qk-layernorm")), "--qk-layernorm", "normalises");
  // A Llama given Qwen3's norms.
  const auto llama = model("llama3-8b");
  auto l = export_plan(Engine::kMegatron, {llama, cluster(2, 8), training(128, 4096),
                                           testing::plan(4, 2, {16, 16}, 1, 32, 1), {}});
  ASSERT_TRUE(l && l->exported);
  expect_error(import_megatron_flags(command(l->exported->options) + " --qk-layernorm", llama, cluster(2, 8)),
               "--qk-layernorm", "does not normalise");
}

// gpt-oss: the window (HF's 128 as Megatron's (127, 0)), every 2nd block full, learnable sinks,
// the clamped quick-GELU GLU, biases on (no --disable-bias-linear); the flags round-trip and each
// missing or wrong one is refused naming it.
TEST(GptOssExport, MegatronGetsTheWindowSinksAndActivationAndTheyRoundTrip) {
  const auto m = model("gpt-oss-120b");
  auto p = testing::plan(16, 1, {9, 9, 9, 9}, 1, 80, /*zero=*/1);
  p.ep = 8;
  auto r = export_plan(Engine::kMegatron, {m, cluster(8, 8), training(1280, 4096), p, {}});
  ASSERT_TRUE(r && r->exported) << (r ? "" : r.error().to_string());
  const auto& o = r->exported->options;
  EXPECT_EQ(value(o, "--window-size"), std::optional<std::string>("127,0"));
  EXPECT_EQ(value(o, "--window-attn-skip-freq"), std::optional<std::string>("2"));
  EXPECT_EQ(value(o, "--softmax-type"), std::optional<std::string>("learnable"));
  EXPECT_TRUE(value(o, "--quick-geglu").has_value());
  EXPECT_FALSE(value(o, "--swiglu").has_value());
  EXPECT_EQ(value(o, "--activation-func-clamp-value"), std::optional<std::string>("7"));
  EXPECT_FALSE(value(o, "--disable-bias-linear").has_value());
  EXPECT_EQ(value(o, "--kv-channels"), std::optional<std::string>("64"));
  const std::string cmd = command(o);
  auto back = import_megatron_flags(cmd, m, cluster(8, 8));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.ep, 8);
  EXPECT_EQ(back->plan.pp, 4);
  auto read_back = [&](const std::string& c) { return import_megatron_flags(c, m, cluster(8, 8)); };
  expect_error(read_back(without_token(cmd, " --window-size 127,0")), "--window-size", "missing");
  expect_error(read_back(without_token(cmd, " --window-attn-skip-freq 2")), "--window-attn-skip-freq", "every 2");
  expect_error(read_back(without_token(cmd, " --softmax-type learnable")), "--softmax-type", "sinks");
  expect_error(read_back(without_token(cmd, " --glu-linear-offset 1.0")), "--glu-linear-offset", "adds 1");
  // A Llama given a window it does not have.
  const auto llama = model("llama3-8b");
  auto l = export_plan(Engine::kMegatron, {llama, cluster(2, 8), training(128, 4096),
                                           testing::plan(4, 2, {16, 16}, 1, 32, 1), {}});
  ASSERT_TRUE(l && l->exported);
  expect_error(import_megatron_flags(command(l->exported->options) + " --window-size 4095,0", llama, cluster(2, 8)),
               "--window-size", "whole sequence");
}

// Dense first blocks: --moe-layer-freq "([0]*k+[1]*n)", read back as moe_freq_type reads it (an
// integer, or a list expression); a layout other than the model's is refused naming the flag.
TEST(DenseFirstExport, MoeLayerFreqRoundTrips) {
  auto m = model("qwen3-30b-a3b");
  m.first_dense_layers = 2;
  m.ffn_hidden_size = 6144;
  auto r = export_plan(Engine::kMegatron, {m, cluster(2, 8), training(128, 4096), qwen3_plan(m), {}});
  ASSERT_TRUE(r && r->exported) << (r ? "" : r.error().to_string());
  const auto& o = r->exported->options;
  EXPECT_EQ(value(o, "--moe-layer-freq"), std::optional<std::string>("([0]*2+[1]*46)"));
  EXPECT_EQ(value(o, "--ffn-hidden-size"), std::optional<std::string>("6144"));  // the dense blocks'
  EXPECT_EQ(value(o, "--moe-ffn-hidden-size"), std::optional<std::string>("768"));
  const std::string cmd = command(o);
  auto back = import_megatron_flags(cmd, m, cluster(2, 8));
  ASSERT_TRUE(back) << back.error().to_string();
  auto with_freq = [&](const std::string& f) {
    return import_megatron_flags(without_token(cmd, " --moe-layer-freq ([0]*2+[1]*46)") + " --moe-layer-freq " + f,
                                 m, cluster(2, 8));
  };
  EXPECT_TRUE(with_freq("'[0,0]+[1]*46'").has_value());
  EXPECT_TRUE(with_freq("'([0]*1+[0])+([1]*23)*2'").has_value());
  expect_error(with_freq("1"), "--moe-layer-freq", "2 dense blocks first");
  expect_error(with_freq("'([0]*3+[1]*45)'"), "--moe-layer-freq", "not model");
  expect_error(with_freq("'([0]*2+[1]*40)'"), "--moe-layer-freq", "gives 42 blocks");
  expect_error(with_freq("'[2]*48'"), "--moe-layer-freq", "neither");
  expect_error(import_megatron_flags(without_token(cmd, " --ffn-hidden-size 6144") + " --ffn-hidden-size 768", m,
                                     cluster(2, 8)),
               "--ffn-hidden-size", "dense blocks");
  expect_error(import_megatron_flags(without_token(cmd, " --moe-layer-freq ([0]*2+[1]*46)"), m, cluster(2, 8)),
               "--moe-layer-freq", "the default is 1");
  // The all-MoE catalog model: no flag, and a dense prefix given to it is refused.
  const auto all = model("qwen3-30b-a3b");
  auto a = export_plan(Engine::kMegatron, {all, cluster(2, 8), training(128, 4096), qwen3_plan(all), {}});
  ASSERT_TRUE(a && a->exported);
  EXPECT_FALSE(value(a->exported->options, "--moe-layer-freq").has_value());
  expect_error(import_megatron_flags(command(a->exported->options) + " --moe-layer-freq '([0]*2+[1]*46)'", all,
                                     cluster(2, 8)),
               "--moe-layer-freq", "0 dense blocks");
}

// Megatron-Core asserts etp = 1 with biased experts.
TEST(GptOssExport, BiasedExpertsNeedEtpOne) {
  const auto m = model("gpt-oss-20b");
  expect_error(plan::check_experts(m, 2, 4, 4, 2), "plan.etp", "biases");
  EXPECT_TRUE(plan::check_experts(m, 2, 4, 4, 1).has_value());
}

TEST(Qwen3Export, OtherEnginesRefuseIt) {
  for (Engine e : {Engine::kDeepSpeed, Engine::kTorchtitan}) {
    const auto m = model("qwen3-8b");
    auto r = export_plan(e, {m, cluster(2, 8), training(128, 4096), qwen3_plan(m), {}});
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().path, "--to");
    EXPECT_NE(r.error().message.find("Qwen3"), std::string::npos) << r.error().to_string();
  }
}

}  // namespace
}  // namespace mist::engines
