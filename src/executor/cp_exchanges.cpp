// Context-parallel flash attention in the executor, the exchanges besides the p2p ring: the last
// rank (r = cp−1) of Transformer Engine's a2a (AttnFuncWithCPAndQKVOA2A, DeepSpeed-Ulysses'
// scheme) and of its all-gather (AttnFuncWithCPAndKVAllGather), holding exactly the buffers
// graph/lower.cpp's cp_attention_core counts for them; and what every exchange shares
// (attention_internal.hpp): the other ranks' tokens and attention over a causal prefix.
#include <algorithm>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "executor/attention_internal.hpp"
#include "executor/functions.hpp"
#include "executor/functions_internal.hpp"
#include "executor/tracking_allocator.hpp"

namespace mist::executor::ops {

namespace detail {

namespace {

at::Tensor drawn(uint64_t seed, int64_t c, int64_t b, int64_t width, const at::TensorOptions& opts) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn({c, b, width}, gen, opts.dtype(at::kFloat)).to(opts.dtype().toScalarType());
}

// Scores of query rows [r0, r0 + n) against keys [0, p0 + r0 + n), scaled, the last n columns
// causally masked.
at::Tensor prefix_scores(const at::Tensor& qf, const at::Tensor& kf, int64_t p0, int64_t r0, int64_t n, double scale) {
  auto sc = at::mm(qf.narrow(0, r0, n), kf.narrow(0, 0, p0 + r0 + n).t()).mul_(scale);
  sc.narrow(1, p0 + r0, n)
      .masked_fill_(at::ones({n, n}, sc.options().dtype(at::kBool)).triu_(1), -std::numeric_limits<float>::infinity());
  return sc;
}

}  // namespace

at::Tensor remote_kv(int64_t chunk, int64_t c, int64_t b, int64_t width, const at::TensorOptions& opts) {
  return drawn(0x5eedc0deULL + static_cast<uint64_t>(chunk), c, b, width, opts);
}
at::Tensor remote_q(int64_t chunk, int64_t c, int64_t b, int64_t width, const at::TensorOptions& opts) {
  return drawn(0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(chunk), c, b, width, opts);
}

PrefixForward prefix_attention(const at::Tensor& qf, const at::Tensor& kf, const at::Tensor& vf, int64_t p0, double scale) {
  const int64_t n = qf.size(0);
  PrefixForward f{at::empty_like(qf), at::empty({n}, qf.options())};
  for (int64_t r0 = 0; r0 < n; r0 += kTile) {
    const int64_t t = std::min(kTile, n - r0), m = p0 + r0 + t;
    auto sc = prefix_scores(qf, kf, p0, r0, t, scale);
    auto mx = std::get<0>(sc.max(1, true));
    auto e = (sc - mx).exp_();
    auto l = e.sum(1, true);
    f.lse.narrow(0, r0, t).copy_((mx + l.log()).squeeze(1));
    f.out.narrow(0, r0, t).copy_(at::mm(e.div_(l), vf.narrow(0, 0, m)));
  }
  return f;
}

PrefixBackward prefix_attention_backward(const at::Tensor& qf, const at::Tensor& kf, const at::Tensor& vf,
                                         const at::Tensor& of, const at::Tensor& lse, const at::Tensor& gof, int64_t p0,
                                         double scale) {
  const int64_t n = qf.size(0);
  PrefixBackward g{at::empty_like(qf), at::zeros_like(kf), at::zeros_like(vf)};
  auto delta = (gof * of).sum(1, true);  // rowsum(dO∘O)
  for (int64_t r0 = 0; r0 < n; r0 += kTile) {
    const int64_t t = std::min(kTile, n - r0), m = p0 + r0 + t;
    auto p = (prefix_scores(qf, kf, p0, r0, t, scale) - lse.narrow(0, r0, t).unsqueeze(1)).exp_();
    auto go = gof.narrow(0, r0, t);
    g.dv.narrow(0, 0, m).add_(at::mm(p.t(), go));
    auto ds = p.mul_(at::mm(go, vf.narrow(0, 0, m).t()).sub_(delta.narrow(0, r0, t)));
    g.dq.narrow(0, r0, t).copy_(at::mm(ds, kf.narrow(0, 0, m)).mul_(scale));
    g.dk.narrow(0, 0, m).add_(at::mm(ds.t(), qf.narrow(0, r0, t)).mul_(scale));
  }
  return g;
}

}  // namespace detail

