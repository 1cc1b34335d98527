#include "executor/validation.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <map>

#include <unistd.h>

#include <fmt/format.h>

#include "analysis/prediction.hpp"
#include "executor/profile_rows.hpp"
#include "graph/lower.hpp"
#include "plan/plan.hpp"
#include "profile/csv_rows.hpp"

namespace mist::executor {

namespace {

using spec::Dtype;
using CM = CheckpointMode;

constexpr double kActivationBound = 0.02;  // issue 4: saved and peak within 2%
// The caching allocator's reserved peak of mist's allocation sequence against that of the
// sequence recorded on this CPU, both replayed with the default options (docs/validation.md,
// "Reserved memory"). Reserved memory moves in segments of 2 MiB (small pool) or 2 to 20 MiB
// (large pool): 2% lets one 2 MiB segment pass above 100 MiB and no difference of a 20 MiB one
// below 1 GiB; the sweep's cases agree exactly once the known gap out-of-place-accumulation is
// accounted for.
constexpr double kReservedBound = 0.02;
// Issue 4: a block's forward+backward time predicted from the per-op profile within 15% of the
// measured one, as the median over the sweep. Each layer is also bounded on its own, loosely: the
// op times and the block time are measured in separate passes on a machine other jobs share, so
// one layer can be off by a burst of load (docs/validation.md has the measured spread).
constexpr double kTimeMedianBound = 0.15;
constexpr double kTimeCaseBound = 0.3;

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
// (The reserved term's gap, out-of-place-accumulation, is checked where the term is computed.)
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
  // The block of a mixture of experts is an MoE block (its dense first blocks are another layer).
  if (m.is_moe()) m.first_dense_layers = 0, m.ffn_hidden_size = 0;
  // One rank of a mixture of experts' ep × etp expert grid: the grid folds over dp = ep·etp
  // data-parallel GPUs (tp = 1), without ZeRO, so every state is whole on the rank.
  const int64_t dp = r.ep * r.etp;
  auto t = run_training(r);
  t.global_batch_size = r.micro_batch * dp;
  plan::StagePlan stage;
  stage.ckpt_layers = r.checkpoint == CM::kFull ? 1 : 0;
  auto p = plan::uniform_plan(m, dp, 1, 1, r.micro_batch, 1, stage);
  p.recompute = r.checkpoint == CM::kSelective ? plan::Recompute::kSelective : plan::Recompute::kNone;
  p.ep = r.ep;
  p.etp = r.etp;
  // One rank of a context-parallel group: a plan of cp GPUs (dp = tp = pp = 1), its CP lowering.
  p.cp = r.cp;
  const auto comm = run_cp_comm(r);
  if (!comm) return fail("run.cp_exchange", "the executor runs Transformer Engine's p2p ring, a2a, all_gather and a2a+p2p");
  p.cp_comm = *comm;
  if (*comm == plan::CpComm::kA2aP2p) p.cp_a2a = r.cp_a2a;
  auto cluster = cpu_cluster();
  cluster.gpus_per_node = r.cp * dp;
  MIST_TRY(auto job, analysis::PreparedJob::create(m, cluster, t));
  MIST_TRY(auto pred, analysis::predict(job, p));
  const auto& st = pred.memory.stages.at(0);
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
  MIST_TRY(const analysis::Lowering* lowering, job.lowering(p));
  graph::LoweredModel lm = lowering->model;
  analysis::StageMemoryModel M = lowering->memory;
  if (r.compiled_loss) {
    // The loss as torch.compile runs it under Megatron's head (whose norm the executor runs): only
    // torchtitan compiles, so the job cannot state it; the same lowering with the loss swapped.
    auto o = lm.options;
    o.compiled_loss = true;
    lm = graph::lower(m, t.seq_length, o);
    MIST_TRY(M, analysis::build_stage_memory_model(lm, t, p.recompute));
  }
  sym::Bindings k = lm.dims;
  for (const auto& name : M.inputs)
    if (!k.count(name)) k[name] = 0.0;
  k["b"] = static_cast<double>(r.micro_batch);
  k["t"] = k["d"] = k["l"] = k["p"] = 1.0;
  k["zw"] = k["zg"] = k["zo"] = 1.0;
  k["c"] = static_cast<double>(stage.ckpt_layers);
  k["cp"] = static_cast<double>(r.cp);
  k["ep"] = static_cast<double>(r.ep);
  k["etp"] = static_cast<double>(r.etp);
  k["zwx"] = k["zgx"] = k["zox"] = 1.0;
  auto eval = [&](const sym::Expr& e, const char* what) -> Result<double> {
    auto v = sym::evaluate(e, k);
    if (!v) return fail(std::string("prediction.") + what, v.error().to_string());
    return *v;
  };
  {
    const auto& layer = r.layer == graph::LayerKind::kBlock       ? lm.block
                        : r.layer == graph::LayerKind::kEmbedding ? lm.embedding
                                                                  : lm.head;
    const auto& a = r.layer == graph::LayerKind::kBlock       ? M.block
                    : r.layer == graph::LayerKind::kEmbedding ? M.embedding
                                                              : M.head;
    const auto mode = r.checkpoint == CM::kFull        ? graph::TraceMode::kFull
                      : r.checkpoint == CM::kSelective ? graph::TraceMode::kSelective
                                                       : graph::TraceMode::kSaveAll;
    out.trace = graph::trace_layer(layer, k, mode);
    MIST_TRY(out.input_bytes, eval(a.input, "input"));
    MIST_TRY(out.output_bytes, eval(a.output, "output"));
  }
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
  MIST_TRY(out.backward_peak, eval(r.checkpoint == CM::kSelective ? M.block.bwd_peak_selective
                                    : r.checkpoint == CM::kFull    ? M.block.bwd_peak_recomputed
                                                                   : M.block.bwd_peak,
                                    "backward_peak"));
  return out;
}

std::vector<allocator::Event> predicted_allocation_sequence(const BlockPrediction& p, bool free_output,
                                                            size_t* backward_begin) {
  using allocator::Event;
  const auto& t = p.trace;
  std::vector<Event> out;
  std::map<int, int64_t> ids;  // live keys of the layer trace -> sequence ids
  int64_t next = 1;
  auto alloc = [&](int key, double bytes) {
    const int64_t id = key == t.input_key ? 0 : next++;
    ids[key] = id;
    out.push_back({Event::Kind::kAlloc, id, static_cast<int64_t>(std::llround(bytes)), 0});
  };
  auto release = [&](int key) {
    if (key == t.input_key) return;  // held by the executor's caller
    auto it = ids.find(key);
    if (it == ids.end()) return;
    out.push_back({Event::Kind::kFree, it->second, 0, 0});
    ids.erase(it);
  };
  auto run = [&](const std::vector<graph::LayerTrace::Event>& events) {
    for (const auto& e : events) e.alloc ? alloc(e.key, e.bytes) : release(e.key);
  };
  alloc(t.input_key, p.input_bytes);
  run(t.forward);
  if (free_output) release(t.output_key);
  if (backward_begin) *backward_begin = out.size();
  alloc(t.output_grad_key, p.output_bytes);
  run(t.backward);
  return out;
}

std::vector<allocator::Event> accumulate_in_place(const std::vector<allocator::Event>& recorded, size_t backward_begin,
                                                  int* rewritten) {
  using allocator::Event;
  using K = Event::Kind;
  std::map<int64_t, int64_t> bytes;  // id -> size
  std::map<int64_t, size_t> made;    // id -> index of its allocation
  for (size_t i = 0; i < recorded.size(); ++i)
    if (recorded[i].kind == K::kAlloc) bytes[recorded[i].id] = recorded[i].bytes, made[recorded[i].id] = i;
  auto size_of = [&](int64_t id) {
    auto it = bytes.find(id);
    return it == bytes.end() ? int64_t{-1} : it->second;
  };
  std::vector<bool> drop(recorded.size(), false);
  std::map<int64_t, int64_t> alias;  // S -> A
  int n = 0;
  for (size_t i = std::max<size_t>(backward_begin, 1); i + 2 < recorded.size(); ++i) {
    const Event &S = recorded[i], &A = recorded[i + 1], &B = recorded[i + 2];
    if (S.kind != K::kAlloc || A.kind != K::kFree || B.kind != K::kFree || S.bytes <= 0) continue;
    if (size_of(A.id) != S.bytes || size_of(B.id) != S.bytes) continue;
    size_t j = i;
    while (j > 0 && recorded[j - 1].kind == K::kFree) --j;
    if (j == 0 || recorded[j - 1].id != B.id) continue;  // B: the last allocation before S
    const size_t a = made.at(A.id);
    if (a >= j - 1 || a < backward_begin) continue;  // A: older, made in the backward
    drop[i] = drop[i + 1] = true;
    alias[S.id] = A.id;
    ++n;
    i += 2;
  }
  std::vector<Event> out;
  out.reserve(recorded.size());
  for (size_t i = 0; i < recorded.size(); ++i) {
    if (drop[i]) continue;
    Event e = recorded[i];
    for (auto it = alias.find(e.id); it != alias.end(); it = alias.find(e.id)) e.id = it->second;
    out.push_back(e);
  }
  if (rewritten) *rewritten = n;
  return out;
}

Result<BlockTimePrediction> predict_block_time(const BlockRun& r, const std::vector<profile::Measurement>& rows) {
  // The memory of a context-parallel rank is checked (predict_block); its time is not: the
  // profile rows name no cp (profile_rows) and the time model would add a ring this CPU never runs.
  if (r.cp != 1) return fail("run.cp", "the time check runs without context parallelism");
  // Likewise one rank of an expert grid: the profile rows name no ep or etp.
  if (r.ep != 1 || r.etp != 1)
    return fail(r.ep != 1 ? "run.ep" : "run.etp", "the time check runs without expert parallelism");
  spec::ModelSpec m = r.model;
  m.num_layers = 1;
  plan::StagePlan stage;
  stage.ckpt_layers = r.checkpoint == CM::kFull ? 1 : 0;
  auto p = plan::uniform_plan(m, 1, 1, 1, r.micro_batch, 1, stage);
  p.recompute = r.checkpoint == CM::kSelective ? plan::Recompute::kSelective : plan::Recompute::kNone;
  const auto cluster = cpu_cluster();
  const auto t = run_training(r);
  MIST_CHECK(plan::validate_plan(p, m, cluster, t));
  analysis::TimeConstants k;
  auto table = std::make_shared<const profile::OpTable>(rows);
  k.profile = table;
  MIST_TRY(auto job, analysis::PreparedJob::create(m, cluster, t, k));
  MIST_TRY(const auto timer, analysis::StageTimer::create(job, p));
  const auto& L = r.layer == graph::LayerKind::kBlock       ? timer.block_times()
                  : r.layer == graph::LayerKind::kEmbedding ? timer.embedding_times()
                                                            : timer.head_times();
  BlockTimePrediction out;
  out.forward = L.fwd;
  // The backward of a checkpointed block re-runs its forward (all of it, or the attention core).
  out.backward = L.bwd + (r.checkpoint == CM::kFull ? L.fwd : r.checkpoint == CM::kSelective ? L.core_fwd : 0);
  // Where this layer's op times came from.
  MIST_TRY(const analysis::Lowering* lowering, job.lowering(false, p.recompute));
  const auto& lm = lowering->model;
  const auto& layer = r.layer == graph::LayerKind::kBlock       ? lm.block
                      : r.layer == graph::LayerKind::kEmbedding ? lm.embedding
                                                                : lm.head;
  sym::Bindings at = lm.dims;
  at["b"] = static_cast<double>(r.micro_batch);
  at["t"] = 1;
  const auto shape = profile::shape_key(r.layer, at);
  for (const auto& op : layer.ops) {
    if (op.kind == graph::OpKind::kView) continue;
    const auto res = profile::resolve_op(table.get(), cluster.gpu, t.precision, op, shape, at);
    out.sources.add(res.fwd);
    if (res.has_bwd) out.sources.add(res.bwd);
  }
  return out;
}

Result<ValidationReport> run_validation(const ValidationOptions& o) {
  if (o.timing_reps < 1) return fail("reps", "the time check needs at least one timed repetition");
  ValidationReport rep;
  const std::string source = profile_source(o.threads, o.thread_cpu_clock && o.threads == 1), date = today();
  for (auto c : validation_sweep(o.quick)) {
    if (!o.only.empty() && c.name.find(o.only) == std::string::npos) continue;
    // Op times and the layer's own time come from separate passes (executor.hpp).
    c.run.timing_reps = o.timing_reps;
    c.run.block_timing_reps = o.timing_reps;
    c.run.threads = o.threads;
    c.run.thread_cpu_clock = o.thread_cpu_clock && o.threads == 1;
    CaseResult cr;
    const auto t0 = std::chrono::steady_clock::now();
    MIST_TRY(cr.predicted, predict_block(c.run));
    auto m = measure_block(c.run);
    if (!m) return fail(c.name + (m.error().path.empty() ? "" : "." + m.error().path), m.error().message);
    cr.measured = std::move(*m);
    cr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MIST_TRY(cr.profile, profile_rows(c.run, cr.measured, source, date));
    MIST_TRY(cr.time, predict_block_time(c.run, cr.profile));
    for (const auto& t : cr.measured.times)
      if (t.op == "block") (t.phase == "forward" ? cr.measured_forward_s : cr.measured_backward_s) = median(t.seconds);
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
        check("block_time", cr.time.forward + cr.time.backward, cr.measured_forward_s + cr.measured_backward_s,
              kTimeCaseBound),
    };
    // The caching allocator over mist's sequence and over the recorded one (docs/validation.md,
    // "Reserved memory"): the reserved peaks (classic and expandable segments) and, as a check
    // of the sequences' contents, the allocated peaks.
    {
      const auto mist_seq = predicted_allocation_sequence(P, M.output_freed);
      allocator::Options classic, expandable;
      expandable.expandable_segments = true;
      const auto pc = allocator::replay(mist_seq, classic), mc = allocator::replay(M.recorded, classic);
      const auto pe = allocator::replay(mist_seq, expandable), me = allocator::replay(M.recorded, expandable);
      const auto d = [](int64_t v) { return static_cast<double>(v); };
      TermCheck extra[] = {
          check("reserved", d(pc.reserved_bytes.peak), d(mc.reserved_bytes.peak), kReservedBound),
          check("reserved_expandable", d(pe.reserved_bytes.peak), d(me.reserved_bytes.peak), -1),
          check("allocated_replay", d(pc.allocated_bytes.peak), d(mc.allocated_bytes.peak), -1),
      };
      // Known gap out-of-place-accumulation (docs/validation.md): LibTorch 1.13 on this CPU adds
      // a tensor's two gradients into a new buffer, where PyTorch 2 (and the liveness walk) adds
      // in place; named only when the recorded sequence rewritten that way accounts for the
      // whole difference.
      auto& reserved = extra[0];
      if (!reserved.ok) {
        const auto rewritten = accumulate_in_place(M.recorded, M.recorded_backward_begin);
        const double e = relative(reserved.predicted, d(allocator::replay(rewritten, classic).reserved_bytes.peak));
        if (std::abs(e) <= reserved.bound) reserved.gap = "out-of-place-accumulation", reserved.error_with_gap = e;
      }
      cr.terms.insert(cr.terms.end() - 1, std::begin(extra), std::end(extra));
    }
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
    if (s.term == "block_time") {
      s.median_bound = kTimeMedianBound;
      s.ok = s.ok && s.median_abs_error <= kTimeMedianBound;
    }
    rep.ok = rep.ok && s.ok;
    rep.summary.push_back(s);
  }
  return rep;
}

std::string timings_csv(const ValidationReport& r) {
  // Appended, not chained with +: GCC 12 warns falsely (-Warray-bounds) on the temporary.
  std::string out = "case,";
  out += profile::kCsvHeader;
  out += '\n';
  for (const auto& c : r.cases)
    for (const auto& row : c.profile) out += c.c.name + "," + profile::csv_line(row) + "\n";
  return out;
}

}  // namespace mist::executor
