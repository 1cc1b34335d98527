// The mixture-of-experts MLP in the executor: one rank of graph/lower_moe.cpp's moe_mlp (Megatron-
// Core's MoELayer: SharedExpertMLP, TopKRouter, MoEAlltoAllTokenDispatcher, TEGroupedMLP) on an
// ep × etp expert grid. Every tensor the lowering names is an activation of exactly its size, made
// by the op the lowering makes it in and kept by the ops that keep it; index arithmetic, fp32
// copies and the other intermediates of what runs fused on a GPU are workspace.
#include <ATen/ATen.h>

#include "executor/functions.hpp"
#include "executor/functions_internal.hpp"
#include "executor/kernels.hpp"
#include "executor/layers.hpp"
#include "executor/tracking_allocator.hpp"

namespace mist::executor {

namespace ops {
namespace {

using namespace detail;

int op_of(AutogradContext* ctx) { return static_cast<int>(ctx->saved_data["op"].toInt()); }
const MoeDims* dims_of(AutogradContext* ctx) { return saved_ptr<MoeDims>(ctx, "dims"); }
void keep(AutogradContext* ctx, const MoeDims* d, int64_t op) {
  ctx->set_materialize_grads(false);
  ctx->saved_data["dims"] = as_int(d);
  ctx->saved_data["op"] = op;
}

// The balanced routing: token t's k experts are (t·k + j) mod E, j < k, so that with E dividing
// the tokens' T·k rows every expert gets T·k/E of them (int64 [T, k]).
at::Tensor balanced_topk(int64_t T, int64_t k, int64_t E) {
  return at::arange(T * k, at::kLong).remainder_(E).view({T, k});
}

// Rows of sort_chunks_by_idxs: `n` rows in sources·local equal chunks ordered [source][local
// expert], taken expert-major ([local expert][source]); `inverse` undoes it. out[i] = in[index[i]].
at::Tensor chunk_order(int64_t n, int64_t sources, int64_t local, bool inverse) {
  const int64_t chunks = sources * local, c = n / chunks;
  auto j = at::arange(chunks, at::kLong);  // output chunk
  // Sorted: output chunk le·sources + x holds input chunk x·local + le; the inverse swaps them.
  auto src = inverse ? j.remainder(local) * sources + j.div(local, "floor")
                     : j.remainder(sources) * local + j.div(sources, "floor");
  return (src.unsqueeze(1) * c + at::arange(c, at::kLong).unsqueeze(0)).view({-1});
}

struct TopkFn : torch::autograd::Function<TopkFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits, const MoeDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const int64_t E = logits.size(-1), T = logits.numel() / E, k = d->topk;
    auto probs = at::zeros({T, E}, logits.options());                  // moe.topk.probs
    auto map = at::zeros({T, E}, logits.options().dtype(at::kBool));   // moe.topk.routing_map
    auto soft = at::empty({T, k}, logits.options().dtype(at::kFloat));  // moe.topk.softmax
    auto idx = at::empty({T, k}, logits.options().dtype(at::kLong));    // moe.topk.indices
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      idx.copy_(balanced_topk(T, k, E));
      soft.copy_(at::softmax(logits.reshape({T, E}).gather(1, idx).to(at::kFloat), 1));
      // .type_as(logits), then the scatter into the dense [T, E] probabilities.
      probs.scatter_(1, idx, soft.to(logits.scalar_type()));
      map.scatter_(1, idx, true);
    }
    ctx->mark_non_differentiable({map});
    ctx->save_for_backward({soft, idx});
    ctx->saved_data["s"] = logits.size(0);
    ctx->saved_data["b"] = logits.size(1);
    return {probs, map};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto sv = ctx->get_saved_variables();
    const auto &soft = sv[0], &idx = sv[1];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto& g = grads[0];
    const int64_t T = g.size(0), E = g.size(1);
    auto gl = at::zeros({ctx->saved_data["s"].toInt(), ctx->saved_data["b"].toInt(), E}, g.options());
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      auto gk = g.gather(1, idx).to(at::kFloat);
      auto dk = soft * (gk - (gk * soft).sum(1, true));  // softmax backward, fp32
      gl.view({T, E}).scatter_(1, idx, dk.to(g.scalar_type()));
    }
    return {gl, at::Tensor(), at::Tensor()};
  }
};

