// Context-parallel flash attention in the executor: one rank (the last) of Transformer Engine's
// p2p K/V ring, its memory as graph/lower.cpp's cp_attention_core counts it.
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>

#include "executor/attention_internal.hpp"
#include "executor/functions.hpp"
#include "executor/functions_internal.hpp"
#include "executor/kernels.hpp"
#include "executor/tracking_allocator.hpp"

namespace mist::executor::ops {

namespace {

using namespace detail;

// Context-parallel flash attention, the last rank of the ring (functions.hpp). Memory follows
// graph/lower.cpp's cp_attention_core byte for byte: every tensor the ring holds is an
// activation of exactly the lowering's size; all fp32 copies and tiles are workspace.

// K/V block i of the ring [s, b, 2·g·d] (k then v per token): block 0 is the local k and v; block
// i > 0 is rank cp−1−i's, chunks cp−1−i and cp+i, drawn (remote_kv) as every exchange draws them.
void fill_block(at::Tensor& blk, const at::Tensor& k, const at::Tensor& v, int64_t step, int64_t cp) {
  const int64_t kvw = k.size(2);
  if (step == 0) {
    blk.narrow(2, 0, kvw).copy_(k);
    blk.narrow(2, kvw, kvw).copy_(v);
    return;
  }
  ScopedAllocClass ws(AllocClass::kWorkspace);
  const int64_t c = blk.size(0) / 2, b = blk.size(1), width = blk.size(2);
  blk.narrow(0, 0, c).copy_(remote_kv(cp - 1 - step, c, b, width, blk.options()));
  blk.narrow(0, c, c).copy_(remote_kv(cp + step, c, b, width, blk.options()));
}

// The k and v heads of kv head `gh` of sequence `bi` in a block, [s, d] views.
at::Tensor block_k(const at::Tensor& blk, int64_t bi, int64_t gh, int64_t d) { return blk.select(1, bi).narrow(1, gh * d, d); }
at::Tensor block_v(const at::Tensor& blk, int64_t bi, int64_t gh, int64_t d, int64_t kvw) {
  return blk.select(1, bi).narrow(1, kvw + gh * d, d);
}

// Keys a step attends to: step 0 all local keys (causal), later steps the first half of the block
// (the sender's earlier chunk, before every local query: no mask).
int64_t step_keys(int64_t step, int64_t s) { return step == 0 ? s : s / 2; }

// Scores of query rows [r0, r0 + n) of a step, scaled (and causally masked at step 0).
at::Tensor step_scores(const at::Tensor& qf, const at::Tensor& kf, int64_t step, int64_t r0, int64_t n, double scale) {
  if (step == 0) return tile_scores(qf, kf, r0, n, scale);
  return at::mm(qf.narrow(0, r0, n), kf.t()).mul_(scale);
}
int64_t step_cols(int64_t step, int64_t r0, int64_t n, int64_t keys) { return step == 0 ? r0 + n : keys; }

struct RingFlashFn : torch::autograd::Function<RingFlashFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const AttnDims* d, int64_t op) {
    Timed t(static_cast<int>(op), forward_phase());
    keep(ctx, d, op);
    const int64_t s = q.size(0), b = q.size(1), hd = d->head_dim, rep = d->heads / d->groups, cp = d->cp;
    const int64_t kvw = d->groups * hd, w = d->heads * hd;
    auto out = at::empty({s, b, w}, q.options());
    auto lse = at::empty({b, d->heads, s}, q.options().dtype(at::kFloat));
    // attn.core.cp_kv_blocks: cp blocks of bytes(k) + bytes(v).
    std::vector<at::Tensor> blocks;
    for (int64_t i = 0; i < cp; ++i) {
      blocks.push_back(at::empty({s, b, 2 * kvw}, k.options()));
      fill_block(blocks.back(), k, v, i, cp);
    }
    // attn.core.cp_step_outputs: each step's output and fp32 log-sum-exp, kept to the correction.
    std::vector<at::Tensor> outs, lses;
    for (int64_t i = 0; i < cp; ++i) {
      outs.push_back(at::empty({s, b, w}, q.options()));
      lses.push_back(at::empty({b, d->heads, s}, q.options().dtype(at::kFloat)));
      const int64_t keys = step_keys(i, s);
      ScopedAllocClass ws(AllocClass::kWorkspace);
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t h = 0; h < d->heads; ++h) {
          auto qf = head(q, bi, h, hd).to(at::kFloat).contiguous();
          auto kf = block_k(blocks[i], bi, h / rep, hd).narrow(0, 0, keys).to(at::kFloat).contiguous();
          auto vf = block_v(blocks[i], bi, h / rep, hd, kvw).narrow(0, 0, keys).to(at::kFloat).contiguous();
          for (int64_t r0 = 0; r0 < s; r0 += kTile) {
            const int64_t n = std::min(kTile, s - r0), m = step_cols(i, r0, n, keys);
            auto sc = step_scores(qf, kf, i, r0, n, d->scale);
            auto mx = std::get<0>(sc.max(1, true));
            auto e = (sc - mx).exp_();
            auto l = e.sum(1, true);
            lses[i][bi][h].narrow(0, r0, n).copy_((mx + l.log()).squeeze(1));
            head(outs[i], bi, h, hd).narrow(0, r0, n).copy_(at::mm(e.div_(l), vf.narrow(0, 0, m)));
          }
        }
    }
    {
      // The correction: lse = log Σ exp(lse_i), out = Σ exp(lse_i − lse)·out_i (TE's
      // flash_attn_fwd_out_correction), in fp32.
      ScopedAllocClass ws(AllocClass::kWorkspace);
      auto total = at::logsumexp(at::stack(lses), 0);
      lse.copy_(total);
      auto acc = at::zeros({s, b, d->heads, hd}, q.options().dtype(at::kFloat));
      for (int64_t i = 0; i < cp; ++i) {
        auto scale = (lses[i] - total).exp_().permute({2, 0, 1}).unsqueeze(3);  // [s, b, a, 1]
        acc.add_(outs[i].to(at::kFloat).view({s, b, d->heads, hd}) * scale);
      }
      out.view({s, b, d->heads, hd}).copy_(acc);
    }
    outs.clear();
    lses.clear();
    blocks.clear();
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
    const int64_t s = q.size(0), b = q.size(1), hd = d->head_dim, rep = d->heads / d->groups, cp = d->cp;
    const int64_t kvw = d->groups * hd, w = d->heads * hd;
    // attn.core.cp_kv_dkv_buffers: two double buffers, each a K/V block and a dK/dV block (the
    // dK/dV of the blocks of other ranks travels with them and goes back to its owner).
    at::Tensor ring[2] = {at::zeros({2, s, b, 2 * kvw}, k.options()), at::zeros({2, s, b, 2 * kvw}, k.options())};
    {
      auto kv0 = ring[0][0];
      fill_block(kv0, k, v, 0, cp);
    }
    for (int64_t i = 0; i < cp; ++i) {
      auto& buf = ring[i % 2];
      if (i + 1 < cp) {  // the next step's K/V arrives in the other buffer
        auto next = ring[(i + 1) % 2][0];
        fill_block(next, k, v, i + 1, cp);
      }
      // attn.core.cp_step_grads: this step's dq and dK/dV.
      auto dq = at::empty({s, b, w}, q.options());
      auto dkv = at::zeros({s, b, 2 * kvw}, k.options());
      const int64_t keys = step_keys(i, s);
      const auto blk = buf[0];
      {
        ScopedAllocClass ws(AllocClass::kWorkspace);
        for (int64_t bi = 0; bi < b; ++bi)
          for (int64_t gh = 0; gh < d->groups; ++gh) {
            auto kf = block_k(blk, bi, gh, hd).narrow(0, 0, keys).to(at::kFloat).contiguous();
            auto vf = block_v(blk, bi, gh, hd, kvw).narrow(0, 0, keys).to(at::kFloat).contiguous();
            auto gkf = at::zeros({keys, hd}, kf.options()), gvf = at::zeros({keys, hd}, kf.options());
            for (int64_t h = gh * rep; h < (gh + 1) * rep; ++h) {
              auto qf = head(q, bi, h, hd).to(at::kFloat).contiguous();
              auto gof = head(g, bi, h, hd).to(at::kFloat).contiguous();
              auto delta = (gof * head(o, bi, h, hd).to(at::kFloat)).sum(1, true);  // rowsum(dO∘O)
              for (int64_t r0 = 0; r0 < s; r0 += kTile) {
                const int64_t n = std::min(kTile, s - r0), m = step_cols(i, r0, n, keys);
                // The final lse normalizes every step's probabilities.
                auto p = (step_scores(qf, kf, i, r0, n, d->scale) - lse[bi][h].narrow(0, r0, n).unsqueeze(1)).exp_();
                auto go = gof.narrow(0, r0, n);
                gvf.narrow(0, 0, m).add_(at::mm(p.t(), go));
                auto ds = p.mul_(at::mm(go, vf.narrow(0, 0, m).t()).sub_(delta.narrow(0, r0, n)));
                head(dq, bi, h, hd).narrow(0, r0, n).copy_(at::mm(ds, kf.narrow(0, 0, m)).mul_(d->scale));
                gkf.narrow(0, 0, m).add_(at::mm(ds.t(), qf.narrow(0, r0, n)).mul_(d->scale));
              }
            }
            block_k(dkv, bi, gh, hd).narrow(0, 0, keys).copy_(gkf);
            block_v(dkv, bi, gh, hd, kvw).narrow(0, 0, keys).copy_(gvf);
          }
      }
      if (i == 0) {
        gq.copy_(dq);
        gk.add_(dkv.narrow(2, 0, kvw));
        gv.add_(dkv.narrow(2, kvw, kvw));
      } else {
        gq.add_(dq);
        buf[1].add_(dkv);  // onto the dK/dV that came with the block, to be sent on
      }
    }
    return fb->grads();
  }
};

}  // namespace

at::Tensor ring_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op) {
  return RingFlashFn::apply(q, k, v, &d, static_cast<int64_t>(op));
}

}  // namespace mist::executor::ops
