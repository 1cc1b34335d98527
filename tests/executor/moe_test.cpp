// Mixture of experts on the executor (issue 16): one rank of an ep × etp expert grid (the
// MoE block of executor/moe.cpp), measured byte for byte against graph/lower_moe.cpp: model
// states, saved activations, forward and backward peaks and the stage peak.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "allocator/caching_allocator.hpp"
#include "executor/executor.hpp"
#include "executor/validation.hpp"
#include "block_checks.hpp"
#include "executor_jobs.hpp"
#include "graph/lower.hpp"
#include "spec/model.hpp"

namespace mist::executor {
namespace {

using CM = CheckpointMode;
using spec::Dtype;
using testing::moe;
using testing::run;

// An expert grid and the shared expert: none (Mixtral), plain, or gated (Qwen2-MoE).
enum class Shared { kNone, kPlain, kGated };
struct Case {
  int64_t E, k, ep, etp;
  Shared shared = Shared::kNone;
};

constexpr int64_t kH = 128, kFe = 96, kFs = 192, kS = 64, kB = 2;

BlockRun moe_run(const Case& c, Dtype dt, CM ck, int64_t cp = 1) {
  auto r = run(moe(kH, 4, 2, c.E, c.k, kFe, c.shared == Shared::kNone ? 0 : kFs, c.shared == Shared::kGated), kS, kB,
               dt, ck, true);
  r.ep = c.ep;
  r.etp = c.etp;
  r.cp = cp;
  r.micro_batches = 1;
  return r;
}

std::string name(const BlockRun& r) {
  const auto& m = r.model;
  return fmt::format("E {} k {} ep {} etp {}{}{} {} {}{}", m.num_experts, m.experts_per_token, r.ep, r.etp,
                     m.shared_expert_ffn_hidden_size > 0 ? " shared" : "", m.shared_expert_gate ? " gated" : "",
                     spec::to_string(r.dtype), to_string(r.checkpoint), r.cp > 1 ? fmt::format(" cp {}", r.cp) : "");
}

// Expert counts 4 and 8, top 1 and 2, ep 1, 2 and 4 (ep = E: one local expert, no chunk sort),
// etp 1 and 2.
std::vector<Case> grid() {
  std::vector<Case> out;
  for (int64_t E : {4, 8})
    for (int64_t k : {1, 2})
      for (int64_t ep : {1, 2, 4})
        for (int64_t etp : {1, 2}) {
          // Each (ep, etp) meets all three shared experts over the four (E, k).
          const auto shared = static_cast<Shared>((E / 4 + k + ep + etp) % 3);
          out.push_back({E, k, ep, etp, shared});
        }
  return out;
}

// Mixtral's layout with every expert on the rank, a gated shared expert on a 2 × 2 grid, and a
// plain one with one local expert (ep = E) on etp 2.
std::vector<Case> three_grids() {
  return {{4, 2, 1, 1, Shared::kNone}, {8, 2, 2, 2, Shared::kGated}, {4, 1, 4, 2, Shared::kPlain}};
}

void expect_exact(const BlockRun& r) {
  SCOPED_TRACE(name(r));
  testing::expect_block_matches_model(r);
}

TEST(MoeExecutor, OneRankMatchesTheModelByteForByte) {
  for (const Case& c : grid())
    for (Dtype dt : {Dtype::kFp32, Dtype::kBf16})
      for (CM ck : {CM::kNone, CM::kFull}) expect_exact(moe_run(c, dt, ck));
}

// A larger block (h 512, 8 heads, s 256, b 2, experts of 1024, a gated shared expert of 2048;
// about 19 MB saved, 24 MB at the peak in bf16), on a 4 × 2 grid, where the caching allocator's
// large pool serves the expert tensors.
TEST(MoeExecutor, LargerBlockMatchesToo) {
  for (CM ck : {CM::kNone, CM::kFull}) {
    auto r = run(moe(512, 8, 2, 8, 2, 1024, 2048, true), 256, 2, Dtype::kBf16, ck, true);
    r.ep = 4;
    r.etp = 2;
    r.micro_batches = 1;
    expect_exact(r);
  }
}

// GELU experts (Megatron without --swiglu, as its MoE layer benchmark runs; the shared expert a
// GELU MLP too): fc1, GELU, the product with each row's probability, fc2, on three grids, with
// and without moe_act's recompute, byte for byte.
TEST(MoeExecutor, GeluExpertsMatchTheModelByteForByte) {
  for (const Case& c : three_grids())
    for (Dtype dt : {Dtype::kFp32, Dtype::kBf16})
      for (uint32_t modules : {0u, static_cast<uint32_t>(spec::kRecomputeMoeAct)}) {
        auto r = moe_run(c, dt, modules ? CM::kSelective : CM::kNone);
        r.model.mlp = spec::Mlp::kGelu;
        r.recompute_modules = modules;
        SCOPED_TRACE(fmt::format("{} gelu{}", name(r), modules ? " moe_act" : ""));
        if (!modules) {
          expect_exact(r);
          continue;
        }
        auto m = measure_block(r);
        auto p = predict_block(r);
        ASSERT_TRUE(m && p) << (m ? p.error().to_string() : m.error().to_string());
        EXPECT_EQ(m->saved_bytes, p->saved);
        EXPECT_EQ(m->backward_peak_bytes, p->backward_peak);
      }
}

// Megatron's --moe-router-dtype fp32 (training.moe_router_dtype): fp32 logits, probabilities and
// their copies through either dispatcher; SwiGLU experts take fp32 probabilities into their fused
// kernel, GELU experts' product is fp32 and cast back, with its backward's two fp32 products. In
// bf16 the bytes differ from the router in bf16; in fp32 nothing changes.
TEST(MoeExecutor, RouterInFp32MatchesTheModelByteForByte) {
  for (const Case& c : three_grids())
    for (spec::Mlp mlp : {spec::Mlp::kSwiGlu, spec::Mlp::kGelu})
      for (bool allgather : {false, true})
        for (CM ck : {CM::kNone, CM::kFull}) {
          auto r = moe_run(c, Dtype::kBf16, ck);
          r.model.mlp = mlp;
          r.moe_allgather = allgather;
          r.moe_router_fp32 = true;
          SCOPED_TRACE(fmt::format("{} {} {} router fp32", name(r), mlp == spec::Mlp::kGelu ? "gelu" : "swiglu",
                                   allgather ? "allgather" : "alltoall"));
          expect_exact(r);
          if (ck == CM::kFull) continue;
          auto bf16_router = r;
          bf16_router.moe_router_fp32 = false;
          const auto a = measure_block(r), b = measure_block(bf16_router);
          ASSERT_TRUE(a && b);
          EXPECT_GT(a->saved_bytes, b->saved_bytes);  // the kept probabilities are fp32
        }
  // A moe_act recompute of GELU experts replays the product and its cast.
  auto r = moe_run({8, 2, 2, 2, Shared::kGated}, Dtype::kBf16, CM::kSelective);
  r.model.mlp = spec::Mlp::kGelu;
  r.moe_router_fp32 = true;
  r.recompute_modules = spec::kRecomputeMoeAct;
  auto m = measure_block(r);
  auto p = predict_block(r);
  ASSERT_TRUE(m && p) << (m ? p.error().to_string() : m.error().to_string());
  EXPECT_EQ(m->saved_bytes, p->saved);
  EXPECT_EQ(m->backward_peak_bytes, p->backward_peak);
}

// Selective recompute (the attention core) and a context-parallel rank of the same block.
TEST(MoeExecutor, SelectiveRecomputeAndContextParallelismToo) {
  for (const Case& c : {Case{8, 2, 2, 2, Shared::kGated}, Case{4, 1, 1, 2, Shared::kNone}})
    for (Dtype dt : {Dtype::kFp32, Dtype::kBf16}) {
      auto r = moe_run(c, dt, CM::kSelective);
      SCOPED_TRACE(name(r));
      auto m = measure_block(r);
      auto p = predict_block(r);
      ASSERT_TRUE(m && p);
      EXPECT_EQ(m->saved_bytes, p->saved);
      EXPECT_EQ(m->backward_peak_bytes, p->backward_peak);
      EXPECT_GE(p->peak, m->peak_bytes());  // the model bounds the forward by that without recompute
      expect_exact(moe_run(c, dt, CM::kNone, 2));
    }
}

// Megatron's --recompute-modules on the MoE block, byte for byte: what it keeps, its backward
// peak (the restored outputs beside the replay's own), and the whole allocation sequence's peak.
// layernorm and moe_act run as CheckpointWithoutOutput, moe and shared_experts as checkpoints.
TEST(MoeExecutor, RecomputeModulesMatchTheModelByteForByte) {
  const uint32_t sets[] = {spec::kRecomputeLayernorm | spec::kRecomputeMoeAct, spec::kRecomputeMoe,
                           spec::kRecomputeCoreAttn | spec::kRecomputeSharedExperts | spec::kRecomputeMoeAct,
                           spec::kRecomputeMoe | spec::kRecomputeMoeAct | spec::kRecomputeLayernorm};
  for (const Case& c : {Case{8, 2, 2, 2, Shared::kGated}, Case{4, 1, 4, 1, Shared::kPlain}, Case{4, 2, 1, 1, Shared::kNone}})
    for (Dtype dt : {Dtype::kFp32, Dtype::kBf16})
      for (uint32_t modules : sets) {
        if ((modules & spec::kRecomputeSharedExperts) && c.shared == Shared::kNone) continue;
        auto r = moe_run(c, dt, CM::kSelective);
        r.recompute_modules = modules;
        SCOPED_TRACE(fmt::format("{} modules {}", name(r), fmt::join(spec::recompute_module_names(modules), ",")));
        auto m = measure_block(r);
        auto p = predict_block(r);
        ASSERT_TRUE(m && p) << (m ? p.error().to_string() : m.error().to_string());
        EXPECT_EQ(m->saved_bytes, p->saved);
        EXPECT_EQ(m->backward_peak_bytes, p->backward_peak);
        const auto seq = predicted_allocation_sequence(*p, m->output_freed);
        EXPECT_EQ(allocator::replay(seq).requested_bytes.peak, m->peak_bytes());
        EXPECT_TRUE(m->step_ok);
      }
}

// The same recomputations compute the same block: output, input and weight gradients.
TEST(MoeExecutor, RecomputeModulesComputeTheSameBlock) {
  const Case c{8, 2, 2, 2, Shared::kGated};
  auto none = measure_block(moe_run(c, Dtype::kFp32, CM::kNone));
  ASSERT_TRUE(none);
  for (uint32_t modules : std::initializer_list<uint32_t>{spec::kRecomputeLayernorm | spec::kRecomputeMoeAct, spec::kRecomputeMoe,
                           spec::kRecomputeSharedExperts}) {
    auto r = moe_run(c, Dtype::kFp32, CM::kSelective);
    r.recompute_modules = modules;
    auto m = measure_block(r);
    ASSERT_TRUE(m) << m.error().to_string();
    EXPECT_LT(m->saved_bytes, none->saved_bytes) << modules;  // each frees what it recomputes
    EXPECT_DOUBLE_EQ(m->output_sumsq, none->output_sumsq) << modules;
    EXPECT_NEAR(m->input_grad_sumsq, none->input_grad_sumsq, 1e-9 * none->input_grad_sumsq) << modules;
    EXPECT_NEAR(m->weight_grad_sumsq, none->weight_grad_sumsq, 1e-9 * none->weight_grad_sumsq) << modules;
  }
}

// The two families lower_moe.cpp lowers, from Hugging Face configs shrunk to a few hundred
// units: Mixtral (no shared expert) and Qwen2-MoE (q, k, v biases, a gated shared expert).
TEST(MoeExecutor, RunsMixtralAndQwen2MoeConfigs) {
  const char* mixtral = R"({"model_type": "mixtral", "hidden_size": 128, "intermediate_size": 96,
      "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "num_local_experts": 4,
      "num_experts_per_tok": 2, "vocab_size": 512, "max_position_embeddings": 1024, "sliding_window": null})";
  const char* qwen2_moe = R"({"model_type": "qwen2_moe", "hidden_size": 128, "intermediate_size": 256,
      "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2, "num_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128,
      "decoder_sparse_step": 1, "vocab_size": 512, "max_position_embeddings": 1024})";
  for (const char* text : {mixtral, qwen2_moe}) {
    auto m = spec::model_from_json(Json::parse(text), "model");
    ASSERT_TRUE(m) << m.error().to_string();
    ASSERT_TRUE(m->is_moe());
    for (auto [ep, etp] : {std::pair<int64_t, int64_t>{1, 1}, {2, 2}, {4, 1}})
      for (Dtype dt : {Dtype::kFp32, Dtype::kBf16}) {
        auto r = run(*m, kS, kB, dt, CM::kNone, true);
        r.ep = ep;
        r.etp = etp;  // two micro-batches of gradient accumulation, the second measured
        expect_exact(r);
      }
  }
}