struct AuxLossFn : torch::autograd::Function<AuxLossFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& probs, const MoeDims* d,
                            int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    auto scores = at::empty(logits.sizes(), logits.options().dtype(at::kFloat));  // moe.aux_loss.scores
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      scores.copy_(at::softmax(logits.to(at::kFloat), -1));
    }
    ctx->save_for_backward({scores});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return probs;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    const auto* d = dims_of(ctx);
    auto scores = ctx->get_saved_variables()[0];
    const int64_t E = scores.size(-1), T = scores.numel() / E;
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    auto gl = at::empty(scores.sizes(), scores.options().dtype(dtype));
    {
      // aux = E·coeff/(k·T²) · Σ_e tokens_e · Σ_t scores[t, e] with tokens_e = T·k/E (balanced):
      // dL/dscores = coeff/T everywhere, through the softmax's backward.
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const double c = d->aux_loss_coeff / static_cast<double>(T);
      gl.copy_(scores * (c - (scores * c).sum(-1, true)));
    }
    // The probabilities' gradient passes through (MoEAuxLossAutoScaler).
    return {gl, grads[0], at::Tensor(), at::Tensor()};
  }
};

// The int64 index vectors of the permutation, one tensor [F + R] for R routed rows: first the
// indices of the routing map's entries in probsᵀ [E, T] with the R selected ones in front,
// expert-major, tokens ascending (F = R, or all F = T·E of them: the whole stable argsort of
// routing_map.T that Megatron's probabilities' index op keeps), then each row's token.
at::Tensor entries(const at::Tensor& idx, int64_t rows) { return idx.narrow(0, 0, rows); }
at::Tensor tokens(const at::Tensor& idx, int64_t rows) { return idx.narrow(0, idx.size(0) - rows, rows); }

struct PermuteFn : torch::autograd::Function<PermuteFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& probs,
                               const at::Tensor& map, bool full_argsort, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    ctx->saved_data["op"] = op;
    const int64_t h = x.size(-1), T = x.numel() / h, E = map.size(1);
    at::Tensor order;
    int64_t routed = 0;
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto mt = map.t().contiguous().view(-1);
      order = mt.nonzero().squeeze(1);
      routed = order.size(0);
      if (full_argsort) order = at::cat({order, mt.logical_not().nonzero().squeeze(1)});
    }
    auto rows = at::empty({routed, h}, x.options());                                  // moe.permute.out
    auto row_probs = at::empty({routed}, probs.options());                            // moe.permute.probs
    auto indices = at::empty({order.size(0) + routed}, x.options().dtype(at::kLong));  // moe.permute.indices
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      indices.narrow(0, 0, order.size(0)).copy_(order);
      tokens(indices, routed).copy_(entries(indices, routed).remainder(T));
      at::index_select_out(rows, x.reshape({T, h}), 0, tokens(indices, routed));
      at::index_select_out(row_probs, probs.t().contiguous().view(-1), 0, entries(indices, routed));
    }
    ctx->mark_non_differentiable({indices});
    ctx->save_for_backward({indices});
    ctx->saved_data["s"] = x.size(0);
    ctx->saved_data["b"] = x.size(1);
    ctx->saved_data["E"] = E;
    return {rows, row_probs, indices};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto idx = ctx->get_saved_variables()[0];
    const auto &g = grads[0], &gp = grads[1];
    const int64_t s = ctx->saved_data["s"].toInt(), b = ctx->saved_data["b"].toInt(), E = ctx->saved_data["E"].toInt();
    const int64_t T = s * b;
    variable_list out(5);
    if (g.defined()) {
      out[0] = at::zeros({s, b, g.size(1)}, g.options());
      ScopedAllocClass ws(AllocClass::kWorkspace);
      out[0].view({T, g.size(1)}).index_add_(0, tokens(idx, g.size(0)), g);
    }
    if (gp.defined()) {
      out[1] = at::zeros({T, E}, gp.options());
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto flat = entries(idx, gp.size(0));
      out[1].view(-1).index_copy_(0, flat.remainder(T) * E + flat.div(T, "floor"), gp);
    }
    return out;
  }
};

struct UnpermuteFn : torch::autograd::Function<UnpermuteFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, const at::Tensor& indices, int64_t s,
                            int64_t b, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    ctx->saved_data["op"] = op;
    const int64_t h = rows.size(1);
    auto out = at::zeros({s, b, h}, rows.options());  // moe.unpermute.out
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      out.view({s * b, h}).index_add_(0, tokens(indices, rows.size(0)), rows);
    }
    ctx->save_for_backward({indices});
    ctx->saved_data["rows"] = rows.size(0);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto idx = ctx->get_saved_variables()[0];
    variable_list out(5);
    if (!grads[0].defined()) return out;
    const auto& g = grads[0];
    const int64_t h = g.size(-1), rows = ctx->saved_data["rows"].toInt();
    out[0] = at::empty({rows, h}, g.options());
    ScopedAllocClass ws(AllocClass::kWorkspace);
    at::index_select_out(out[0], g.reshape({-1, h}), 0, tokens(idx, rows));
    return out;
  }
};

