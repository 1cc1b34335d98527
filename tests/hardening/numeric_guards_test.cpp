// Numeric guards: sizes whose byte counts overflow, zero/negative/NaN/inf quantities, degenerate
// shapes. Each is rejected with an error naming the field, or handled with finite results.
#include <cmath>
#include <limits>

#include "hardening_util.hpp"

namespace mist::hardening {
namespace {

const char* kA100x16 = R"({"gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8})";

Result<spec::ClusterSpec> cluster(const Json& j) { return spec::cluster_from_json(j, "cluster"); }

// --- JSON numbers -------------------------------------------------------------------------------

TEST(JsonNumbers, OutOfRangeNumbersAreMalformedJsonNotAnException) {
  // Found by fuzz_model: nlohmann throws out_of_range (not parse_error) for 1e400.
  for (const char* text : {R"({"n": 401e308})", R"({"n": -1e999})", "1e400"}) {
    auto j = parse_json_text(text, "model");
    EXPECT_TRUE(fails_naming(j, "model")) << text;
    if (!j) {
      EXPECT_NE(j.error().message.find("malformed JSON"), std::string::npos) << j.error().message;
    }
  }
}

TEST(JsonNumbers, NanAndInfinityAreRejectedByEveryNumberField) {
  // JSON text cannot spell NaN, but Json built in code (and CBOR/MessagePack) can hold one.
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    Json c = parse(kA100x16);
    c["inter_node_GBps"] = bad;
    EXPECT_TRUE(fails_naming(cluster(c), "cluster.inter_node_GBps"));
    Json g = parse(kA100x16);
    g["gpu"] = {{"name", "A100-SXM4-80GB"}, {"memory_GiB", bad}};
    EXPECT_TRUE(fails_naming(cluster(g), "cluster.gpu.memory_GiB"));
    Json n = parse(kA100x16);
    n["nodes"] = bad;
    EXPECT_TRUE(fails_naming(cluster(n), "cluster.nodes"));
    Json t = parse(R"({"global_batch_size": 512, "seq_length": 2048})");
    t["seq_length"] = bad;
    EXPECT_TRUE(fails_naming(spec::training_from_json(t, "training"), "training.seq_length"));
    Json p = parse(R"({"dp": 2, "tp": 4, "pp": 2, "micro_batch_size": 2, "grad_accum_steps": 128,
                      "stages": [{"num_layers": 20}, {"num_layers": 20}]})");
    p["stages"][1]["offload"] = {{"activations", bad}};
    EXPECT_TRUE(fails_naming(plan::plan_from_json(p, "plan"), "plan.stages[1].offload.activations"));
  }
}

TEST(JsonNumbers, IntegersBeyondInt64AreRejectedNotWrapped) {
  Json c = parse(kA100x16);
  c["nodes"] = std::numeric_limits<uint64_t>::max();
  EXPECT_TRUE(fails_naming(cluster(c), "cluster.nodes"));
  c["nodes"] = 1e19;  // a float beyond int64
  EXPECT_TRUE(fails_naming(cluster(c), "cluster.nodes"));
  Json t = parse(R"({"global_batch_size": -9223372036854775808, "seq_length": 2048})");
  EXPECT_TRUE(fails_naming(spec::training_from_json(t, "training"), "training.global_batch_size"));
}

// --- Cluster and GPU overrides ------------------------------------------------------------------

TEST(ClusterGuards, ZeroOrNegativeBandwidthsAndMemoryAreRejected) {
  for (const char* key : {"intra_node_GBps", "inter_node_GBps", "pcie_GBps", "host_memory_GiB"}) {
    for (double v : {0.0, -1.0, -1e300}) {
      Json c = parse(kA100x16);
      c[key] = v;
      EXPECT_TRUE(fails_naming(cluster(c), std::string("cluster.") + key)) << key << " = " << v;
    }
  }
  for (const char* key : {"memory_GiB", "mem_bw_TBps", "fp32_TFLOPS", "sm_count", "default_inter_node_GBps"}) {
    for (double v : {0.0, -4.0}) {
      Json c = parse(kA100x16);
      c["gpu"] = {{"name", "A100-SXM4-80GB"}, {key, v}};
      EXPECT_TRUE(fails_naming(cluster(c), std::string("cluster.gpu.") + key)) << key << " = " << v;
    }
  }
  // Optional figures may be 0 ("none"), never negative.
  Json c = parse(kA100x16);
  c["gpu"] = {{"name", "A100-SXM4-80GB"}, {"link_GBps", -1}};
  EXPECT_TRUE(fails_naming(cluster(c), "cluster.gpu.link_GBps"));
}