// Megatron's all-gather token dispatcher (graph/lower_moe.cpp allgather_experts), on the same
// grid: the tp_ep group's tokens gathered into the buffer outside the activations, the local
// experts' rows permuted out of them, their probabilities selected, the output reduce-scattered.
TEST(MoeExecutor, AllGatherDispatcherMatchesTheModelByteForByte) {
  for (const Case& c : grid())
    for (Dtype dt : {Dtype::kFp32, Dtype::kBf16})
      for (CM ck : {CM::kNone, CM::kFull}) {
        auto r = moe_run(c, dt, ck);
        r.moe_allgather = true;
        SCOPED_TRACE("allgather");
        expect_exact(r);
      }
}

// On one rank holding every expert (ep = etp = 1, nothing to move) the two dispatchers compute
// the same block: the same output and gradients. On a grid each stands for the other ranks'
// rows its own way (the all-to-all's rows return to this rank's experts, the all-gather's copies
// are routed like its own tokens), so there only the gradients are checked, against finite
// differences.
TEST(MoeExecutor, BothDispatchersComputeTheSameBlock) {
  for (const Case& c : three_grids()) {
    auto a2a = moe_run(c, Dtype::kFp32, CM::kNone), ag = a2a;
    ag.moe_allgather = true;
    SCOPED_TRACE(name(a2a));
    if (c.ep == 1 && c.etp == 1) {
      auto x = measure_block(a2a), y = measure_block(ag);
      ASSERT_TRUE(x && y);
      EXPECT_NEAR(y->output_sumsq, x->output_sumsq, 1e-9 * x->output_sumsq);
      EXPECT_NEAR(y->input_grad_sumsq, x->input_grad_sumsq, 1e-9 * x->input_grad_sumsq);
      EXPECT_NEAR(y->weight_grad_sumsq, x->weight_grad_sumsq, 1e-9 * x->weight_grad_sumsq);
    }
    auto g = check_gradients(ag);
    ASSERT_TRUE(g) << g.error().to_string();
    EXPECT_LT(g->input_error(), 5e-3) << g->input_numeric << " vs " << g->input_analytic;
    EXPECT_LT(g->weights_error(), 5e-3) << g->weights_numeric << " vs " << g->weights_analytic;
  }
}