// A row tensor [n, ...] with n rows replaced.
std::vector<int64_t> with_rows(const at::Tensor& x, int64_t n) {
  auto v = x.sizes().vec();
  v[0] = n;
  return v;
}

// `x` moved as `move` (or, in backward, as its adjoint) into a new tensor.
at::Tensor move_rows(const at::Tensor& x, RowMove move, const MoeDims& d, bool adjoint) {
  const int64_t n = x.size(0), etp = d.etp;
  // The adjoint of a gather is a reduce-scatter and the reverse; sorts invert; all-to-all is its
  // own (the reverse exchange).
  if (adjoint) {
    if (move == RowMove::kGather)
      move = RowMove::kReduceScatter;
    else if (move == RowMove::kReduceScatter)
      move = RowMove::kGather;
    else if (move == RowMove::kGatherTpEp)
      move = RowMove::kReduceScatterTpEp;
    else if (move == RowMove::kReduceScatterTpEp)
      move = RowMove::kGatherTpEp;
    else if (move == RowMove::kSortChunks)
      move = RowMove::kUnsortChunks;
    else if (move == RowMove::kUnsortChunks)
      move = RowMove::kSortChunks;
  }
  auto gather = [&](int64_t copies) {
    auto out = at::empty(with_rows(x, copies * n), x.options());
    for (int64_t c = 0; c < copies; ++c) out.narrow(0, c * n, n).copy_(x);
    return out;
  };
  auto reduce_scatter = [&](int64_t parts) {
    const int64_t m = n / parts;
    auto out = at::empty(with_rows(x, m), x.options());
    out.copy_(x.narrow(0, 0, m));
    for (int64_t c = 1; c < parts; ++c) out.add_(x.narrow(0, c * m, m));
    return out;
  };
  switch (move) {
    case RowMove::kGatherTpEp: return gather(etp * d.ep);
    case RowMove::kReduceScatterTpEp: return reduce_scatter(etp * d.ep);
    case RowMove::kAllToAll: {
      auto out = at::empty(x.sizes(), x.options());
      out.copy_(x);
      return out;
    }
    case RowMove::kGather: return gather(etp);
    case RowMove::kReduceScatter: return reduce_scatter(etp);
    case RowMove::kSortChunks:
    case RowMove::kUnsortChunks: {
      auto out = at::empty(x.sizes(), x.options());
      ScopedAllocClass ws(AllocClass::kWorkspace);
      at::index_select_out(out, x, 0, chunk_order(n, etp * d.ep, d.local_experts(), move == RowMove::kUnsortChunks));
      return out;
    }
  }
  return {};
}

struct RowMoveFn : torch::autograd::Function<RowMoveFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t move, const MoeDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    ctx->saved_data["move"] = move;
    return move_rows(x, static_cast<RowMove>(move), *d, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    return {move_rows(g, static_cast<RowMove>(ctx->saved_data["move"].toInt()), *dims_of(ctx), true), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

struct GroupedLinearFn : torch::autograd::Function<GroupedLinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const LinearParams* p, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    const int64_t experts = p->w.size(0), out = p->w.size(1), n = x.size(0), c = n / experts;
    auto y = at::empty({n, out}, x.options());
    for (int64_t e = 0; e < experts; ++e) mm_into(y.narrow(0, e * c, c), x.narrow(0, e * c, c), p->w[e].t());
    ctx->save_for_backward({x});
    ctx->saved_data["p"] = as_int(p);
    ctx->saved_data["op"] = op;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    const auto* p = saved_ptr<LinearParams>(ctx, "p");
    auto x = ctx->get_saved_variables()[0];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    const int64_t experts = p->w.size(0), n = x.size(0), c = n / experts;
    auto gx = at::empty(x.sizes(), x.options());
    for (int64_t e = 0; e < experts; ++e) mm_into(gx.narrow(0, e * c, c), g.narrow(0, e * c, c), p->w[e]);
    {
      // As LinearFn: a bf16 weight-gradient GEMM needs a temporary, Megatron's fused wgrad none.
      ScopedAllocClass wg(AllocClass::kWeightGrad);
      for (int64_t e = 0; e < experts; ++e) {
        const auto ge = g.narrow(0, e * c, c), xe = x.narrow(0, e * c, c);
        auto mw = p->main_w[e];
        if (x.scalar_type() == at::kFloat)
          mw.addmm_(ge.t(), xe);
        else
          mw.add_(at::mm(ge.t(), xe));
      }
    }
    return {gx, at::Tensor(), at::Tensor()};
  }
};

