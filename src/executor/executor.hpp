// The LibTorch reference executor: runs one layer of a model (a transformer block, the embedding
// or the head) on the CPU, built op for op as mist's lowering describes it (graph/lower.cpp), and
// measures what mist predicts: model states, the bytes the layer saves for backward, the peak of
// its forward and backward, and the wall time of every op. Memory is exact (a tracking allocator
// sees every byte).
//
// Tensor parallelism is 1 (no collectives on one CPU), hence no sequence parallelism either.
// Context parallelism runs one rank of the ring (BlockRun::cp): its tokens, and the K/V blocks,
// per-step outputs and ring buffers it holds, with the blocks other ranks would send drawn here
// (or the buffers of Transformer Engine's a2a, all-gather or a2a+p2p exchange: BlockRun::cp_exchange).
// A mixture of experts runs one rank of its expert grid (BlockRun::ep, etp) likewise.
// Only this header is needed to use the executor; LibTorch stays inside its .cpp files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "core/result.hpp"
#include "graph/layer.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::executor {

enum class CheckpointMode { kNone, kSelective, kFull };
const char* to_string(CheckpointMode m);

struct BlockRun {
  spec::ModelSpec model;  // one layer of it runs (num_layers is ignored)
  graph::LayerKind layer = graph::LayerKind::kBlock;  // or the embedding, or the head
  int64_t seq_length = 128;
  int64_t micro_batch = 1;
  spec::Dtype dtype = spec::Dtype::kFp32;  // fp32 or bf16 (fp16 has no CPU kernels)
  CheckpointMode checkpoint = CheckpointMode::kNone;  // blocks only
  bool flash_attention = false;
  bool dropout = false;
  // Context parallelism (blocks with flash attention; 2·cp divides seq_length): the block runs as
  // the last of cp ranks (r = cp−1, the rank mist's memory model bounds), on its seq_length/cp
  // tokens (sequence chunks r and 2·cp−1−r, with their rotary positions), its attention a ring of
  // cp steps as Transformer Engine's AttnFuncWithCPAndKVP2P: step 0 over its own K/V (causal),
  // each later step all its queries against the first half of another rank's K/V block. The
  // blocks received are drawn here (the same in every pass, no gradient flows to them); the
  // dK/dV of them that would travel back stay on this rank.
  int64_t cp = 1;
  // The K/V exchange of that rank: kRing (the above), kAllToAll (TE's a2a: cp divides the heads and
  // the K/V heads), kAllGather (TE's all_gather) or kA2aP2p (TE's a2a+p2p with all-to-all groups of
  // cp_a2a ranks: 1 < cp_a2a < cp, dividing cp, the heads and the K/V heads), each with its own
  // buffers and the same result.
  graph::CpExchange cp_exchange = graph::CpExchange::kRing;
  int64_t cp_a2a = 1;
  // Expert parallelism (mixture-of-experts blocks; graph/lower_moe.cpp): the block runs as one
  // rank of an ep × etp expert grid, with E/ep local experts of 1/etp of their width each (ep
  // divides E, etp the expert width). Routing is balanced and fixed (each expert gets s·b·k/E rows
  // of every micro-batch, so E must divide them); the all-to-all over ep and the all-gather over
  // etp bring this rank as many rows as the lowering counts, its own rows standing for the other
  // ranks' (each collective is a copy into a new buffer, its backward the adjoint).
  int64_t ep = 1, etp = 1;
  // Megatron-Core d98e8a64's unfused permutation keeps the whole int64 argsort of the routing map
  // (s·b·E entries: the probabilities' index op saves a slice view of it) besides each row's token,
  // as graph/lower_moe.cpp counts since 2026-12-03. False keeps only the s·b·k chosen entries (the
  // lowering's count before), to measure the difference.
  bool moe_full_argsort = true;
  // Megatron's all-gather token dispatcher instead of the all-to-all one (graph/lower_moe.cpp
  // allgather_experts): the tp_ep group's etp·ep copies of the rank's tokens gathered (into a buffer
  // outside the activations, as Megatron's global memory buffer), the local experts' rows permuted
  // out of them, the experts' output reduce-scattered back.
  bool moe_allgather = false;
  // Megatron's --moe-router-dtype fp32 (training.moe_router_dtype): the router's logits, the
  // probabilities and their copies in fp32 (graph/lower_moe.cpp pw).
  bool moe_router_fp32 = false;
  // Under CheckpointMode::kSelective: Megatron's --recompute-modules (spec::RecomputeModule bits;
  // the attention core by default). core_attn, mlp, moe and shared_experts run as checkpoints,
  // layernorm (an MoE block's pre-MLP norm) and moe_act as CheckpointWithoutOutput.
  uint32_t recompute_modules = spec::kRecomputeCoreAttn;
  // The head's loss kernel (training cross_entropy_fusion): kTe runs Transformer Engine's
  // parallel_cross_entropy (no fp32 copy of the logits); kNone and kNative Megatron's.
  spec::CrossEntropyFusion cross_entropy_fusion = spec::CrossEntropyFusion::kNone;
  // torchtitan's loss under torch.compile (training compile_loss): the fused cross entropy that
  // keeps the logits, not an fp32 copy (ops::compiled_cross_entropy). Wins over the above.
  bool compiled_loss = false;
  int micro_batches = 2;  // gradient accumulation before the AdamW step; the last one is measured
  int timing_reps = 0;    // timed forward+backward repetitions after the step, op by op
  // Further timed repetitions of the whole layer with no per-op timing; when > 0 the "block" times
  // come from them, so that a block's time and its ops' times are separate measurements.
  int block_timing_reps = 0;
  // Time with the calling thread's CPU time instead of the wall clock (functions.hpp): with one
  // intra-op thread, what the work takes when the machine is not shared.
  bool thread_cpu_clock = false;
  int threads = 0;        // intra-op threads (LibTorch and OpenBLAS); 0 keeps the current setting
  uint64_t seed = 0;      // weights, input and output gradient are drawn from it
};

