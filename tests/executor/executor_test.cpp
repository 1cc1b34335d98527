// The LibTorch executor against mist's lowering: same ops, byte-exact saved activations and peaks,
// exact model states, correct gradients, and `mist validate --quick` passing.
#include "executor/executor.hpp"

#include <set>

#include <gtest/gtest.h>

#include "allocator/caching_allocator.hpp"
#include "executor/validation.hpp"
#include "executor_jobs.hpp"
#include "profile/csv_rows.hpp"
#include "graph/lower.hpp"

namespace mist::executor {
namespace {

using CM = CheckpointMode;
using spec::Dtype;

using testing::model;
using testing::run;

BlockRun layer(graph::LayerKind kind, spec::ModelSpec m, Dtype dt, bool dropout = false) {
  m.tie_word_embeddings = false;
  auto r = run(std::move(m), 64, 2, dt, CM::kNone, false, dropout);
  r.layer = kind;
  return r;
}

std::vector<BlockRun> small_runs() {
  const auto E = graph::LayerKind::kEmbedding, H = graph::LayerKind::kHead;
  return {layer(E, model("gpt", 128, 4, 4), Dtype::kBf16, true),
          layer(E, model("llama", 128, 4, 2), Dtype::kFp32),
          layer(H, model("gpt", 128, 4, 4), Dtype::kBf16),
          layer(H, model("llama", 128, 4, 2), Dtype::kFp32),
          run(model("gpt", 128, 4, 4), 64, 2, Dtype::kFp32, CM::kNone, false, true),
          run(model("gpt", 128, 4, 4), 64, 1, Dtype::kBf16, CM::kSelective, false, true),
          run(model("llama", 128, 4, 2), 64, 2, Dtype::kBf16, CM::kNone, false),
          run(model("llama", 128, 8, 2), 96, 1, Dtype::kFp32, CM::kSelective, true),
          run(model("falcon", 128, 4, 1), 64, 2, Dtype::kBf16, CM::kFull, true),
          run(model("falcon", 128, 4, 2), 64, 1, Dtype::kFp32, CM::kNone, true, true)};
}

TEST(Executor, RunsTheOpsOfTheLoweringInItsOrder) {
  for (const auto& r : small_runs()) {
    auto m = measure_block(r);
    ASSERT_TRUE(m) << m.error().to_string();
    graph::LoweringOptions o;
    o.flash_attention = r.flash_attention;
    o.dropout = r.dropout;
    o.act_bytes = spec::dtype_bytes(r.dtype);
    const auto lm = graph::lower(r.model, r.seq_length, o);
    const auto& L = r.layer == graph::LayerKind::kBlock ? lm.block
                    : r.layer == graph::LayerKind::kHead ? lm.head
                                                         : lm.embedding;
    std::vector<std::string> expected;
    for (const auto& op : L.ops)
      if (op.kind != graph::OpKind::kView) expected.push_back(op.name);  // torch.split makes views, not an op
    EXPECT_EQ(m->forward_ops, expected) << r.model.family << " " << L.name;
  }
}

TEST(Executor, SavedBytesPeaksAndModelStatesMatchMistExactly) {
  for (const auto& r : small_runs()) {
    auto m = measure_block(r);
    auto p = predict_block(r);
    ASSERT_TRUE(m && p);
    const std::string what = std::string(r.model.family) + " " + to_string(r.checkpoint) + " layer " +
                             std::to_string(static_cast<int>(r.layer));
    EXPECT_EQ(m->weight_bytes, p->weights) << what;
    EXPECT_EQ(m->gradient_bytes, p->gradients) << what;
    EXPECT_EQ(m->optimizer_bytes, p->optimizer_states) << what;
    EXPECT_EQ(m->saved_bytes, p->saved) << what;
    // The backward peak is exact, under full recompute the replay's (bwd_peak_recomputed, which
    // holds the recomputed output and its gradient); under selective recompute the model takes the
    // forward peak of the block without recompute, an upper bound (docs/validation.md).
    EXPECT_EQ(m->backward_peak_bytes, p->backward_peak) << what;
    if (r.checkpoint != CM::kFull) {
      if (r.checkpoint == CM::kNone)
        EXPECT_EQ(m->peak_bytes(), p->peak) << what;
      else
        EXPECT_GE(p->peak, m->peak_bytes()) << what;
    }
    EXPECT_TRUE(m->step_ok) << what;
  }
}

TEST(Executor, RecomputeModesAgreeAndFlashMatchesPlainAttention) {
  for (const char* fam : {"gpt", "llama", "falcon"}) {
    auto base = run(model(fam, 128, 4, std::string(fam) == "gpt" ? 4 : 2), 64, 2, Dtype::kFp32, CM::kNone, false,
                    true);
    auto none = measure_block(base);
    ASSERT_TRUE(none) << none.error().to_string();
    for (CM ck : {CM::kSelective, CM::kFull}) {
      auto r = base;
      r.checkpoint = ck;
      auto m = measure_block(r);
      ASSERT_TRUE(m);
      EXPECT_DOUBLE_EQ(m->output_sumsq, none->output_sumsq) << fam << " " << to_string(ck);
      EXPECT_NEAR(m->input_grad_sumsq, none->input_grad_sumsq, 1e-9 * none->input_grad_sumsq) << fam;
      EXPECT_NEAR(m->weight_grad_sumsq, none->weight_grad_sumsq, 1e-9 * none->weight_grad_sumsq) << fam;
    }
    // Flash attention has no attention dropout: compare with plain attention without it.
    auto r = base;
    r.dropout = false;
    auto plain = measure_block(r);
    r.flash_attention = true;
    auto flash = measure_block(r);
    ASSERT_TRUE(plain && flash);
    none = plain;
    EXPECT_NEAR(flash->output_sumsq, none->output_sumsq, 1e-4 * none->output_sumsq) << fam;
    EXPECT_NEAR(flash->input_grad_sumsq, none->input_grad_sumsq, 1e-4 * none->input_grad_sumsq) << fam;
    EXPECT_NEAR(flash->weight_grad_sumsq, none->weight_grad_sumsq, 1e-4 * none->weight_grad_sumsq) << fam;
  }
}

// Megatron's "mlp" recompute module on a dense block (the MLP and the norm Transformer Engine fuses
// into its fc1, one checkpoint), alone and with the attention core: byte for byte, and the same
// gradients as saving everything.
TEST(Executor, RecomputeModuleMlpMatchesTheModel) {
  auto plain = measure_block(run(model("llama", 128, 4, 2), 64, 2, Dtype::kFp32, CM::kNone, true));
  ASSERT_TRUE(plain);
  for (Dtype dt : {Dtype::kFp32, Dtype::kBf16})
    for (uint32_t modules : std::initializer_list<uint32_t>{spec::kRecomputeMlp, spec::kRecomputeMlp | spec::kRecomputeCoreAttn}) {
      auto r = run(model("llama", 128, 4, 2), 64, 2, dt, CM::kSelective, true);
      r.recompute_modules = modules;
      SCOPED_TRACE(std::string(spec::to_string(dt)) + " modules " + std::to_string(modules));
      auto m = measure_block(r);
      auto p = predict_block(r);
      ASSERT_TRUE(m && p) << (m ? p.error().to_string() : m.error().to_string());
      EXPECT_EQ(m->saved_bytes, p->saved);
      EXPECT_EQ(m->backward_peak_bytes, p->backward_peak);
      EXPECT_EQ(allocator::replay(predicted_allocation_sequence(*p, m->output_freed)).requested_bytes.peak,
                m->peak_bytes());
      if (dt == Dtype::kFp32) {
        EXPECT_DOUBLE_EQ(m->output_sumsq, plain->output_sumsq);
        EXPECT_NEAR(m->input_grad_sumsq, plain->input_grad_sumsq, 1e-9 * plain->input_grad_sumsq);
      }
    }
}

// A head whose loss kernel `fuse` sets on the run, measured byte for byte against the model, with
// the loss and gradients of Megatron's kernel (and finite differences); it keeps
// `kept_less(n, V, w)` bytes fewer than Megatron's (n tokens, V vocabulary, w bytes an element).
template <class Fuse, class KeptLess>
void expect_loss_kernel_matches(Fuse fuse, KeptLess kept_less) {
  for (Dtype dt : {Dtype::kBf16, Dtype::kFp32}) {
    auto r = layer(graph::LayerKind::kHead, model("llama", 128, 4, 2), dt);
    auto megatron = measure_block(r);
    fuse(r);
    auto m = measure_block(r);
    auto p = predict_block(r);
    ASSERT_TRUE(megatron) << megatron.error().to_string();
    ASSERT_TRUE(m) << m.error().to_string();
    ASSERT_TRUE(p) << p.error().to_string();
    SCOPED_TRACE(spec::to_string(dt));
    EXPECT_EQ(m->saved_bytes, p->saved);
    EXPECT_EQ(m->forward_peak_bytes, p->forward_peak);
    EXPECT_EQ(m->backward_peak_bytes, p->backward_peak);
    EXPECT_EQ(m->peak_bytes(), p->peak);
    const int64_t n = r.seq_length * r.micro_batch, V = r.model.vocab_size, w = spec::dtype_bytes(dt);
    EXPECT_EQ(megatron->saved_bytes - m->saved_bytes, kept_less(n, V, w));
    EXPECT_NEAR(m->output_sumsq, megatron->output_sumsq, 1e-3 * megatron->output_sumsq);
    EXPECT_NEAR(m->input_grad_sumsq, megatron->input_grad_sumsq, 2e-2 * megatron->input_grad_sumsq);
  }
  auto r = run(model("llama", 64, 4, 2), 32, 2, Dtype::kFp32, CM::kNone, true);
  r.layer = graph::LayerKind::kHead;
  fuse(r);
  auto c = check_gradients(r);
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_LT(c->input_error(), 2e-2);
  EXPECT_LT(c->weights_error(), 2e-2);
}

// Transformer Engine's fused cross entropy (training cross_entropy_fusion "te", 2026-12-07): no
// fp32 copy of the logits; the bf16 logits, holding the gradient, are what the head keeps: V·s·b·2
// bytes where Megatron's keeps V·s·b·4 plus the target ids and mask.
TEST(Executor, TransformerEnginesCrossEntropyMatchesTheModel) {
  expect_loss_kernel_matches([](BlockRun& r) { r.cross_entropy_fusion = spec::CrossEntropyFusion::kTe; },
                             [](int64_t n, int64_t V, int64_t w) { return n * V * (4 - w) + n * 9; });
}

// torchtitan's loss under torch.compile (training compile_loss, 2026-12-07): Inductor's fused
// cross entropy keeps the logits in their dtype and each row's fp32 log-sum-exp, where Megatron's
// keeps an fp32 copy of the logits with the target ids and mask; its backward writes a new
// gradient.
TEST(Executor, CompiledLossMatchesTheModel) {
  expect_loss_kernel_matches([](BlockRun& r) { r.compiled_loss = true; },
                             [](int64_t n, int64_t V, int64_t w) { return n * V * (4 - w) + n * 9 - n * 4; });
}

TEST(Executor, GradientsMatchFiniteDifferences) {
  for (const char* fam : {"gpt", "llama", "falcon"})
    for (bool flash : {false, true}) {
      auto r = run(model(fam, 64, 4, std::string(fam) == "gpt" ? 4 : 2), 32, 2, Dtype::kFp32, CM::kNone, flash,
                   !flash);
      auto c = check_gradients(r);
      ASSERT_TRUE(c) << c.error().to_string();
      if (flash) {  // the head too (final norm, LM head, cross entropy)
        auto h = r;
        h.layer = graph::LayerKind::kHead;
        auto ch = check_gradients(h);
        ASSERT_TRUE(ch) << ch.error().to_string();
        EXPECT_LT(ch->input_error(), 2e-2) << fam << " head";
        EXPECT_LT(ch->weights_error(), 2e-2) << fam << " head";
      }
      EXPECT_LT(c->input_error(), 2e-2) << fam << " flash " << flash << ": " << c->input_numeric << " vs "
                                        << c->input_analytic;
      EXPECT_LT(c->weights_error(), 2e-2) << fam << " flash " << flash << ": " << c->weights_numeric << " vs "
                                          << c->weights_analytic;
    }
}

TEST(Executor, TimesEveryOpInEveryPhase) {
  auto r = run(model("llama", 128, 4, 2), 64, 1, Dtype::kFp32, CM::kSelective, false);
  r.timing_reps = 2;
  auto m = measure_block(r);
  ASSERT_TRUE(m);
  bool recompute = false, block = false;
  for (const auto& t : m->times) {
    EXPECT_EQ(t.seconds.size(), 2u) << t.op << " " << t.phase;
    recompute = recompute || t.phase == "recompute";
    block = block || t.op == "block";
  }
  EXPECT_TRUE(recompute && block);
  EXPECT_EQ(m->times.size(), 2 * m->forward_ops.size() + 4 /* core ops recomputed */ + 2);
}

TEST(Executor, RejectsWhatTheCpuCannotRun) {
  auto r = run(model("gpt", 128, 4, 4), 64, 1, Dtype::kFp16, CM::kNone, false);
  auto m = measure_block(r);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().path, "run.dtype");
  r = run(model("llama", 120, 8, 8), 64, 1, Dtype::kFp32, CM::kNone, false);  // head dim 15
  EXPECT_FALSE(measure_block(r));
}

TEST(Validate, QuickSweepIsWithinItsBounds) {
  ValidationOptions o;
  o.quick = true;
  o.timing_reps = 1;
  auto r = run_validation(o);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->cases.size(), validation_sweep(true).size());
  // Memory terms are deterministic; the time bound is left to mist_validate_quick (more
  // repetitions than this one).
  for (const auto& s : r->summary) {
    if (s.term != "block_time") {
      EXPECT_TRUE(s.ok) << s.term;
    }
    if (s.term == "saved" || s.term == "weights") {
      EXPECT_EQ(s.max_abs_error, 0.0) << s.term;
    }
  }
  for (const auto& c : r->cases) {
    SCOPED_TRACE(c.c.name);
    // Every op of the layer was timed, so every op time of the prediction is a profile entry.
    EXPECT_GT(c.time.sources.exact, 0);
    EXPECT_EQ(c.time.sources.analytical, 0);
    EXPECT_EQ(c.time.sources.scaled, 0);
    EXPECT_GT(c.time.forward, 0);
    EXPECT_GT(c.measured_forward_s + c.measured_backward_s, 0);
    ASSERT_EQ(c.terms.back().term, "block_time");
  }
  // The timings CSV is what `mist profile import` reads.
  const auto csv = timings_csv(*r);
  EXPECT_NE(csv.find(",cpu,attn.qkv,linear,b="), std::string::npos);
  const auto rows = profile::parse_csv(csv);
  ASSERT_TRUE(rows) << rows.error().to_string();
  size_t n = 0;
  for (const auto& c : r->cases) n += c.profile.size();
  EXPECT_EQ(rows->size(), n);
}