// What it keeps against the all-to-all dispatcher's, closed form (T = s·b tokens, R = etp·T·k
// rows, G = etp·ep·T gathered tokens, E_l = E/ep local experts): the all-to-all keeps the whole
// argsort of the routing map with each row's token (T·(E + k)·8) and, with more than one local
// expert, nothing else; the all-gather keeps each row's token (R·8) and masked_select's input and
// mask (G·E_l·(w + 1)); the rows the experts keep are the same.
TEST(MoeExecutor, AllGatherKeepsItsOwnIndicesAndTheSelectsInputs) {
  for (const Case& c : {Case{4, 1, 1, 1}, Case{8, 2, 2, 2}, Case{8, 2, 4, 1}, Case{4, 2, 2, 2}})
    for (Dtype dt : {Dtype::kFp32, Dtype::kBf16}) {
      auto a2a = moe_run(c, dt, CM::kNone), ag = a2a;
      ag.moe_allgather = true;
      auto x = measure_block(a2a), y = measure_block(ag);
      ASSERT_TRUE(x && y);
      const int64_t w = spec::dtype_bytes(dt), T = kS * kB, R = c.etp * T * c.k, G = c.etp * c.ep * T;
      EXPECT_EQ(y->saved_bytes - x->saved_bytes, R * 8 + G * (c.E / c.ep) * (w + 1) - T * (c.E + c.k) * 8)
          << name(a2a);
    }
}

