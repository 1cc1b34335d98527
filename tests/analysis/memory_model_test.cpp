#include "analysis/memory_model.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "graph/lower.hpp"
#include "test_jobs.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;
using mist::testing::gpt;
using mist::testing::training;

double term(const StageMemory& s, const std::string& name) { return mist::testing::memory_term(s, name); }

// ZeRO (Rajbhandari et al., SC20, Figure 1): model states per GPU for Ψ = 7.5B, N_d = 64, K = 12:
// 120 / 31.4 / 16.6 / 1.9 GB for stages 0..3 under fp16 mixed precision with fp16 gradients.
TEST(MemoryModel, ZeroPaperModelStates) {
  // SC21 Table 1's 7.5B GPT (h 4096, 36 layers) has Ψ within 1% of the paper's 7.5B.
  const auto m = gpt(36, 4096, 32);
  const double psi = static_cast<double>(m.num_parameters());
  ASSERT_NEAR(psi / 7.5e9, 1.0, 0.01);
  const auto c = cluster("A100-SXM4-80GB", 8, 8);
  const auto t = training(64, 2048, spec::Dtype::kFp16, true, false, spec::Dtype::kFp16);
  const double published[] = {120e9, 31.4e9, 16.6e9, 1.9e9};
  for (int zero = 0; zero <= 3; ++zero) {
    plan::StagePlan st;
    st.zero = zero;
    const auto p = plan::uniform_plan(m, 64, 1, 1, 1, 1, st);
    auto pred = mist::testing::memory_of(m, c, t, p);
    ASSERT_TRUE(pred.has_value()) << pred.error().to_string();
    const auto& s = pred->stages[0];
    const double states = term(s, "weights") + term(s, "gradients") + term(s, "optimizer_states");
    // Exactly the paper's formula for this model's Ψ ...
    const double k = 12, n = 64;
    const double formula[] = {(2 + 2 + k) * psi, 2 * psi + 2 * psi + k * psi / n, 2 * psi + (2 + k) * psi / n,
                              (2 + 2 + k) * psi / n};
    EXPECT_NEAR(states / formula[zero], 1.0, 1e-9) << "ZeRO-" << zero;
    // ... and within 1% of the published figure for Ψ = 7.5B.
    EXPECT_NEAR(states / published[zero], 1.0, zero == 3 ? 0.02 : 0.01) << "ZeRO-" << zero;
  }
}

// Korthikanti et al. 2022, Table 2: activation bytes per GPT layer with 16-bit activations and
// 1-byte dropout masks, no flash attention.
struct ActivationCase {
  int64_t s, b, h, a, t;
};

double korthikanti(const ActivationCase& c, bool sp, bool selective) {
  const double sbh = double(c.s) * c.b * c.h, t = c.t, as_h = double(c.a) * c.s / c.h;
  if (sp && selective) return sbh * 34 / t;
  if (sp) return sbh * (34 / t + 5 * as_h / t);
  if (selective) return sbh * (10 + 24 / t);
  return sbh * (10 + 24 / t + 5 * as_h / t);
}

TEST(MemoryModel, BlockActivationsMatchKorthikanti) {
  const ActivationCase cases[] = {{2048, 1, 2048, 16, 1}, {2048, 4, 4096, 32, 1}, {1024, 2, 5120, 40, 4},
                                  {2048, 1, 12288, 96, 8}, {4096, 1, 8192, 64, 8},  {512, 8, 1024, 16, 2}};
  for (const auto& k : cases) {
    for (bool sp : {false, true}) {
      for (bool selective : {false, true}) {
        if (sp && k.t == 1) continue;
        const auto m = gpt(8, k.h, k.a, 51200, /*max_positions=*/k.s);
        const auto c = cluster("A100-SXM4-80GB", 1, k.t);
        const auto t = training(k.b, k.s, spec::Dtype::kFp16, /*flash=*/false, /*dropout=*/true);
        auto p = plan::uniform_plan(m, 1, k.t, 1, k.b, 1, {});
        p.sequence_parallel = sp;
        p.recompute = selective ? plan::Recompute::kSelective : plan::Recompute::kNone;
        auto pred = mist::testing::memory_of(m, c, t, p);
        ASSERT_TRUE(pred.has_value()) << pred.error().to_string();
        const auto& s = pred->stages[0];
        const double expected = korthikanti(k, sp, selective);
        EXPECT_NEAR(s.block_activation_bytes / expected, 1.0, 0.03)
            << "s=" << k.s << " b=" << k.b << " h=" << k.h << " t=" << k.t << " sp=" << sp << " sel=" << selective;
        // A fully recomputed block keeps its input: 2·s·b·h, divided by t under SP.
        const double input = 2.0 * k.s * k.b * k.h / (sp ? k.t : 1);
        EXPECT_DOUBLE_EQ(s.block_activation_bytes_recomputed, input);
      }
    }
  }
}

