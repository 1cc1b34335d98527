#include "analysis/reserved_memory.hpp"

#include <algorithm>

#include "allocator/caching_allocator.hpp"
#include "analysis/allocation_trace.hpp"

namespace mist::analysis {

Result<ReservedMemory> reserved_memory(const PreparedJob& job, const plan::Plan& p, int stage,
                                       double allocated_peak, double allocator_capacity) {
  MIST_TRY(const AllocationTrace trace, stage_allocation_trace(job, p, stage));
  ReservedMemory r;
  allocator::Options o;
  o.expandable_segments = expandable_segments_by_default(job.engine());
  r.expandable_segments = o.expandable_segments;
  const allocator::Stats free_run = allocator::replay(trace.events, o);
  r.trace_allocated = static_cast<double>(free_run.allocated_bytes.peak);
  r.trace_reserved = static_cast<double>(free_run.reserved_bytes.peak);
  // Offloaded activations leave the GPU after their forward; the trace keeps them (it knows which
  // bytes are saved, not which an offloading engine moves): add only its reserve above its
  // allocated peak to the symbolic allocated peak, which counts the offload.
  const bool offloads = p.stages.at(static_cast<size_t>(stage)).offload.activations > 0;
  r.reserved = offloads ? allocated_peak + (r.trace_reserved - r.trace_allocated)
                        : std::max(allocated_peak, r.trace_reserved);
  if (r.reserved <= allocator_capacity) return r;
  // Over the limit without one: the allocator would have released its cache and retried.
  r.limited = true;
  if (allocated_peak > allocator_capacity) {
    r.out_of_memory = true;
    return r;
  }
  o.capacity_bytes = allocator_capacity;
  const allocator::Stats limited = allocator::replay(trace.events, o);
  r.limited_reserved = static_cast<double>(limited.reserved_bytes.peak);
  r.alloc_retries = limited.num_alloc_retries;
  r.out_of_memory = limited.num_ooms > 0;
  return r;
}

}  // namespace mist::analysis
