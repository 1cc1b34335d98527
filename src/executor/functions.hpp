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
#include <memory>
#include <optional>
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
  int64_t cp_a2a = 1;                           // a2a+p2p: the all-to-all groups' size
};

// x [s, b, in] through p ([out, in] weight); saves x. `out_dtype`: the output's dtype when not the
// input's (the router's fp32 logits under --moe-router-dtype fp32).
at::Tensor linear(at::Tensor x, const LinearParams& p, int op, std::optional<at::ScalarType> out_dtype = {});
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
// Engine's AttnFuncWithCPAndKVP2P with graph/lower.cpp's accounting (cp_attention_core): q, k, v
// hold the rank's s/cp tokens, which for the last rank are contiguous (chunks cp−1 and cp). Saves
// what flash_attention saves. Forward: cp K/V blocks (a copy of the local k and v, then cp − 1
// received: drawn, the same in every call) and each step's output and fp32 log-sum-exp, combined
// into the output and freed. Backward: two double buffers of K/V + dK/dV (4 blocks) and, per step,
// a partial dq and dK/dV. Step 0 attends causally over the local keys, step i > 0 all local
// queries to the first half (an earlier chunk) of block i.
at::Tensor ring_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op);
// The same rank under Transformer Engine's other exchanges (cp_exchanges.cpp), computing the same
// function (its queries against chunks 0..cp−2, drawn, and causally against its own keys) with the
// buffers cp_attention_core counts for each. a2a (AttnFuncWithCPAndQKVOA2A; cp divides the heads
// and the K/V heads): q, k, v of the rank's head group over every token after an all-to-all, the
// kernel's output for them; backward their output gradient and dq, dk, dv. all_gather
// (AttnFuncWithCPAndKVAllGather): the gathered K/V and their sequence-order copy, one chunk
// kernel's output; backward the gathered K/V again, full-length dK/dV and one kernel's gradients.
at::Tensor a2a_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op);
at::Tensor allgather_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op);
// a2a+p2p (AttnFuncWithCPAndKVP2P with cp_group_a2a; d.cp_a2a = a divides cp, the heads and the
// K/V heads): the a2a's buffers over the rank's group of a ranks, and the ring's over the cp/a
// groups with the head-sharded blocks (cp/a steps).
at::Tensor a2a_p2p_flash_attention(at::Tensor q, at::Tensor k, at::Tensor v, const AttnDims& d, int op);

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
// Transformer Engine's parallel_cross_entropy (t = 1) of logits [s, b, V] in the training dtype:
// the loss of each row computed in fp32 tiles (workspace) and the gradient (softmax minus the
// one-hot target) written into the logits, which it keeps; backward scales them in place.
// Returns the per-token loss [s, b] (fp32).
at::Tensor te_cross_entropy(at::Tensor logits, const at::Tensor& labels, int op);
// torchtitan's cross_entropy_loss(logits.float()) as torch.compile runs it (t = 1): each row's
// log-sum-exp computed in fp32 tiles (workspace, as Inductor's fused kernel keeps them in
// registers) and kept with the logits; backward writes the gradient (softmax minus the one-hot
// target, scaled) as a new tensor in the logits' dtype. Returns the per-token loss [s, b] (fp32).
at::Tensor compiled_cross_entropy(at::Tensor logits, const at::Tensor& labels, int op);

// Mixture-of-experts ops (moe.cpp), as graph/lower_moe.cpp lowers Megatron-Core's MoELayer on one
// rank of its expert grid: E experts over ep ranks (E/ep local experts), each 1/etp of its width.
// Routing is balanced and fixed (token t's k experts are (t·k + j) mod E, j < k), so each expert
// gets s·b·k/E rows of every micro-batch whatever the values, as the lowering assumes. Row tensors
// are [rows, width] (probabilities [rows]), token tensors [s, b, width].
struct MoeDims {
  int64_t experts = 0, topk = 0;  // E, k
  int64_t ep = 1, etp = 1;
  double aux_loss_coeff = 1e-2;   // --moe-aux-loss-coeff
  bool allgather = false;         // Megatron's all-gather dispatcher instead of the all-to-all one
  int64_t local_experts() const { return experts / ep; }
};
// TopKRouter's top-k of the router logits [s, b, E]: the softmax of the k chosen logits in fp32,
// scattered into dense probabilities [s·b, E] (activation dtype) and a bool routing map [s·b, E].
// Saves the fp32 softmax [s·b, k] and the int64 indices [s·b, k].
std::pair<at::Tensor, at::Tensor> moe_topk(at::Tensor logits, const MoeDims& d, int op);
// The load-balancing loss (switch_load_balancing_loss_func): a softmax of all E logits in fp32,
// kept; returns `probs` itself, as MoEAuxLossAutoScaler does, whose backward adds the aux loss's
// gradient into the logits' and passes the probabilities' on.
at::Tensor moe_aux_loss(at::Tensor logits, at::Tensor probs, const MoeDims& d, int op);
// moe_utils.permute: the rows of x [s, b, h] copied once per chosen expert, expert-major
// (index_select), and their probabilities. Returns {rows [R, h], probs [R], indices} for the
// R = s·b·k routed rows; indices, kept by this op and by moe_unpermute, holds two int64 vectors:
// each row's index into probsᵀ [E, s·b] and its token (2·R entries, as graph/lower_moe.cpp counts
// them), or with `full_argsort` the whole argsort of the routing map's s·b·E entries before the
// tokens, as Megatron-Core d98e8a64 keeps it (docs/validation.md).
std::vector<at::Tensor> moe_permute(at::Tensor x, at::Tensor probs, at::Tensor routing_map, bool full_argsort,
                                    int op);