TEST(MemoryModel, FlashAttentionRemovesTheQuadraticTerm) {
  const auto m = gpt(8, 4096, 32, 51200, /*max_positions=*/8192);
  const auto c = cluster("A100-SXM4-80GB", 1, 8);
  auto per_token = [&](int64_t seq, bool flash) {
    const auto t = training(8, seq, spec::Dtype::kBf16, flash, false);
    auto p = plan::uniform_plan(m, 1, 8, 1, 8, 1, {});
    auto pred = mist::testing::memory_of(m, c, t, p);
    EXPECT_TRUE(pred.has_value());
    return pred->stages[0].block_activation_bytes / double(seq);
  };
  EXPECT_NEAR(per_token(8192, true) / per_token(1024, true), 1.0, 1e-12);
  EXPECT_GT(per_token(8192, false) / per_token(1024, false), 2.0);
}

TEST(MemoryModel, MemoryOptimisationsReduceTheirTerms) {
  const auto m = gpt(24, 2048, 16);
  const auto c = cluster("A100-SXM4-40GB", 1, 8);
  const auto t = training(64, 2048, spec::Dtype::kBf16, true, false);
  auto predict = [&](plan::StagePlan st) {
    auto p = plan::uniform_plan(m, 2, 2, 2, 4, 8, st);
    auto pred = mist::testing::memory_of(m, c, t, p);
    EXPECT_TRUE(pred.has_value()) << pred.error().to_string();
    return pred->stages[0];
  };
  const auto base = predict({});
  plan::StagePlan ckpt;
  ckpt.ckpt_layers = 6;
  EXPECT_LT(term(predict(ckpt), "activations"), term(base, "activations"));
  plan::StagePlan z3;
  z3.zero = 3;
  EXPECT_LT(term(predict(z3), "weights"), term(base, "weights"));
  EXPECT_GT(term(predict(z3), "weight_buffers"), 0.0);
  plan::StagePlan off;
  off.offload = {0.5, 0.5, 1.0, 0.25};
  const auto o = predict(off);
  EXPECT_NEAR(term(o, "weights"), 0.5 * term(base, "weights"), 1.0);
  EXPECT_NEAR(term(o, "optimizer_states"), 0.0, 1e-6);
  EXPECT_NEAR(term(o, "activations"), 0.75 * term(base, "activations"), 1.0);
  EXPECT_GT(o.host_bytes, 0.0);
  EXPECT_LT(o.peak_bytes, base.peak_bytes);
}

TEST(MemoryModel, FirstStageHoldsMoreMicroBatches) {
  const auto m = gpt(32, 4096, 32);
  const auto c = cluster("A100-SXM4-80GB", 1, 8);
  const auto t = training(64, 2048, spec::Dtype::kBf16, true, false);
  auto p = plan::uniform_plan(m, 1, 2, 4, 1, 64, {});
  auto pred = mist::testing::memory_of(m, c, t, p);
  ASSERT_TRUE(pred.has_value());
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(pred->stages[i].in_flight, 4 - i);
  // Stage 0 holds 4 micro-batches, stage 2 holds 2 (same blocks; stage 0 adds the embedding).
  EXPECT_NEAR(term(pred->stages[0], "activations") / term(pred->stages[2], "activations"), 2.0, 0.01);
  // Fewer micro-batches than stages caps what is in flight.
  auto few = plan::uniform_plan(m, 1, 2, 4, 32, 2, {});
  auto pf = mist::testing::memory_of(m, c, t, few);
  ASSERT_TRUE(pf.has_value());
  EXPECT_DOUBLE_EQ(pf->stages[0].in_flight, 2);
}

TEST(MemoryModel, InterleavedScheduleHoldsMoreOnTheFirstStage) {
  plan::Plan p;
  p.pp = 4;
  p.grad_accum_steps = 16;
  p.virtual_pipeline_stages = 2;
  // Megatron: warm-up (pp - 1)·2 + (v - 1)·pp chunks on rank 0, +1 in flight = 11 chunks of 1/2.
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(p, 0), 5.5);
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(p, 3), 2.5);
  p.virtual_pipeline_stages = 1;
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(p, 0), 4);
}

