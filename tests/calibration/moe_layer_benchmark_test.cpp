// Megatron-Core's own single-MoE-layer benchmark on one DGX H100 against mist's time of the same
// layer (issue 16). Source: Megatron-LM d98e8a64, tests/functional_tests/test_cases/common/moe_perf
// (test_cases.py: the proxies and cases; __main__.py: how they run; baseline.json: mean forward and
// backward of 20 iterations after 5 warm-ups, CUDA events around layer(input) and
// output.backward(grad), a long GEMM before each to hide the host's launch). The layer is a
// MoELayer alone (router, dispatcher, TEGroupedMLP with grouped GEMM, the shared expert), 4096
// tokens per GPU (seq 4096, micro-batch 1), tp 1, ep 8, tokens force-balanced, fused permutation
// and router. Its TransformerConfig sets neither gated_linear_unit nor activation_func, so the
// experts are GELU MLPs (fc1 h -> f, GELU, fc2), not SwiGLU: mist plans them with model.mlp gelu.
// mist's default path for the stack: the Megatron-Core H100 calibration (job::prepare, --engine
// megatron). What mist does not model of the proxies: their routers in fp32 (MoEModelConfig's
// default moe_router_dtype, which makes the GELU experts' probability product fp32), the DeepSeek
// proxy's sigmoid scores, grouped top-k and expert bias (mist: the activation dtype, softmax top-k),
// and the fused permutation (mist: unfused). Nothing here is fitted; the bands are what mist reaches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>

#include <fmt/format.h>

#include "analysis/memory_model.hpp"
#include "analysis/time_model.hpp"
#include "graph/liveness.hpp"
#include "job/prepare.hpp"
#include "plan/plan.hpp"
#include "spec/catalog.hpp"

