// A model lowered into layers of ops with symbolic shapes (per GPU, per micro-batch).
//
// Symbols (docs/memory-model.md has the full legend):
//   b micro-batch size   s sequence length   h hidden size   a query heads   g key/value heads
//   f FFN hidden size    V vocabulary size   t tensor-parallel degree
//   ep expert-parallel degree   etp expert tensor-parallel degree (mixtures of experts)
//   cp context-parallel degree (present only in a lowering with context parallelism)
// Sizes are in bytes for one micro-batch on one GPU, after tensor (and sequence) parallel
// sharding. FLOPs count multiply-adds as 2.
#pragma once

#include <string>
#include <vector>

#include "graph/op_kind.hpp"
#include "symbolic/expr.hpp"

namespace mist::graph {

using sym::Expr;

// The symbols of the lowering, shared with the analysis.
struct Symbols {
  Expr b = Expr::symbol("b"), s = Expr::symbol("s"), h = Expr::symbol("h"),
       a = Expr::symbol("a"), g = Expr::symbol("g"), f = Expr::symbol("f"),
       V = Expr::symbol("V"), t = Expr::symbol("t"), ep = Expr::symbol("ep"), etp = Expr::symbol("etp"),
       cp = Expr::symbol("cp");
};
const Symbols& symbols();

// kRingExchange: context parallelism's K/V ring (cp − 1 send/recv steps; bytes: one step's block).
enum class CommKind { kNone, kAllReduce, kAllGather, kReduceScatter, kAllToAll, kRingExchange };
const char* to_string(CommKind k);

// The group a collective runs over: the tensor-parallel group, the context-parallel group, or the
// expert grid's (Megatron's parallel folding) expert tensor-parallel or expert-parallel group, or
// the two together (etp·ep consecutive ranks: Megatron's tp_ep group, the all-gather dispatcher's).
// kContextA2a and kContextRing: a2a+p2p's all-to-all groups (cp_a2a consecutive CP ranks) and the
// ring over them (cp / cp_a2a ranks, cp_a2a apart).
enum class CommGroup { kTp, kContext, kExpertTp, kExpert, kExpertTpEp, kContextA2a, kContextRing };

// A collective on an op's activation (Megatron's f/g operators; the MoE dispatcher's).
struct TpComm {
  CommKind kind = CommKind::kNone;
  Expr bytes;  // size of the full (unsharded) tensor exchanged; all-to-all: what one rank sends
  CommGroup group = CommGroup::kTp;
};

// A collective that runs under a share of its op's own kernel time (context parallelism's K/V
// exchanges): `under` 0 is fully exposed; what the collective takes beyond the share, and the
// interference while both run, is exposed (analysis/time_model.cpp).
struct HiddenComm {
  TpComm comm;
  Expr under = Expr(0.0);
};

// How the lowering's attention moves keys and values under context parallelism
// (LoweringOptions::cp_exchange; the plan's cp_comm with the engine's implementation):
//   kRing        Transformer Engine's p2p ring: cp − 1 sends of the local K/V block, each under a
//                step's kernel;
//   kGatherRing  PyTorch's ring attention (torchtitan): K/V all-gathered once under the first step's
//                kernel; backward gathers them again and passes the fp32 dK/dV around the ring, the
//                last pass after the kernels;
//   kAllGather   Transformer Engine's all-gather (Megatron's all_gather): K/V gathered before the
//                kernels, again in backward, dK/dV reduce-scattered after, all exposed;
//   kAllToAll    Transformer Engine's a2a (Ulysses): q, k, v to head-sharded before the kernel, the
//                output back after it (backward: the output gradient, then dq, dk, dv), all exposed;
//   kA2aP2p      Transformer Engine's hierarchical a2a+p2p: the a2a over groups of
//                LoweringOptions::cp_a2a ranks, then the p2p ring over the cp/cp_a2a groups.
enum class CpExchange { kRing, kGatherRing, kAllGather, kAllToAll, kA2aP2p };

struct Tensor {
  std::string name;
  Expr bytes;                 // a view carries its own size (its gradient has it); storage is the base's
  bool requires_grad = true;  // false for token ids, masks and statistics
  int view_of = -1;           // a view (q, k, v split from qkv) keeps its base storage alive
  // Its storage is a buffer outside the layer (Megatron's global memory buffer, which the
  // all-gather dispatcher gathers the tokens into): the layer never allocates it; its gradient is
  // the layer's. Layer::external_bytes sizes the buffer.
  bool external = false;
  // A local variable of the module's Python forward keeps it referenced after its last reader: its
  // storage is freed no earlier than after op `held_until` (MoELayer.forward's custom_forward keeps
  // the permuted tokens and the all-to-all's output until it returns). -1: freed after its last
  // reader.
  int held_until = -1;
};

// Shape of a (batched) matrix multiply C[m×n] = A[m×k]·B[k×n], for GEMM efficiency models.
// `streams` > 0: the batch runs as separate GEMMs, `streams` of them at a time (Transformer
// Engine's grouped GEMM: one cuBLAS GEMM per expert over its 4 compute streams); 0: one batched
// kernel.
struct GemmShape {
  Expr batch = Expr(1.0), m, n, k;
  int streams = 0;
};

struct Op {
  std::string name;  // "attn.qkv"
  OpKind kind = OpKind::kView;  // set by the lowering (lower.cpp); to_string gives the stored name
  std::vector<int> inputs, outputs, saved;  // tensor ids in Layer::tensors
  std::vector<int> temporaries;             // allocated and freed inside the op (forward and backward)
  std::vector<int> bwd_temporaries;         // allocated and freed inside the op's backward only
  std::vector<int> fwd_temporaries;         // allocated and freed inside the op's forward only
  Expr params;                              // parameters this op holds on one GPU
  bool expert = false;                      // params are expert weights (sharded and reduced over the expert grid)
  Expr fwd_flops, bwd_flops;                // backward = input grads + weight grads
  Expr bytes_read, bytes_written;           // forward memory traffic
  int stream_kernels = 1;                   // kernels a memory-bound op runs per pass (eager: one per step)
  bool attention_core = false;              // Megatron's attention core (scores, softmax, dropout)
  bool selective_recompute = false;         // recomputed in backward under the plan's selective recompute
  // Megatron's recompute modules (spec::RecomputeModule bits) the op belongs to; the attention
  // core's is attention_core.
  uint32_t modules = 0;
  // Recomputed as Megatron's CheckpointWithoutOutput (LoweringOptions::recompute_modules: layernorm,
  // moe_act, mla_up_proj): after the forward the op's outputs are freed although later ops saved
  // them; when the backward reaches op `restore_at` (the module whose output carries the hook) the
  // op's forward replays and its outputs are copied back into their storages.
  bool recompute_without_output = false;
  int restore_at = -1;
  bool backward_in_place = false;           // input grad overwrites the saved tensor (Megatron's CE)
  TpComm fwd_comm, bwd_comm;                // collective after the op (fwd) / before its grad (bwd)
  TpComm bwd_regather;                      // a saved input shard gathered again for the weight gradient
  bool exposed_comm = false;                // a collective alone (the MoE dispatcher's), overlapped with nothing
  // Context parallelism's K/V exchanges in forward and backward, each under its share of the op's
  // kernel (Transformer Engine's ring sends the next step's block while it computes the current one).
  std::vector<HiddenComm> fwd_cp, bwd_cp;
  bool is_gemm = false;                     // linear or bmm: `gemm` holds its forward shape
  GemmShape gemm;
  // Flash attention: the share of the full s×s score product its kernel computes (0.5 under a
  // causal mask: it skips the tiles above the diagonal; less with a sliding window, averaged over
  // the model's blocks: lower.cpp attention_work). fwd_flops and bwd_flops count the full product.
  double attention_work = 1.0;
  // The fused attention kernel is PyTorch SDPA's FlashAttention-2 (torchtitan), not cuDNN's
  // (Transformer Engine): its own rates on Hopper (hardware/perf_model.hpp).
  bool flash2 = false;
  // FP8 training: the op's GEMMs run on FP8 operands; the casts that quantize them move
  // fp8_cast_fwd bytes in forward and fp8_cast_bwd in backward (memory-bound kernels of their own).
  // fp8_block_scaled: the FP8 GEMMs carry block scales (the blockwise recipe), applied in the main
  // loop: their own rate on Hopper (hardware::PerfConstants::fp8_block_scaled_rate_sm90).
  bool fp8 = false;
  bool fp8_block_scaled = false;
  Expr fp8_cast_fwd, fp8_cast_bwd;
  // Megatron's FusedScaleMaskSoftmax (the attention's softmax without flash attention): its fused
  // kernel runs for some shapes only and the others fall back to eager PyTorch
  // (hardware/op_cost.hpp: megatron_softmax_fused). softmax_batches is b·np, the batches that
  // kernel would take (the constant 0: no such rule); softmax_elements the elements of the scores.
  Expr softmax_batches, softmax_elements;
};

enum class LayerKind { kEmbedding, kBlock, kHead };

// What a plan's "selective" recompute keeps for backward, as the engine defines it; the lowering
// marks the ops it recomputes (Op::selective_recompute).
enum class SelectivePolicy {
  // Megatron-LM (--recompute-granularity selective): the attention core is recomputed, inside a
  // checkpoint that keeps its inputs; every other op keeps what it saves. With --recompute-modules
  // the modules listed instead (LoweringOptions::recompute_modules).
  kAttentionCore,
  // torchtitan's op-level policy (selective_ac_option = "op", parallelize_llama.py _save_list): the
  // whole block is a checkpoint that keeps the outputs of the attention kernel and of every other
  // matmul (the 1st, 3rd, ... in forward order) and recomputes all other ops in backward.
  kSaveOddMatmuls,
};

struct Layer {
  std::string name;
  LayerKind kind = LayerKind::kBlock;
  std::vector<Tensor> tensors;
  std::vector<Op> ops;
  SelectivePolicy selective = SelectivePolicy::kAttentionCore;
  // Compiled by torch.compile (LoweringOptions::compiled_blocks): AOTAutograd's partitioner keeps,
  // of the outputs a selective policy marks to save, only those its backward reads.
  bool compiled = false;
  int input = -1;   // tensor id of the layer input (produced upstream)
  int output = -1;  // tensor id passed downstream

