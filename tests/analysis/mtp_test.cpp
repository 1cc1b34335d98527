// Multi-token prediction (training.mtp_layers, Megatron-LM's --mtp-num-layers): each depth is one
// block of the model's last kind, a 2h -> h projection and three norms in the last stage's head,
// a second loss over the shared LM head, and the word embedding's copy on the last stage.
#include <gtest/gtest.h>

#include "analysis/prepared_job.hpp"
#include "graph/lower.hpp"
#include "test_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;
using mist::testing::memory_of;
using mist::testing::time_of;

double term(const StageMemory& s, std::string_view name) { return mist::testing::memory_term(s, name); }

double head_params(const spec::ModelSpec& m, int mtp, double t = 1, double ep = 1) {
  auto t_spec = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false);
  t_spec.mtp_layers = mtp;
  const auto lm = graph::lower(m, 4096, graph::lowering_options(t_spec, false));
  sym::Bindings at = lm.dims;
  at["b"] = 1;
  at["t"] = t;
  at["cp"] = 1;
  at["ep"] = ep;
  at["etp"] = 1;
  return sym::evaluate_or_zero(lm.head.params(), at);
}

// DeepSeek-V3's MTP module as its report and checkpoint count it: one MoE block with latent
// attention, eh_proj of 2h·h and three RMSNorms (enorm, hnorm, shared_head.norm) of h. Hugging Face
// lists 685B parameters: the 671B of the main model, the module, and the copies of the embedding
// and the head its checkpoint stores with it (model.layers.61.embed_tokens, shared_head.head).
TEST(Mtp, DeepSeekV3DepthIsOneMoeBlockAProjectionAndThreeNorms) {
  const auto m = *spec::catalog_model("deepseek-v3");
  const double h = static_cast<double>(m.hidden_size), V = static_cast<double>(m.vocab_size);
  const double depth = head_params(m, 1) - head_params(m, 0);
  EXPECT_DOUBLE_EQ(depth, static_cast<double>(m.block_parameters()) + 2 * h * h + 3 * h);
  EXPECT_NEAR(depth, 11.61e9, 0.01e9);  // 11,507,286,016 for the block, 102,781,952 beside it
  EXPECT_DOUBLE_EQ(head_params(m, 2) - head_params(m, 0), 2 * depth);
  const double hf = static_cast<double>(m.num_parameters()) + depth + 2 * V * h;
  EXPECT_NEAR(hf / 685e9, 1.0, 0.002);
  // On one GPU of tp 2, ep 8: the projection's output split over TP, 1/8 of the experts.
  const double sharded = head_params(m, 1, 2, 8) - head_params(m, 0, 2, 8);
  EXPECT_LT(sharded, depth / 7);
  EXPECT_GT(sharded, depth / 9);
}

// Llama 3 8B on 8 H100, dp 4 pp 2, GBS 64, seq 4096, trained with `depths` MTP depths.
struct Llama8bPp2 {
  spec::ModelSpec m = *spec::catalog_model("llama3-8b");
  spec::ClusterSpec c = cluster("H100-SXM5-80GB", 1, 8);
  plan::Plan p = plan::uniform_plan(m, 4, 1, 2, 1, 16, {});
  spec::TrainingSpec training(int64_t depths) const {
    auto t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false);
    t.mtp_layers = depths;
    return t;
  }
  Result<MemoryPrediction> memory(int64_t depths) const { return memory_of(m, c, training(depths), p); }
  Result<TimePrediction> time(int64_t depths) const { return time_of(m, c, training(depths), p); }
};

// The depth's block, projection, norms and the word embedding's copy are the last stage's, in
// weights, gradients and optimizer states; its saved activations add a block's and a second set
// of fp32 logits; the first stage holds what it held.
TEST(Mtp, TheLastStageHoldsTheDepthsAndTheEmbeddingsCopy) {
  const Llama8bPp2 job;
  const auto& m = job.m;
  auto base = job.memory(0), mtp = job.memory(1);
  ASSERT_TRUE(base && mtp) << (base ? mtp.error().to_string() : base.error().to_string());
  const double h = static_cast<double>(m.hidden_size), V = static_cast<double>(m.vocab_size);
  const double added = static_cast<double>(m.block_parameters()) + 2 * h * h + 3 * h + V * h;
  const auto &b0 = base->stages[0], &b1 = base->stages[1], &m0 = mtp->stages[0], &m1 = mtp->stages[1];
  EXPECT_DOUBLE_EQ(term(m0, "weights"), term(b0, "weights"));
  EXPECT_DOUBLE_EQ(term(m0, "activations"), term(b0, "activations"));
  EXPECT_NEAR(term(m1, "weights") - term(b1, "weights"), 2 * added, 1);      // bf16
  EXPECT_NEAR(term(m1, "gradients") - term(b1, "gradients"), 4 * added, 1);  // fp32
  EXPECT_NEAR(term(m1, "optimizer_states") - term(b1, "optimizer_states"), 12 * added, 2);
  // Saved: at least a block's activations and the depth's fp32 logits (s·V·4), in each of the
  // last stage's in-flight micro-batches (1 with pp 2).
  const double logits = 4096.0 * V * 4;
  const double more = term(m1, "activations") - term(b1, "activations");
  EXPECT_GT(more, b1.block_activation_bytes + logits);
  EXPECT_LT(more, 2 * b1.block_activation_bytes + 2 * logits);
  EXPECT_GT(m1.reserved_bytes, b1.reserved_bytes);
}