namespace mist {
namespace {

// The job of the layer on one DGX H100 as `mist predict --engine megatron` prepares it (the stack's
// calibration on): 4096 tokens per GPU, bf16 with bf16 gradients, maybe FP8 GEMMs.
Result<analysis::PreparedJob> layer_job(const spec::ModelSpec& m, spec::Fp8Recipe fp8) {
  auto c = spec::cluster_from_json(Json{{"gpu", "H100-SXM5-80GB"}, {"nodes", 1}, {"gpus_per_node", 8}}, "cluster");
  if (!c) return std::unexpected(c.error());
  spec::TrainingSpec t;
  t.global_batch_size = 8;
  t.seq_length = 4096;
  t.precision = spec::Dtype::kBf16;
  t.grad_dtype = spec::Dtype::kBf16;
  t.flash_attention = true;
  t.fp8 = fp8;
  t.moe_router_fp32 = true;  // MoEModelConfig's default moe_router_dtype for both proxies
  return job::prepare(m, *c, t);
}

// One proxy of test_cases.py: h, the experts' width, their count and top-k, a shared expert.
struct Proxy {
  const char* name;
  int64_t h, fe, experts, topk, shared = 0;
};
constexpr Proxy kMixtral{"Mixtral proxy", 4096, 14336, 8, 2};
constexpr Proxy kDeepSeek{"DeepSeek proxy", 7168, 2048, 32, 8, 2048};

spec::ModelSpec proxy_model(const Proxy& x) {
  auto m = *spec::catalog_model("mixtral-8x7b");
  m.name = x.name;
  m.num_layers = 1;
  m.hidden_size = x.h;
  m.num_heads = m.num_kv_heads = 8;  // MoEModelConfig.num_attention_heads; the attention is not timed
  m.mlp = spec::Mlp::kGelu;
  m.num_experts = x.experts;
  m.experts_per_token = x.topk;
  m.moe_ffn_hidden_size = x.fe;
  m.shared_expert_ffn_hidden_size = x.shared;
  return m;
}

struct Case {
  Proxy proxy;
  spec::Fp8Recipe fp8;
  double fwd_ms, bwd_ms;  // baseline.json
};

struct Times {
  double fwd = 0, bwd = 0;
};

// Ops of the layer: the router on ("moe.") and the shared expert.
constexpr const char* kLayer[] = {"moe.", "shared_expert."};

// The ops' time for one micro-batch at tp 1, ep 8.
Times op_time(const Case& c, std::span<const char* const> prefixes) {
  const auto m = proxy_model(c.proxy);
  auto job = layer_job(m, c.fp8);
  EXPECT_TRUE(job) << job.error().to_string();
  if (!job) return {};
  auto p = plan::uniform_plan(m, 8, 1, 1, 1, 1, {});
  p.ep = 8;
  Times out;
  for (const char* prefix : prefixes) {
    auto part = analysis::block_op_times(*job, p, prefix);
    EXPECT_TRUE(part) << part.error().to_string();
    if (!part) return {};
    out.fwd += part->fwd + part->fwd_exposed;
    out.bwd += part->bwd + part->bwd_exposed;
  }
  return out;
}

// bf16: each pass within 10% (2026-12-07, the router in fp32 as the proxies run: −1.0% / +0.8%
// Mixtral, +7.3% / +7.8% DeepSeek). FP8 blockwise within 12%: 16-26% too fast until Hopper's
// block-scaled GEMM rate (0.755 of the row-scaled one, measured by FBGEMM, not fitted here) was
// modelled on 2026-12-08, −8.2% / −10.6% Mixtral and −8.6% / −6.7% DeepSeek since (issue 17;
// docs/time-model.md).
TEST(MoeLayerBenchmark, MegatronCoresProxiesOnH100) {
  const Case cases[] = {
      {kMixtral, spec::Fp8Recipe::kNone, 4.3269, 7.6843},
      {kDeepSeek, spec::Fp8Recipe::kNone, 7.1192, 10.4827},
      {kMixtral, spec::Fp8Recipe::kBlockwise, 3.7876, 6.6182},
      {kDeepSeek, spec::Fp8Recipe::kBlockwise, 7.6093, 10.1265},
  };
  fmt::print("| case | measured fwd / bwd (ms) | mist fwd / bwd | error |\n|---|---|---|---|\n");
  for (const Case& c : cases) {
    const Times t = op_time(c, kLayer);
    const double ef = t.fwd * 1e3 / c.fwd_ms - 1, eb = t.bwd * 1e3 / c.bwd_ms - 1;
    const bool bf16 = c.fp8 == spec::Fp8Recipe::kNone;
    fmt::print("| {}, {} | {:.2f} / {:.2f} | {:.2f} / {:.2f} | {:+.1f}% / {:+.1f}% |\n", c.proxy.name,
               bf16 ? "bf16" : "fp8 blockwise", c.fwd_ms, c.bwd_ms, t.fwd * 1e3, t.bwd * 1e3, 100 * ef, 100 * eb);
    const double bound = bf16 ? 0.10 : 0.12;
    EXPECT_LT(std::abs(ef), bound) << c.proxy.name << " forward";
    EXPECT_LT(std::abs(eb), bound) << c.proxy.name << " backward";
  }
}

// The benchmark's memory: torch.cuda.max_memory_allocated() over an iteration after
// reset_peak_memory_stats() (__main__.py; baseline.json's max_allocated_bytes, bf16 all-to-all
// cases). What is allocated then: the layer's bf16 weights, TE's cuBLAS workspaces (one per grouped-
// GEMM stream, 4, and one for TE's dense linears when the shared expert has them; 32 MiB + 1 KiB
// each on Hopper, cpp_extensions/gemm.py), the input, and the previous iteration's output and
// output gradient (the script still holds them). Then the forward (mist's allocation trace of the
// MoE ops), the old output released, the new output gradient made beside the old one, and the
// backward with the weights' bf16 gradients (no DDP: each made as its op's backward runs; mist
// counts them from the backward's start, an upper bound).
double layer_peak_bytes(const Proxy& x) {
  const auto m = proxy_model(x);
  auto job = layer_job(m, spec::Fp8Recipe::kNone);
  EXPECT_TRUE(job);
  if (!job) return 0;
  auto p = plan::uniform_plan(m, 8, 1, 1, 1, 1, {});
  p.ep = 8;
  auto lowering = job->lowering(p);
  EXPECT_TRUE(lowering);
  if (!lowering) return 0;
  graph::Layer layer = (*lowering)->model.block;
  std::vector<graph::Op> ops;
  for (const auto& op : layer.ops)
    if (op.name.starts_with("moe.") || op.name.starts_with("shared_expert.")) ops.push_back(op);
  layer.input = -1;
  for (const auto& op : ops)
    if (op.name == "moe.router") layer.input = op.inputs.at(0);
  layer.ops = std::move(ops);
  layer.output = layer.ops.back().outputs.at(0);
  sym::Bindings b = (*lowering)->model.dims;
  b["b"] = 1;
  analysis::bind_parallel_degrees(b, p);
  const graph::LayerTrace trace = graph::trace_layer(layer, b, graph::TraceMode::kSaveAll);
  const double tokens = 4096.0 * static_cast<double>(x.h) * 2;  // one [s, b, h] bf16 tensor
  const double weights = 2 * sym::evaluate_or_zero(layer.params(), b);
  const double workspaces = static_cast<double>(x.shared > 0 ? 5 : 4) * (32 * 1024 * 1024 + 1024);
  double live = weights + workspaces + 3 * tokens, peak = live;
  std::map<int, double> sizes;
  auto step = [&](const graph::LayerTrace::Event& e) {
    if (e.key == trace.input_key || e.key == trace.output_grad_key) return;
    if (e.alloc) sizes[e.key] = e.bytes;
    live += e.alloc ? e.bytes : -sizes[e.key];
    peak = std::max(peak, live);
  };
  for (const auto& e : trace.forward) step(e);
  live -= tokens;                            // the old output
  peak = std::max(peak, live + tokens);      // the new output gradient beside the old one
  live += weights;                           // the weights' gradients
  peak = std::max(peak, live);
  for (const auto& e : trace.backward) step(e);
  return peak;
}

// 2026-12-07, with the proxies' fp32 router: Mixtral −0.1% (−38% without it: the GELU experts' fp32
// product and its backward were the gap). DeepSeek −19% until MoELayer.forward's locals were
// counted (Tensor::held_until: custom_forward's `hidden_states`, the permuted tokens, and
// `dispatched_input` keep two routed-row tensors of 470 MB each until the layer's forward
// returns), +1.2% since. Both held within 5%.
TEST(MoeLayerBenchmark, PeakAllocatedMemoryOnH100) {
  struct Row {
    Proxy proxy;
    double measured;  // baseline.json max_allocated_bytes (mean of 20 iterations)
  };
  fmt::print("| case | measured max allocated | mist | error |\n|---|---|---|---|\n");
  for (const Row& r : {Row{kMixtral, 2890180198.4}, Row{kDeepSeek, 3442750464.0}}) {
    const double mist = layer_peak_bytes(r.proxy);
    const double err = mist / r.measured - 1;
    fmt::print("| {}, bf16, a2a | {:.3f} GB | {:.3f} GB | {:+.1f}% |\n", r.proxy.name, r.measured / 1e9, mist / 1e9,
               100 * err);
    EXPECT_LT(std::abs(err), 0.05) << r.proxy.name;
  }
}

// The dispatcher's copies (permutation, the chunk sort and its inverse, unpermutation) move the
// gradient back the way the rows came: their backward takes what their forward does, not twice.
TEST(MoeLayerBenchmark, TheDispatchersCopiesTakeTheirForwardsTimeInBackward) {
  const Case deepseek{kDeepSeek, spec::Fp8Recipe::kNone, 0, 0};
  for (const char* op : {"moe.permute", "moe.sort_chunks", "moe.unsort_chunks", "moe.unpermute"}) {
    const char* one[] = {op};
    const Times t = op_time(deepseek, one);
    EXPECT_GT(t.fwd, 0) << op;
    EXPECT_NEAR(t.bwd / t.fwd, 1.0, 0.05) << op;
  }
}

}  // namespace
}  // namespace mist
