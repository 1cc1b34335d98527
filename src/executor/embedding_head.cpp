// The embedding and head layers and their ops (graph/lower.cpp lower_embedding, lower_head).
#include <algorithm>

#include <ATen/ATen.h>

#include "executor/functions.hpp"
#include "executor/functions_internal.hpp"
#include "executor/layers.hpp"
#include "executor/tracking_allocator.hpp"

namespace mist::executor {

namespace ops {
namespace {

using namespace detail;

int op_of(AutogradContext* ctx) { return static_cast<int>(ctx->saved_data["op"].toInt()); }

struct EmbeddingFn : torch::autograd::Function<EmbeddingFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& tokens, const at::Tensor& table,
                            const LinearParams* p, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    const int64_t h = table.size(1);
    auto out = at::empty({tokens.size(0), tokens.size(1), h}, table.options());
    auto o2 = out.view({-1, h});
    at::index_select_out(o2, table, 0, tokens.reshape({-1}));
    ctx->save_for_backward({tokens});
    ctx->saved_data["p"] = as_int(p);
    ctx->saved_data["op"] = op;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto tokens = ctx->get_saved_variables()[0];
    const auto* p = saved_ptr<LinearParams>(ctx, "p");
    if (grads[0].defined()) {
      ScopedAllocClass wg(AllocClass::kWeightGrad);
      p->main_w.index_add_(0, tokens.reshape({-1}), grads[0].reshape({-1, p->w.size(1)}).to(at::kFloat));
    }
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct PositionsFn : torch::autograd::Function<PositionsFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& e, const LinearParams* p, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    ctx->saved_data["p"] = as_int(p);
    ctx->saved_data["op"] = op;
    return at::add(e, p->w.narrow(0, 0, e.size(0)).unsqueeze(1));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    const auto* p = saved_ptr<LinearParams>(ctx, "p");
    const auto& g = grads[0];
    if (g.defined()) {
      ScopedAllocClass wg(AllocClass::kWeightGrad);
      p->main_w.narrow(0, 0, g.size(0)).add_(g.sum(1, false, at::kFloat));
    }
    return {g, at::Tensor(), at::Tensor()};
  }
};

struct ToFp32Fn : torch::autograd::Function<ToFp32Fn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    ctx->saved_data["op"] = op;
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    return x.to(at::kFloat);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    return {grads[0].to(static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt())), at::Tensor()};
  }
};

// Megatron's _VocabParallelCrossEntropy with one rank: the vocabulary range is [0, V).
struct CrossEntropyFn : torch::autograd::Function<CrossEntropyFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor* labels, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    const int64_t V = logits.size(-1);
    auto l2 = logits.view({-1, V});
    l2.sub_(at::amax(l2, 1, true));
    const auto target = labels->reshape({-1});
    auto target_mask = at::logical_or(target < 0, target >= V);
    auto masked_target = target.masked_fill(target_mask, 0);
    auto predicted = l2.gather(1, masked_target.unsqueeze(1)).squeeze(1).masked_fill_(target_mask, 0.0);
    l2.exp_();
    auto sum_exp = l2.sum(1);
    auto loss = sum_exp.log().sub_(predicted);
    l2.div_(sum_exp.unsqueeze(1));  // the softmax, kept in the logits' storage
    ctx->save_for_backward({logits, target_mask, masked_target});
    ctx->saved_data["op"] = op;
    return loss.view({logits.size(0), logits.size(1)});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto sv = ctx->get_saved_variables();
    auto& softmax = sv[0];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto s2 = softmax.view({-1, softmax.size(-1)});
    // In place, as Megatron: softmax - one_hot(target), scaled by the loss gradient.
    s2.scatter_add_(1, sv[2].unsqueeze(1), sv[1].logical_not().to(at::kFloat).neg_().unsqueeze(1));
    s2.mul_(grads[0].reshape({-1, 1}));
    return {softmax, at::Tensor(), at::Tensor()};
  }
};

