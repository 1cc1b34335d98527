#include "export/engine.hpp"

#include <string>

namespace mist::engines {

namespace {

// Megatron-LM @ d98e8a64: one --recompute-num-layers for all stages (transformer_config.py,
// recompute.py), distributed optimizer = ZeRO-1, Megatron-FSDP optim_grads / optim_grads_params
// = ZeRO-2/3 (arguments.py), --optimizer-offload-fraction needs the precision-aware (Adam)
// distributed optimizer, --cpu-offloading-num-layers refuses pp > 1 and recompute.
constexpr EngineCaps kMegatronCaps{
    .engine = Engine::kMegatron,
    .zero_levels = {true, true, true, true},
    .zero_levels_with_pp = {true, true, true, true},
    .per_stage_zero = false,
    .virtual_stages = true,
    .split = SplitSupport::kAny,
    .full_recompute = RecomputeSupport::kFirstNPerChunk,
    .selective_recompute = true,
    .selective_with_full = false,
    .offload = {.weights = false,
                .weights_need_zero3 = false,
                .optimizer = true,
                .optimizer_any_fraction = true,
                .optimizer_min_zero = 1,
                .optimizer_fraction_min_zero = 1,
                .tied_whole = false,
                .activations_by_block = true},
    // --cp-comm-type p2p | a2a | all_gather | a2a+p2p with any tp and pp (TransformerConfig.cp_comm_type;
    // a2a+p2p with --hierarchical-context-parallel-sizes).
    .cp = {.comms = {true, true, true, true},
           .nearest = plan::CpComm::kRing,
           .with_tp = true,
           .with_pp = true,
           .grouped_kv = true},
};

// DeepSpeed @ 38327e07 with Megatron-DeepSpeed @ f4157bea: the pipeline engine asserts ZeRO < 2,
// has no interleaving and partitions by type; offload_optimizer.ratio < 1 only with ZeRO-3;
// offload_param only with ZeRO-3. Context parallelism is DeepSpeed-Ulysses
// (--ds-sequence-parallel-size: deepspeed/sequence/layer.py DistributedAttention, an all-to-all of
// q, k, v and the output over heads): initialize_model_parallel asserts tp = pp = 1
// (megatron/core/parallel_state.py:146) and ParallelAttention as many key/value heads as heads
// (megatron/model/transformer.py:729, projection_size == kv_projection_size).
constexpr EngineCaps kDeepSpeedCaps{
    .engine = Engine::kDeepSpeed,
    .zero_levels = {true, true, true, true},
    .zero_levels_with_pp = {true, true, false, false},
    .per_stage_zero = false,
    .virtual_stages = false,
    .split = SplitSupport::kDeepSpeedBalanced,
    .full_recompute = RecomputeSupport::kAnyIfSingleStageElseAll,
    .selective_recompute = true,
    .selective_with_full = false,
    .offload = {.weights = true,
                .weights_need_zero3 = true,
                .optimizer = true,
                .optimizer_any_fraction = true,
                .optimizer_min_zero = 1,
                .optimizer_fraction_min_zero = 3,
                .tied_whole = false,
                .activations_by_block = false},
    .cp = {.comms = {false, true, false, false},
           .nearest = plan::CpComm::kAllToAll,
           .with_tp = false,
           .with_pp = false,
           .grouped_kv = false},
};

// torchtitan @ b5bcd76c: FSDP2 (reshard after forward = ZeRO-3, never = ZeRO-2) or DDP
// replication; full activation checkpointing wraps every block; selective AC is its op-level policy
// (distributed/activation_checkpoint.py SelectiveAC: keeps the attention kernel and every other
// matmul), which is what a plan's "selective" means for this engine (graph::SelectivePolicy), never
// mixed with full; CPU offload moves parameters, gradients and optimizer states; context
// parallelism is PyTorch's ring attention (context_parallel_degree) only.
constexpr EngineCaps kTorchtitanCaps{
    .engine = Engine::kTorchtitan,
    .zero_levels = {true, false, true, true},
    // Under PP each rank keeps its stage's whole weights and gradients until the last micro-batch
    // (torchtitan_rules in capability.cpp): ZeRO-1's memory and traffic.
    .zero_levels_with_pp = {true, true, false, false},
    .per_stage_zero = false,
    .virtual_stages = true,
    .split = SplitSupport::kTorchtitanAuto,
    .full_recompute = RecomputeSupport::kAllOrNone,
    .selective_recompute = true,
    .selective_with_full = false,
    .offload = {.weights = true,
                .weights_need_zero3 = true,
                .optimizer = true,
                .optimizer_any_fraction = false,
                .optimizer_min_zero = 3,
                .optimizer_fraction_min_zero = 3,
                .tied_whole = true,
                .activations_by_block = false},
    .cp = {.comms = {true, false, false, false},
           .nearest = plan::CpComm::kRing,
           .with_tp = true,
           .with_pp = true,
           .grouped_kv = true},
};

}  // namespace

const EngineCaps& engine_caps(Engine e) {
  switch (e) {
    case Engine::kMegatron: return kMegatronCaps;
    case Engine::kDeepSpeed: return kDeepSpeedCaps;
    case Engine::kTorchtitan: break;
  }
  return kTorchtitanCaps;
}

}  // namespace mist::engines