// An activation of the experts weighted by each row's probability, x [n, width] and p [n] in, saving
// both: Megatron's WeightedSwiGLUFunction (x = [gate | up], half the width out), or GELU experts'
// product of the GELU's output with the probabilities (the same width out).
struct WeightedSwiglu {
  static int64_t width(const at::Tensor& x) { return x.size(1) / 2; }
  // fp32 probabilities beside a bf16 input: the fused kernel casts inside, its output bf16.
  static at::ScalarType out_dtype(const at::Tensor& x, const at::Tensor&) { return x.scalar_type(); }
  static constexpr auto forward = kernels::weighted_swiglu_forward;
  static constexpr auto backward = kernels::weighted_swiglu_backward;
};
struct WeightRows {
  static int64_t width(const at::Tensor& x) { return x.size(1); }
  // `intermediate_parallel * permuted_probs`: PyTorch promotes bf16 × fp32 to fp32.
  static at::ScalarType out_dtype(const at::Tensor& x, const at::Tensor& p) {
    return at::promote_types(x.scalar_type(), p.scalar_type());
  }
  static constexpr auto forward = kernels::weight_rows_forward;
  static constexpr auto backward = kernels::weight_rows_backward;
};

template <class K>
struct ProbWeightedFn : torch::autograd::Function<ProbWeightedFn<K>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& p, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    auto y = at::empty({x.size(0), K::width(x)}, x.options().dtype(K::out_dtype(x, p)));
    K::forward(x, p, y);
    ctx->save_for_backward({x, p});
    ctx->saved_data["op"] = op;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto sv = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    auto gx = at::empty(sv[0].sizes(), sv[0].options());
    auto gp = at::empty(sv[1].sizes(), sv[1].options());
    if (g.scalar_type() == sv[0].scalar_type()) {
      K::backward(g, sv[0], sv[1], gx, gp);
      return {gx, gp, at::Tensor()};
    }
    // A promoted product (bf16 × fp32): autograd's MulBackward makes grad·p and grad·x in fp32,
    // both alive together, then casts the first to the input's dtype and sums the second per row.
    auto gp_rows = at::empty(g.sizes(), g.options());  // moe.experts.weight.grad_p_fp32
    auto gx_fp32 = at::empty(g.sizes(), g.options());  // moe.experts.weight.grad_x_fp32
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      at::mul_out(gx_fp32, g, sv[1].unsqueeze(1));
      at::mul_out(gp_rows, g, sv[0].to(g.scalar_type()));
      gx.copy_(gx_fp32);
      at::sum_out(gp, gp_rows, {1});
    }
    return {gx, gp, at::Tensor()};
  }
};

// A cast to `to` (the GELU experts' fp32 product back to the activation dtype for fc2); its
// backward casts the gradient back.
struct CastFn : torch::autograd::Function<CastFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t to, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    auto y = at::empty(x.sizes(), x.options().dtype(static_cast<at::ScalarType>(to)));
    y.copy_(x);
    ctx->saved_data["from"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["op"] = op;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto from = static_cast<at::ScalarType>(ctx->saved_data["from"].toInt());
    auto gx = at::empty(grads[0].sizes(), grads[0].options().dtype(from));
    gx.copy_(grads[0]);
    return {gx, at::Tensor(), at::Tensor()};
  }
};

struct SigmoidGateFn : torch::autograd::Function<SigmoidGateFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logit, const at::Tensor& y, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    auto out = at::empty(y.sizes(), y.options());            // shared_expert.gated.out
    auto score = at::empty(logit.sizes(), logit.options());  // shared_expert.gate.score
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      at::sigmoid_out(score, logit);
      at::mul_out(out, y, score);
    }
    ctx->save_for_backward({score, y});
    ctx->saved_data["op"] = op;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto sv = ctx->get_saved_variables();
    const auto &score = sv[0], &y = sv[1];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto& g = grads[0];
    auto glogit = at::empty(score.sizes(), score.options());
    auto gy = at::empty(y.sizes(), y.options());
    ScopedAllocClass ws(AllocClass::kWorkspace);
    at::mul_out(gy, g, score);
    const auto sf = score.to(at::kFloat);
    glogit.copy_((g.to(at::kFloat) * y.to(at::kFloat)).sum(-1, true) * sf * (1 - sf));
    return {glogit, gy, at::Tensor()};
  }
};

