#include "executor/layers.hpp"

#include <cmath>

#include <ATen/ATen.h>

namespace mist::executor {

namespace {
constexpr double kDropoutP = 0.1;
constexpr double kRopeBase = 10000.0;
}  // namespace

Block::Block(const BlockRun& r, at::ScalarType dtype) : LayerBase(r, dtype) {
  const auto& m = r.model;
  dims_.heads = m.num_heads;
  dims_.groups = m.num_kv_heads;
  dims_.head_dim = m.hidden_size / m.num_heads;
  dims_.scale = 1.0 / std::sqrt(static_cast<double>(dims_.head_dim));
  dims_.cp = r.cp;
  dims_.cp_a2a = r.cp_a2a;
  moe_.experts = m.num_experts;
  moe_.topk = m.experts_per_token;
  moe_.ep = r.ep;
  moe_.etp = r.etp;
  moe_.allgather = r.moe_allgather;
  if (m.positions == spec::Positions::kRotary) {
    // cos/sin of position·base^(-2i/d), i < d/2: constants, like Megatron's rotary buffers. Under
    // context parallelism the last rank's positions: chunks cp−1 and cp of the 2·cp, contiguous.
    const int64_t half = dims_.head_dim / 2;
    const int64_t first = (r.cp - 1) * (r.seq_length / (2 * r.cp)), local = r.seq_length / r.cp;
    auto inv = at::pow(kRopeBase, at::arange(0, half, at::kDouble).mul_(-2.0 / dims_.head_dim));
    auto angle = at::outer(at::arange(first, first + local, at::kDouble), inv);
    cos_ = angle.cos().to(at::kFloat);
    sin_ = angle.sin().to(at::kFloat);
  }
  core_region_ = [this](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{core(in[0], in[1], in[2])};
  };
  block_region_ = [this](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{body(in[0], false)};
  };
  // "mlp": the dense MLP with the norm Transformer Engine fuses into its fc1.
  mlp_region_ = [this](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{dense_mlp(ops::norm(in[0], ln2_, id("ln2")), fc1_, fc2_, "mlp")};
  };
  // "moe": the whole MoE layer, nothing recomputed inside it (its checkpoint holds all).
  moe_region_ = [this](const std::vector<at::Tensor>& in) {
    const uint32_t outer = modules_;
    modules_ = 0;
    auto out = moe(in[0]);
    modules_ = outer;
    return std::vector<at::Tensor>{std::move(out)};
  };
  shared_region_ = [this](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{dense_mlp(in[0], shared_fc1_, shared_fc2_, "shared_expert")};
  };
}

ops::CheckpointWithoutOutput Block::without_output(ops::Region region, std::vector<at::Tensor> inputs,
                                                   at::Tensor& out) {
  std::erase_if(without_output_, [](const auto& s) { return ops::CheckpointWithoutOutput::done(*s); });
  ops::CheckpointWithoutOutput ck;
  out = ck.run(std::move(region), std::move(inputs))[0];
  without_output_.push_back(ck.state());
  return ck;
}

int LayerBase::id(const std::string& name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  names_.push_back(name);
  return static_cast<int>(names_.size()) - 1;
}

ops::LinearParams LayerBase::linear_params(int64_t in, int64_t out, bool bias) {
  ops::LinearParams p;
  p.w = at::randn({out, in}, at::kFloat).mul_(0.02).to(dtype_);
  if (bias) p.b = at::zeros({out}, dtype_);
  return p;
}

ops::NormParams LayerBase::norm_params() {
  ops::NormParams p;
  p.layernorm = run_.model.norm == spec::Norm::kLayerNorm;
  p.w = at::ones({run_.model.hidden_size}, dtype_);
  if (p.layernorm) p.b = at::zeros({run_.model.hidden_size}, dtype_);
  return p;
}

void Block::init_params() {
  const auto& m = run_.model;
  const int64_t h = m.hidden_size, f = m.ffn_hidden_size, kv = h / m.num_heads * m.num_kv_heads;
  const bool swiglu = m.mlp == spec::Mlp::kSwiGlu;
  // The same parameters as the lowering counts (graph/lower.cpp): a second norm unless Falcon
  // shares one, biases on QKV (qkv_bias) and on the other projections (linear_bias).
  ln1_ = norm_params();
  if (!m.parallel_block || m.norms_per_block >= 2) ln2_ = norm_params();
  qkv_ = linear_params(h, h + 2 * kv, m.qkv_bias);
  proj_ = linear_params(h, h, m.linear_bias);
  if (m.is_moe()) {
    init_moe_params();
    return;
  }
  fc1_ = linear_params(h, swiglu ? 2 * f : f, m.linear_bias);
  fc2_ = linear_params(f, h, m.linear_bias);
}

std::vector<std::pair<at::Tensor*, at::Tensor*>> Block::params_and_grads() {
  std::vector<std::pair<at::Tensor*, at::Tensor*>> v;
  for (auto* n : {&ln1_, &ln2_}) {
    if (n->w.defined()) v.push_back({&n->w, &n->main_w});
    if (n->b.defined()) v.push_back({&n->b, &n->main_b});
  }
  for (auto* l : {&qkv_, &proj_, &fc1_, &fc2_, &router_, &shared_fc1_, &shared_fc2_, &shared_gate_, &experts_fc1_,
                  &experts_fc2_}) {
    if (!l->w.defined()) continue;  // the dense MLP's or the experts', whichever the block lacks
    v.push_back({&l->w, &l->main_w});
    if (l->b.defined()) v.push_back({&l->b, &l->main_b});
  }
  return v;
}

int64_t LayerBase::param_count() {
  int64_t n = 0;
  for (auto& [p, g] : params_and_grads()) n += p->numel();
  return n;
}

void LayerBase::init_main_grads() {
  for (auto& [p, g] : params_and_grads()) *g = at::zeros(p->sizes(), at::kFloat);
}

void LayerBase::init_optimizer() {
  for (auto& [p, g] : params_and_grads()) {
    // Mixed precision keeps an fp32 master copy; fp32 training updates the weight itself.
    if (dtype_ != at::kFloat) master_.push_back(p->to(at::kFloat));
    exp_avg_.push_back(at::zeros(p->sizes(), at::kFloat));
    exp_avg_sq_.push_back(at::zeros(p->sizes(), at::kFloat));
  }
}

void LayerBase::adamw_step(double lr) {
  constexpr double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  at::NoGradGuard no_grad;  // the embedding table requires grad (see Embedding::init_params)
  ++step_;
  const double c1 = 1 - std::pow(b1, step_), c2 = 1 - std::pow(b2, step_);
  size_t i = 0;
  for (auto& [p, g] : params_and_grads()) {
    auto& w = master_.empty() ? *p : master_[i];
    exp_avg_[i].mul_(b1).add_(*g, 1 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(*g, *g, 1 - b2);
    auto denom = (exp_avg_sq_[i] / c2).sqrt_().add_(eps);
    w.mul_(1 - lr * wd).addcdiv_(exp_avg_[i], denom, -lr / c1);
    if (!master_.empty()) p->copy_(w);
    g->zero_();
    ++i;
  }
}

bool LayerBase::weights_finite() {
  for (auto& [p, g] : params_and_grads())
    if (!at::isfinite(*p).all().item<bool>()) return false;
  return true;
}

at::Tensor LayerBase::maybe_dropout(at::Tensor x, const char* name) {
  if (!run_.dropout) return x;
  const int op = id(name);
  // The seed depends on the micro-batch and the op only, so a recomputation draws the same mask.
  return ops::dropout(std::move(x), kDropoutP, static_cast<uint64_t>(micro_batch_) * 1000003u + op, op);
}

at::Tensor Block::core(at::Tensor q, at::Tensor k, at::Tensor v) {
  if (run_.cp > 1) {
    const int op = id("attn.core");
    switch (run_.cp_exchange) {
      case graph::CpExchange::kAllToAll: return ops::a2a_flash_attention(std::move(q), std::move(k), std::move(v), dims_, op);
      case graph::CpExchange::kAllGather:
        return ops::allgather_flash_attention(std::move(q), std::move(k), std::move(v), dims_, op);
      case graph::CpExchange::kA2aP2p:
        return ops::a2a_p2p_flash_attention(std::move(q), std::move(k), std::move(v), dims_, op);
      default: return ops::ring_flash_attention(std::move(q), std::move(k), std::move(v), dims_, op);
    }
  }
  if (run_.flash_attention) return ops::flash_attention(std::move(q), std::move(k), std::move(v), dims_, id("attn.core"));
  if (dims_.groups != dims_.heads) std::tie(k, v) = ops::expand_kv(std::move(k), std::move(v), dims_, id("attn.expand_kv"));
  auto scores = ops::qk(std::move(q), std::move(k), dims_, id("attn.qk"));
  auto p = ops::causal_softmax(std::move(scores), dims_, id("attn.softmax"));
  p = maybe_dropout(std::move(p), "attn.dropout");
  return ops::pv(std::move(p), std::move(v), dims_, id("attn.pv"));
}

at::Tensor Block::attention(at::Tensor x, bool checkpoint_core) {
  const int64_t h = run_.model.hidden_size, kv = dims_.head_dim * dims_.groups;
  auto qkv = ops::linear(std::move(x), qkv_, id("attn.qkv"));
  // q, k and v are views of one allocation (torch.split in Megatron).
  auto parts = at::split_with_sizes(qkv, {h, kv, kv}, 2);
  qkv.reset();
  at::Tensor q = std::move(parts[0]), k = std::move(parts[1]), v = std::move(parts[2]);
  if (run_.model.positions == spec::Positions::kRotary)
    std::tie(q, k) = ops::rotary(std::move(q), std::move(k), cos_, sin_, dims_, id("attn.rotary"));
  auto ctx = checkpoint_core ? ops::checkpoint(core_region_, {std::move(q), std::move(k), std::move(v)})[0]
                             : core(std::move(q), std::move(k), std::move(v));
  return ops::linear(std::move(ctx), proj_, id("attn.proj"));
}

at::Tensor Block::dense_mlp(at::Tensor x, const ops::LinearParams& fc1, const ops::LinearParams& fc2,
                            const std::string& prefix) {
  if (run_.model.mlp == spec::Mlp::kSwiGlu) {
    auto gu = ops::linear(std::move(x), fc1, id(prefix + ".gate_up"));
    return ops::linear(ops::swiglu(std::move(gu), id(prefix + ".swiglu")), fc2, id(prefix + ".down"));
  }
  auto a = ops::linear(std::move(x), fc1, id(prefix + ".fc1"));
  return ops::linear(ops::gelu(std::move(a), id(prefix + ".gelu")), fc2, id(prefix + ".fc2"));
}

at::Tensor Block::mlp(at::Tensor x) {
  if (!run_.model.is_moe()) return dense_mlp(std::move(x), fc1_, fc2_, "mlp");
  if (modules_ & spec::kRecomputeMoe) return ops::checkpoint(moe_region_, {std::move(x)})[0];
  return moe(std::move(x));
}

at::Tensor Block::body(const at::Tensor& x, bool selective) {
  modules_ = selective ? run_.recompute_modules : 0u;
  const bool checkpoint_core = (modules_ & spec::kRecomputeCoreAttn) != 0;
  if (run_.model.parallel_block) {
    // Falcon: attention and MLP read the same normed input (or one norm each), one residual.
    auto xa = ops::norm(x, ln1_, id("ln_attn"));
    const bool shared = !ln2_.w.defined();
    auto xm = shared ? xa : ops::norm(x, ln2_, id("ln_mlp"));
    auto ya = attention(shared ? xa : std::move(xa), checkpoint_core);
    xa.reset();
    auto ym = mlp(std::move(xm));
    auto y = maybe_dropout(ops::add(std::move(ya), std::move(ym), id("attn_mlp_sum")), "dropout");
    return ops::add(x, std::move(y), id("residual"));
  }
  auto x1 = ops::norm(x, ln1_, id("ln1"));
  auto ya = maybe_dropout(attention(std::move(x1), checkpoint_core), "attn.dropout_out");
  auto r1 = ops::add(x, std::move(ya), id("residual1"));
  at::Tensor ym;
  if (!run_.model.is_moe() && (modules_ & spec::kRecomputeMlp)) {
    ym = ops::checkpoint(mlp_region_, {r1})[0];
  } else if (run_.model.is_moe() && (modules_ & spec::kRecomputeLayernorm)) {
    // The pre-MLP norm's output is restored when the gradient reaches the MoE layer's output.
    at::Tensor x2;
    auto ck = without_output(
        [this](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{ops::norm(in[0], ln2_, id("ln2"))}; },
        {r1}, x2);
    ym = mlp(std::move(x2));
    ck.discard_output_and_restore_at(ym);
  } else {
    ym = mlp(ops::norm(r1, ln2_, id("ln2")));
  }
  ym = maybe_dropout(std::move(ym), "mlp.dropout_out");
  return ops::add(std::move(r1), std::move(ym), id("residual2"));
}

at::Tensor Block::forward(const at::Tensor& x) {
  ++micro_batch_;
  switch (run_.checkpoint) {
    case CheckpointMode::kNone: return body(x, false);
    case CheckpointMode::kSelective: return body(x, true);
    case CheckpointMode::kFull: return ops::checkpoint(block_region_, {x})[0];
  }
  return {};
}

}  // namespace mist::executor