namespace {

using namespace detail;

// The rank's shapes: sl local tokens (chunks cp−1 and cp of c each, from global position P), S
// tokens in all; under a2a the rank's heads are group r = cp−1 (ah query heads, gh K/V heads).
struct Shape {
  int64_t sl, b, hd, heads, groups, rep, cp, c, P, S, kvw, w, ah, gh, r;
  Shape(const at::Tensor& q, const AttnDims& d)
      : sl(q.size(0)), b(q.size(1)), hd(d.head_dim), heads(d.heads), groups(d.groups), rep(d.heads / d.groups),
        cp(d.cp), c(sl / 2), P((d.cp - 1) * c), S(d.cp * sl), kvw(d.groups * d.head_dim), w(d.heads * d.head_dim),
        ah(d.heads / d.cp), gh(d.groups / d.cp), r(d.cp - 1) {}
};

// Every token's k and v [S, b, 2·kvw] (k then v) or q [S, b, w] in sequence order, fp32: the local
// ones at rows P..P + sl, the other ranks' drawn. Workspace.
at::Tensor sequence_kv(const at::Tensor& k, const at::Tensor& v, const Shape& z) {
  std::vector<at::Tensor> parts;
  for (int64_t j = 0; j < 2 * z.cp; ++j) {
    if (j == z.cp) continue;  // local, with chunk cp−1
    parts.push_back(j == z.cp - 1 ? at::cat({k, v}, 2) : remote_kv(j, z.c, z.b, 2 * z.kvw, k.options()));
  }
  return at::cat(parts, 0).to(at::kFloat);
}
at::Tensor sequence_q(const at::Tensor& q, const Shape& z) {
  std::vector<at::Tensor> parts;
  for (int64_t j = 0; j < 2 * z.cp; ++j) {
    if (j == z.cp) continue;
    parts.push_back(j == z.cp - 1 ? q : remote_q(j, z.c, z.b, z.w, q.options()));
  }
  return at::cat(parts, 0).to(at::kFloat);
}

// Columns of K/V head `g` of sequence bi in a [rows, b, 2·kvw] tensor: [rows, d] views.
at::Tensor kv_k(const at::Tensor& x, int64_t bi, int64_t g, const Shape& z) { return x.select(1, bi).narrow(1, g * z.hd, z.hd); }
at::Tensor kv_v(const at::Tensor& x, int64_t bi, int64_t g, const Shape& z) {
  return x.select(1, bi).narrow(1, z.kvw + g * z.hd, z.hd);
}
at::Tensor f32(const at::Tensor& x) { return x.to(at::kFloat).contiguous(); }

// The a2a's buffer [S, b, (ah + 2·gh)·d]: the rank's query heads, then its K heads, then its V
// heads; column offsets of each.
int64_t a2a_q_col(int64_t hl, const Shape& z) { return hl * z.hd; }
int64_t a2a_k_col(int64_t kh, const Shape& z) { return (z.ah + kh) * z.hd; }
int64_t a2a_v_col(int64_t kh, const Shape& z) { return (z.ah + z.gh + kh) * z.hd; }
at::Tensor a2a_col(const at::Tensor& x, int64_t bi, int64_t col, const Shape& z) { return x.select(1, bi).narrow(1, col, z.hd); }

// TE's a2a, the last rank: an all-to-all makes q, k, v head-sharded (this rank: group r's heads of
// every token), the kernel runs over the whole sequence, a second all-to-all returns the output
// to the tokens' ranks. The other ranks' heads of this rank's tokens, which their kernels compute
// and send back, are computed here as workspace.
struct A2aFlashFn : torch::autograd::Function<A2aFlashFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const Shape z(q, *d);
    auto out = at::empty({z.sl, z.b, z.w}, q.options());
    auto lse = at::empty({z.b, z.ah, z.S}, q.options().dtype(at::kFloat));  // the rank's heads, every token
    // attn.core.cp_a2a_qkv: the rank's heads of every token's q, k and v, after the all-to-all.
    auto qkv = at::empty({z.S, z.b, (z.ah + 2 * z.gh) * z.hd}, q.options());
    // attn.core.cp_a2a_out: the kernel's output for them, before the all-to-all back.
    auto o_a2a = at::empty({z.S, z.b, z.ah * z.hd}, q.options());
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto fq = sequence_q(q, z), fkv = sequence_kv(k, v, z);
      qkv.narrow(2, 0, z.ah * z.hd).copy_(fq.narrow(2, z.r * z.ah * z.hd, z.ah * z.hd));
      qkv.narrow(2, a2a_k_col(0, z), z.gh * z.hd).copy_(fkv.narrow(2, z.r * z.gh * z.hd, z.gh * z.hd));
      qkv.narrow(2, a2a_v_col(0, z), z.gh * z.hd).copy_(fkv.narrow(2, z.kvw + z.r * z.gh * z.hd, z.gh * z.hd));
      for (int64_t bi = 0; bi < z.b; ++bi) {
        for (int64_t hl = 0; hl < z.ah; ++hl) {
          const auto f = prefix_attention(f32(a2a_col(qkv, bi, a2a_q_col(hl, z), z)),
                                          f32(a2a_col(qkv, bi, a2a_k_col(hl / z.rep, z), z)),
                                          f32(a2a_col(qkv, bi, a2a_v_col(hl / z.rep, z), z)), 0, d->scale);
          head(o_a2a, bi, hl, z.hd).copy_(f.out);
          lse[bi][hl].copy_(f.lse);
        }
        // The all-to-all back: the rank's heads from o_a2a, the others' as their ranks compute them.
        for (int64_t h = 0; h < z.heads; ++h) {
          if (h / z.ah == z.r) {
            head(out, bi, h, z.hd).copy_(head(o_a2a, bi, h - z.r * z.ah, z.hd).narrow(0, z.P, z.sl));
            continue;
          }
          const auto f = prefix_attention(f32(head(q, bi, h, z.hd)), f32(kv_k(fkv, bi, h / z.rep, z)),
                                          f32(kv_v(fkv, bi, h / z.rep, z)), z.P, d->scale);
          head(out, bi, h, z.hd).copy_(f.out);
        }
      }
    }
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    const auto* d = dims_of(ctx);
    auto sv = ctx->get_saved_variables();
    const auto &q = sv[0], &k = sv[1], &v = sv[2], &o = sv[3], &lse = sv[4];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto& g = grads[0];
    const Shape z(q, *d);
    auto gq = at::empty({z.sl, z.b, z.w}, q.options());
    auto gk = at::zeros({z.sl, z.b, z.kvw}, k.options());
    auto gv = at::zeros({z.sl, z.b, z.kvw}, v.options());
    // attn.core.cp_a2a_dout: the rank's heads' output gradient, every token, after the all-to-all
    // (the other ranks' tokens' outputs are not this function's: zero).
    auto dout = at::zeros({z.S, z.b, z.ah * z.hd}, q.options());
    dout.narrow(0, z.P, z.sl).copy_(g.narrow(2, z.r * z.ah * z.hd, z.ah * z.hd));
    // attn.core.cp_a2a_dqkv: their dq, dk and dv, before the all-to-all back.
    auto dqkv = at::zeros({z.S, z.b, (z.ah + 2 * z.gh) * z.hd}, q.options());
    {
      // TE keeps the head-sharded q, k, v (the bytes of the saved local ones); rebuilt here.
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto fq = sequence_q(q, z), fkv = sequence_kv(k, v, z);
      for (int64_t bi = 0; bi < z.b; ++bi) {
        for (int64_t kh = 0; kh < z.gh; ++kh) {
          const int64_t gk_global = z.r * z.gh + kh;
          const auto kf = f32(kv_k(fkv, bi, gk_global, z)), vf = f32(kv_v(fkv, bi, gk_global, z));
          auto dk = at::zeros_like(kf), dv = at::zeros_like(vf);
          for (int64_t hl = kh * z.rep; hl < (kh + 1) * z.rep; ++hl) {
            auto of = at::zeros({z.S, z.hd}, kf.options());
            of.narrow(0, z.P, z.sl).copy_(head(o, bi, z.r * z.ah + hl, z.hd));
            const auto bw = prefix_attention_backward(f32(head(fq, bi, z.r * z.ah + hl, z.hd)), kf, vf, of, lse[bi][hl],
                                                      f32(head(dout, bi, hl, z.hd)), 0, d->scale);
            a2a_col(dqkv, bi, a2a_q_col(hl, z), z).copy_(bw.dq);
            dk.add_(bw.dk);
            dv.add_(bw.dv);
          }
          a2a_col(dqkv, bi, a2a_k_col(kh, z), z).copy_(dk);
          a2a_col(dqkv, bi, a2a_v_col(kh, z), z).copy_(dv);
        }
        // The other ranks' heads of this rank's tokens: what their kernels send back.
        for (int64_t kvh = 0; kvh < z.groups; ++kvh) {
          if (kvh / z.gh == z.r) continue;
          const auto kf = f32(kv_k(fkv, bi, kvh, z).narrow(0, 0, z.P + z.sl));
          const auto vf = f32(kv_v(fkv, bi, kvh, z).narrow(0, 0, z.P + z.sl));
          auto dk = at::zeros_like(kf), dv = at::zeros_like(vf);
          for (int64_t h = kvh * z.rep; h < (kvh + 1) * z.rep; ++h) {
            const auto qf = f32(head(q, bi, h, z.hd));
            const auto f = prefix_attention(qf, kf, vf, z.P, d->scale);  // its log-sum-exp
            const auto bw = prefix_attention_backward(qf, kf, vf, f32(head(o, bi, h, z.hd)), f.lse,
                                                      f32(head(g, bi, h, z.hd)), z.P, d->scale);
            head(gq, bi, h, z.hd).copy_(bw.dq);
            dk.add_(bw.dk);
            dv.add_(bw.dv);
          }
          head(gk, bi, kvh, z.hd).copy_(dk.narrow(0, z.P, z.sl));
          head(gv, bi, kvh, z.hd).copy_(dv.narrow(0, z.P, z.sl));
        }
        // The all-to-all back of the rank's heads: its tokens' rows.
        const auto mine = dqkv.select(1, bi).narrow(0, z.P, z.sl);
        gq.select(1, bi).narrow(1, z.r * z.ah * z.hd, z.ah * z.hd).copy_(mine.narrow(1, 0, z.ah * z.hd));
        gk.select(1, bi).narrow(1, z.r * z.gh * z.hd, z.gh * z.hd).copy_(mine.narrow(1, a2a_k_col(0, z), z.gh * z.hd));
        gv.select(1, bi).narrow(1, z.r * z.gh * z.hd, z.gh * z.hd).copy_(mine.narrow(1, a2a_v_col(0, z), z.gh * z.hd));
      }
    }
    return {gq, gk, gv, at::Tensor(), at::Tensor()};
  }
};