struct TeCrossEntropyFn : torch::autograd::Function<TeCrossEntropyFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor* labels, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    const int64_t V = logits.size(-1);
    auto l2 = logits.view({-1, V});
    const int64_t rows = l2.size(0);
    auto loss = at::empty({rows}, logits.options().dtype(at::kFloat));
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto target = labels->reshape({-1, 1});
      for (int64_t r0 = 0; r0 < rows; r0 += 64) {
        const int64_t n = std::min<int64_t>(64, rows - r0);
        auto x = l2.narrow(0, r0, n).to(at::kFloat);
        const auto tgt = target.narrow(0, r0, n);
        x.sub_(std::get<0>(x.max(1, true)));
        const auto predicted = x.gather(1, tgt).squeeze(1);
        x.exp_();
        const auto sum = x.sum(1, true);
        loss.narrow(0, r0, n).copy_(sum.squeeze(1).log().sub_(predicted));
        x.div_(sum).scatter_add_(1, tgt, at::full({n, 1}, -1.0, x.options()));
        l2.narrow(0, r0, n).copy_(x);  // the gradient, in the logits' storage
      }
    }
    ctx->save_for_backward({logits});
    ctx->saved_data["op"] = op;
    return loss.view({logits.size(0), logits.size(1)});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto sv = ctx->get_saved_variables();
    auto& grad = sv[0];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    {
      // In place, as TE's element_mul_kernel: whatever LibTorch's broadcast needs aside is workspace.
      ScopedAllocClass ws(AllocClass::kWorkspace);
      grad.view({-1, grad.size(-1)}).mul_(grads[0].reshape({-1, 1}).to(grad.scalar_type()));
    }
    return {grad, at::Tensor(), at::Tensor()};
  }
};

struct CompiledCrossEntropyFn : torch::autograd::Function<CompiledCrossEntropyFn> {
  static constexpr int64_t kTile = 64;  // rows per fp32 tile
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor* labels, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    const int64_t V = logits.size(-1);
    const auto l2 = logits.view({-1, V});
    const int64_t rows = l2.size(0);
    auto loss = at::empty({rows}, logits.options().dtype(at::kFloat));
    auto lse = at::empty({rows}, logits.options().dtype(at::kFloat));
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto target = labels->reshape({-1, 1});
      for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
        const int64_t n = std::min<int64_t>(kTile, rows - r0);
        const auto x = l2.narrow(0, r0, n).to(at::kFloat);
        const auto row_lse = at::logsumexp(x, 1);
        lse.narrow(0, r0, n).copy_(row_lse);
        loss.narrow(0, r0, n).copy_(row_lse - x.gather(1, target.narrow(0, r0, n)).squeeze(1));
      }
    }
    ctx->save_for_backward({logits, lse});
    ctx->saved_data["op"] = op;
    ctx->saved_data["labels"] = as_int(labels);
    return loss.view({logits.size(0), logits.size(1)});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto sv = ctx->get_saved_variables();
    const auto& logits = sv[0];
    const auto& lse = sv[1];
    const auto* labels = saved_ptr<at::Tensor>(ctx, "labels");
    const int64_t V = logits.size(-1);
    const auto l2 = logits.view({-1, V});
    const int64_t rows = l2.size(0);
    auto grad = at::empty_like(logits);
    auto g2 = grad.view({-1, V});
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto target = labels->reshape({-1, 1});
      const auto scale = grads[0].reshape({-1, 1}).to(at::kFloat);
      for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
        const int64_t n = std::min<int64_t>(kTile, rows - r0);
        auto x = l2.narrow(0, r0, n).to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);  // fp32 logits too
        x.sub_(lse.narrow(0, r0, n).unsqueeze(1)).exp_();
        x.scatter_add_(1, target.narrow(0, r0, n), at::full({n, 1}, -1.0, x.options()));
        x.mul_(scale.narrow(0, r0, n));
        g2.narrow(0, r0, n).copy_(x);
      }
    }
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor embedding(at::Tensor tokens, const LinearParams& table, int op) {
  return EmbeddingFn::apply(tokens, table.w, &table, static_cast<int64_t>(op));
}
at::Tensor add_positions(at::Tensor e, const LinearParams& positions, int op) {
  return PositionsFn::apply(e, &positions, static_cast<int64_t>(op));
}
at::Tensor to_fp32(at::Tensor x, int op) { return ToFp32Fn::apply(x, static_cast<int64_t>(op)); }
at::Tensor cross_entropy(at::Tensor logits, const at::Tensor& labels, int op) {
  return CrossEntropyFn::apply(logits, &labels, static_cast<int64_t>(op));
}
at::Tensor te_cross_entropy(at::Tensor logits, const at::Tensor& labels, int op) {
  return TeCrossEntropyFn::apply(logits, &labels, static_cast<int64_t>(op));
}
at::Tensor compiled_cross_entropy(at::Tensor logits, const at::Tensor& labels, int op) {
  return CompiledCrossEntropyFn::apply(logits, &labels, static_cast<int64_t>(op));
}

}  // namespace ops