TEST(MoeExecutor, RunsTheOpsOfTheMoeLowering) {
  for (const Case& c : three_grids()) {
    const auto r = moe_run(c, Dtype::kFp32, CM::kNone);
    graph::LoweringOptions o;
    o.flash_attention = true;
    o.expert_parallel = c.ep > 1;
    o.expert_tensor_parallel = c.etp > 1;
    o.one_local_expert = c.ep == c.E;
    for (bool allgather : {false, true}) {
      auto ri = r;
      ri.moe_allgather = o.moe_allgather = allgather;
      auto m = measure_block(ri);
      ASSERT_TRUE(m) << m.error().to_string();
      const auto lm = graph::lower(r.model, r.seq_length, o);
      std::vector<std::string> expected;
      for (const auto& op : lm.block.ops)
        if (op.kind != graph::OpKind::kView) expected.push_back(op.name);
      EXPECT_EQ(m->forward_ops, expected) << name(r) << (allgather ? " allgather" : "");
    }
  }
}

// The saved bytes against docs/memory-model.md's closed form, measured on two blocks: the MoE
// block minus a dense SwiGLU block of one expert's width keeps
// T·(20k + 12E) + R·(h + 1)·w + R·3·f_e/etp·w − T·3·f_e·w (T = s·b tokens, R = etp·T·k rows).
TEST(MoeExecutor, SavedBytesAreTheClosedForm) {
  for (const Case& c : {Case{4, 1, 1, 1}, Case{8, 2, 2, 2}, Case{8, 2, 4, 1}, Case{4, 2, 2, 2}})
    for (Dtype dt : {Dtype::kFp32, Dtype::kBf16}) {
      const auto r = moe_run(c, dt, CM::kNone);
      auto dense_model = testing::model("llama", kH, 4, 2);
      dense_model.ffn_hidden_size = kFe;
      auto moe_m = measure_block(r);
      auto dense = measure_block(run(dense_model, kS, kB, dt, CM::kNone, true));
      ASSERT_TRUE(moe_m && dense);
      const int64_t w = spec::dtype_bytes(dt), T = kS * kB, R = c.etp * T * c.k;
      EXPECT_EQ(moe_m->saved_bytes - dense->saved_bytes,
                T * (20 * c.k + 12 * c.E) + R * (kH + 1) * w + R * 3 * kFe / c.etp * w - T * 3 * kFe * w)
          << name(r);
    }
}

