// The allocations and frees one GPU of a pipeline stage makes over training iterations, in the
// order the engine's implementation makes them: the sequence PyTorch's CUDA caching allocator
// serves (allocator/caching_allocator.hpp). Its reserved peak, not the allocated one, is what
// decides an out-of-memory error. docs/memory-model.md ("Reserved memory") describes each part.
//
// In order: the model state the engine keeps (weights, fp32 main gradients, the master copy), the
// cuBLAS workspaces; then per iteration the micro-batches of the stage in its 1F1B order, each layer
// replaying the liveness walk's allocations (graph::trace_layer) with the stage's recompute, the
// pipeline's receive and send buffers, torchtitan's FSDP2 gathers and reduce-scatters on their own
// streams (Megatron-Core and DeepSpeed gather and reduce through buffers made once); at the end of
// the first iteration the optimizer states (made by the first step, as torch.optim does) and, where
// the engine frees gradients between iterations (torchtitan's zero_grad), their release.
#pragma once

#include <vector>

#include "allocator/caching_allocator.hpp"
#include "analysis/prepared_job.hpp"
#include "plan/plan.hpp"

namespace mist::analysis {

// Streams of a trace: the caching allocator reuses a block only on the stream it was made on.
inline constexpr int kComputeStream = 0;
inline constexpr int kAllGatherStream = 1;      // FSDP2 / ZeRO-3 parameter all-gathers
inline constexpr int kReduceScatterStream = 2;  // FSDP2 gradient reduce-scatters

struct AllocationTrace {
  std::vector<allocator::Event> events;
  int iterations = 0;
  int64_t micro_batches = 0;  // per iteration (the schedule's first ones: the pattern repeats)
};

// The trace of stage `stage` of plan `p` (which predict() has checked) over `iterations` iterations.
Result<AllocationTrace> stage_allocation_trace(const PreparedJob& job, const plan::Plan& p, int stage,
                                               int iterations = 2);

// Whether the engine runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True by default
// (torchtitan's launch script sets it; Megatron-LM and DeepSpeed leave the allocator's default).
bool expandable_segments_by_default(spec::Engine engine);

}  // namespace mist::analysis
