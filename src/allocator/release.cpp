// Giving memory back (c10/cuda/CUDACachingAllocator.cpp at 001074d2): on the way to an OOM
// (release_available_cached_blocks, release_cached_blocks) and in emptyCache (release_blocks,
// release_block). Unmapping expandable segments is in expandable_segments.cpp.
#include <algorithm>

#include "allocator/caching_allocator.hpp"

namespace mist::allocator {

// release_available_cached_blocks: only with max_split_size set. Frees the smallest oversize
// cached segment that covers the request, else oversize ones from the largest down until their
// sum covers it. (With expandable segments torch's release_block would assert on an expandable
// block; this simulation skips the step there.)
bool CachingAllocator::release_available_cached_blocks(const Request& r) {
  if (max_split_ == kUnlimited || options_.expandable_segments) return false;
  auto& set = r.pool->blocks;
  const int64_t want = std::max(r.size, max_split_);
  auto it = set.lower_bound(SizeKey{r.stream, want, std::numeric_limits<int64_t>::min(), -1});
  if (it != set.end() && it->stream == r.stream) {
    release_block(it->block);
    return true;
  }
  if (it == set.begin()) return false;
  int64_t released = 0;
  --it;  // the largest block of the stream, if any
  while (released < want && it->size >= max_split_ && it->stream == r.stream) {
    const int32_t cur = it->block;
    released += it->size;
    if (it == set.begin()) {
      release_block(cur);
      break;
    }
    --it;
    release_block(cur);
  }
  return released >= want;
}

// release_cached_blocks (emptyCache): release_blocks on the large pool, then the small one.
void CachingAllocator::release_cached_blocks() {
  release_blocks(large_);
  release_blocks(small_);
}

void CachingAllocator::empty_cache() { release_cached_blocks(); }

// release_blocks: cudaFree every free block that is a whole segment; unmap the free pages of
// expandable segments, and drop an expandable segment left without any page.
void CachingAllocator::release_blocks(Pool& pool) {
  scratch_.clear();
  for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
    const int32_t b = (it++)->block;
    if (blocks_[b].segment >= 0) scratch_.push_back(b);
    else if (!is_split(b)) release_block(b);
  }
  for (int32_t b : scratch_) {
    unmap_block(b);
    if (!blocks_[b].mapped && !is_split(b)) release_expandable_segment(b);
  }
}

// release_block: cudaFree of a whole free segment.
void CachingAllocator::release_block(int32_t b) {
  Block& k = blocks_[b];
  ++stats_.num_device_free;
  --stats_.segments.current;  // decrease_stat
  add_reserved(-k.size);
  pool_of(k).blocks.erase(size_key(b));
  drop_block(b);
}

}  // namespace mist::allocator
