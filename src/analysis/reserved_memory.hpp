// What PyTorch's CUDA caching allocator reserves for a stage: its allocation trace of two
// iterations (allocation_trace.hpp) replayed through the allocator's rules (allocator/), with the
// engine's expandable-segments setting. The symbolic memory model gives the allocated peak; the
// replay gives what the allocator holds above it (rounding, segment sizes, splits it cannot reuse,
// blocks cached on other streams), and whether the GPU's memory runs out even after the allocator
// has released its cache and retried, as it does before raising an out-of-memory error.
#pragma once

#include "analysis/prepared_job.hpp"
#include "plan/plan.hpp"

namespace mist::analysis {

struct ReservedMemory {
  bool expandable_segments = false;
  double trace_allocated = 0;  // the trace's allocated peak (torch.cuda.max_memory_allocated)
  double trace_reserved = 0;   // its reserved peak with no memory limit (max_memory_reserved)
  // The reserved peak: the replay's, and never below the symbolic allocated peak (which, with
  // ZeRO-3/FSDP gathers, counts the largest layer's gathered weights and gradient buffers at the
  // activation peak where the replay finds them at other times).
  double reserved = 0;
  // Replayed with the allocator's share of the GPU as its limit (run only when the unlimited peak
  // exceeds it): the reserved peak then, the cache releases it needed and whether it still failed.
  bool limited = false;
  double limited_reserved = 0;
  int64_t alloc_retries = 0;
  bool out_of_memory = false;
};

// `allocated_peak`: the symbolic model's; `allocator_capacity`: the bytes the allocator may take on
// one GPU (the usable memory less what lives outside it: the CUDA context, NCCL's buffers).
Result<ReservedMemory> reserved_memory(const PreparedJob& job, const plan::Plan& p, int stage,
                                       double allocated_peak, double allocator_capacity);

}  // namespace mist::analysis