struct OpTime {
  std::string op;     // the lowering's op name ("attn.qkv"); "block" for the whole block
  std::string phase;  // "forward", "backward" or "recompute"
  std::vector<double> seconds;  // one entry per call over the timed repetitions
};

struct BlockMeasurement {
  int64_t param_count = 0;
  int64_t weight_bytes = 0;     // parameters in the training dtype
  int64_t gradient_bytes = 0;   // fp32 main_grad accumulators
  int64_t optimizer_bytes = 0;  // AdamW: fp32 master copy (mixed precision), m and v
  int64_t input_bytes = 0, output_bytes = 0;
  // Bytes the block keeps from the end of its forward to its backward: live bytes after the
  // forward minus before, minus the output, plus the input (which the first op saves).
  int64_t saved_bytes = 0;
  // Most activation bytes live at once (the input included) during the forward and the backward;
  // the backward starts with the saved tensors and the output's gradient, the output itself
  // having been freed (it is the next block's saved input).
  int64_t forward_peak_bytes = 0;
  int64_t backward_peak_bytes = 0;
  int64_t peak_bytes() const { return std::max(forward_peak_bytes, backward_peak_bytes); }
  // Most bytes held at once in GEMM workspaces, flash-attention tiles and weight-gradient
  // temporaries, which the counts above leave out (docs/validation.md says why).
  int64_t scratch_peak_bytes = 0;
  std::vector<std::string> forward_ops;  // op names in the order the forward ran them
  // The measured micro-batch op by op (forward, then backward in the order autograd ran it):
  // live bytes when the op returned and the most while it ran, counted as the peaks above.
  struct Step {
    std::string op, phase;
    int64_t live_bytes = 0, peak_bytes = 0;
  };
  std::vector<Step> trace;
  // The measured micro-batch's allocations and frees of activations (the class the peaks count),
  // in the order LibTorch made them, over the window of the peaks: first an allocation of the
  // input (id 0, made before the window), then the forward, the free of the output when nothing
  // else holds it (output_freed), and from index recorded_backward_begin the backward, whose first
  // allocation is the output's gradient. The scalar loss, its product with the gradient source
  // and its unit gradient are left out, as the peaks leave them out. Stream 0; ids > 0 are unique
  // per allocation.
  // Replayed through allocator::replay, its requested-bytes peak is peak_bytes() (that of the
  // events before recorded_backward_begin, forward_peak_bytes).
  std::vector<allocator::Event> recorded;
  size_t recorded_backward_begin = 0;
  bool output_freed = false;  // the output's storage was freed between the forward and the backward
  std::vector<OpTime> times;             // per op and phase, then "block" forward/backward
  bool step_ok = false;                  // the AdamW step ran and left finite weights
  // Numerics of the measured micro-batch, to check that runs which must agree do (recompute
  // modes exactly, flash against non-flash attention closely): sums of squares of the output,
  // of the input's gradient and of the accumulated weight gradients.
  double output_sumsq = 0, input_grad_sumsq = 0, weight_grad_sumsq = 0;
};

// Runs `r.micro_batches` forward/backward passes of the layer (gradient accumulation into main_grad), an AdamW
// step, then `timing_reps` timed passes. Errors: an invalid model or run, or a LibTorch failure.
Result<BlockMeasurement> measure_block(const BlockRun& r);

// Finite-difference check of the executor's backward (fp32 runs): the directional derivative of
// L = <block(x), g> along random directions of the input and of all weights, by central
// differences, against the gradients the backward computes.
struct GradientCheck {
  double input_analytic = 0, input_numeric = 0;
  double weights_analytic = 0, weights_numeric = 0;
  double input_error() const;    // relative
  double weights_error() const;  // relative
};
Result<GradientCheck> check_gradients(const BlockRun& r);

// True once measure_block has installed the tracking allocator (it must precede every tensor).
bool executor_ready();

}  // namespace mist::executor
