// FP8 training in the lowering, the time model and the memory model: the blocks' linears run their
// GEMMs on FP8 operands after casts of their own; Transformer Engine keeps their inputs for backward
// as FP8 copies and caches the weights' FP8 copies, torchao keeps the bf16 inputs; GPUs without FP8
// tensor cores refuse it.
#include <gtest/gtest.h>

#include "analysis/prepared_job.hpp"
#include "hardware/op_cost.hpp"
#include "test_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;
using mist::testing::expect_error;
using mist::testing::memory_of;
using mist::testing::memory_term;
using mist::testing::op_named;
using mist::testing::predict;
using mist::testing::time_of;

spec::TrainingSpec fp8(spec::Fp8Recipe r = spec::Fp8Recipe::kTensorwise) {
  auto t = mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false);
  t.fp8 = r;
  return t;
}

plan::Plan llama_plan(int64_t dp, int64_t tp) {
  const auto m = *spec::catalog_model("llama3-8b");
  plan::StagePlan st;
  st.zero = 1;
  auto p = plan::uniform_plan(m, dp, tp, 1, 1, 64 / dp, st);
  p.sequence_parallel = tp > 1;
  return p;
}

// Which ops are FP8: the block's linears, not the LM head; with Transformer Engine the saved input
// of a linear is its one-byte copy, with torchao the bf16 input itself.
TEST(Fp8, LinearsOfTheBlocksOnly) {
  const auto m = *spec::catalog_model("llama3-8b");
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  auto te = *PreparedJob::create(m, c, fp8(), {});
  const auto* L = *te.lowering(llama_plan(8, 1));
  const auto& qkv = op_named(L->model.block, "attn.qkv");
  EXPECT_TRUE(qkv.fp8);
  EXPECT_FALSE(op_named(L->model.head, "lm_head").fp8);
  EXPECT_FALSE(op_named(L->model.block, "attn.core").fp8);
  ASSERT_EQ(qkv.saved.size(), 1u);
  const auto& kept = L->model.block.tensors[qkv.saved[0]];
  EXPECT_EQ(kept.name, "attn.qkv.input_fp8");
  sym::Bindings at = L->model.dims;
  at["b"] = 1;
  at["t"] = 1;
  EXPECT_DOUBLE_EQ(*sym::evaluate(kept.bytes, at), 4096.0 * 4096);  // s·h elements, one byte each
  // torchtitan (torchao's Float8Linear): the input itself is kept, the weights are cast each pass.
  auto ao = *PreparedJob::create(m, c, fp8(spec::Fp8Recipe::kRowwise), {}, {}, spec::Engine::kTorchtitan);
  const auto* A = *ao.lowering(llama_plan(8, 1));
  const auto& wq = op_named(A->model.block, "attn.wq");
  EXPECT_TRUE(wq.fp8);
  EXPECT_EQ(A->model.block.tensors[wq.saved[0]].name, "ln1.out");
  EXPECT_GT(*sym::evaluate(wq.fp8_cast_fwd, at), 6 * 4096.0 * 4096);  // input casts plus the weight's
}

// The forward kernels of a block's gate_up linear in `job` under plan `p`, at micro-batch 1.
std::vector<hardware::Kernel> gate_up_kernels(const PreparedJob& job, const plan::Plan& p) {
  const auto* L = *job.lowering(p);
  sym::Bindings at = L->model.dims;
  at["b"] = 1;
  at["t"] = 1;
  return hardware::op_kernels(op_named(L->model.block, "mlp.gate_up"), at, spec::Dtype::kBf16,
                              hardware::Pass::kForward);
}

// Time: an FP8 GEMM runs at the FP8 peak at the same achievable fraction, after its casts; the
// block is faster than in bf16 but less than twice as fast.
TEST(Fp8, GemmsAtTheFp8RateAfterTheirCasts) {
  const auto m = *spec::catalog_model("llama3-8b");
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  auto bf = *PreparedJob::create(m, c, mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false), {});
  auto f8 = *PreparedJob::create(m, c, fp8(), {});
  const auto p = llama_plan(8, 1);
  const auto a = *block_op_times(bf, p, "mlp.gate_up");
  const auto b = *block_op_times(f8, p, "mlp.gate_up");
  EXPECT_LT(b.fwd, 0.75 * a.fwd);
  EXPECT_GT(b.fwd, 0.5 * a.fwd);
  const auto kernels = gate_up_kernels(f8, p);
  ASSERT_EQ(kernels.size(), 2u);  // the cast, then the GEMM
  EXPECT_TRUE(std::holds_alternative<hardware::StreamKernel>(kernels[0]));
  EXPECT_EQ(std::get<hardware::GemmKernel>(kernels[1]).dtype, spec::Dtype::kFp8);
  const auto t_bf = *time_of(m, c, bf.training(), p), t_f8 = *time_of(m, c, f8.training(), p);
  EXPECT_LT(t_f8.iteration_time_s, 0.85 * t_bf.iteration_time_s);
  EXPECT_GT(t_f8.iteration_time_s, 0.5 * t_bf.iteration_time_s);
}