// The all-gather's buffer [2, S, b, 2·kvw]: [0] every rank's K/V block as gathered (rank j's
// chunks j and 2·cp−1−j), [1] the same in sequence order (TE's index_select, a second copy).
void gather_kv(at::Tensor& gathered, const at::Tensor& k, const at::Tensor& v, const Shape& z) {
  ScopedAllocClass ws(AllocClass::kWorkspace);
  const auto fkv = sequence_kv(k, v, z);
  auto ranks = gathered[0];
  std::vector<int64_t> order(static_cast<size_t>(z.S));
  for (int64_t j = 0; j < z.cp; ++j) {
    ranks.narrow(0, j * z.sl, z.c).copy_(fkv.narrow(0, j * z.c, z.c));
    ranks.narrow(0, j * z.sl + z.c, z.c).copy_(fkv.narrow(0, (2 * z.cp - 1 - j) * z.c, z.c));
    for (int64_t i = 0; i < z.c; ++i) {
      order[static_cast<size_t>(j * z.c + i)] = j * z.sl + i;
      order[static_cast<size_t>((2 * z.cp - 1 - j) * z.c + i)] = j * z.sl + z.c + i;
    }
  }
  gathered[1].copy_(at::index_select(ranks, 0, at::tensor(order, at::kLong)));
}