void Embedding::init_params() {
  const auto& m = run_.model;
  word_ = linear_params(m.hidden_size, m.vocab_size, false);
  // The lookup's only differentiable input is the table; its gradient still goes to main_w.
  word_.w.requires_grad_(true);
  if (m.positions == spec::Positions::kLearned)
    position_ = linear_params(m.hidden_size, m.max_position_embeddings, false);
}

std::vector<std::pair<at::Tensor*, at::Tensor*>> Embedding::params_and_grads() {
  std::vector<std::pair<at::Tensor*, at::Tensor*>> v{{&word_.w, &word_.main_w}};
  if (position_.w.defined()) v.push_back({&position_.w, &position_.main_w});
  return v;
}

at::Tensor Embedding::forward(const at::Tensor& tokens) {
  ++micro_batch_;
  auto e = ops::embedding(tokens, word_, id("embedding.word"));
  if (position_.w.defined()) e = ops::add_positions(std::move(e), position_, id("embedding.position"));
  return maybe_dropout(std::move(e), "embedding.dropout");
}

Head::Head(const BlockRun& r, at::ScalarType dtype) : LayerBase(r, dtype) {
  labels_ = at::randint(r.model.vocab_size, {r.seq_length, r.micro_batch}, at::kLong);
}

void Head::init_params() {
  norm_ = norm_params();
  lm_head_ = linear_params(run_.model.hidden_size, run_.model.vocab_size, false);
}

std::vector<std::pair<at::Tensor*, at::Tensor*>> Head::params_and_grads() {
  std::vector<std::pair<at::Tensor*, at::Tensor*>> v{{&norm_.w, &norm_.main_w}};
  if (norm_.b.defined()) v.push_back({&norm_.b, &norm_.main_b});
  v.push_back({&lm_head_.w, &lm_head_.main_w});
  return v;
}

at::Tensor Head::forward(const at::Tensor& x) {
  ++micro_batch_;
  auto logits = ops::linear(ops::norm(x, norm_, id("final_norm")), lm_head_, id("lm_head"));
  if (run_.compiled_loss) return ops::compiled_cross_entropy(std::move(logits), labels_, id("loss.cross_entropy"));
  if (run_.cross_entropy_fusion == spec::CrossEntropyFusion::kTe)
    return ops::te_cross_entropy(std::move(logits), labels_, id("loss.cross_entropy"));
  if (dtype_ != at::kFloat) logits = ops::to_fp32(std::move(logits), id("loss.to_fp32"));
  return ops::cross_entropy(std::move(logits), labels_, id("loss.cross_entropy"));
}

}  // namespace mist::executor