// The blockwise recipe's GEMMs carry block scales, which Hopper applies outside its tensor cores:
// its GEMM of a linear takes 1/0.755 of the tensorwise one's compute time on H100 (the casts are
// cheaper: no amax pass), and the same time on B200, whose tensor cores take the scales.
TEST(Fp8, BlockScaledGemmsRunSlowerOnHopperOnly) {
  const auto m = *spec::catalog_model("llama3-8b");
  const auto p = llama_plan(8, 1);
  auto gemm_s = [&](const char* gpu, spec::Fp8Recipe r, bool& block_scaled) {
    const auto c = cluster(gpu, 1, 8);
    const auto kernels = gate_up_kernels(*PreparedJob::create(m, c, fp8(r), {}), p);
    const auto& g = std::get<hardware::GemmKernel>(kernels.at(1));
    block_scaled = g.block_scaled;
    return hardware::gemm_time(c.gpu, g, {}) - hardware::PerfConstants{}.kernel_launch_s;
  };
  bool tw = true, bw = false, tw_b = true, bw_b = false;
  const double h_tensor = gemm_s("H100-SXM5-80GB", spec::Fp8Recipe::kTensorwise, tw);
  const double h_block = gemm_s("H100-SXM5-80GB", spec::Fp8Recipe::kBlockwise, bw);
  EXPECT_FALSE(tw);
  EXPECT_TRUE(bw);
  EXPECT_NEAR(h_block / h_tensor, 1 / hardware::PerfConstants{}.fp8_block_scaled_rate_sm90, 1e-9);
  EXPECT_DOUBLE_EQ(gemm_s("B200-SXM-180GB", spec::Fp8Recipe::kBlockwise, bw_b), gemm_s("B200-SXM-180GB", spec::Fp8Recipe::kTensorwise, tw_b));
  EXPECT_TRUE(bw_b);
  // The whole job on H100: slower in blockwise than in tensorwise.
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  EXPECT_GT(time_of(m, c, fp8(spec::Fp8Recipe::kBlockwise), p)->iteration_time_s,
            time_of(m, c, fp8(spec::Fp8Recipe::kTensorwise), p)->iteration_time_s);
}

// Memory: Transformer Engine's FP8 weight copies (2 bytes per FP8 linear parameter) on top of the
// bf16 weights, and fewer saved activation bytes (the linears' inputs in one byte).
TEST(Fp8, WeightCopiesAndOneByteInputs) {
  const auto m = *spec::catalog_model("llama3-8b");
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  const auto p = llama_plan(8, 1);
  const auto bf = *memory_of(m, c, mist::testing::training(64, 4096, spec::Dtype::kBf16, true, false), p);
  const auto f8 = *memory_of(m, c, fp8(), p);
  const double copies = memory_term(f8.stages[0], "fp8_weight_copies");
  // 32 blocks of qkv, proj, gate_up and down: 32 · (4096·6144 + 4096·4096 + 4096·28672 + 14336·4096).
  EXPECT_DOUBLE_EQ(copies, 2.0 * 32 * (4096.0 * 6144 + 4096.0 * 4096 + 4096.0 * 28672 + 14336.0 * 4096));
  EXPECT_LT(memory_term(f8.stages[0], "activations"), memory_term(bf.stages[0], "activations"));
  EXPECT_DOUBLE_EQ(memory_term(f8.stages[0], "weights"), memory_term(bf.stages[0], "weights"));
}

