// Attention ops of the executor: rotary, GQA expansion, q·kᵀ, causal softmax, p·v and flash
// attention. Batched matmuls run per (sequence, head) on strided views of [s, b, heads·d]
// tensors, so no contiguous copies of q, k or v are made (BLAS takes the row stride).
#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "executor/functions.hpp"
#include "executor/attention_internal.hpp"
#include "executor/functions_internal.hpp"
#include "executor/kernels.hpp"
#include "executor/tracking_allocator.hpp"

namespace mist::executor::ops {

namespace {

using namespace detail;


// Out-of-place rotary on q and k (Megatron's apply_rotary_pos_emb): saves nothing but the
// constant cos/sin tables.
struct RotaryFn : torch::autograd::Function<RotaryFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor* cos, const at::Tensor* sin, const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    ctx->saved_data["cos"] = as_int(cos);
    ctx->saved_data["sin"] = as_int(sin);
    auto qr = at::empty({q.size(0), q.size(1), q.size(2)}, q.options());
    auto kr = at::empty({k.size(0), k.size(1), k.size(2)}, k.options());
    kernels::rotary_forward(q, *cos, *sin, d->head_dim, qr);
    kernels::rotary_forward(k, *cos, *sin, d->head_dim, kr);
    return {qr, kr};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    const auto *cos = saved_ptr<at::Tensor>(ctx, "cos"), *sin = saved_ptr<at::Tensor>(ctx, "sin");
    const int64_t hd = dims_of(ctx)->head_dim;
    variable_list out(6);
    for (int i = 0; i < 2; ++i) {
      if (!grads[i].defined()) continue;
      const auto g = grads[i].is_contiguous() ? grads[i] : grads[i].contiguous();
      out[i] = at::empty(g.sizes(), g.options());
      kernels::rotary_backward(g, *cos, *sin, hd, out[i]);
    }
    return out;
  }
};

// GQA (non-flash): k and v repeated to all query heads; saves nothing.
struct ExpandKvFn : torch::autograd::Function<ExpandKvFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& k, const at::Tensor& v,
                               const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    auto ke = at::empty({k.size(0), k.size(1), d->heads * d->head_dim}, k.options());
    auto ve = at::empty({v.size(0), v.size(1), d->heads * d->head_dim}, v.options());
    kernels::expand_heads_forward(k, d->head_dim, d->heads, ke);
    kernels::expand_heads_forward(v, d->head_dim, d->heads, ve);
    return {ke, ve};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    const auto* d = dims_of(ctx);
    variable_list out(4);
    for (int i = 0; i < 2; ++i) {
      if (!grads[i].defined()) continue;
      const auto g = grads[i].is_contiguous() ? grads[i] : grads[i].contiguous();
      out[i] = at::empty({g.size(0), g.size(1), d->groups * d->head_dim}, g.options());
      kernels::expand_heads_backward(g, d->head_dim, d->groups, out[i]);
    }
    return out;
  }
};

// scores = q·kᵀ: saves q and k (views of qkv, or the rotated / expanded tensors).
struct QkFn : torch::autograd::Function<QkFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const int64_t s = q.size(0), b = q.size(1);
    auto scores = at::empty({b, d->heads, s, s}, q.options());
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < d->heads; ++h)
        mm_into(scores[bi][h], head(q, bi, h, d->head_dim), head(k, bi, h, d->head_dim).t());
    ctx->save_for_backward({q, k});
    return scores;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    const auto* d = dims_of(ctx);
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &g = grads[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const int64_t s = q.size(0), b = q.size(1), w = d->heads * d->head_dim;
    auto gq = at::empty({s, b, w}, q.options()), gk = at::empty({s, b, w}, k.options());
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < d->heads; ++h) {
        mm_into(head(gq, bi, h, d->head_dim), g[bi][h], head(k, bi, h, d->head_dim));
        mm_into(head(gk, bi, h, d->head_dim), g[bi][h].t(), head(q, bi, h, d->head_dim));
      }
    return {gq, gk, at::Tensor(), at::Tensor()};
  }
};

// Causal scale-mask-softmax: saves its output.
struct SoftmaxFn : torch::autograd::Function<SoftmaxFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& scores, const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    auto p = at::empty(scores.sizes(), scores.options());
    kernels::causal_softmax_forward(scores, d->scale, p);
    ctx->save_for_backward({p});
    return p;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto p = ctx->get_saved_variables()[0];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto gx = at::empty(p.sizes(), p.options());
    kernels::causal_softmax_backward(grads[0], p, dims_of(ctx)->scale, gx);
    return {gx, at::Tensor(), at::Tensor()};
  }
};

// context = p·v: saves p and v.
struct PvFn : torch::autograd::Function<PvFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& p, const at::Tensor& v,
                            const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const int64_t b = p.size(0), s = p.size(2);
    auto out = at::empty({s, b, d->heads * d->head_dim}, v.options());
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < d->heads; ++h)
        mm_into(head(out, bi, h, d->head_dim), p[bi][h], head(v, bi, h, d->head_dim));
    ctx->save_for_backward({p, v});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    const auto* d = dims_of(ctx);
    auto saved = ctx->get_saved_variables();
    const auto &p = saved[0], &v = saved[1];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto g = grads[0].is_contiguous() ? grads[0] : grads[0].contiguous();
    const int64_t b = p.size(0), s = p.size(2);
    auto gp = at::empty(p.sizes(), p.options());
    auto gv = at::empty({s, b, d->heads * d->head_dim}, v.options());
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < d->heads; ++h) {
        mm_into(gp[bi][h], head(g, bi, h, d->head_dim), head(v, bi, h, d->head_dim).t());
        mm_into(head(gv, bi, h, d->head_dim), p[bi][h].t(), head(g, bi, h, d->head_dim));
      }
    return {gp, gv, at::Tensor(), at::Tensor()};
  }
};