// The all-gather dispatcher's ops (functions.hpp).
struct GatherTokensFn : torch::autograd::Function<GatherTokensFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::Tensor* buffer, const MoeDims* d,
                            int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const int64_t h = x.size(-1), T = x.numel() / h, n = d->etp * d->ep;
    if (!buffer->defined() || buffer->numel() < n * T * h) {
      ScopedAllocClass ws(AllocClass::kWorkspace);  // outside the activations, as Megatron's buffer
      *buffer = at::empty({n * T * h}, x.options());
    }
    auto out = buffer->narrow(0, 0, n * T * h).view({n * T, h});
    for (int64_t c = 0; c < n; ++c) out.narrow(0, c * T, T).copy_(x.reshape({T, h}));
    ctx->saved_data["s"] = x.size(0);
    ctx->saved_data["b"] = x.size(1);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    variable_list out(4);
    if (!grads[0].defined()) return out;
    const auto g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    const int64_t s = ctx->saved_data["s"].toInt(), b = ctx->saved_data["b"].toInt(), T = s * b;
    const auto* d = dims_of(ctx);
    out[0] = at::empty({s, b, g.size(1)}, g.options());
    auto flat = out[0].view({T, g.size(1)});
    flat.copy_(g.narrow(0, 0, T));
    for (int64_t c = 1; c < d->etp * d->ep; ++c) flat.add_(g.narrow(0, c * T, T));
    return out;
  }
};

struct LocalColumnsFn : torch::autograd::Function<LocalColumnsFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const MoeDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    auto out = at::empty({x.size(0), d->local_experts()}, x.options());
    out.copy_(x.narrow(1, 0, d->local_experts()));
    if (x.scalar_type() == at::kBool) ctx->mark_non_differentiable({out});
    ctx->saved_data["E"] = x.size(1);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    variable_list out(3);
    if (!grads[0].defined()) return out;
    const auto& g = grads[0];
    out[0] = at::zeros({g.size(0), ctx->saved_data["E"].toInt()}, g.options());
    out[0].narrow(1, 0, g.size(1)).copy_(g);
    return out;
  }
};

struct PermuteGatheredFn : torch::autograd::Function<PermuteGatheredFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& map, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    ctx->saved_data["op"] = op;
    const int64_t G = x.size(0), h = x.size(1), cols = map.numel();
    int64_t routed = 0;
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      routed = map.sum().item<int64_t>();  // tokens_per_expert.sum().item()
    }
    auto rows = at::empty({routed, h}, x.options());                       // moe.permute.out
    auto tokens = at::empty({routed}, x.options().dtype(at::kLong));       // moe.permute.indices
    auto map_t = at::empty({map.size(1), G}, map.options());               // moe.permute.map_t
    auto order = at::empty({cols}, x.options().dtype(at::kLong));          // moe.permute.argsort
    map_t.copy_(map.t());
    {
      // The stable descending argsort of the 0/1 map: its nonzero entries first, in order.
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto flat = map_t.view(-1);
      order.narrow(0, 0, routed).copy_(flat.nonzero().squeeze(1));
      order.narrow(0, routed, cols - routed).copy_(flat.logical_not().nonzero().squeeze(1));
      tokens.copy_(order.narrow(0, 0, routed).remainder(G));
      at::index_select_out(rows, x, 0, tokens);
    }
    map_t.reset();
    order.reset();
    ctx->mark_non_differentiable({tokens});
    ctx->save_for_backward({tokens});
    ctx->saved_data["G"] = G;
    return {rows, tokens};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    variable_list out(3);
    if (!grads[0].defined()) return out;
    auto tokens = ctx->get_saved_variables()[0];
    const auto& g = grads[0];
    out[0] = at::zeros({ctx->saved_data["G"].toInt(), g.size(1)}, g.options());
    ScopedAllocClass ws(AllocClass::kWorkspace);
    out[0].index_add_(0, tokens, g);
    return out;
  }
};

