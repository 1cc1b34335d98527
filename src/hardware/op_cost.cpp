#include "hardware/op_cost.hpp"

#include <algorithm>
#include <cmath>

namespace mist::hardware {

namespace {

bool zero(const sym::Expr& e) { return e.is_constant() && e.constant_value() == 0; }

bool multiple(double x, int of) { return std::fmod(x, of) == 0; }

// forward_torch_softmax with layer scaling on (Megatron-DeepSpeed's default, and Megatron-LM's
// before Megatron-Core; it forces softmax_in_fp32): input.float(), input * scale, masked_fill_,
// torch.nn.Softmax, .half()/.bfloat16(), each a kernel, and autograd's five backward kernels.
// Bytes per element of the scores (w the activation bytes, the middle steps fp32; masked_fill
// reads the bool mask), the softmax's own math on its kernel.
void eager_softmax(std::vector<Kernel>& out, double elements, double w, double flops, bool bwd) {
  const double fwd_bytes[] = {w + 4, 8, 9, 8, 4 + w};
  // The cast's gradient, softmax backward (gradient, saved output, result), masked_fill's (the mask
  // again), the scale's, the cast back.
  const double bwd_bytes[] = {w + 4, 12, 9, 8, 4 + w};
  for (int i = 0; i < 5; ++i)
    out.push_back(StreamKernel{elements * (bwd ? bwd_bytes[i] : fwd_bytes[i]), i == (bwd ? 1 : 3) ? flops : 0});
}

}  // namespace

bool megatron_softmax_fused(double batches, double sq, double sk) {
  if (!(sk > 16 && sk <= 4096) || !multiple(sq, 4) || !multiple(sk, 4)) return false;
  return multiple(batches, 4) && multiple(batches, sk <= 128 ? 8 : 4);
}

double GemmKernel::bytes() const { return batch * (m * k + k * n + m * n) * spec::dtype_bytes(dtype); }

bool has_backward(const graph::Op& op) { return op.kind != graph::OpKind::kView && !zero(op.bwd_flops); }

std::vector<Kernel> op_kernels(const graph::Op& op, const sym::Bindings& at, spec::Dtype d, Pass pass) {
  const bool bwd = pass == Pass::kBackward;
  std::vector<Kernel> out;
  if (op.kind == graph::OpKind::kView || (bwd && !has_backward(op))) return out;
  auto value = [&](const sym::Expr& e) { return sym::evaluate_or_zero(e, at); };
  if (op.is_gemm) {
    // FP8 training: the operands' casts first (memory-bound), then the GEMMs on FP8 operands.
    if (op.fp8)
      if (const double cast = value(bwd ? op.fp8_cast_bwd : op.fp8_cast_fwd); cast > 0) out.push_back(StreamKernel{cast, 0});
    const spec::Dtype gd = op.fp8 ? spec::Dtype::kFp8 : d;
    const bool blocks = op.fp8 && op.fp8_block_scaled;
    const double B = value(op.gemm.batch), m = value(op.gemm.m), n = value(op.gemm.n), k = value(op.gemm.k);
    const int streams = op.gemm.streams;
    auto gemm = [&](double gm, double gn, double gk) {
      if (streams <= 0 || B <= streams) {
        if (const GemmKernel mm{B, gm, gn, gk, gd, blocks}; !mm.empty()) out.push_back(mm);
        return;
      }
      // Rounds of `streams` GEMMs running at once (the last may hold fewer).
      for (double left = B; left > 0; left -= streams)
        if (const GemmKernel mm{std::min<double>(left, streams), gm, gn, gk, gd, blocks}; !mm.empty()) out.push_back(mm);
    };
    if (!bwd) {
      gemm(m, n, k);
    } else {
      gemm(m, k, n);  // input gradient dA = dC·Bᵀ: m×k, inner n
      gemm(k, n, m);  // weight gradient dB = Aᵀ·dC: k×n, inner m
    }
    return out;
  }
  const double flops = value(bwd ? op.bwd_flops : op.fwd_flops);
  if (op.kind == graph::OpKind::kFlashAttention) {
    // Under a causal mask the kernel skips the tiles above the diagonal (half the work), and with
    // a sliding window those left of the band (Op::attention_work).
    if (op.attention_work * flops > 0) out.push_back(FlashKernel{op.attention_work * flops, bwd, d, op.flash2});
    return out;
  }
  if (const double batches = value(op.softmax_batches); batches > 0) {
    const auto seq = at.find("s");  // self-attention without context parallelism: sq = sk = s
    const double sq = seq == at.end() ? 0 : seq->second;
    if (!megatron_softmax_fused(batches, sq, sq)) {
      eager_softmax(out, value(op.softmax_elements), spec::dtype_bytes(d), flops, bwd);
      return out;
    }
  }
  // Everything else is memory-bound: the forward streams what it reads and writes; the backward
  // reads the output gradient and the saved inputs and writes the input gradient, about twice,
  // except a copy's (a permutation, a gather, a layout change), which moves the gradient back the
  // way the rows came: the same bytes (Megatron's MoE permute and unpermute are each other's
  // backward, sort_chunks_by_idxs its own with the inverse order), and a cast's, which casts the
  // gradient back: the same bytes the other way.
  // An eager decomposition runs its steps as separate kernels: the traffic split among them.
  const double bytes = value(op.bytes_read) + value(op.bytes_written);
  const double bwd_scale = op.kind == graph::OpKind::kCopy || op.kind == graph::OpKind::kCast ? 1.0 : 2.0;
  const int n = std::max(1, op.stream_kernels);
  if (bytes > 0)
    for (int i = 0; i < n; ++i) out.push_back(StreamKernel{(bwd ? bwd_scale * bytes : bytes) / n, flops / n});
  return out;
}

}  // namespace mist::hardware