TEST(MemoryModel, CompiledProgramMatchesTreeEvaluation) {
  // A dense model, a mixture of experts with its expert collectives (expert weights sharded over
  // their own data-parallel group: zwx, zgx, zox differ from zw, zg, zo), and the dense model under
  // context parallelism (its ring attention needs flash attention).
  for (const char* name : {"llama2-7b", "mixtral-8x7b", "llama2-7b cp"}) {
    const std::string_view n = name;
    const bool cp = n.ends_with(" cp");
    const auto m = *spec::catalog_model(std::string(n.substr(0, n.find(' '))));
    const auto t = training(64, 4096, spec::Dtype::kBf16, cp, false);
    auto o = graph::lowering_options(t, true);
    o.expert_parallel = o.expert_tensor_parallel = m.is_moe();
    o.context_parallel = cp;
    const auto lm = graph::lower(m, t.seq_length, o);
    auto M = build_stage_memory_model(lm, t, plan::Recompute::kNone);
    ASSERT_TRUE(M.has_value()) << M.error().to_string();
    std::vector<double> row;
    sym::Bindings b = lm.dims;
    const std::map<std::string, double> knobs = {
        {"b", 2},     {"t", 4},    {"cp", 2},   {"ep", 2},   {"etp", 2},  {"d", 8},  {"l", 9},  {"c", 3},   {"p", 3},   {"ph", 1},
        {"zw", 8},    {"zg", 8},   {"zo", 8},   {"zwx", 2},  {"zgx", 2}, {"zox", 2}, {"wo", .5}, {"go", .5},
        {"oo", 1},    {"ao", .25}, {"E", 1},    {"H", 1},    {"D", 0},    {"T", 0},  {"Q", 1},  {"W", 1},   {"G", 1},
        {"O", 1},     {"A", 1},    {"C_ctx", 5e8}, {"C_blas", 8e6}, {"C_nccl", 1e9}};
    b.insert(knobs.begin(), knobs.end());
    for (const auto& input : M->inputs) row.push_back(b.at(input));
    const auto out = M->program.evaluate_row(row);
    for (size_t i = 0; i < M->terms.size(); ++i) {
      const double tree = *sym::evaluate(M->terms[i].formula, b);
      EXPECT_NEAR(out[i], tree, 1e-9 * std::max(1.0, std::fabs(tree))) << name << " " << M->terms[i].name;
    }
  }
}

TEST(MemoryModel, FitsComparesPeakWithCapacity) {
  const auto m = *spec::catalog_model("llama2-70b");
  const auto c = cluster("A100-SXM4-40GB", 1, 8);
  const auto t = training(8, 4096, spec::Dtype::kBf16, true, false);
  auto p = plan::uniform_plan(m, 1, 8, 1, 1, 8, {});
  auto pred = mist::testing::memory_of(m, c, t, p);
  ASSERT_TRUE(pred.has_value());
  // 70B parameters with 18 bytes of state each over 8 GPUs cannot fit in 40 GB.
  EXPECT_FALSE(pred->fits);
  EXPECT_FALSE(pred->stages[0].fits);
  EXPECT_GT(pred->stages[0].peak_bytes, 70e9 * 18 / 8);
}

}  // namespace
}  // namespace mist::analysis

namespace mist::analysis {
namespace {

TEST(MemoryModel, AbsurdProductsAreRefused) {
  auto m = mist::testing::gpt(4, 8192, 64);
  m.positions = spec::Positions::kRotary;  // no position table to bound the sequence
  const auto c = mist::testing::cluster("A100-SXM4-80GB", 1, 1);
  // Each value is within its own bound; together they would need ~1e24 bytes.
  const auto t = mist::testing::training(1'000'000'000, 10'000'000, spec::Dtype::kBf16, false, false);
  auto p = plan::uniform_plan(m, 1, 1, 1, 1'000'000'000, 1, {});
  auto pred = mist::testing::memory_of(m, c, t, p);
  ASSERT_FALSE(pred.has_value());
  EXPECT_EQ(pred.error().path, "plan");
  EXPECT_NE(pred.error().message.find("beyond any real machine"), std::string::npos);
}

}  // namespace
}  // namespace mist::analysis