struct ProbsSelectFn : torch::autograd::Function<ProbsSelectFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& probs, const at::Tensor& map, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    ctx->saved_data["op"] = op;
    int64_t routed = 0;
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      routed = map.sum().item<int64_t>();
    }
    auto out = at::empty({routed}, probs.options());                              // moe.probs_select.out
    auto probs_t = at::empty({probs.size(1), probs.size(0)}, probs.options());   // moe.probs_select.probs_t
    auto mask_t = at::empty({map.size(1), map.size(0)}, map.options());          // moe.probs_select.mask_t
    probs_t.copy_(probs.t());
    mask_t.copy_(map.t());
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      out.copy_(probs_t.masked_select(mask_t));
    }
    ctx->save_for_backward({probs_t, mask_t});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    variable_list out(3);
    if (!grads[0].defined()) return out;
    auto sv = ctx->get_saved_variables();
    const auto &probs_t = sv[0], &mask_t = sv[1];
    out[0] = at::empty({probs_t.size(1), probs_t.size(0)}, probs_t.options());
    ScopedAllocClass ws(AllocClass::kWorkspace);
    out[0].copy_(at::zeros_like(probs_t).masked_scatter_(mask_t, grads[0]).t());
    return out;
  }
};

struct UnpermuteGatheredFn : torch::autograd::Function<UnpermuteGatheredFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, const at::Tensor& tokens, int64_t gathered,
                            int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    ctx->set_materialize_grads(false);
    ctx->saved_data["op"] = op;
    auto out = at::zeros({gathered, rows.size(1)}, rows.options());  // moe.unpermute.out
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      out.index_add_(0, tokens, rows);
    }
    ctx->save_for_backward({tokens});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    variable_list out(4);
    if (!grads[0].defined()) return out;
    auto tokens = ctx->get_saved_variables()[0];
    const auto& g = grads[0];
    out[0] = at::empty({tokens.size(0), g.size(1)}, g.options());
    ScopedAllocClass ws(AllocClass::kWorkspace);
    at::index_select_out(out[0], g.is_contiguous() ? g : g.contiguous(), 0, tokens);
    return out;
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> moe_topk(at::Tensor logits, const MoeDims& d, int op) {
  auto out = TopkFn::apply(logits, &d, static_cast<int64_t>(op));
  return {out[0], out[1]};
}
at::Tensor moe_aux_loss(at::Tensor logits, at::Tensor probs, const MoeDims& d, int op) {
  return AuxLossFn::apply(logits, probs, &d, static_cast<int64_t>(op));
}
std::vector<at::Tensor> moe_permute(at::Tensor x, at::Tensor probs, at::Tensor routing_map, bool full_argsort,
                                    int op) {
  return PermuteFn::apply(x, probs, routing_map, full_argsort, static_cast<int64_t>(op));
}
at::Tensor moe_unpermute(at::Tensor rows, at::Tensor indices, int64_t s, int64_t b, int op) {
  return UnpermuteFn::apply(rows, indices, s, b, static_cast<int64_t>(op));
}
at::Tensor moe_rows(at::Tensor x, RowMove move, const MoeDims& d, int op) {
  return RowMoveFn::apply(x, static_cast<int64_t>(move), &d, static_cast<int64_t>(op));
}
at::Tensor moe_gather_tokens(at::Tensor x, at::Tensor& buffer, const MoeDims& d, int op) {
  return GatherTokensFn::apply(x, &buffer, &d, static_cast<int64_t>(op));
}
at::Tensor moe_local_columns(at::Tensor x, const MoeDims& d, int op) {
  return LocalColumnsFn::apply(x, &d, static_cast<int64_t>(op));
}
std::vector<at::Tensor> moe_permute_gathered(at::Tensor tokens, at::Tensor local_map, int op) {
  return PermuteGatheredFn::apply(tokens, local_map, static_cast<int64_t>(op));
}
at::Tensor moe_probs_select(at::Tensor local_probs, at::Tensor local_map, int op) {
  return ProbsSelectFn::apply(local_probs, local_map, static_cast<int64_t>(op));
}
at::Tensor moe_unpermute_gathered(at::Tensor rows, at::Tensor tokens, int64_t gathered, int op) {
  return UnpermuteGatheredFn::apply(rows, tokens, gathered, static_cast<int64_t>(op));
}
at::Tensor grouped_linear(at::Tensor x, const LinearParams& p, int op) {
  return GroupedLinearFn::apply(x, &p, static_cast<int64_t>(op));
}
at::Tensor weighted_swiglu(at::Tensor gate_up, at::Tensor probs, int op) {
  return ProbWeightedFn<WeightedSwiglu>::apply(gate_up, probs, static_cast<int64_t>(op));
}
at::Tensor cast(at::Tensor x, at::ScalarType to, int op) {
  return CastFn::apply(x, static_cast<int64_t>(to), static_cast<int64_t>(op));
}
at::Tensor weight_rows(at::Tensor x, at::Tensor probs, int op) {
  return ProbWeightedFn<WeightRows>::apply(x, probs, static_cast<int64_t>(op));
}
at::Tensor sigmoid_gate(at::Tensor logit, at::Tensor y, int op) {
  return SigmoidGateFn::apply(logit, y, static_cast<int64_t>(op));
}

}  // namespace ops

