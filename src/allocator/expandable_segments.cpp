// Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), after Note [Expandable
// Segments], ExpandableSegment::map/unmap and DeviceCachingAllocator::find_expandable_block,
// map_block, try_allocate_expandable_block, unmap_block and release_expandable_segment of
// c10/cuda/CUDACachingAllocator.cpp at 001074d2.
//
// Both pools use them: per stream and pool one segment reserves address space for 9/8 of the
// device memory and maps physical pages of kSmallBuffer (small pool) or kLargeBuffer (large pool)
// on demand. The unmapped rest of the range is a block with mapped == false in pool.unmapped.
#include <algorithm>

#include "allocator/caching_allocator.hpp"

namespace mist::allocator {

// find_expandable_block: the lowest-address unmapped range of the stream's segments that, with the
// free block just before it, has `size` bytes of free or unmapped space; else a new segment.
int32_t CachingAllocator::find_expandable_block(int stream, Pool& pool, int64_t size) {
  auto allocatable = [&](int32_t b) { return b >= 0 && !blocks_[b].allocated; };
  auto has_space = [&](int32_t b) {
    int64_t bytes = 0;
    while (bytes < size && allocatable(b)) {
      bytes += blocks_[b].size;
      b = blocks_[b].next;
    }
    return bytes >= size;
  };
  const AddrKey first{stream, std::numeric_limits<int64_t>::min(), -1};
  for (auto it = pool.unmapped.lower_bound(first);
       it != pool.unmapped.end() && it->stream == stream; ++it) {
    int32_t c = it->block;
    if (allocatable(blocks_[c].prev)) c = blocks_[c].prev;
    if (has_space(c)) return c;
  }
  const int64_t page = pool.small ? kSmallBuffer : kLargeBuffer;
  const int64_t span = (address_space_ + page - 1) / page * page;
  segments_.push_back(Segment{.base = next_addr_, .page = page, .alive = true});
  const int32_t b = new_block(stream, span, pool.small, next_addr_);
  next_addr_ += span;
  blocks_[b].mapped = false;
  blocks_[b].segment = static_cast<int32_t>(segments_.size() - 1);
  pool.unmapped.insert(addr_key(b));
  return b;
}

// map_block + ExpandableSegment::map: maps the pages covering [addr, addr + size) of an unmapped
// block (all of them or none: cuMemCreate failing releases the pages of this call), splits off the
// unmapped rest, merges with free mapped neighbours, and puts the block in the free pool.
bool CachingAllocator::map_block(int32_t b, int64_t size) {
  const Segment& seg = segments_[blocks_[b].segment];
  const int64_t begin = (blocks_[b].addr - seg.base) / seg.page;
  const int64_t end = (blocks_[b].addr + size - seg.base + seg.page - 1) / seg.page;
  const int64_t bytes = (end - begin) * seg.page;
  if (bytes == 0 || !fits(bytes)) return false;
  Pool& pool = pool_of(blocks_[b]);
  pool.unmapped.erase(addr_key(b));
  blocks_[b].mapped = true;
  if (bytes < blocks_[b].size) {
    const int32_t rest = new_block(blocks_[b].stream, blocks_[b].size - bytes, blocks_[b].small,
                                   blocks_[b].addr + bytes);
    blocks_[rest].mapped = false;
    blocks_[rest].segment = blocks_[b].segment;
    splice(rest, b, blocks_[b].next);
    pool.unmapped.insert(addr_key(rest));
    blocks_[b].size = bytes;
  }
  try_merge_blocks(b, blocks_[b].prev);
  try_merge_blocks(b, blocks_[b].next);
  pool.blocks.insert(size_key(b));
  add_reserved(bytes);
  ++stats_.num_device_alloc;
  return true;
}

// try_allocate_expandable_block: maps as many pages as the request still needs after the free
// block in front of the candidate range, one map_block per unmapped range crossed. A failure keeps
// what earlier calls mapped (as free cached memory), as in torch.
int32_t CachingAllocator::try_allocate_expandable_block(int stream, Pool& pool, int64_t size) {
  int32_t c = find_expandable_block(stream, pool, size);
  if (!blocks_[c].mapped && !map_block(c, std::min(blocks_[c].size, size))) return -1;
  while (blocks_[c].size < size) {
    const int32_t n = blocks_[c].next;  // invariant: free -> unmapped -> ...
    if (n < 0 || blocks_[n].mapped || blocks_[n].allocated) return -1;
    if (!map_block(n, std::min(size - blocks_[c].size, blocks_[n].size))) return -1;
    c = n;  // map_block merged c into n
  }
  pool.blocks.erase(size_key(c));
  return c;
}

// unmap_block + ExpandableSegment::unmap: unmaps the pages lying wholly inside a free block; the
// partial pages at either end stay mapped as free blocks. The unmapped range merges with unmapped
// neighbours.
void CachingAllocator::unmap_block(int32_t b) {
  const Segment& seg = segments_[blocks_[b].segment];
  const int64_t begin = (blocks_[b].addr - seg.base + seg.page - 1) / seg.page;
  const int64_t end = (blocks_[b].addr + blocks_[b].size - seg.base) / seg.page;
  if (begin >= end) return;
  Pool& pool = pool_of(blocks_[b]);
  pool.blocks.erase(size_key(b));
  const int64_t start = seg.base + begin * seg.page;
  const int64_t bytes = (end - begin) * seg.page;
  const int64_t before = start - blocks_[b].addr;
  const int64_t after = blocks_[b].size - before - bytes;
  auto free_piece = [&](int64_t addr, int64_t piece_size, int32_t prev, int32_t next) {
    const int32_t f = new_block(blocks_[b].stream, piece_size, blocks_[b].small, addr);
    blocks_[f].segment = blocks_[b].segment;
    splice(f, prev, next);
    pool.blocks.insert(size_key(f));
  };
  if (before > 0) free_piece(blocks_[b].addr, before, blocks_[b].prev, b);
  if (after > 0) free_piece(start + bytes, after, b, blocks_[b].next);
  blocks_[b].addr = start;
  blocks_[b].size = bytes;
  blocks_[b].mapped = false;
  try_merge_blocks(b, blocks_[b].prev);
  try_merge_blocks(b, blocks_[b].next);
  pool.unmapped.insert(addr_key(b));
  add_reserved(-bytes);
  ++stats_.num_device_free;
}

// release_expandable_segment: a segment that is one unmapped block gives back its address space.
void CachingAllocator::release_expandable_segment(int32_t b) {
  pool_of(blocks_[b]).unmapped.erase(addr_key(b));
  segments_[blocks_[b].segment].alive = false;
  drop_block(b);
}

}  // namespace mist::allocator