// Model states on the grid: the expert weights are E/ep experts of 1/etp of their width.
TEST(MoeExecutor, ExpertWeightsAreTheRanksShare) {
  const int64_t attention = 2 * kH * kH + 2 * kH * (kH / 2) + 2 * kH, router = kH * 8;
  for (const Case& c : {Case{8, 2, 1, 1}, Case{8, 2, 2, 1}, Case{8, 2, 4, 2}}) {
    auto m = measure_block(moe_run(c, Dtype::kBf16, CM::kNone));
    ASSERT_TRUE(m);
    EXPECT_EQ(m->param_count, attention + router + 8 / c.ep * 3 * kH * kFe / c.etp) << c.ep << " " << c.etp;
    EXPECT_EQ(m->weight_bytes, 2 * m->param_count);
    EXPECT_EQ(m->gradient_bytes, 4 * m->param_count);
    EXPECT_EQ(m->optimizer_bytes, 12 * m->param_count);
  }
}

TEST(MoeExecutor, GradientsMatchFiniteDifferences) {
  for (const Case& c : three_grids()) {
    auto r = run(moe(64, 4, 2, c.E, c.k, 32, c.shared == Shared::kNone ? 0 : 48, c.shared == Shared::kGated), 32, 2,
                 Dtype::kFp32, CM::kNone, true);
    r.ep = c.ep;
    r.etp = c.etp;
    auto g = check_gradients(r);
    ASSERT_TRUE(g) << g.error().to_string();
    EXPECT_LT(g->input_error(), 5e-3) << name(r) << ": " << g->input_numeric << " vs " << g->input_analytic;
    EXPECT_LT(g->weights_error(), 5e-3) << name(r) << ": " << g->weights_numeric << " vs " << g->weights_analytic;
  }
}

TEST(MoeExecutor, RecomputeAgreesWithSavingEverything) {
  const Case c{8, 2, 2, 2, Shared::kGated};
  auto none = measure_block(moe_run(c, Dtype::kFp32, CM::kNone));
  ASSERT_TRUE(none);
  for (CM ck : {CM::kSelective, CM::kFull}) {
    auto m = measure_block(moe_run(c, Dtype::kFp32, ck));
    ASSERT_TRUE(m);
    EXPECT_DOUBLE_EQ(m->output_sumsq, none->output_sumsq) << to_string(ck);
    EXPECT_NEAR(m->input_grad_sumsq, none->input_grad_sumsq, 1e-9 * none->input_grad_sumsq) << to_string(ck);
    EXPECT_NEAR(m->weight_grad_sumsq, none->weight_grad_sumsq, 1e-9 * none->weight_grad_sumsq) << to_string(ck);
  }
}

