// The executor's ops as LibTorch autograd Functions, one per op kind of mist's lowering
// (graph/lower.cpp), each saving for backward exactly the tensors the lowering says it saves.
// Parameters never require grad: weight gradients are added into fp32 main_grad tensors inside
// the backward, as Megatron-LM does with gradient_accumulation_fusion.
//
// Activations are taken by value: a caller that moves its last reference in lets the tensor be
// freed as soon as the op is done with it (mist's liveness frees tensors at their last use).
//
// Every call records (op id, phase, seconds) into the sink set with set_op_sink, which gives the
// per-op times and the order in which ops ran.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace mist::executor::ops {

enum class Phase { kForward, kBackward, kRecompute };
struct OpSample {
  int op;
  Phase phase;
  double seconds;
  int64_t live_after = 0;   // live activation bytes when the op returned
  int64_t peak_inside = 0;  // most live activation bytes while it ran
};
// The clock of op and pass times: wall time, or the CPU time of the calling thread, which with one
// intra-op thread is the wall time the work would take on a machine nobody else uses (the time
// the thread spends descheduled is left out).
void use_thread_cpu_clock(bool on);
double clock_seconds();
// Where op samples go (nullptr: nowhere).
void set_op_sink(std::vector<OpSample>* sink);

struct LinearParams {
  at::Tensor w, b;            // w [out, in], b [out] or undefined; training dtype
  at::Tensor main_w, main_b;  // fp32 gradient accumulators
};
struct NormParams {
  bool layernorm = true;  // false: RMSNorm (no bias)
  double eps = 1e-5;
  at::Tensor w, b, main_w, main_b;
};
struct AttnDims {
  int64_t heads = 0, groups = 0, head_dim = 0;  // a, g, h/a
  double scale = 1.0;                           // 1/sqrt(head_dim)
  int64_t cp = 1;                               // context parallelism: ring_flash_attention's steps
};

at::Tensor linear(at::Tensor x, const LinearParams& p, int op);
at::Tensor norm(at::Tensor x, const NormParams& p, int op);
at::Tensor add(at::Tensor a, at::Tensor b, int op);
at::Tensor dropout(at::Tensor x, double p, uint64_t seed, int op);
at::Tensor gelu(at::Tensor x, int op);
at::Tensor swiglu(at::Tensor gate_up, int op);
// q [s, b, a·d] and k [s, b, g·d] (column slices of qkv) -> new contiguous rotated q and k.
std::pair<at::Tensor, at::Tensor> rotary(at::Tensor q, at::Tensor k, const at::Tensor& cos,
                                         const at::Tensor& sin, const AttnDims& d, int op);
std::pair<at::Tensor, at::Tensor> expand_kv(at::Tensor k, at::Tensor v, const AttnDims& d,
                                            int op);
// scores [b, a, s, s] = q·kᵀ per head (unscaled; the softmax applies the scale, as Megatron's fused
// scale-mask-softmax does); k has a heads here (expanded under GQA).
at::Tensor qk(at::Tensor q, at::Tensor k, const AttnDims& d, int op);
at::Tensor causal_softmax(at::Tensor scores, const AttnDims& d, int op);
// context [s, b, a·d] = p·v per head.
at::Tensor pv(at::Tensor p, at::Tensor v, const AttnDims& d, int op);
// Flash attention: saves q, k, v, the output and the fp32 log-sum-exp [b, a, s]; scores exist only
// as tiles (workspace), recomputed in backward.
at::Tensor flash_attention(at::Tensor q, at::Tensor k, at::Tensor v,
                           const AttnDims& d, int op);
// The last rank (r = cp−1) of context-parallel flash attention over d.cp > 1 ranks, as Transformer
// Engine's AttnFuncWithCPAndKVP2P with graph/lower.cpp's accounting (ring_attention_core): q, k, v
// hold the rank's s/cp tokens, which for the last rank are contiguous (chunks cp−1 and cp). Saves
// what flash_attention saves. Forward: cp K/V blocks (a copy of the local k and v, then cp − 1
// received: drawn, the same in every call) and each step's output and fp32 log-sum-exp, combined
// into the output and freed. Backward: two double buffers of K/V + dK/dV (4 blocks) and, per step,
// a partial dq and dK/dV. Step 0 attends causally over the local keys, step i > 0 all local
// queries to the first half (an earlier chunk) of block i.
at::Tensor ring_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op);

// Embedding and head ops (embedding_head.cpp).
// Vocab lookup of tokens [s, b] in table.w [V, h]: saves the token ids; the table's gradient is
// added into table.main_w. table.w must require grad (the op's only differentiable input) and
// its .grad stays empty.
at::Tensor embedding(at::Tensor tokens, const LinearParams& table, int op);
// e + positions.w[0..s) (learned positions): saves nothing; e's gradient is the output's.
at::Tensor add_positions(at::Tensor e, const LinearParams& positions, int op);
// The logits in fp32 for the loss (Megatron computes the cross entropy in fp32): saves nothing.
at::Tensor to_fp32(at::Tensor x, int op);
// Megatron's vocab-parallel cross entropy (t = 1) of fp32 logits [s, b, V] against labels [s, b]:
// exponentiates the logits in place and keeps them with the target mask (1 byte) and the
// masked target ids (8 bytes); its backward turns them into the gradient in place. Returns the
// per-token loss [s, b] (fp32).
at::Tensor cross_entropy(at::Tensor logits, const at::Tensor& labels, int op);

// Activation checkpointing as Megatron's CheckpointFunction: runs `region` without keeping its
// intermediates, saves only `inputs`, and in backward re-runs it with grad and back-propagates
// through the recomputed graph.
using Region = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
std::vector<at::Tensor> checkpoint(const Region& region, std::vector<at::Tensor> inputs);

}  // namespace mist::executor::ops