// Time: the last stage runs one more block (and a projection and a loss) per micro-batch, the
// first does not move but for the embedding gradient's all-reduce with the last stage; the
// iteration grows by about a block's share of the model.
TEST(Mtp, TheLastStageRunsTheDepthsBlockAndLoss) {
  const Llama8bPp2 job;
  auto base = job.time(0), mtp = job.time(1);
  ASSERT_TRUE(base && mtp);
  const auto &b0 = base->stages[0], &b1 = base->stages[1], &m0 = mtp->stages[0], &m1 = mtp->stages[1];
  EXPECT_DOUBLE_EQ(m0.fwd_s, b0.fwd_s);
  EXPECT_DOUBLE_EQ(m0.bwd_s, b0.bwd_s);
  // A block is 1/16 of the last stage's 16; with the projection and the second loss the stage's
  // micro-batch grows by more than that and by less than a third.
  EXPECT_GT(m1.stable_s, b1.stable_s * (1 + 1.0 / 16));
  EXPECT_LT(m1.stable_s, b1.stable_s * 1.33);
  EXPECT_GT(mtp->iteration_time_s, base->iteration_time_s);
  EXPECT_GT(mtp->model_flops_per_iteration, base->model_flops_per_iteration);
}

// A mixture of experts' depth is an MoE block: its experts shard over the expert grid and its
// dispatcher's all-to-alls run in the head. Qwen3-30B-A3B on 2×8 H100, pp 2, ep 8.
TEST(Mtp, AMixtureOfExpertsDepthShardsItsExperts) {
  const auto m = *spec::catalog_model("qwen3-30b-a3b");
  const auto c = cluster("H100-SXM5-80GB", 2, 8);
  auto t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false, spec::Dtype::kBf16);
  plan::StagePlan st;
  st.zero = 1;
  auto p = plan::uniform_plan(m, 8, 1, 2, 1, 8, st);
  p.ep = 8;
  auto base = mist::testing::predict(m, c, t, p);
  t.mtp_layers = 1;
  auto mtp = mist::testing::predict(m, c, t, p);
  ASSERT_TRUE(base && mtp) << (base ? mtp.error().to_string() : base.error().to_string());
  const double h = static_cast<double>(m.hidden_size);
  const double experts = 3.0 * m.num_experts * h * m.moe_ffn_hidden_size;
  const double dense = static_cast<double>(m.block_parameters()) - experts + 2 * h * h + 3 * h +
                       static_cast<double>(m.vocab_size) * h;
  // bf16 weights: the dense part whole, the experts 1/ep.
  EXPECT_NEAR(term(mtp->memory.stages[1], "weights") - term(base->memory.stages[1], "weights"),
              2 * (dense + experts / 8), 2);
  EXPECT_GT(mtp->time.stages[1].stable_s, base->time.stages[1].stable_s);
  EXPECT_DOUBLE_EQ(mtp->time.stages[0].fwd_s, base->time.stages[0].fwd_s);
}

// Refused where mist cannot model it, naming the field: learned absolute positions (Megatron-LM
// asserts rotary or none) and the engines without multi-token prediction.
TEST(Mtp, RefusedWhereItCannotRun) {
  auto t = mist::testing::training(64, 2048, spec::Dtype::kBf16, true, false);
  t.mtp_layers = 1;
  mist::testing::expect_error(
      plan::validate_training(mist::testing::gpt(24, 2048, 16), cluster("H100-SXM5-80GB", 1, 8), t),
      "training.mtp_layers", "rotary");
  const auto m = *spec::catalog_model("llama3-8b");
  for (auto e : {spec::Engine::kTorchtitan, spec::Engine::kDeepSpeed})
    mist::testing::expect_error(PreparedJob::create(m, cluster("H100-SXM5-80GB", 1, 8), t, {}, {}, e),
                                "training.mtp_layers", "--engine megatron");
  mist::testing::expect_error(
      spec::training_from_json(Json{{"global_batch_size", 8}, {"seq_length", 64}, {"mtp_layers", -1}}, "training"),
      "training.mtp_layers", "");
  auto parsed = spec::training_from_json(Json{{"global_batch_size", 8}, {"seq_length", 64}, {"mtp_layers", 2}},
                                         "training");
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_EQ(parsed->mtp_layers, 2);
  EXPECT_EQ(spec::training_to_json(*parsed).at("mtp_layers"), 2);
}

}  // namespace
}  // namespace mist::analysis
