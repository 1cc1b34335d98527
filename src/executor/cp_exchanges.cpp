// Context-parallel flash attention in the executor, the exchanges besides the p2p ring: the last
// rank (r = cp−1) of Transformer Engine's a2a (AttnFuncWithCPAndQKVOA2A, DeepSpeed-Ulysses'
// scheme), of its all-gather (AttnFuncWithCPAndKVAllGather) and of its hierarchical a2a+p2p
// (AttnFuncWithCPAndKVP2P with cp_group_a2a), holding exactly the buffers
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
// causally masked (against every key of kf, unmasked, when not causal).
int64_t prefix_keys(const at::Tensor& kf, int64_t p0, int64_t r0, int64_t n, bool causal) {
  return causal ? p0 + r0 + n : kf.size(0);
}
at::Tensor prefix_scores(const at::Tensor& qf, const at::Tensor& kf, int64_t p0, int64_t r0, int64_t n, double scale,
                         bool causal) {
  auto sc = at::mm(qf.narrow(0, r0, n), kf.narrow(0, 0, prefix_keys(kf, p0, r0, n, causal)).t()).mul_(scale);
  if (!causal) return sc;
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

PrefixForward prefix_attention(const at::Tensor& qf, const at::Tensor& kf, const at::Tensor& vf, int64_t p0, double scale,
                               bool causal) {
  const int64_t n = qf.size(0);
  PrefixForward f{at::empty_like(qf), at::empty({n}, qf.options())};
  for (int64_t r0 = 0; r0 < n; r0 += kTile) {
    const int64_t t = std::min(kTile, n - r0), m = prefix_keys(kf, p0, r0, t, causal);
    auto sc = prefix_scores(qf, kf, p0, r0, t, scale, causal);
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
                                         double scale, bool causal) {
  const int64_t n = qf.size(0);
  PrefixBackward g{at::empty_like(qf), at::zeros_like(kf), at::zeros_like(vf)};
  auto delta = (gof * of).sum(1, true);  // rowsum(dO∘O)
  for (int64_t r0 = 0; r0 < n; r0 += kTile) {
    const int64_t t = std::min(kTile, n - r0), m = prefix_keys(kf, p0, r0, t, causal);
    auto p = (prefix_scores(qf, kf, p0, r0, t, scale, causal) - lse.narrow(0, r0, t).unsqueeze(1)).exp_();
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
// tokens in all. Under an all-to-all over groups of `grp` ranks (a2a: the whole CP group;
// a2a+p2p: cp_a2a) the rank is the last of its group and holds head group hg = grp−1 (ah query
// heads, gh K/V heads) of its group's n = grp·sl tokens, which are contiguous from G0 (chunks
// cp−grp .. cp+grp−1), its own at L0 within them.
struct Shape {
  int64_t sl, b, hd, heads, groups, rep, cp, c, P, S, kvw, w;
  int64_t grp, ah, gh, hg, n, G0, L0;
  Shape(const at::Tensor& q, const AttnDims& d, int64_t group = 0)
      : sl(q.size(0)), b(q.size(1)), hd(d.head_dim), heads(d.heads), groups(d.groups), rep(d.heads / d.groups),
        cp(d.cp), c(sl / 2), P((d.cp - 1) * c), S(d.cp * sl), kvw(d.groups * d.head_dim), w(d.heads * d.head_dim),
        grp(group > 0 ? group : d.cp), ah(heads / grp), gh(groups / grp), hg(grp - 1), n(grp * sl),
        G0((cp - grp) * c), L0((grp - 1) * c) {}
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

// The all-to-all's buffer [n, b, (ah + 2·gh)·d]: the rank's query heads, then its K heads, then its
// V heads, of its group's tokens; column offsets of each.
int64_t a2a_q_col(int64_t hl, const Shape& z) { return hl * z.hd; }
int64_t a2a_k_col(int64_t kh, const Shape& z) { return (z.ah + kh) * z.hd; }
int64_t a2a_v_col(int64_t kh, const Shape& z) { return (z.ah + z.gh + kh) * z.hd; }
at::Tensor a2a_col(const at::Tensor& x, int64_t bi, int64_t col, const Shape& z) { return x.select(1, bi).narrow(1, col, z.hd); }

// The all-to-all of q, k and v (from the sequence tensors fq, fkv): the rank's head group of its
// group's tokens.
void fill_a2a(at::Tensor& qkv, const at::Tensor& fq, const at::Tensor& fkv, const Shape& z) {
  const auto q = fq.narrow(0, z.G0, z.n), kv = fkv.narrow(0, z.G0, z.n);
  qkv.narrow(2, 0, z.ah * z.hd).copy_(q.narrow(2, z.hg * z.ah * z.hd, z.ah * z.hd));
  qkv.narrow(2, a2a_k_col(0, z), z.gh * z.hd).copy_(kv.narrow(2, z.hg * z.gh * z.hd, z.gh * z.hd));
  qkv.narrow(2, a2a_v_col(0, z), z.gh * z.hd).copy_(kv.narrow(2, z.kvw + z.hg * z.gh * z.hd, z.gh * z.hd));
}

// The all-to-all back of the output: the rank's heads of its own tokens from o_a2a, the other
// heads as the group's other ranks compute and send them (workspace, over the same keys).
void output_a2a_back(at::Tensor& out, const at::Tensor& o_a2a, const at::Tensor& q, const at::Tensor& fkv,
                     const Shape& z, double scale) {
  for (int64_t bi = 0; bi < z.b; ++bi)
    for (int64_t h = 0; h < z.heads; ++h) {
      if (h / z.ah == z.hg) {
        head(out, bi, h, z.hd).copy_(head(o_a2a, bi, h - z.hg * z.ah, z.hd).narrow(0, z.L0, z.sl));
        continue;
      }
      const auto f = prefix_attention(f32(head(q, bi, h, z.hd)), f32(kv_k(fkv, bi, h / z.rep, z)),
                                      f32(kv_v(fkv, bi, h / z.rep, z)), z.P, scale);
      head(out, bi, h, z.hd).copy_(f.out);
    }
}

// The all-to-all back of dq, dk, dv: the rank's heads of its own tokens from dqkv, the other heads'
// as the group's other ranks compute them from this rank's output gradient (workspace).
void grads_a2a_back(at::Tensor& gq, at::Tensor& gk, at::Tensor& gv, const at::Tensor& dqkv, const at::Tensor& q,
                    const at::Tensor& o, const at::Tensor& g, const at::Tensor& fkv, const Shape& z, double scale) {
  for (int64_t bi = 0; bi < z.b; ++bi) {
    for (int64_t kvh = 0; kvh < z.groups; ++kvh) {
      if (kvh / z.gh == z.hg) continue;
      const auto kf = f32(kv_k(fkv, bi, kvh, z).narrow(0, 0, z.P + z.sl));
      const auto vf = f32(kv_v(fkv, bi, kvh, z).narrow(0, 0, z.P + z.sl));
      auto dk = at::zeros_like(kf), dv = at::zeros_like(vf);
      for (int64_t h = kvh * z.rep; h < (kvh + 1) * z.rep; ++h) {
        const auto qf = f32(head(q, bi, h, z.hd));
        const auto f = prefix_attention(qf, kf, vf, z.P, scale);  // its log-sum-exp
        const auto bw = prefix_attention_backward(qf, kf, vf, f32(head(o, bi, h, z.hd)), f.lse,
                                                  f32(head(g, bi, h, z.hd)), z.P, scale);
        head(gq, bi, h, z.hd).copy_(bw.dq);
        dk.add_(bw.dk);
        dv.add_(bw.dv);
      }
      head(gk, bi, kvh, z.hd).copy_(dk.narrow(0, z.P, z.sl));
      head(gv, bi, kvh, z.hd).copy_(dv.narrow(0, z.P, z.sl));
    }
    const auto mine = dqkv.select(1, bi).narrow(0, z.L0, z.sl);
    gq.select(1, bi).narrow(1, z.hg * z.ah * z.hd, z.ah * z.hd).copy_(mine.narrow(1, 0, z.ah * z.hd));
    gk.select(1, bi).narrow(1, z.hg * z.gh * z.hd, z.gh * z.hd).copy_(mine.narrow(1, a2a_k_col(0, z), z.gh * z.hd));
    gv.select(1, bi).narrow(1, z.hg * z.gh * z.hd, z.gh * z.hd).copy_(mine.narrow(1, a2a_v_col(0, z), z.gh * z.hd));
  }
}

// The rank's output gradient of its head group over its group's tokens (zero but its own: the
// other tokens' outputs are not this function's).
void fill_dout(at::Tensor& dout, const at::Tensor& g, const Shape& z) {
  dout.narrow(0, z.L0, z.sl).copy_(g.narrow(2, z.hg * z.ah * z.hd, z.ah * z.hd));
}
// Head hl of the rank's group's output, for rowsum(dO∘O): its own tokens' rows (the others' dO is zero).
at::Tensor group_output(const at::Tensor& o, int64_t bi, int64_t hl, const Shape& z) {
  auto of = at::zeros({z.n, z.hd}, o.options().dtype(at::kFloat));
  of.narrow(0, z.L0, z.sl).copy_(head(o, bi, z.hg * z.ah + hl, z.hd));
  return of;
}

// TE's a2a, the last rank: an all-to-all makes q, k, v head-sharded (this rank: head group cp−1 of
// every token), the kernel runs over the whole sequence, a second all-to-all returns the output to
// the tokens' ranks.
struct A2aFlashFn : torch::autograd::Function<A2aFlashFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const Shape z(q, *d);
    auto out = at::empty({z.sl, z.b, z.w}, q.options());
    auto lse = at::empty({z.b, z.ah, z.n}, q.options().dtype(at::kFloat));  // the rank's heads, every token
    // attn.core.cp_a2a_qkv: the rank's heads of every token's q, k and v, after the all-to-all.
    auto qkv = at::empty({z.n, z.b, (z.ah + 2 * z.gh) * z.hd}, q.options());
    // attn.core.cp_a2a_out: the kernel's output for them, before the all-to-all back.
    auto o_a2a = at::empty({z.n, z.b, z.ah * z.hd}, q.options());
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto fq = sequence_q(q, z), fkv = sequence_kv(k, v, z);
      fill_a2a(qkv, fq, fkv, z);
      for (int64_t bi = 0; bi < z.b; ++bi)
        for (int64_t hl = 0; hl < z.ah; ++hl) {
          const auto f = prefix_attention(f32(a2a_col(qkv, bi, a2a_q_col(hl, z), z)),
                                          f32(a2a_col(qkv, bi, a2a_k_col(hl / z.rep, z), z)),
                                          f32(a2a_col(qkv, bi, a2a_v_col(hl / z.rep, z), z)), 0, d->scale);
          head(o_a2a, bi, hl, z.hd).copy_(f.out);
          lse[bi][hl].copy_(f.lse);
        }
      output_a2a_back(out, o_a2a, q, fkv, z, d->scale);
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
    const Shape z(q, *d);
    // attn.core.cp_a2a_dout: the rank's heads' output gradient, every token, after the all-to-all.
    auto dout = at::zeros({z.n, z.b, z.ah * z.hd}, q.options());
    fill_dout(dout, g, z);
    // attn.core.cp_a2a_dqkv: their dq, dk and dv, before the all-to-all back.
    auto dqkv = at::zeros({z.n, z.b, (z.ah + 2 * z.gh) * z.hd}, q.options());
    {
      // TE keeps the head-sharded q, k, v (the bytes of the saved local ones); rebuilt here.
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto fq = sequence_q(q, z), fkv = sequence_kv(k, v, z);
      auto qkv = at::empty({z.n, z.b, (z.ah + 2 * z.gh) * z.hd}, q.options());
      fill_a2a(qkv, fq, fkv, z);
      for (int64_t bi = 0; bi < z.b; ++bi)
        for (int64_t kh = 0; kh < z.gh; ++kh) {
          const auto kf = f32(a2a_col(qkv, bi, a2a_k_col(kh, z), z)), vf = f32(a2a_col(qkv, bi, a2a_v_col(kh, z), z));
          auto dk = at::zeros_like(kf), dv = at::zeros_like(vf);
          for (int64_t hl = kh * z.rep; hl < (kh + 1) * z.rep; ++hl) {
            const auto bw = prefix_attention_backward(f32(a2a_col(qkv, bi, a2a_q_col(hl, z), z)), kf, vf,
                                                      group_output(o, bi, hl, z), lse[bi][hl],
                                                      f32(head(dout, bi, hl, z.hd)), 0, d->scale);
            a2a_col(dqkv, bi, a2a_q_col(hl, z), z).copy_(bw.dq);
            dk.add_(bw.dk);
            dv.add_(bw.dv);
          }
          a2a_col(dqkv, bi, a2a_k_col(kh, z), z).copy_(dk);
          a2a_col(dqkv, bi, a2a_v_col(kh, z), z).copy_(dv);
        }
      grads_a2a_back(gq, gk, gv, dqkv, q, o, g, fkv, z, d->scale);
    }
    return fb->grads();
  }
};

// TE's a2a+p2p (AttnFuncWithCPAndKVP2P with cp_group_a2a), the last rank: the all-to-all over its
// group of a = cp_a2a ranks, then the p2p ring over the R = cp/a groups with the head-sharded
// blocks (R steps: its own block causally, then each earlier group's earlier big chunk of a·c
// tokens, whole), each step's output and log-sum-exp kept to the correction, then the output's
// all-to-all back. Backward: two double buffers of K/V + dK/dV, each step's dq and dK/dV.
struct A2aP2pFlashFn : torch::autograd::Function<A2aP2pFlashFn> {
  // Block i of the ring [n, b, 2·gh·d]: 0 the own group's K/V (from the all-to-all), i > 0 group
  // R−1−i's: big chunks R−1−i and R+i.
  static void fill_ring_block(at::Tensor blk, const at::Tensor& qkv, const at::Tensor& fkv, int64_t i, const Shape& z) {
    const int64_t kw = z.gh * z.hd;
    if (i == 0) {
      blk.narrow(2, 0, kw).copy_(qkv.narrow(2, a2a_k_col(0, z), kw));
      blk.narrow(2, kw, kw).copy_(qkv.narrow(2, a2a_v_col(0, z), kw));
      return;
    }
    ScopedAllocClass ws(AllocClass::kWorkspace);
    const int64_t R = z.cp / z.grp, C = z.n / 2;
    const int64_t rows[2] = {(R - 1 - i) * C, (R + i) * C};
    for (int half = 0; half < 2; ++half) {
      const auto src = fkv.narrow(0, rows[half], C);
      auto dst = blk.narrow(0, half * C, C);
      dst.narrow(2, 0, kw).copy_(src.narrow(2, z.hg * kw, kw));
      dst.narrow(2, kw, kw).copy_(src.narrow(2, z.kvw + z.hg * kw, kw));
    }
  }
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const Shape z(q, *d, d->cp_a2a);
    const int64_t R = z.cp / z.grp, C = z.n / 2, kw = z.gh * z.hd;
    auto out = at::empty({z.sl, z.b, z.w}, q.options());
    auto lse = at::empty({z.b, z.ah, z.n}, q.options().dtype(at::kFloat));
    // attn.core.cp_a2a_qkv
    auto qkv = at::empty({z.n, z.b, (z.ah + 2 * z.gh) * z.hd}, q.options());
    // attn.core.cp_kv_blocks: R blocks of the group's K/V heads.
    std::vector<at::Tensor> blocks;
    for (int64_t i = 0; i < R; ++i) blocks.push_back(at::empty({z.n, z.b, 2 * kw}, k.options()));
    // attn.core.cp_step_outputs
    std::vector<at::Tensor> outs, lses;
    for (int64_t i = 0; i < R; ++i) {
      outs.push_back(at::empty({z.n, z.b, z.ah * z.hd}, q.options()));
      lses.push_back(at::empty({z.b, z.ah, z.n}, q.options().dtype(at::kFloat)));
    }
    // attn.core.cp_a2a_out
    auto o_a2a = at::empty({z.n, z.b, z.ah * z.hd}, q.options());
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      const auto fq = sequence_q(q, z), fkv = sequence_kv(k, v, z);
      fill_a2a(qkv, fq, fkv, z);
      for (int64_t i = 0; i < R; ++i) {
        fill_ring_block(blocks[static_cast<size_t>(i)], qkv, fkv, i, z);
        const auto& blk = blocks[static_cast<size_t>(i)];
        for (int64_t bi = 0; bi < z.b; ++bi)
          for (int64_t hl = 0; hl < z.ah; ++hl) {
            const int64_t kh = hl / z.rep, keys = i == 0 ? z.n : C;
            const auto kf = f32(blk.select(1, bi).narrow(1, kh * z.hd, z.hd).narrow(0, 0, keys));
            const auto vf = f32(blk.select(1, bi).narrow(1, kw + kh * z.hd, z.hd).narrow(0, 0, keys));
            const auto f = prefix_attention(f32(a2a_col(qkv, bi, a2a_q_col(hl, z), z)), kf, vf, 0, d->scale, i == 0);
            head(outs[static_cast<size_t>(i)], bi, hl, z.hd).copy_(f.out);
            lses[static_cast<size_t>(i)][bi][hl].copy_(f.lse);
          }
      }
      // The correction: lse = log Σ exp(lse_i), out = Σ exp(lse_i − lse)·out_i, in fp32.
      auto total = at::logsumexp(at::stack(lses), 0);
      lse.copy_(total);
      auto acc = at::zeros({z.n, z.b, z.ah, z.hd}, q.options().dtype(at::kFloat));
      for (int64_t i = 0; i < R; ++i) {
        auto scale = (lses[static_cast<size_t>(i)] - total).exp_().permute({2, 0, 1}).unsqueeze(3);
        acc.add_(outs[static_cast<size_t>(i)].to(at::kFloat).view({z.n, z.b, z.ah, z.hd}) * scale);
      }
      o_a2a.view({z.n, z.b, z.ah, z.hd}).copy_(acc);
      output_a2a_back(out, o_a2a, q, fkv, z, d->scale);
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
    const Shape z(q, *d, d->cp_a2a);
    const int64_t R = z.cp / z.grp, C = z.n / 2, kw = z.gh * z.hd;
    // attn.core.cp_a2a_dout
    auto dout = at::zeros({z.n, z.b, z.ah * z.hd}, q.options());
    fill_dout(dout, g, z);
    // attn.core.cp_kv_dkv_buffers: two double buffers, each a K/V block and a dK/dV block.
    at::Tensor ring[2] = {at::zeros({2, z.n, z.b, 2 * kw}, k.options()), at::zeros({2, z.n, z.b, 2 * kw}, k.options())};
    // attn.core.cp_a2a_dqkv
    auto dqkv = at::zeros({z.n, z.b, (z.ah + 2 * z.gh) * z.hd}, q.options());
    at::Tensor fq, fkv, qkv;
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      fq = sequence_q(q, z);
      fkv = sequence_kv(k, v, z);
      qkv = at::empty({z.n, z.b, (z.ah + 2 * z.gh) * z.hd}, q.options());  // TE keeps it saved
      fill_a2a(qkv, fq, fkv, z);
    }
    fill_ring_block(ring[0][0], qkv, fkv, 0, z);
    for (int64_t i = 0; i < R; ++i) {
      auto& buf = ring[i % 2];
      if (i + 1 < R) fill_ring_block(ring[(i + 1) % 2][0], qkv, fkv, i + 1, z);
      // attn.core.cp_step_grads: this step's dq and dK/dV.
      auto dq = at::empty({z.n, z.b, z.ah * z.hd}, q.options());
      auto dkv = at::zeros({z.n, z.b, 2 * kw}, k.options());
      {
        ScopedAllocClass ws(AllocClass::kWorkspace);
        const auto blk = buf[0];
        const int64_t keys = i == 0 ? z.n : C;
        for (int64_t bi = 0; bi < z.b; ++bi)
          for (int64_t kh = 0; kh < z.gh; ++kh) {
            const auto kf = f32(blk.select(1, bi).narrow(1, kh * z.hd, z.hd).narrow(0, 0, keys));
            const auto vf = f32(blk.select(1, bi).narrow(1, kw + kh * z.hd, z.hd).narrow(0, 0, keys));
            auto dk = at::zeros_like(kf), dv = at::zeros_like(vf);
            for (int64_t hl = kh * z.rep; hl < (kh + 1) * z.rep; ++hl) {
              const auto bw = prefix_attention_backward(f32(a2a_col(qkv, bi, a2a_q_col(hl, z), z)), kf, vf,
                                                        group_output(o, bi, hl, z), lse[bi][hl],
                                                        f32(head(dout, bi, hl, z.hd)), 0, d->scale, i == 0);
              head(dq, bi, hl, z.hd).copy_(bw.dq);
              dk.add_(bw.dk);
              dv.add_(bw.dv);
            }
            dkv.select(1, bi).narrow(1, kh * z.hd, z.hd).narrow(0, 0, keys).copy_(dk);
            dkv.select(1, bi).narrow(1, kw + kh * z.hd, z.hd).narrow(0, 0, keys).copy_(dv);
          }
      }
      dqkv.narrow(2, 0, z.ah * z.hd).add_(dq);
      if (i == 0) {
        dqkv.narrow(2, a2a_k_col(0, z), kw).add_(dkv.narrow(2, 0, kw));
        dqkv.narrow(2, a2a_v_col(0, z), kw).add_(dkv.narrow(2, kw, kw));
      } else {
        buf[1].add_(dkv);  // onto the dK/dV that came with the block, to be sent on
      }
    }
    {
      ScopedAllocClass ws(AllocClass::kWorkspace);
      grads_a2a_back(gq, gk, gv, dqkv, q, o, g, fkv, z, d->scale);
    }
    return fb->grads();
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
    auto fb = flash_backward(ctx, grads);
    if (!fb) return none_of_them();
    const auto* d = fb->d;
    const auto &q = fb->q, &k = fb->k, &v = fb->v, &o = fb->o, &lse = fb->lse, &g = fb->g;
    auto &gq = fb->gq, &gk = fb->gk, &gv = fb->gv;
    const Shape z(q, *d);
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
    return fb->grads();
  }
};

}  // namespace

at::Tensor a2a_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op) {
  return A2aFlashFn::apply(q, k, v, &d, static_cast<int64_t>(op));
}

at::Tensor allgather_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op) {
  return AllGatherFlashFn::apply(q, k, v, &d, static_cast<int64_t>(op));
}

at::Tensor a2a_p2p_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op) {
  return A2aP2pFlashFn::apply(q, k, v, &d, static_cast<int64_t>(op));
}

}  // namespace mist::executor::ops