void Block::init_moe_params() {
  const auto& m = run_.model;
  const int64_t h = m.hidden_size, fe = m.moe_ffn_hidden_size / moe_.etp, fs = m.shared_expert_ffn_hidden_size;
  router_ = linear_params(h, m.num_experts, false);
  const int64_t in_width = m.mlp == spec::Mlp::kSwiGlu ? 2 : 1;  // [gate | up], or GELU's fc1
  if (fs > 0) {
    shared_fc1_ = linear_params(h, in_width * fs, false);
    shared_fc2_ = linear_params(fs, h, false);
    if (m.shared_expert_gate) shared_gate_ = linear_params(h, 1, false);
  }
  // This rank's E/ep experts, 1/etp of each: fc1 h -> 2·f_e/etp ([gate | up]; GELU: f_e/etp),
  // fc2 f_e/etp -> h.
  const int64_t local = moe_.local_experts();
  experts_fc1_.w = at::randn({local, in_width * fe, h}, at::kFloat).mul_(0.02).to(dtype_);
  experts_fc2_.w = at::randn({local, h, fe}, at::kFloat).mul_(0.02).to(dtype_);
}

at::Tensor Block::moe(at::Tensor x) {
  const auto& m = run_.model;
  // The shared expert first (MoELayer without --moe-shared-expert-overlap), maybe gated.
  at::Tensor shared;
  if (m.shared_expert_ffn_hidden_size > 0) {
    shared = modules_ & spec::kRecomputeSharedExperts ? ops::checkpoint(shared_region_, {x})[0]
                                                      : dense_mlp(x, shared_fc1_, shared_fc2_, "shared_expert");
    if (m.shared_expert_gate) {
      auto logit = ops::linear(x, shared_gate_, id("shared_expert.gate"));
      shared = ops::sigmoid_gate(std::move(logit), std::move(shared), id("shared_expert.gated"));
    }
  }
  // The router's logits: fp32 under --moe-router-dtype fp32 (RouterGatingLinearFunction).
  auto logits = ops::linear(x, router_, id("moe.router"),
                            run_.moe_router_fp32 ? std::optional(at::kFloat) : std::nullopt);
  auto [probs, map] = ops::moe_topk(logits, moe_, id("moe.topk"));
  probs = ops::moe_aux_loss(std::move(logits), std::move(probs), moe_, id("moe.aux_loss"));
  std::vector<at::Tensor> held;  // custom_forward's locals, released as it returns
  at::Tensor out = moe_.allgather ? moe_allgather(std::move(x), std::move(probs), std::move(map), held)
                                  : moe_alltoall(std::move(x), std::move(probs), std::move(map), held);
  if (shared.defined()) out = ops::add(std::move(out), std::move(shared), id("moe.add_shared"));
  held.clear();
  return out;
}

at::Tensor Block::moe_alltoall(at::Tensor x, at::Tensor probs, at::Tensor map, std::vector<at::Tensor>& held) {
  const int64_t s = x.size(0), b = x.size(1);
  auto permuted = ops::moe_permute(std::move(x), std::move(probs), std::move(map), run_.moe_full_argsort,
                                   id("moe.permute"));
  at::Tensor rows = std::move(permuted[0]), row_probs = std::move(permuted[1]), indices = std::move(permuted[2]);
  permuted.clear();
  held.push_back(rows);  // `hidden_states`, rebound to the permuted tokens
  using ops::RowMove;
  auto relay = [&](at::Tensor& t, RowMove how, const char* name) {
    t = ops::moe_rows(std::move(t), how, moe_, id(name));
  };
  if (moe_.ep > 1) {
    relay(rows, RowMove::kAllToAll, "moe.dispatch_a2a");
    relay(row_probs, RowMove::kAllToAll, "moe.dispatch_a2a_probs");
    held.push_back(rows);  // `dispatched_input`
  }
  held.push_back(row_probs);  // `probs`, rebound to the dispatched probabilities
  if (moe_.etp > 1) {
    relay(rows, RowMove::kGather, "moe.dispatch_gather");
    relay(row_probs, RowMove::kGather, "moe.dispatch_gather_probs");
  }
  const bool sort = moe_.local_experts() > 1;
  if (sort) {
    relay(rows, RowMove::kSortChunks, "moe.sort_chunks");
    relay(row_probs, RowMove::kSortChunks, "moe.sort_chunks_probs");
  }
  rows = experts(std::move(rows), std::move(row_probs));
  if (sort) relay(rows, RowMove::kUnsortChunks, "moe.unsort_chunks");
  if (moe_.etp > 1) relay(rows, RowMove::kReduceScatter, "moe.combine_scatter");
  if (moe_.ep > 1) relay(rows, RowMove::kAllToAll, "moe.combine_a2a");
  return ops::moe_unpermute(std::move(rows), std::move(indices), s, b, id("moe.unpermute"));
}