TEST(ClusterGuards, TinyPositiveQuantitiesGiveFiniteTimesOrAnError) {
  // Denormal-sized bandwidths and rates pass "positive" but make bytes / rate overflow to inf.
  const auto m = *spec::catalog_model("gpt3-1.3b");
  const auto t = *spec::training_from_json(parse(R"({"global_batch_size": 16, "seq_length": 2048})"), "training");
  const auto p = plan::uniform_plan(m, 4, 2, 2, 1, 4, {});
  for (const char* key : {"intra_node_GBps", "inter_node_GBps", "pcie_GBps"}) {
    Json c = parse(kA100x16);
    c[key] = 1e-300;
    auto cl = cluster(c);
    if (!cl) {
      EXPECT_TRUE(fails_naming(cl, std::string("cluster.") + key));
      continue;
    }
    EXPECT_TRUE(finite_or_error(predict(m, *cl, t, p))) << key;
  }
  for (const char* key : {"mem_bw_TBps", "fp32_TFLOPS", "bf16_TFLOPS", "fp16_TFLOPS", "matmul_bf16_TFLOPS"}) {
    Json c = parse(kA100x16);
    c["gpu"] = {{"name", "A100-SXM4-80GB"}, {key, 1e-300}};
    auto cl = cluster(c);
    if (!cl) {
      EXPECT_TRUE(fails_naming(cl, std::string("cluster.gpu.") + key));
      continue;
    }
    EXPECT_TRUE(finite_or_error(predict(m, *cl, t, p))) << key;
  }
}

// --- Sizes --------------------------------------------------------------------------------------

TEST(SizeGuards, ModelsWhoseParameterCountOverflowsAreRejected) {
  Json j = parse(R"({"name": "huge", "family": "gpt", "num_layers": 10000, "hidden_size": 1048576,
                     "num_heads": 16, "ffn_hidden_size": 16777216, "vocab_size": 100000000,
                     "max_position_embeddings": 2048, "norm": "layernorm", "mlp": "gelu", "positions": "learned"})");
  EXPECT_TRUE(fails_naming(spec::model_from_json(j, "model"), "model"));
  j["hidden_size"] = int64_t{1} << 40;
  EXPECT_TRUE(fails_naming(spec::model_from_json(j, "model"), "model.hidden_size"));
  Json hf = parse(R"({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                      "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 1e12})");
  EXPECT_TRUE(fails_naming(spec::model_from_json(hf, "model"), "model.vocab_size"));
}

TEST(SizeGuards, BatchProductThatOverflowsInt64IsRejectedNotWrapped) {
  // micro_batch_size · dp · grad_accum_steps = 1e9 · 16 · 1e9 overflows int64.
  const auto m = *spec::catalog_model("gpt3-13b");
  const auto c = *cluster(parse(kA100x16));
  const auto t = *spec::training_from_json(parse(R"({"global_batch_size": 512, "seq_length": 2048})"), "training");
  auto p = plan::uniform_plan(m, 16, 1, 1, 1'000'000'000, 1'000'000'000, {});
  EXPECT_TRUE(fails_naming(plan::validate_plan(p, m, c, t), "plan"));
  // Wrapping modulo 2^64 must not make a product look right: (2^62 + 32) · 16 wraps to exactly 512.
  p = plan::uniform_plan(m, 16, 1, 1, (int64_t{1} << 62) + 32, 1, {});
  EXPECT_TRUE(fails_naming(plan::validate_plan(p, m, c, t), "plan"));
}