TEST(Validate, FullSweepCoversTheIssue) {
  const auto sweep = validation_sweep(false);
  EXPECT_GE(sweep.size(), 30u);
  std::set<std::string> families;
  std::set<CM> modes;
  std::set<Dtype> dtypes;
  int64_t hmin = 1 << 30, hmax = 0, smin = 1 << 30, smax = 0, bmax = 0, amin = 1 << 30, amax = 0;
  bool gqa = false;
  for (const auto& c : sweep) {
    const auto& m = c.run.model;
    families.insert(m.family);
    modes.insert(c.run.checkpoint);
    dtypes.insert(c.run.dtype);
    hmin = std::min(hmin, m.hidden_size), hmax = std::max(hmax, m.hidden_size);
    smin = std::min(smin, c.run.seq_length), smax = std::max(smax, c.run.seq_length);
    amin = std::min(amin, m.num_heads), amax = std::max(amax, m.num_heads);
    bmax = std::max(bmax, c.run.micro_batch);
    gqa = gqa || m.num_kv_heads != m.num_heads;
  }
  EXPECT_EQ(families.size(), 3u);
  EXPECT_EQ(modes.size(), 3u);
  EXPECT_EQ(dtypes.size(), 2u);
  EXPECT_TRUE(gqa);
  EXPECT_EQ(hmin, 256);
  EXPECT_EQ(hmax, 2048);
  EXPECT_EQ(smin, 128);
  EXPECT_EQ(smax, 2048);
  EXPECT_EQ(bmax, 8);
  EXPECT_EQ(amin, 4);
  EXPECT_EQ(amax, 32);
}

}  // namespace
}  // namespace mist::executor
