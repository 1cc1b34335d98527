#include "executor/executor.hpp"

#include <chrono>
#include <cmath>
#include <dlfcn.h>
#include <map>
#include <memory>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include "executor/layers.hpp"
#include "executor/profile_rows.hpp"
#include "executor/functions.hpp"
#include "executor/tracking_allocator.hpp"

namespace mist::executor {

namespace {

int64_t live() { return live_bytes(AllocClass::kActivation); }

const char* phase_name(ops::Phase p) {
  switch (p) {
    case ops::Phase::kForward: return "forward";
    case ops::Phase::kBackward: return "backward";
    case ops::Phase::kRecompute: return "recompute";
  }
  return "?";
}

// Intra-op threads for LibTorch's OpenMP pool and, when the BLAS is OpenBLAS (Debian's
// alternatives may point libblas.so.3 at it), for OpenBLAS's own pthread pool: two pools spinning
// on the same cores slow small ops down a hundredfold on a loaded machine.
void set_threads(int n) {
  at::set_num_threads(n);
  using SetThreads = void (*)(int);
  if (auto* f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

std::unique_ptr<LayerBase> make_layer(const BlockRun& r, at::ScalarType dtype) {
  switch (r.layer) {
    case graph::LayerKind::kEmbedding: return std::make_unique<Embedding>(r, dtype);
    case graph::LayerKind::kHead: return std::make_unique<Head>(r, dtype);
    case graph::LayerKind::kBlock: break;
  }
  return std::make_unique<Block>(r, dtype);
}

// The layer's input (token ids for the embedding, activations otherwise) and the gradient of its
// output (fp32 per-token loss gradients for the head).
std::pair<at::Tensor, at::Tensor> inputs(const BlockRun& r, at::ScalarType dtype) {
  // A context-parallel rank holds seq_length/cp tokens (cp > 1 runs blocks only).
  const int64_t s = r.seq_length / r.cp, b = r.micro_batch, h = r.model.hidden_size;
  auto act = [&] { return at::randn({s, b, h}, at::kFloat).to(dtype); };
  switch (r.layer) {
    case graph::LayerKind::kEmbedding:
      return {at::randint(r.model.vocab_size, {s, b}, at::kLong), act().mul_(1e-2)};
    case graph::LayerKind::kHead:
      return {act().requires_grad_(true), at::full({s, b}, 1.0 / static_cast<double>(s * b), at::kFloat)};
    case graph::LayerKind::kBlock: break;
  }
  return {act().requires_grad_(true), act().mul_(1e-2)};
}

// A mixture of experts' block (moe.cpp): Mixtral's (no shared expert) and Qwen2-MoE's (a gated
// shared expert) experts, on one rank of an ep × etp grid with balanced routing.
Result<void> check_expert_grid(const BlockRun& r) {
  const auto& m = r.model;
  if (r.ep < 1) return fail("run.ep", "must be >= 1");
  if (r.etp < 1) return fail("run.etp", "must be >= 1");
  if (!m.is_moe()) {
    if (r.ep > 1 || r.etp > 1) return fail(r.ep > 1 ? "run.ep" : "run.etp", "a dense model has no experts to split");
    return {};
  }
  if (r.layer != graph::LayerKind::kBlock) return {};
  if (m.num_experts % r.ep != 0) return fail("run.ep", "ep must divide the experts (model.num_experts)");
  if (m.moe_ffn_hidden_size % r.etp != 0) return fail("run.etp", "etp must divide model.moe_ffn_hidden_size");
  if ((r.seq_length / r.cp * r.micro_batch * m.experts_per_token) % m.num_experts != 0)
    return fail("run.seq_length", "balanced routing gives every expert s·b·k/E rows: model.num_experts must divide "
                                  "the rank's tokens times model.experts_per_token");
  if (m.linear_bias)
    return fail("model.linear_bias", "the CPU executor's experts and router have no biases (gpt-oss's) yet");
  if (m.swiglu_limit != 0)
    return fail("model.swiglu_limit", "the CPU executor's experts run plain SwiGLU, not gpt-oss's clamped GLU");
  return {};
}

Result<void> check_run(const BlockRun& r) {
  MIST_CHECK(spec::validate_model(r.model, "model"));
  const auto& m = r.model;
  if (r.dtype != spec::Dtype::kFp32 && r.dtype != spec::Dtype::kBf16)
    return fail("run.dtype", "the CPU executor runs fp32 or bf16 (LibTorch 1.13 has no fp16 CPU matmul)");
  if (r.seq_length < 1 || r.micro_batch < 1) return fail("run", "seq_length and micro_batch must be >= 1");
  if (r.micro_batches < 1) return fail("run.micro_batches", "must be >= 1");
  if (r.cp < 1) return fail("run.cp", "must be >= 1");
  if (r.cp > 1) {
    if (r.layer != graph::LayerKind::kBlock) return fail("run.cp", "context parallelism runs transformer blocks only");
    if (!r.flash_attention)
      return fail("run.cp", "context parallelism needs flash attention (run.flash_attention): the K/V ring runs "
                            "inside the fused attention kernel");
    if (r.seq_length % (2 * r.cp) != 0)
      return fail("run.cp", "cp splits each sequence into 2·cp load-balanced chunks: 2·cp must divide seq_length");
    const auto comm = run_cp_comm(r);
    if (!comm) return fail("run.cp_exchange", "the executor runs Transformer Engine's p2p ring, a2a, all_gather and a2a+p2p");
    if (*comm == plan::CpComm::kA2aP2p && (r.cp_a2a <= 1 || r.cp_a2a >= r.cp || r.cp % r.cp_a2a != 0))
      return fail("run.cp_a2a", "a2a+p2p needs all-to-all groups of 1 < cp_a2a < cp ranks, cp_a2a dividing cp");
    // The exchange's own rules (the heads it splits, the masks it runs) are the plan's.
    if (auto ok = plan::check_cp(m, run_training(r), r.cp, *comm, 1, r.cp_a2a); !ok)
      return fail(ok.error().path == "plan.cp_a2a" ? "run.cp_a2a" : "run.cp_exchange", ok.error().message);
  }
  if (r.layer != graph::LayerKind::kBlock && r.checkpoint != CheckpointMode::kNone)
    return fail("run.checkpoint", "only blocks are checkpointed");
  if (r.layer == graph::LayerKind::kEmbedding && m.positions == spec::Positions::kLearned &&
      r.seq_length > m.max_position_embeddings)
    return fail("run.seq_length", "exceeds the model's learned positions");
  MIST_CHECK(check_expert_grid(r));
  // No q/k norms or decoupled head size yet (their memory is read from Megatron's source:
  // docs/memory-model.md).
  if (m.qk_norm || m.decoupled_head_dim())
    return fail(m.qk_norm ? "model.qk_norm" : "model.head_dim",
                "the CPU executor runs attention with heads of hidden_size / num_heads and no q/k norms");
  if (m.attention_sinks) return fail("model.attention_sinks", "the CPU executor's attention has no sinks yet");
  if (m.is_mla()) return fail("model.kv_lora_rank", "the CPU executor has no multi-head latent attention yet");
  if (m.positions == spec::Positions::kRotary && m.head_dim() % 2 != 0)
    return fail("model.hidden_size", "rotary embeddings need an even head dimension");
  return {};
}

struct Pass {
  int64_t base = 0;  // live bytes before the forward, less the input
  int64_t saved = 0, fwd_peak = 0, bwd_peak = 0, scratch_peak = 0;
  double fwd_s = 0, bwd_s = 0;
  double output_sumsq = 0, input_grad_sumsq = 0;
  bool output_freed = false;
};

// The allocation sequence of a recorded pass (tracking_allocator.hpp).
struct Recording {
  std::vector<RecordedEvent> events;
  size_t backward_begin = 0;  // index of the backward's first event
};

double sumsq(const at::Tensor& t) {
  ScopedAllocClass ws(AllocClass::kWorkspace);  // the fp64 copy is not an activation
  return t.to(at::kDouble).pow(2).sum().item<double>();
}

// One micro-batch; byte counts are relative to the live bytes before it, plus the input. With
// `rec`, records the activation allocations over the window of the peaks.
Pass run_pass(LayerBase& blk, at::Tensor& x, const at::Tensor& grad_source, Recording* rec = nullptr) {
  Pass p;
  if (x.requires_grad()) x.mutable_grad().reset();  // the input's gradient is handed upstream
  const int64_t x_bytes = static_cast<int64_t>(x.nbytes());
  const int64_t base = live();
  p.base = base - x_bytes;
  reset_peaks();
  if (rec) start_recording();
  double t0 = ops::clock_seconds();
  auto out = blk.forward(x);
  p.fwd_s = ops::clock_seconds() - t0;
  p.fwd_peak = peak_activation_bytes() - base + x_bytes;
  p.saved = live() - base - static_cast<int64_t>(out.nbytes()) + x_bytes;
  int64_t scratch = peak_scratch_bytes();
  at::Tensor loss;
  {
    // Bookkeeping, not the layer's activations: left out of the recording as out of the peaks.
    ScopedRecordingPause pause;
    p.output_sumsq = sumsq(out);
    // The gradient of the output enters through a scalar (out·g).sum(), so that only the graph
    // holds it, as when the next block's backward produces it; the output itself is then freed
    // (it is the next block's saved input, counted there).
    loss = (out * grad_source).sum();
  }
  const int64_t before_free = live();
  out.reset();  // recorded: the output's free, when nothing else holds it
  p.output_freed = live() < before_free;
  at::Tensor one;
  {
    ScopedRecordingPause pause;
    one = at::ones({}, loss.options());
  }
  // The scalar loss and its unit gradient stay live through the backward: bookkeeping, not
  // activations.
  const int64_t bookkeeping = static_cast<int64_t>(loss.nbytes() + one.nbytes());
  reset_peaks();
  if (rec) rec->backward_begin = recorded_events();
  t0 = ops::clock_seconds();
  torch::autograd::backward({loss}, {one});
  p.bwd_s = ops::clock_seconds() - t0;
  if (rec) rec->events = stop_recording();
  p.bwd_peak = peak_activation_bytes() - base + x_bytes - bookkeeping;
  p.scratch_peak = std::max(scratch, peak_scratch_bytes());
  if (x.requires_grad()) p.input_grad_sumsq = sumsq(x.grad());
  return p;
}

Result<BlockMeasurement> measure(const BlockRun& r) {
  const auto dtype = r.dtype == spec::Dtype::kBf16 ? at::kBFloat16 : at::kFloat;
  BlockMeasurement M;
  at::manual_seed(r.seed);
  auto layer = make_layer(r, dtype);
  auto& blk = *layer;
  int64_t l = live();
  blk.init_params();
  M.weight_bytes = live() - l;
  M.param_count = blk.param_count();
  l = live();
  blk.init_main_grads();
  M.gradient_bytes = live() - l;
  l = live();
  blk.init_optimizer();
  M.optimizer_bytes = live() - l;

  auto [x, grad_source] = inputs(r, dtype);
  M.input_bytes = static_cast<int64_t>(x.nbytes());
  M.output_bytes = static_cast<int64_t>(grad_source.nbytes());

  // Gradient accumulation: the first micro-batches warm up LibTorch's lazy state (oneDNN
  // primitive caches); the last one is measured and records the op order.
  std::vector<ops::OpSample> samples;
  Pass pass;
  Recording rec;
  for (int i = 0; i < r.micro_batches; ++i) {
    const bool last = i + 1 == r.micro_batches;
    if (last) ops::set_op_sink(&samples);
    pass = run_pass(blk, x, grad_source, last ? &rec : nullptr);
    ops::set_op_sink(nullptr);
  }
  using allocator::Event;
  M.recorded.reserve(rec.events.size() + 1);
  M.recorded.push_back({Event::Kind::kAlloc, 0, M.input_bytes, 0});  // the input, made before the window
  for (const auto& e : rec.events)
    M.recorded.push_back({e.alloc ? Event::Kind::kAlloc : Event::Kind::kFree, e.id, e.alloc ? e.bytes : 0, 0});
  M.recorded_backward_begin = rec.backward_begin + 1;
  M.output_freed = pass.output_freed;
  M.saved_bytes = pass.saved;
  M.forward_peak_bytes = pass.fwd_peak;
  M.backward_peak_bytes = pass.bwd_peak;
  M.scratch_peak_bytes = pass.scratch_peak;
  M.output_sumsq = pass.output_sumsq;
  M.input_grad_sumsq = pass.input_grad_sumsq;
  for (auto& [w, g] : blk.params_and_grads()) M.weight_grad_sumsq += sumsq(*g);
  for (const auto& s : samples) {
    if (s.phase == ops::Phase::kForward) M.forward_ops.push_back(blk.op_names()[s.op]);
    M.trace.push_back({blk.op_names()[s.op], phase_name(s.phase), s.live_after - pass.base, s.peak_inside - pass.base});
  }

  blk.adamw_step(1e-4);
  M.step_ok = blk.weights_finite();

  // Timed repetitions: per op and phase, plus the whole block.
  samples.clear();
  OpTime fwd{"block", "forward", {}}, bwd{"block", "backward", {}};
  // Op-timed and whole-layer passes alternate, so that both see the same machine load.
  ops::use_thread_cpu_clock(r.thread_cpu_clock);
  for (int i = 0; i < std::max(r.timing_reps, r.block_timing_reps); ++i) {
    if (i < r.timing_reps) {
      ops::set_op_sink(&samples);
      auto p = run_pass(blk, x, grad_source);
      ops::set_op_sink(nullptr);
      if (r.block_timing_reps == 0) {
        fwd.seconds.push_back(p.fwd_s);
        bwd.seconds.push_back(p.bwd_s);
      }
    }
    if (i < r.block_timing_reps) {
      auto p = run_pass(blk, x, grad_source);
      fwd.seconds.push_back(p.fwd_s);
      bwd.seconds.push_back(p.bwd_s);
    }
  }
  ops::use_thread_cpu_clock(false);
  std::map<std::pair<int, int>, size_t> index;
  for (const auto& s : samples) {
    auto key = std::make_pair(s.op, static_cast<int>(s.phase));
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, M.times.size()).first;
      M.times.push_back({blk.op_names()[s.op], phase_name(s.phase), {}});
    }
    M.times[it->second].seconds.push_back(s.seconds);
  }
  if (!fwd.seconds.empty()) {
    M.times.push_back(std::move(fwd));
    M.times.push_back(std::move(bwd));
  }
  return M;
}

Result<GradientCheck> gradient_check(const BlockRun& r) {
  at::manual_seed(r.seed);
  auto layer = make_layer(r, at::kFloat);
  auto& blk = *layer;
  blk.init_params();
  blk.init_main_grads();
  auto [x, g] = inputs(r, at::kFloat);
  x = x.detach();
  g = at::randn(g.sizes(), at::kFloat);
  auto loss_at = [&](const at::Tensor& xin) {
    blk.set_micro_batch(1);  // the same dropout masks in every evaluation
    return (blk.forward(xin).to(at::kDouble) * g.to(at::kDouble)).sum().item<double>();
  };
  GradientCheck c;
  auto xr = x.clone().requires_grad_(true);
  blk.set_micro_batch(1);
  (blk.forward(xr) * g).sum().backward();
  const auto v = at::randn(x.sizes(), at::kFloat);
  c.input_analytic = (xr.grad().to(at::kDouble) * v.to(at::kDouble)).sum().item<double>();
  // Central differences; fp32 rounding sets the step (about the cube root of its epsilon).
  const double eps = 5e-3;
  {
    at::NoGradGuard no_grad;
    c.input_numeric = (loss_at(x + eps * v) - loss_at(x - eps * v)) / (2 * eps);
    std::vector<at::Tensor> dirs;
    for (auto& [w, gw] : blk.params_and_grads()) {
      dirs.push_back(at::randn(w->sizes(), at::kFloat).mul_(w->abs().mean().item<double>() + 1e-2));
      c.weights_analytic += (gw->to(at::kDouble) * dirs.back().to(at::kDouble)).sum().item<double>();
    }
    auto shift = [&](double by) {
      size_t i = 0;
      for (auto& [w, gw] : blk.params_and_grads()) w->add_(dirs[i++], by);
    };
    shift(eps);
    const double up = loss_at(x);
    shift(-2 * eps);
    const double down = loss_at(x);
    shift(eps);
    c.weights_numeric = (up - down) / (2 * eps);
  }
  return c;
}

}  // namespace

double GradientCheck::input_error() const {
  return std::abs(input_numeric - input_analytic) / std::max(std::abs(input_analytic), 1e-30);
}
double GradientCheck::weights_error() const {
  return std::abs(weights_numeric - weights_analytic) / std::max(std::abs(weights_analytic), 1e-30);
}

Result<GradientCheck> check_gradients(const BlockRun& r) {
  MIST_CHECK(check_run(r));
  if (r.dtype != spec::Dtype::kFp32) return fail("run.dtype", "gradient checks run in fp32");
  if (r.layer == graph::LayerKind::kEmbedding) return fail("run.layer", "token ids have no gradient to check");
  install_tracking_allocator();
  try {
    if (r.threads > 0) set_threads(r.threads);
    return gradient_check(r);
  } catch (const std::exception& e) {
    return fail("executor", std::string("LibTorch failed: ") + e.what());
  }
}

const char* to_string(CheckpointMode m) {
  switch (m) {
    case CheckpointMode::kNone: return "none";
    case CheckpointMode::kSelective: return "selective";
    case CheckpointMode::kFull: return "full";
  }
  return "?";
}

bool executor_ready() { return tracking_allocator_installed(); }

Result<BlockMeasurement> measure_block(const BlockRun& r) {
  MIST_CHECK(check_run(r));
  install_tracking_allocator();
  // LibTorch reports failures as exceptions; they stop here.
  try {
    if (r.threads > 0) set_threads(r.threads);
    return measure(r);
  } catch (const std::exception& e) {
    ops::set_op_sink(nullptr);
    if (recording()) stop_recording();
    return fail("executor", std::string("LibTorch failed: ") + e.what());
  }
}

}  // namespace mist::executor