TEST(SizeGuards, LargestAcceptedShapesGiveFiniteNumbersOrAnError) {
  // Every size at or near its bound at once: activation bytes s·b·h·L are far beyond 2^63.
  Json j = parse(R"({"name": "wide", "family": "llama", "num_layers": 64, "hidden_size": 1048576,
                     "num_heads": 1024, "num_kv_heads": 8, "ffn_hidden_size": 4194304,
                     "vocab_size": 1000000, "max_position_embeddings": 10000000,
                     "norm": "rmsnorm", "mlp": "swiglu", "positions": "rotary"})");
  auto m = spec::model_from_json(j, "model");
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  const auto c = *cluster(parse(kA100x16));
  auto t = spec::training_from_json(parse(R"({"global_batch_size": 1000000000, "seq_length": 10000000})"), "training");
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  const auto p = plan::uniform_plan(*m, 2, 8, 1, 1'000'000, 500, {});
  EXPECT_TRUE(finite_or_error(predict(*m, c, *t, p)));
}

// --- Degenerate shapes --------------------------------------------------------------------------

TEST(DegenerateShapes, OneLayerOneHeadSequenceOneAndBatchOnePredictFinitely) {
  Json j = parse(R"({"name": "tiny", "family": "gpt", "num_layers": 1, "hidden_size": 1, "num_heads": 1,
                     "ffn_hidden_size": 1, "vocab_size": 1, "max_position_embeddings": 1,
                     "norm": "layernorm", "mlp": "gelu", "positions": "learned"})");
  auto m = spec::model_from_json(j, "model");
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  auto one_gpu = cluster(parse(R"({"gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 1})"));
  ASSERT_TRUE(one_gpu.has_value());
  auto t = spec::training_from_json(parse(R"({"global_batch_size": 1, "seq_length": 1})"), "training");
  ASSERT_TRUE(t.has_value());
  const auto p = plan::uniform_plan(*m, 1, 1, 1, 1, 1, {});
  const auto pred = predict(*m, *one_gpu, *t, p);
  ASSERT_TRUE(pred.memory.has_value()) << pred.memory.error().to_string();
  ASSERT_TRUE(pred.time.has_value()) << pred.time.error().to_string();
  EXPECT_TRUE(finite_or_error(pred));
  EXPECT_GT(pred.memory->stages.at(0).peak_bytes, 0);
  // The same with every stage option at its extreme.
  plan::StagePlan all{.num_layers = 1, .zero = 3, .ckpt_layers = 1, .offload = {1, 1, 1, 1}};
  auto p2 = plan::uniform_plan(*m, 1, 1, 1, 1, 1, all);
  p2.recompute = plan::Recompute::kSelective;
  EXPECT_TRUE(finite_or_error(predict(*m, *one_gpu, *t, p2)));
}

TEST(DegenerateShapes, MorePipelineStagesThanLayersIsRejected) {
  const auto m = *spec::catalog_model("gpt3-1.3b");  // 24 layers
  const auto c = *cluster(parse(R"({"gpu": "A100-SXM4-80GB", "nodes": 4, "gpus_per_node": 8})"));
  const auto t = *spec::training_from_json(parse(R"({"global_batch_size": 32, "seq_length": 2048})"), "training");
  auto p = plan::uniform_plan(m, 1, 1, 32, 1, 32, {});  // 8 of the 32 stages get no layer
  EXPECT_TRUE(fails_naming(plan::validate_plan(p, m, c, t), "plan.stages"));
}

}  // namespace
}  // namespace mist::hardening

namespace mist::hardening {
namespace {

// fuzz/regressions/predict/tiny_rates_inf_time.json: a GPU override with a 1e-310 TB/s memory
// bandwidth or a 1e-300 TFLOPS peak passed "positive" and made the iteration time infinite.
TEST(ClusterGuards, ImplausiblySmallGpuRatesAreRefusedNamingTheField) {
  for (const char* key : {"mem_bw_TBps", "bf16_TFLOPS", "fp32_TFLOPS"}) {
    Json c = Json::parse(R"({"gpu": {"name": "A100-SXM4-80GB"}, "nodes": 1, "gpus_per_node": 8})");
    c["gpu"][key] = 1e-300;
    EXPECT_TRUE(fails_naming(spec::cluster_from_json(c, "cluster"), std::string("cluster.gpu.") + key)) << key;
    c["gpu"][key] = 1e-9;  // the floor itself is accepted
    EXPECT_TRUE(spec::cluster_from_json(c, "cluster").has_value()) << key;
  }
}

}  // namespace
}  // namespace mist::hardening