  Expr params() const;         // Σ op params (per GPU)
  Expr expert_params() const;  // the expert weights among them (Op::expert)
  Expr fp8_params() const;     // the weights of its FP8 linears (Op::fp8)
  Expr fp8_expert_params() const;  // the expert weights among them
  Expr fwd_flops() const;
  Expr bwd_flops() const;
  // The largest tensor in a buffer outside the layer (Tensor::external; 0: none): the buffer the
  // engine keeps for it, reused by every layer.
  Expr external_bytes() const;
};

// Options that change which ops exist, not their sizes.
struct LoweringOptions {
  bool sequence_parallel = false;
  bool flash_attention = true;
  bool dropout = false;
  int act_bytes = 2;   // bytes per activation element (training precision)
  // Megatron's fused projections: one QKV linear and one gate+up linear. false: torchtitan's Llama
  // (wq, wk, wv; w1 and w3), one matmul each, which its selective policy counts.
  bool fused_projections = true;
  // Megatron's vocab-parallel cross entropy works in place on the fp32 logits; false: PyTorch's
  // F.cross_entropy (log-softmax then NLL), which keeps the log-softmax for backward.
  bool fused_cross_entropy = true;
  // With it, Transformer Engine's parallel_cross_entropy (training cross_entropy_fusion "te"): no fp32
  // copy; the bf16 logits are kept, the gradient written into them in forward.
  bool te_cross_entropy = false;
  // torch.compile of the loss (training compiled_loss(); torchtitan's compile.components "loss"):
  // F.cross_entropy(logits.float()) fused by Inductor, no fp32 copy and no log-softmax kept. Wins
  // over the two above.
  bool compiled_loss = false;
  // torchtitan's sequence parallelism (DTensor's): a column-parallel linear's all-gathered input
  // is what its matmul keeps for backward (and the linears sharing that input keep it too), with
  // no re-gather in backward; false: Megatron's, which keeps the local shard and gathers it again.
  // sp_gathers_fp8: torchao's float8 tensor parallelism (Float8ColwiseParallel and
  // PrepareFloat8ModuleInput, torchtitan's tensorwise float8) casts the input shard to FP8 before
  // the all-gather, so the gathered and kept copy is one byte an element.
  // Not under torchtitan's op-level selective checkpointing, whose save list holds no all-gather:
  // there the gathered input is gathered again in backward, as Megatron's (recomputes_selectively:
  // the plan recomputes selectively, set where the lowering is built for a plan).
  bool sp_keeps_gathered = false;
  bool sp_gathers_fp8 = false;
  bool recomputes_selectively = false;
  // Eager PyTorch without torch.compile (torchtitan's default): RMSNorm, rotary embedding and SwiGLU
  // run as one kernel per elementwise step, RMSNorm and rotary in fp32, and autograd keeps the
  // steps' inputs.
  bool eager_elementwise = false;
  // torchtitan's Attention: GQA's k and v repeated to every head before SDPA (repeat_kv) and the
  // attention output made contiguous, each a copy, compiled or not.
  bool copies_around_attention = false;
  // torchtitan's F.scaled_dot_product_attention runs PyTorch's FlashAttention-2 kernel (Op::flash2).
  bool sdpa_flash2 = false;
  // torch.compile of every block (torchtitan's compile.enable: apply_compile wraps each
  // TransformerBlock): inside the blocks each elementwise chain is one generated kernel that keeps
  // what a fused kernel keeps (eager_elementwise off); the embedding and the head stay eager.
  bool compiled_blocks = false;
  SelectivePolicy selective = SelectivePolicy::kAttentionCore;  // the blocks' policy
  // Under kAttentionCore: the modules Megatron's selective recompute runs again
  // (spec::RecomputeModule bits, TrainingSpec::recompute_modules; the default: the attention core).
  uint32_t recompute_modules = 1;
  // Without flash attention the softmax is Megatron's FusedScaleMaskSoftmax (Megatron-LM and
  // Megatron-DeepSpeed), with its rule for when the fused kernel runs (Op::softmax_batches).
  bool megatron_softmax = true;
  // Mixtures of experts: the dispatcher's all-to-alls over the expert-parallel group exist (ep > 1),
  // and its all-gather / reduce-scatter over the expert tensor-parallel group (etp > 1). Their
  // sizes follow the symbols ep and etp.
  // one_local_expert: each rank holds a single expert (ep = E), so the dispatcher has no rows to
  // regroup expert-major (sort_chunks_by_idxs runs only with more than one local expert).
  bool expert_parallel = false;
  bool expert_tensor_parallel = false;
  bool one_local_expert = false;
  // The routed rows of the busiest expert rank over the balanced share (TrainingSpec::moe_load_factor):
  // its expert GEMMs, activations and all-to-all shares grow by it, and the step waits for that
  // rank. An imbalance is at most ep (a rank receives at most every token's copies); a padded
  // capacity (moe_load_padded) is what every expert computes, whatever ep.
  double moe_load = 1.0;
  bool moe_load_padded = false;
  // Megatron's all-gather token dispatcher (--moe-token-dispatcher-type allgather, its default)
  // instead of the all-to-all one: every rank of the etp·ep group gathers the group's tokens (into
  // the global memory buffer), its routing map and probabilities, permutes those routed to its
  // local experts, and reduce-scatters the experts' output back (expert_parallel or
  // expert_tensor_parallel: the collectives exist).
  bool moe_allgather = false;
  // Megatron's --moe-router-dtype fp32: the router's logits, the routing probabilities and every
  // copy of them the dispatcher makes are fp32 (4 bytes) instead of the activation dtype; GELU
  // experts multiply their activation by them in fp32 and cast back.
  bool moe_router_fp32 = false;
  // Context parallelism (Megatron-Core's p2p ring, torchtitan's ring attention): every token-wise op
  // sees s/cp tokens (symbol cp), the attention's local queries attend to all s keys, whose blocks
  // travel around the CP ring.
  bool context_parallel = false;
  CpExchange cp_exchange = CpExchange::kRing;
  int cp_a2a = 1;  // kA2aP2p: the all-to-all groups' size (plan.cp_a2a)
  // FP8 training: the blocks' linears run in FP8 (the router, the shared expert's gate and the LM
  // head stay bf16, as Megatron-Core and torchtitan's float8 converter leave them).
  // fp8_keeps_fp8_inputs: Transformer Engine keeps each FP8 linear's input for backward as its FP8
  // copy and caches the weights' FP8 copies over an iteration's micro-batches (Megatron passes
  // is_first_microbatch); false: torchao keeps the bf16 input and casts the weights at every use.
  // fp8_cast_bytes: bytes moved per element to quantize one operand: a read of the bf16 value and
  // the row- and column-wise FP8 copies (4), plus the separate amax pass of current scaling (6).
  // fp8_params: the FP8 linears' weights are FP8 parameters (Megatron's --fp8-param-gather): one
  // byte each, all-gathered in FP8, their row-wise copy the parameter itself.
  // fp8_block_scaled: the blockwise recipe (1×128 activation and 128×128 weight scales), whose GEMMs
  // apply the scales inside their main loop (Op::fp8_block_scaled).
  bool fp8 = false;
  bool fp8_keeps_fp8_inputs = false;
  bool fp8_params = false;
  bool fp8_block_scaled = false;
  int fp8_cast_bytes = 4;
  // Multi-token prediction (Megatron-Core's MultiTokenPredictionBlock, TrainingSpec::mtp_layers):
  // the head also runs this many MTP depths, each an embedding lookup of the tokens shifted by one
  // more, two norms, a 2h -> h projection, one block of the model's last kind, a final norm and the
  // shared LM head's loss.
  int mtp_layers = 0;
};

struct LoweredModel {
  Layer embedding;   // stage 0: token (+ position) embedding
  Layer block;       // one transformer block; every block of the model has this shape, except:
  // a mixture of experts' first dense_blocks blocks (ModelSpec::first_dense_layers), which have the
  // dense MLP (dense_block; empty when dense_blocks is 0). Plans hold them all on the first stage.
  Layer dense_block;
  long dense_blocks = 0;
  Layer head;        // last stage: final norm, LM head, loss (and the multi-token prediction depths)
  long num_blocks = 0;
  // The word embedding the last stage needs besides the first stage's: the LM head's weight when it
  // is tied to the embedding, or the table multi-token prediction looks the shifted tokens up in.
  // Held once with pp = 1, and as a second copy on the last stage with pp > 1 (Megatron keeps both
  // and all-reduces their gradients over its embedding group).
  Expr embedding_copy_params;
  LoweringOptions options;
  sym::Bindings dims;  // values of s, h, a, g, f, V for this model and sequence length
};

}  // namespace mist::graph