// Flash attention: saves q, k, v, the output and the fp32 log-sum-exp. All tiles and fp32 copies
// live in workspace (on a GPU they stay in on-chip memory).
struct FlashFn : torch::autograd::Function<FlashFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const int64_t s = q.size(0), b = q.size(1), hd = d->head_dim, rep = d->heads / d->groups;
    auto out = at::empty({s, b, d->heads * hd}, q.options());
    auto lse = at::empty({b, d->heads, s}, q.options().dtype(at::kFloat));
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t h = 0; h < d->heads; ++h) {
          auto qf = head(q, bi, h, hd).to(at::kFloat).contiguous();
          auto kf = head(k, bi, h / rep, hd).to(at::kFloat).contiguous();
          auto vf = head(v, bi, h / rep, hd).to(at::kFloat).contiguous();
          for (int64_t r0 = 0; r0 < s; r0 += kTile) {
            const int64_t n = std::min(kTile, s - r0);
            auto sc = tile_scores(qf, kf, r0, n, d->scale);
            auto m = std::get<0>(sc.max(1, true));
            auto e = (sc - m).exp_();
            auto l = e.sum(1, true);
            lse[bi][h].narrow(0, r0, n).copy_((m + l.log()).squeeze(1));
            head(out, bi, h, hd).narrow(0, r0, n).copy_(at::mm(e.div_(l), vf.narrow(0, 0, r0 + n)));
          }
        }
    }
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    auto fb = flash_backward(ctx, grads);
    if (!fb) return none_of_them();
    const auto* d = fb->d;
    const auto &q = fb->q, &k = fb->k, &v = fb->v, &o = fb->o, &lse = fb->lse, &g = fb->g;
    auto &gq = fb->gq, &gk = fb->gk, &gv = fb->gv;
    const int64_t s = q.size(0), b = q.size(1), hd = d->head_dim, rep = d->heads / d->groups;
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t h = 0; h < d->heads; ++h) {
          auto qf = head(q, bi, h, hd).to(at::kFloat).contiguous();
          auto kf = head(k, bi, h / rep, hd).to(at::kFloat).contiguous();
          auto vf = head(v, bi, h / rep, hd).to(at::kFloat).contiguous();
          auto gof = head(g, bi, h, hd).to(at::kFloat).contiguous();
          auto delta = (gof * head(o, bi, h, hd).to(at::kFloat)).sum(1, true);  // rowsum(dO∘O)
          auto gkf = at::zeros({s, hd}, qf.options()), gvf = at::zeros({s, hd}, qf.options());
          for (int64_t r0 = 0; r0 < s; r0 += kTile) {
            const int64_t n = std::min(kTile, s - r0), m = r0 + n;
            auto p = (tile_scores(qf, kf, r0, n, d->scale) - lse[bi][h].narrow(0, r0, n).unsqueeze(1)).exp_();
            auto go = gof.narrow(0, r0, n);
            gvf.narrow(0, 0, m).add_(at::mm(p.t(), go));
            auto ds = p.mul_(at::mm(go, vf.narrow(0, 0, m).t()).sub_(delta.narrow(0, r0, n)));
            head(gq, bi, h, hd).narrow(0, r0, n).copy_(at::mm(ds, kf.narrow(0, 0, m)).mul_(d->scale));
            gkf.narrow(0, 0, m).add_(at::mm(ds.t(), qf.narrow(0, r0, n)).mul_(d->scale));
          }
          head(gk, bi, h / rep, hd).add_(gkf);
          head(gv, bi, h / rep, hd).add_(gvf);
        }
    }
    return fb->grads();
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> rotary(at::Tensor q, at::Tensor k, const at::Tensor& cos,
                                         const at::Tensor& sin, const AttnDims& d, int op) {
  auto r = RotaryFn::apply(q, k, &cos, &sin, &d, static_cast<int64_t>(op));
  return {r[0], r[1]};
}
std::pair<at::Tensor, at::Tensor> expand_kv(at::Tensor k, at::Tensor v, const AttnDims& d,
                                            int op) {
  auto r = ExpandKvFn::apply(k, v, &d, static_cast<int64_t>(op));
  return {r[0], r[1]};
}
at::Tensor qk(at::Tensor q, at::Tensor k, const AttnDims& d, int op) {
  return QkFn::apply(q, k, &d, static_cast<int64_t>(op));
}
at::Tensor causal_softmax(at::Tensor scores, const AttnDims& d, int op) {
  return SoftmaxFn::apply(scores, &d, static_cast<int64_t>(op));
}
at::Tensor pv(at::Tensor p, at::Tensor v, const AttnDims& d, int op) {
  return PvFn::apply(p, v, &d, static_cast<int64_t>(op));
}
at::Tensor flash_attention(at::Tensor q, at::Tensor k, at::Tensor v,
                           const AttnDims& d, int op) {
  return FlashFn::apply(q, k, v, &d, static_cast<int64_t>(op));
}

}  // namespace mist::executor::ops
