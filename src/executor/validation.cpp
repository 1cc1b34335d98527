#include "executor/validation.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <unistd.h>

#include <fmt/format.h>

#include "analysis/memory_model.hpp"
#include "graph/lower.hpp"
#include "plan/plan.hpp"

namespace mist::executor {

namespace {

using spec::Dtype;
using CM = CheckpointMode;

constexpr double kActivationBound = 0.02;  // issue 4: saved and peak within 2%

spec::ModelSpec base(const char* family, int64_t h, int64_t a, int64_t g, int64_t f) {
  spec::ModelSpec m;
  m.name = fmt::format("{}-h{}", family, h);
  m.family = family;
  m.source = "mist validate sweep";
  m.num_layers = 1;
  m.hidden_size = h;
  m.num_heads = a;
  m.num_kv_heads = g;
  m.ffn_hidden_size = f;
  m.vocab_size = 1024;  // unused by a block
  m.max_position_embeddings = 4096;
  return m;
}
// Megatron GPT: LayerNorm, GELU 4h, learned positions, biases everywhere.
spec::ModelSpec gpt(int64_t h, int64_t a) {
  auto m = base("gpt", h, a, a, 4 * h);
  m.qkv_bias = m.linear_bias = true;
  m.tie_word_embeddings = true;
  return m;
}
// Llama: RMSNorm, SwiGLU, rotary, GQA, no biases.
spec::ModelSpec llama(int64_t h, int64_t a, int64_t g, int64_t f) {
  auto m = base("llama", h, a, g, f);
  m.norm = spec::Norm::kRmsNorm;
  m.mlp = spec::Mlp::kSwiGlu;
  m.positions = spec::Positions::kRotary;
  return m;
}
// Falcon: parallel attention/MLP, one shared or two LayerNorms, GELU 4h, rotary, MQA/GQA.
spec::ModelSpec falcon(int64_t h, int64_t a, int64_t g, int norms) {
  auto m = base("falcon", h, a, g, 4 * h);
  m.positions = spec::Positions::kRotary;
  m.parallel_block = true;
  m.norms_per_block = norms;
  return m;
}

ValidationCase make(spec::ModelSpec m, int64_t s, int64_t b, Dtype dt, CM ck, bool flash, bool dropout = false) {
  ValidationCase c;
  c.run.model = std::move(m);
  c.run.seq_length = s;
  c.run.micro_batch = b;
  c.run.dtype = dt;
  c.run.checkpoint = ck;
  c.run.flash_attention = flash;
  c.run.dropout = dropout;
  const auto& mm = c.run.model;
  c.name = fmt::format("{}-h{}-a{}{}-s{}-b{}-{}-{}{}{}", mm.family, mm.hidden_size, mm.num_heads,
                       mm.num_kv_heads != mm.num_heads ? fmt::format("g{}", mm.num_kv_heads) : "", s, b,
                       spec::to_string(dt), to_string(ck), flash ? "-flash" : "", dropout ? "-dropout" : "");
  if (mm.parallel_block && mm.norms_per_block == 1) c.name += "-sharednorm";
  return c;
}

// The embedding or the head of a model, untied (each layer owns its table, as the lowering
// counts it with one pipeline stage per layer).
ValidationCase layer_case(graph::LayerKind kind, spec::ModelSpec m, int64_t V, int64_t s, int64_t b, Dtype dt,
                          bool dropout = false) {
  m.vocab_size = V;
  m.tie_word_embeddings = false;
  auto c = make(std::move(m), s, b, dt, CM::kNone, false, dropout);
  c.run.layer = kind;
  const auto& mm = c.run.model;
  c.name = fmt::format("{}-{}-h{}-V{}-s{}-b{}-{}{}", kind == graph::LayerKind::kHead ? "head" : "embedding",
                       mm.family, mm.hidden_size, V, s, b, spec::to_string(dt), dropout ? "-dropout" : "");
  return c;
}

spec::ClusterSpec cpu_cluster() {
  // This machine as a one-device "cluster"; only the block terms are compared, so the device's
  // figures matter only for precision checks (bf16 runs on the CPU).
  spec::ClusterSpec c;
  c.gpu.name = "cpu";
  c.gpu.vendor = "cpu";
  c.gpu.source = "this machine";
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  c.gpu.memory_bytes = ram;
  c.gpu.fp32_flops = c.gpu.bf16_flops = 1e11;
  c.gpu.default_gpus_per_node = 1;
  c.host_memory_bytes = ram;
  return c;
}

spec::TrainingSpec training_of(const BlockRun& r) {
  spec::TrainingSpec t;
  t.global_batch_size = r.micro_batch;
  t.seq_length = r.seq_length;
  t.precision = r.dtype;
  t.grad_dtype = Dtype::kFp32;  // the executor's main_grad, as Megatron's
  t.optimizer = spec::Optimizer::kAdamW;
  t.flash_attention = r.flash_attention;
  t.dropout = r.dropout;
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double relative(double predicted, double measured) {
  return measured != 0 ? (predicted - measured) / measured : (predicted == 0 ? 0 : INFINITY);
}

TermCheck check(const char* term, double predicted, double measured, double bound) {
  TermCheck t{term, predicted, measured, relative(predicted, measured), bound, true, "", 0};
  // Model states are exact byte counts: "exact" means equal, not within rounding.
  t.ok = bound < 0 || (bound == 0 ? predicted == measured : std::abs(t.error) <= bound);
  return t;
}

// Known gaps of the memory model (docs/validation.md), each checked to account for the whole
// difference before it is named:
// - recomputed-output: Megatron's CheckpointFunction keeps the recomputed output of a fully
//   recomputed block, and the output gradient it was given, referenced through that block's
//   backward; the held gradient also stops the first gradient accumulation from running in place.
//   One or two block outputs more than activations + activation_transient count;
// - selective-forward: under selective recompute the model bounds the forward by the forward
//   peak without recompute; the backward peak (liveness) is what the block reaches.
void explain_gaps(const BlockRun& r, const BlockMeasurement& m, const BlockPrediction& p, TermCheck& t) {
  if (t.ok || t.term != "peak") return;
  if (r.checkpoint == CM::kFull) {
    for (int outputs : {1, 2}) {
      const double e = relative(t.predicted + outputs * static_cast<double>(m.output_bytes), t.measured);
      if (std::abs(e) <= t.bound && (t.gap.empty() || std::abs(e) < std::abs(t.error_with_gap)))
        t.gap = "recomputed-output", t.error_with_gap = e;
    }
  } else if (r.checkpoint == CM::kSelective && t.predicted > t.measured &&
             m.backward_peak_bytes >= m.forward_peak_bytes) {
    const double e = relative(p.backward_peak, t.measured);
    if (std::abs(e) <= t.bound) t.gap = "selective-forward", t.error_with_gap = e;
  }
}

}  // namespace

std::vector<ValidationCase> validation_sweep(bool quick) {
  const Dtype F = Dtype::kFp32, B = Dtype::kBf16;
  const CM N = CM::kNone, S = CM::kSelective, U = CM::kFull;
  const auto E = graph::LayerKind::kEmbedding, H = graph::LayerKind::kHead;
  if (quick)
    return {
        make(gpt(256, 4), 128, 2, F, N, false, true),
        make(gpt(256, 4), 256, 1, B, S, false),
        make(llama(256, 8, 2, 704), 128, 2, B, N, false),
        make(llama(256, 4, 4, 688), 256, 1, F, U, true),
        make(falcon(256, 4, 1, 1), 128, 2, B, N, true),
        make(falcon(256, 8, 2, 2), 128, 1, F, S, false),
        layer_case(E, gpt(256, 4), 2048, 128, 2, F, true),
        layer_case(H, llama(256, 4, 4, 688), 2048, 128, 2, B),
    };
  return {
      // GPT
      make(gpt(256, 4), 128, 1, F, N, false),
      make(gpt(256, 4), 512, 4, F, S, false, true),
      make(gpt(512, 8), 256, 2, B, N, false, true),
      make(gpt(512, 8), 1024, 1, B, U, false),
      make(gpt(1024, 16), 256, 2, F, N, true),
      make(gpt(1024, 16), 512, 1, B, S, false),
      make(gpt(2048, 32), 128, 1, B, N, false),
      make(gpt(2048, 16), 128, 2, F, U, true),
      make(gpt(256, 8), 2048, 1, B, N, true),
      make(gpt(768, 12), 384, 8, B, S, false),
      make(gpt(512, 8), 2048, 1, F, S, false),
      make(gpt(256, 4), 128, 8, B, U, false, true),
      make(gpt(1024, 16), 2048, 1, B, N, true),
      make(gpt(512, 4), 128, 8, F, S, true),
      // Llama
      make(llama(256, 4, 4, 688), 128, 1, F, N, false),
      make(llama(256, 8, 2, 704), 256, 2, B, N, false),
      make(llama(512, 8, 8, 1376), 512, 1, B, S, false),
      make(llama(512, 8, 2, 1408), 1024, 2, F, N, true),
      make(llama(1024, 16, 4, 2816), 256, 1, B, U, false),
      make(llama(1024, 16, 16, 2752), 512, 2, B, N, true),
      make(llama(2048, 32, 8, 5632), 128, 1, B, S, false),
      make(llama(2048, 16, 16, 5504), 256, 1, F, N, false),
      make(llama(256, 4, 1, 688), 2048, 1, B, S, false),
      make(llama(512, 8, 4, 1376), 128, 8, F, U, true),
      make(llama(768, 12, 4, 2048), 384, 4, B, N, false),
      make(llama(2048, 32, 8, 5632), 512, 1, B, N, true),
      // Falcon
      make(falcon(256, 4, 1, 1), 128, 1, F, N, false),
      make(falcon(256, 4, 4, 2), 512, 2, B, S, false),
      make(falcon(512, 8, 2, 2), 256, 4, B, N, false, true),
      make(falcon(512, 8, 1, 1), 1024, 1, F, U, false),
      make(falcon(1024, 16, 4, 2), 256, 2, B, N, true),
      make(falcon(1024, 16, 1, 1), 512, 1, B, S, false),
      make(falcon(2048, 32, 8, 2), 128, 1, B, N, false),
      make(falcon(2048, 32, 32, 2), 128, 1, F, U, false),
      make(falcon(256, 8, 8, 2), 2048, 1, B, N, true),
      make(falcon(768, 12, 12, 1), 384, 8, F, N, false),
      // Embedding and head
      layer_case(E, gpt(512, 8), 8192, 256, 2, F, true),
      layer_case(E, llama(1024, 16, 4, 2816), 8192, 512, 1, B),
      layer_case(H, gpt(512, 8), 8192, 256, 2, B),
      layer_case(H, llama(1024, 16, 4, 2816), 8192, 512, 1, F),
      layer_case(H, falcon(256, 4, 1, 1), 4096, 128, 4, B),
  };
}

Result<BlockPrediction> predict_block(const BlockRun& r) {
  spec::ModelSpec m = r.model;
  m.num_layers = 1;
  const auto t = training_of(r);
  plan::StagePlan stage;
  stage.ckpt_layers = r.checkpoint == CM::kFull ? 1 : 0;
  auto p = plan::uniform_plan(m, 1, 1, 1, r.micro_batch, 1, stage);
  p.recompute = r.checkpoint == CM::kSelective ? plan::Recompute::kSelective : plan::Recompute::kNone;
  MIST_TRY(auto pred, analysis::predict_memory(m, cpu_cluster(), t, p));
  const auto& st = pred.stages.at(0);
  BlockPrediction out;
  out.saved = r.checkpoint == CM::kFull ? st.block_activation_bytes_recomputed : st.block_activation_bytes;
  const char* P_name = r.layer == graph::LayerKind::kBlock       ? "P_blk"
                       : r.layer == graph::LayerKind::kEmbedding ? "P_emb"
                                                                 : "P_head";
  double P = 0;
  for (const auto& q : st.quantities)
    if (q.name == P_name) P = q.bytes;
  out.weights = spec::dtype_bytes(t.precision) * P;
  out.gradients = spec::dtype_bytes(t.grad_dtype) * P;
  out.optimizer_states = analysis::optimizer_bytes_per_param(t) * P;

  // The peak of one block alone: a one-block stage without embedding or head, one micro-batch.
  const auto lm = graph::lower(m, r.seq_length, graph::lowering_options(t, false));
  MIST_TRY(auto M, analysis::build_stage_memory_model(lm, t, p.recompute));
  sym::Bindings k = lm.dims;
  for (const auto& name : M.inputs)
    if (!k.count(name)) k[name] = 0.0;
  k["b"] = static_cast<double>(r.micro_batch);
  k["t"] = k["d"] = k["l"] = k["p"] = 1.0;
  k["zw"] = k["zg"] = k["zo"] = 1.0;
  k["c"] = static_cast<double>(stage.ckpt_layers);
  auto eval = [&](const sym::Expr& e, const char* what) -> Result<double> {
    auto v = sym::evaluate(e, k);
    if (!v) return fail(std::string("prediction.") + what, v.error().to_string());
    return *v;
  };
  if (r.layer != graph::LayerKind::kBlock) {
    // The embedding's and the head's share of the memory model: A + X = max(forward, backward)
    // peak of the layer (X_emb, X_head in analysis/memory_model.cpp).
    const auto& a = r.layer == graph::LayerKind::kHead ? M.head : M.embedding;
    MIST_TRY(out.saved, eval(a.saved, "saved"));
    MIST_TRY(out.peak, eval(sym::max(a.fwd_peak, a.bwd_peak), "peak"));
    MIST_TRY(out.forward_peak, eval(a.input + a.fwd_peak, "forward_peak"));
    MIST_TRY(out.backward_peak, eval(a.bwd_peak, "backward_peak"));
    return out;
  }
  for (const auto& term : M.terms)
    if (term.name == "activations" || term.name == "activation_transient") {
      MIST_TRY(double v, eval(term.formula, term.name.c_str()));
      out.peak += v;
    }
  MIST_TRY(out.forward_peak, eval(M.block.input + M.block.fwd_peak, "forward_peak"));
  MIST_TRY(out.backward_peak,
           eval(r.checkpoint == CM::kSelective ? M.block.bwd_peak_selective : M.block.bwd_peak, "backward_peak"));
  return out;
}

Result<ValidationReport> run_validation(const ValidationOptions& o) {
  ValidationReport rep;
  for (auto c : validation_sweep(o.quick)) {
    c.run.timing_reps = o.timing_reps;
    c.run.threads = o.threads;
    CaseResult cr;
    const auto t0 = std::chrono::steady_clock::now();
    MIST_TRY(cr.predicted, predict_block(c.run));
    auto m = measure_block(c.run);
    if (!m) return fail(c.name + (m.error().path.empty() ? "" : "." + m.error().path), m.error().message);
    cr.measured = std::move(*m);
    cr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& M = cr.measured;
    const auto& P = cr.predicted;
    cr.terms = {
        check("weights", P.weights, static_cast<double>(M.weight_bytes), 0),
        check("gradients", P.gradients, static_cast<double>(M.gradient_bytes), 0),
        check("optimizer_states", P.optimizer_states, static_cast<double>(M.optimizer_bytes), 0),
        check("saved", P.saved, static_cast<double>(M.saved_bytes), kActivationBound),
        check("peak", P.peak, static_cast<double>(M.peak_bytes()), kActivationBound),
        check("forward_peak", P.forward_peak, static_cast<double>(M.forward_peak_bytes), -1),
        check("backward_peak", P.backward_peak, static_cast<double>(M.backward_peak_bytes), -1),
    };
    for (auto& t : cr.terms) explain_gaps(c.run, M, P, t);
    cr.c = std::move(c);
    if (o.on_case) o.on_case(cr);
    rep.cases.push_back(std::move(cr));
  }
  if (rep.cases.empty()) return rep;
  for (size_t i = 0; i < rep.cases[0].terms.size(); ++i) {
    TermSummary s{rep.cases[0].terms[i].term, rep.cases[0].terms[i].bound, 0, 0, 0, 0, true};
    std::vector<double> errs;
    for (const auto& c : rep.cases) {
      const auto& t = c.terms[i];
      errs.push_back(std::abs(t.error));
      s.max_abs_error = std::max(s.max_abs_error, std::abs(t.error));
      const bool explained = !t.ok && !t.gap.empty();
      s.explained += explained ? 1 : 0;
      s.ok = s.ok && (t.ok || (explained && !o.strict));
      ++s.cases;
    }
    s.median_abs_error = median(errs);
    rep.ok = rep.ok && s.ok;
    rep.summary.push_back(s);
  }
  return rep;
}

std::string timings_csv(const ValidationReport& r) {
  std::string out = "case,family,dtype,h,a,g,f,s,b,checkpoint,flash,dropout,op,phase,calls,median_s,min_s,max_s\n";
  for (const auto& c : r.cases) {
    const auto& run = c.c.run;
    const auto& m = run.model;
    for (const auto& t : c.measured.times) {
      if (t.seconds.empty()) continue;
      const auto [mn, mx] = std::minmax_element(t.seconds.begin(), t.seconds.end());
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.9f},{:.9f},{:.9f}\n", c.c.name, m.family,
                         spec::to_string(run.dtype), m.hidden_size, m.num_heads, m.num_kv_heads,
                         m.ffn_hidden_size, run.seq_length, run.micro_batch, to_string(run.checkpoint),
                         run.flash_attention ? 1 : 0, run.dropout ? 1 : 0, t.op, t.phase, t.seconds.size(),
                         median(t.seconds), *mn, *mx);
    }
  }
  return out;
}

}  // namespace mist::executor