at::Tensor Block::expert_activation(at::Tensor fc1, at::Tensor row_probs) {
  if (run_.model.mlp == spec::Mlp::kSwiGlu)
    return ops::weighted_swiglu(std::move(fc1), std::move(row_probs), id("moe.experts.swiglu"));
  auto g = ops::gelu(std::move(fc1), id("moe.experts.gelu"));
  auto y = ops::weight_rows(std::move(g), std::move(row_probs), id("moe.experts.weight"));
  if (y.scalar_type() == dtype_) return y;
  return ops::cast(std::move(y), dtype_, id("moe.experts.weight_cast"));  // fp32 probabilities: back for fc2
}

at::Tensor Block::experts(at::Tensor rows, at::Tensor row_probs) {
  rows = ops::grouped_linear(std::move(rows), experts_fc1_, id("moe.experts.fc1"));
  if (!(modules_ & spec::kRecomputeMoeAct)) {
    rows = expert_activation(std::move(rows), std::move(row_probs));
    return ops::grouped_linear(std::move(rows), experts_fc2_, id("moe.experts.fc2"));
  }
  // "moe_act" (TEGroupedMLP's activation_checkpoint): restored when the gradient reaches fc2's output.
  at::Tensor act;
  auto ck = without_output(
      [this](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{expert_activation(in[0], in[1])}; },
      {std::move(rows), std::move(row_probs)}, act);
  auto out = ops::grouped_linear(std::move(act), experts_fc2_, id("moe.experts.fc2"));
  ck.discard_output_and_restore_at(out);
  return out;
}

at::Tensor Block::moe_allgather(at::Tensor x, at::Tensor probs, at::Tensor map, std::vector<at::Tensor>& held) {
  const int64_t s = x.size(0), b = x.size(1), h = x.size(2);
  const bool gather = moe_.ep > 1 || moe_.etp > 1;
  const int64_t G = moe_.etp * moe_.ep * s * b;
  using ops::RowMove;
  at::Tensor tokens;
  if (gather) {
    map = ops::moe_rows(std::move(map), RowMove::kGatherTpEp, moe_, id("moe.gather_routing_map"));
    probs = ops::moe_rows(std::move(probs), RowMove::kGatherTpEp, moe_, id("moe.gather_probs"));
    tokens = ops::moe_gather_tokens(std::move(x), gather_buffer_, moe_, id("moe.gather_tokens"));
  } else {
    tokens = x.view({s * b, h});
    x.reset();
  }
  held.push_back(probs);  // `probs`, rebound by dispatch to the gathered probabilities
  auto local_map = ops::moe_local_columns(std::move(map), moe_, id("moe.local_map"));
  auto local_probs = ops::moe_local_columns(std::move(probs), moe_, id("moe.local_probs"));
  auto permuted = ops::moe_permute_gathered(std::move(tokens), local_map, id("moe.permute"));
  at::Tensor rows = std::move(permuted[0]), indices = std::move(permuted[1]);
  permuted.clear();
  auto row_probs = ops::moe_probs_select(std::move(local_probs), std::move(local_map), id("moe.probs_select"));
  rows = experts(std::move(rows), std::move(row_probs));
  auto full = ops::moe_unpermute_gathered(std::move(rows), std::move(indices), G, id("moe.unpermute"));
  if (gather) full = ops::moe_rows(std::move(full), RowMove::kReduceScatterTpEp, moe_, id("moe.combine_scatter"));
  return full.view({s, b, h});
}

}  // namespace mist::executor