// FP8 parameters (Megatron-LM's --fp8-param-gather): the FP8 linears' weights take one byte instead
// of two, their row-wise FP8 copy is the parameter itself (the column-wise one stays), the
// distributed optimizer's all-gather moves them in FP8, and the replayed reserve falls with the
// allocated peak.
TEST(Fp8, Fp8ParametersKeepTheFp8LinearsWeightsInOneByte) {
  const auto m = *spec::catalog_model("llama3-8b");
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  auto p = llama_plan(8, 1);
  p.overlap_param_gather = false;  // the gather alone, in the iteration's delta
  auto t8 = fp8();
  t8.fp8_param_gather = true;
  const auto a = *predict(m, c, fp8(), p), b = *predict(m, c, t8, p);
  const double P8 = 32 * (4096.0 * 6144 + 4096.0 * 4096 + 4096.0 * 28672 + 14336.0 * 4096);
  const auto &sa = a.memory.stages[0], &sb = b.memory.stages[0];
  // ZeRO-1 keeps every weight on every rank: one byte less per FP8 parameter, one copy fewer.
  EXPECT_DOUBLE_EQ(memory_term(sa, "weights") - memory_term(sb, "weights"), P8);
  EXPECT_DOUBLE_EQ(memory_term(sa, "fp8_weight_copies"), 2 * P8);
  EXPECT_DOUBLE_EQ(memory_term(sb, "fp8_weight_copies"), P8);
  EXPECT_DOUBLE_EQ(sa.peak_bytes - sb.peak_bytes, 2 * P8);
  // The replay of the allocations sees the same bytes go (within the allocator's rounding).
  EXPECT_NEAR(sa.replayed_allocated_bytes - sb.replayed_allocated_bytes, 2 * P8, 64.0 * (1 << 20));
  EXPECT_NEAR(sa.reserved_bytes - sb.reserved_bytes, 2 * P8, 256.0 * (1 << 20));
  // The parameter all-gather moves 2·P - P8 bytes instead of 2·P (P: the stage's parameters); a
  // collective's time is a latency plus bytes over bandwidth, so it falls by less than its bytes.
  auto gather = [](const analysis::Prediction& x) {
    for (const auto& term : x.time.stages[0].delta_terms)
      if (term.name == "parameter_gather") return term.seconds;
    ADD_FAILURE() << "no parameter_gather";
    return 0.0;
  };
  const double P = 8030261248.0;  // Llama 3 8B
  EXPECT_LT(gather(b), gather(a));
  EXPECT_GT(gather(b), (2 * P - P8) / (2 * P) * gather(a));
  EXPECT_LT(b.time.iteration_time_s, a.time.iteration_time_s);
  // Under ZeRO-3 the shards hold them in one byte too; the gathered buffers are sized by the largest
  // layer, here the embedding (525M parameters against a block's 218M), which stays bf16.
  for (auto& st : p.stages) st.zero = 3;
  const auto a3 = *memory_of(m, c, fp8(), p), b3 = *memory_of(m, c, t8, p);
  EXPECT_DOUBLE_EQ(memory_term(b3.stages[0], "weight_buffers"), memory_term(a3.stages[0], "weight_buffers"));
  EXPECT_DOUBLE_EQ(memory_term(a3.stages[0], "weights") - memory_term(b3.stages[0], "weights"), P8 / 8);
}

// fp8_param_gather needs FP8 training, and mist models it as Megatron-LM keeps FP8 parameters: the
// other engines refuse it, naming the field.
TEST(Fp8, Fp8ParametersNeedFp8TrainingAndMegatron) {
  expect_error(spec::training_from_json(Json{{"global_batch_size", 8}, {"seq_length", 1024}, {"fp8_param_gather", true}},
                                        "training"),
               "training.fp8_param_gather", "needs \"precision\": \"fp8\"");
  const auto m = *spec::catalog_model("llama3-8b");
  auto t8 = fp8(spec::Fp8Recipe::kRowwise);
  t8.fp8_param_gather = true;
  const auto tt = analysis::PreparedJob::create(m, cluster("H100-SXM5-80GB", 1, 8), t8, {}, {}, spec::Engine::kTorchtitan);
  ASSERT_FALSE(tt.has_value());
  EXPECT_EQ(tt.error().path, "training.fp8_param_gather");
  EXPECT_NE(tt.error().message.find("enable_fsdp_float8_all_gather"), std::string::npos) << tt.error().message;
}

// A GPU without FP8 tensor cores refuses it, naming the field; mxfp8 needs Blackwell.
TEST(Fp8, RefusedWhereTheGpuHasNoFp8) {
  const auto m = *spec::catalog_model("llama3-8b");
  expect_error(plan::validate_training(m, cluster("A100-SXM4-80GB", 1, 8), fp8()), "training.precision",
               "no FP8 tensor cores");
  expect_error(plan::validate_training(m, cluster("H100-SXM5-80GB", 1, 8), fp8(spec::Fp8Recipe::kMxfp8)),
               "training.fp8_recipe", "Blackwell");
  EXPECT_TRUE(plan::validate_training(m, cluster("H100-SXM5-80GB", 1, 8), fp8()).has_value());
  EXPECT_TRUE(plan::validate_training(m, cluster("B200-SXM-180GB", 1, 8), fp8(spec::Fp8Recipe::kMxfp8)).has_value());
}

}  // namespace
}  // namespace mist::analysis