// TE's all-gather, the last rank: k and v gathered whole and put in sequence order before two
// kernels, one per local chunk (queries of chunk cp−1 against keys up to it, of chunk cp against
// keys up to it); backward gathers again, computes into full-length dk, dv and reduce-scatters
// them.
struct AllGatherFlashFn : torch::autograd::Function<AllGatherFlashFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const Shape z(q, *d);
    auto out = at::empty({z.sl, z.b, z.w}, q.options());
    auto lse = at::empty({z.b, z.heads, z.sl}, q.options().dtype(at::kFloat));
    // attn.core.cp_kv_gathered
    auto gathered = at::empty({2, z.S, z.b, 2 * z.kvw}, k.options());
    gather_kv(gathered, k, v, z);
    // attn.core.cp_step_outputs: the chunk kernels' output and log-sum-exp.
    auto step_out = at::empty({z.sl, z.b, z.w}, q.options());
    auto step_lse = at::empty({z.b, z.heads, z.sl}, q.options().dtype(at::kFloat));
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto seq = gathered[1];
      for (int64_t bi = 0; bi < z.b; ++bi)
        for (int64_t h = 0; h < z.heads; ++h) {
          const auto qf = f32(head(q, bi, h, z.hd));
          const auto kf = f32(kv_k(seq, bi, h / z.rep, z)), vf = f32(kv_v(seq, bi, h / z.rep, z));
          for (int64_t ch = 0; ch < 2; ++ch) {
            const auto f = prefix_attention(qf.narrow(0, ch * z.c, z.c), kf, vf, z.P + ch * z.c, d->scale);
            head(step_out, bi, h, z.hd).narrow(0, ch * z.c, z.c).copy_(f.out);
            step_lse[bi][h].narrow(0, ch * z.c, z.c).copy_(f.lse);
          }
        }
      out.copy_(step_out);
      lse.copy_(step_lse);
    }
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Timed t(op_of(ctx), Phase::kBackward);
    const auto* d = dims_of(ctx);
    auto sv = ctx->get_saved_variables();
    const auto &q = sv[0], &k = sv[1], &v = sv[2], &o = sv[3], &lse = sv[4];
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto& g = grads[0];
    const Shape z(q, *d);
    auto gq = at::empty({z.sl, z.b, z.w}, q.options());
    auto gk = at::zeros({z.sl, z.b, z.kvw}, k.options());
    auto gv = at::zeros({z.sl, z.b, z.kvw}, v.options());
    // attn.core.cp_kv_gathered, again.
    auto gathered = at::empty({2, z.S, z.b, 2 * z.kvw}, k.options());
    gather_kv(gathered, k, v, z);
    // attn.core.cp_dkv_full: every token's dk and dv, reduce-scattered at the end.
    auto dkv_full = at::zeros({z.S, z.b, 2 * z.kvw}, k.options());
    // attn.core.cp_step_grads: the chunk kernels' dq and full-length dk, dv.
    auto dq = at::empty({z.sl, z.b, z.w}, q.options());
    auto dkv = at::zeros({z.S, z.b, 2 * z.kvw}, k.options());
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto seq = gathered[1];
      for (int64_t bi = 0; bi < z.b; ++bi)
        for (int64_t kvh = 0; kvh < z.groups; ++kvh) {
          const auto kf = f32(kv_k(seq, bi, kvh, z)), vf = f32(kv_v(seq, bi, kvh, z));
          auto dk = at::zeros_like(kf), dv = at::zeros_like(vf);
          for (int64_t h = kvh * z.rep; h < (kvh + 1) * z.rep; ++h) {
            const auto qf = f32(head(q, bi, h, z.hd)), of = f32(head(o, bi, h, z.hd)), gof = f32(head(g, bi, h, z.hd));
            for (int64_t ch = 0; ch < 2; ++ch) {
              const int64_t r0 = ch * z.c;
              const auto bw = prefix_attention_backward(qf.narrow(0, r0, z.c), kf, vf, of.narrow(0, r0, z.c),
                                                        lse[bi][h].narrow(0, r0, z.c), gof.narrow(0, r0, z.c),
                                                        z.P + r0, d->scale);
              head(dq, bi, h, z.hd).narrow(0, r0, z.c).copy_(bw.dq);
              dk.add_(bw.dk);
              dv.add_(bw.dv);
            }
          }
          kv_k(dkv, bi, kvh, z).copy_(dk);
          kv_v(dkv, bi, kvh, z).copy_(dv);
        }
      dkv_full.add_(dkv);
      gq.copy_(dq);
      // The reduce-scatter: this rank's tokens' rows.
      const auto mine = dkv_full.narrow(0, z.P, z.sl);
      gk.copy_(mine.narrow(2, 0, z.kvw));
      gv.copy_(mine.narrow(2, z.kvw, z.kvw));
    }
    return {gq, gk, gv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor a2a_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op) {
  return A2aFlashFn::apply(q, k, v, &d, static_cast<int64_t>(op));
}

at::Tensor allgather_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op) {
  return AllGatherFlashFn::apply(q, k, v, &d, static_cast<int64_t>(op));
}

}  // namespace mist::executor::ops