// moe_utils.unpermute: each token's k rows added back into one (scatter_add) -> [s, b, h].
at::Tensor moe_unpermute(at::Tensor rows, at::Tensor indices, int64_t s, int64_t b, int op);
// The dispatcher's row movements on one rank, each into a new buffer of the lowering's size (rows
// another rank would send are this rank's own, so the block stays a function of its inputs):
// all-to-all over ep (a copy; backward the reverse), all-gather over etp (etp copies; backward the
// reduce-scatter, their sum), reduce-scatter over etp (the sum of the etp row blocks; backward the
// all-gather), and sort_chunks_by_idxs from [etp·ep sources][E/ep local experts] chunks to
// expert-major and back (a copy; backward the inverse permutation).
// The all-gather dispatcher's gather over the tp_ep group (etp·ep copies; backward their sum) and
// its reduce-scatter (the sum of the etp·ep row blocks; backward the gather).
enum class RowMove : int64_t {
  kAllToAll, kGather, kReduceScatter, kSortChunks, kUnsortChunks, kGatherTpEp, kReduceScatterTpEp
};
at::Tensor moe_rows(at::Tensor x, RowMove move, const MoeDims& d, int op);

// The all-gather dispatcher (graph/lower_moe.cpp allgather_experts). Its tokens gathered over the
// tp_ep group into `buffer` (Megatron's global memory buffer: made on first use, [G, h] for G =
// etp·ep·s·b gathered tokens, outside the activations) -> a view of it; backward the reduce-scatter.
at::Tensor moe_gather_tokens(at::Tensor x, at::Tensor& buffer, const MoeDims& d, int op);
// The local experts' columns (the first E/ep) of a gathered [G, E] map or probabilities, contiguous.
at::Tensor moe_local_columns(at::Tensor x, const MoeDims& d, int op);
// moe_utils.permute without probabilities on the gathered tokens [G, h] and the local map [G, E/ep]:
// {rows [R, h], each row's token [R] int64 (kept)}; the transposed map and its int64 argsort are
// activations while it runs.
std::vector<at::Tensor> moe_permute_gathered(at::Tensor tokens, at::Tensor local_map, int op);
// The rows' probabilities: local_probsᵀ made contiguous, masked_select by the transposed local map
// (both kept, as autograd keeps masked_select's input and mask) -> [R].
at::Tensor moe_probs_select(at::Tensor local_probs, at::Tensor local_map, int op);
// Zeros [G, h], each row added at its token (scatter_add); keeps the tokens.
at::Tensor moe_unpermute_gathered(at::Tensor rows, at::Tensor tokens, int64_t gathered, int op);
// TEGroupedLinear: rows [n, in] in E/ep equal chunks, expert-major, each through its expert's
// weight (p.w [E/ep, out, in]): saves its input; weight gradients go into p.main_w.
at::Tensor grouped_linear(at::Tensor x, const LinearParams& p, int op);
// WeightedSwiGLUFunction: silu(gate)·up·p for gate_up [n, 2f] and probs [n]; saves both inputs.
at::Tensor weighted_swiglu(at::Tensor gate_up, at::Tensor probs, int op);
// GELU experts' activation x [n, f] times each row's probability probs [n] (TEGroupedMLP's
// `intermediate_parallel * permuted_probs`); saves both.
at::Tensor weight_rows(at::Tensor x, at::Tensor probs, int op);
// x cast to `to`; the backward casts the gradient back.
at::Tensor cast(at::Tensor x, at::ScalarType to, int op);
// The shared expert's gate (Qwen2-MoE): y·sigmoid(logit) for logit [s, b, 1], y [s, b, h]; saves
// the score sigmoid(logit) and y.
at::Tensor sigmoid_gate(at::Tensor logit, at::Tensor y, int op);

// Activation checkpointing as Megatron's CheckpointFunction: runs `region` without keeping its
// intermediates, saves only `inputs`, and in backward re-runs it with grad and back-propagates
// through the recomputed graph.
using Region = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
std::vector<at::Tensor> checkpoint(const Region& region, std::vector<at::Tensor> inputs);

// Megatron's CheckpointWithoutOutput (tensor_parallel/random.py; --recompute-modules layernorm,
// moe_act): run() executes `region` without keeping its intermediates and saves `inputs`;
// discard_output_and_restore_at(hook) empties the outputs' storages (the ops after the region
// saved them) and, when the gradient reaches `hook`, replays the region with grad and copies its
// outputs back into those storages. The replay's own outputs stay referenced until the backward
// goes through them. Whoever runs it keeps `state()` alive until that backward (done() says so).
class CheckpointWithoutOutput {
 public:
  struct State;
  CheckpointWithoutOutput();
  std::vector<at::Tensor> run(Region region, std::vector<at::Tensor> inputs);
  void discard_output_and_restore_at(const at::Tensor& hook);
  const std::shared_ptr<State>& state() const { return state_; }
  static bool done(const State& s);

 private:
  std::shared_ptr<State> state_;
};

}  // namespace mist::executor::ops