TEST(MoeExecutor, RefusesWhatItDoesNotRunNamingTheField) {
  auto refused = [](BlockRun r) {
    auto m = measure_block(r);
    return m ? std::string("ran") : m.error().path;
  };
  const Case c{8, 2, 2, 1};
  auto r = moe_run(c, Dtype::kFp32, CM::kNone);
  r.ep = 3;
  EXPECT_EQ(refused(r), "run.ep");  // 3 does not divide 8 experts
  r.ep = 0;
  EXPECT_EQ(refused(r), "run.ep");
  r = moe_run(c, Dtype::kFp32, CM::kNone);
  r.etp = 5;  // nor 5 the width 96
  EXPECT_EQ(refused(r), "run.etp");
  r = moe_run(c, Dtype::kFp32, CM::kNone);
  r.seq_length = 5;  // 5·2·2 rows do not split over 8 experts
  r.flash_attention = false;
  EXPECT_EQ(refused(r), "run.seq_length");
  r = moe_run(c, Dtype::kFp32, CM::kNone);
  r.model.linear_bias = true;  // gpt-oss's biased experts and router
  EXPECT_EQ(refused(r), "model.linear_bias");
  r = moe_run(c, Dtype::kFp32, CM::kNone);
  r.model.swiglu_limit = 7;
  EXPECT_EQ(refused(r), "model.swiglu_limit");
  r = moe_run(c, Dtype::kFp32, CM::kNone);
  r.model.attention_sinks = true;
  EXPECT_EQ(refused(r), "model.attention_sinks");
  r = moe_run(c, Dtype::kFp32, CM::kNone);
  r.model.qk_norm = true;  // Qwen3's attention
  EXPECT_EQ(refused(r), "model.qk_norm");
  r = run(testing::model("llama", kH, 4, 2), kS, kB, Dtype::kFp32, CM::kNone, true);
  r.ep = 2;  // a dense model
  EXPECT_EQ(refused(r), "run.ep");
  // Memory is checked, time not yet: profile rows name no ep or etp.
  r = moe_run(c, Dtype::kFp32, CM::kNone);
  auto t = predict_block_time(r, {});
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().path, "run.ep");
}

// A gap the executor found in the lowering against Megatron-Core d98e8a64, measured and closed
// (2026-12-03). Its unfused permutation (moe_utils.permute) takes flat_sorted =
// routing_map.T.reshape(-1).argsort(...)[:num_out_tokens], a view of the whole argsort, and the
// probabilities' index op probs.T.contiguous().reshape(-1)[flat_sorted] saves it: s·b·E int64
// entries stay until the permutation's backward. graph/lower_moe.cpp counted s·b·k of them; it
// now counts the whole argsort. Run as Megatron does, the block matches the model; keeping only
// the chosen entries (the old count) keeps s·b·(E − k)·8 bytes less, in its saved activations and
// at the forward's and backward's peaks (both between the permutation and its backward).
TEST(MoeExecutor, MegatronKeepsTheWholeArgsortOfThePermutation) {
  for (const Case& c : {Case{8, 2, 2, 2, Shared::kGated}, Case{4, 1, 1, 1, Shared::kNone}, Case{8, 1, 4, 1}})
    for (Dtype dt : {Dtype::kFp32, Dtype::kBf16}) {
      const auto r = moe_run(c, dt, CM::kNone);
      ASSERT_TRUE(r.moe_full_argsort);  // Megatron's, the default
      auto chosen_only = r;
      chosen_only.moe_full_argsort = false;
      SCOPED_TRACE(name(r));
      auto real = measure_block(r), fewer = measure_block(chosen_only);
      auto p = predict_block(r);
      ASSERT_TRUE(real && fewer && p);
      const int64_t argsort_gap = kS * kB * (c.E - c.k) * 8;
      EXPECT_EQ(real->saved_bytes, p->saved);
      EXPECT_EQ(real->peak_bytes(), p->peak);
      EXPECT_EQ(p->saved - fewer->saved_bytes, argsort_gap);
      EXPECT_EQ(p->forward_peak - fewer->forward_peak_bytes, argsort_gap);
      EXPECT_EQ(p->backward_peak - fewer->backward_peak_bytes, argsort_gap);
      EXPECT_DOUBLE_EQ(real->output_sumsq, fewer->output_sumsq);
      EXPECT_DOUBLE_EQ(real->input_grad_sumsq, fewer->input_grad_sumsq);
    }
}

}  // namespace
}  // namespace mist::executor
