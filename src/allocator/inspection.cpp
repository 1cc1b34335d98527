// Reading the allocator: state() (what torch.cuda.memory_stats and memory_snapshot would show) and
// check_consistency() (the invariants the tests hold every operation to).
#include <algorithm>
#include <string>

#include "allocator/caching_allocator.hpp"

namespace mist::allocator {

State CachingAllocator::state() const {
  State s;
  s.reserved_bytes = stats_.reserved_bytes.current;
  s.allocated_bytes = stats_.allocated_bytes.current;
  s.cached_bytes = s.reserved_bytes - s.allocated_bytes;
  s.inactive_split_bytes = stats_.inactive_split_bytes.current;
  s.segments = stats_.segments.current;
  for (const Pool* pool : {&small_, &large_}) {
    s.free_blocks += static_cast<int64_t>(pool->blocks.size());
    for (const SizeKey& k : pool->blocks)
      s.largest_free_block = std::max(s.largest_free_block, k.size);
  }
  s.expandable_segments = std::count_if(segments_.begin(), segments_.end(),
                                        [](const Segment& g) { return g.alive; });
  s.live_ids = static_cast<int64_t>(ids_.size());
  for (const auto& [id, b] : ids_) s.live_ids -= (b == kFailed);  // failed mallocs are not live
  return s;
}

std::string CachingAllocator::check_consistency() const {
  int64_t mapped = 0, allocated = 0, requested = 0, live = 0, heads = 0;
  size_t free_mapped = 0, free_unmapped = 0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& k = blocks_[i];
    if (!k.in_use) continue;
    const auto b = static_cast<int32_t>(i);
    const std::string where = "block " + std::to_string(i) + ": ";
    if (k.size <= 0) return where + "non-positive size";
    if (k.prev >= 0) {
      const Block& p = blocks_[k.prev];
      if (!p.in_use || p.next != b) return where + "prev does not link back";
      if (p.addr + p.size != k.addr) return where + "not contiguous with prev";
      if (!k.allocated && !p.allocated && k.mapped == p.mapped) return where + "uncoalesced prev";
      if (p.stream != k.stream || p.small != k.small || p.segment != k.segment)
        return where + "prev in another segment";
    } else if (k.segment < 0) {
      ++heads;
    }
    if (k.next >= 0 && (!blocks_[k.next].in_use || blocks_[k.next].prev != b))
      return where + "next does not link back";
    const Pool& pool = k.small ? small_ : large_;
    const bool in_blocks = pool.blocks.count(size_key(b)) > 0;
    const bool in_unmapped = pool.unmapped.count(addr_key(b)) > 0;
    if (k.mapped) mapped += k.size;
    if (k.allocated) {
      if (!k.mapped) return where + "allocated but unmapped";
      if (in_blocks || in_unmapped) return where + "allocated but in a free set";
      allocated += k.size;
      requested += k.requested;
      ++live;
    } else if (k.mapped) {
      if (!in_blocks || in_unmapped) return where + "free block missing from its pool";
      ++free_mapped;
    } else {
      if (in_blocks || !in_unmapped) return where + "unmapped block missing from its pool";
      ++free_unmapped;
    }
    if (k.segment < 0 && !k.mapped) return where + "unmapped block of a cudaMalloc segment";
  }
  if (free_mapped != small_.blocks.size() + large_.blocks.size()) return "stale free-set entries";
  if (free_unmapped != small_.unmapped.size() + large_.unmapped.size())
    return "stale unmapped-set entries";
  if (mapped != stats_.reserved_bytes.current) return "reserved_bytes != mapped block bytes";
  if (allocated != stats_.allocated_bytes.current) return "allocated_bytes != allocated blocks";
  if (requested != stats_.requested_bytes.current) return "requested_bytes != requests";
  if (live != stats_.allocations.current) return "allocations != allocated blocks";
  if (heads != stats_.segments.current) return "segments != cudaMalloc'd segments";
  if (stats_.reserved_bytes.current > capacity_) return "reserved above capacity";
  return {};
}

}  // namespace mist::allocator
