// The classic paths of DeviceCachingAllocator (c10/cuda/CUDACachingAllocator.cpp at 001074d2):
// malloc, free, best fit, splitting, coalescing, segment allocation, statistics. Releasing memory
// is in release.cpp, the expandable-segment paths in expandable_segments.cpp.
#include "allocator/caching_allocator.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/units.hpp"

namespace mist::allocator {
namespace {

void increase(Stat& s, int64_t amount) {  // increase_stat
  s.current += amount;
  s.peak = std::max(s.peak, s.current);
}
void decrease(Stat& s, int64_t amount) { s.current -= amount; }  // decrease_stat

}  // namespace

// round_size: below kMinBlockSize -> kMinBlockSize; with roundup_power2_divisions N > 1 and a size
// above N * 512, roundup_power2_next_division (the next of N equal steps between two powers of
// two); else the next multiple of 512.
int64_t round_size(int64_t bytes, int64_t divisions) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  if (divisions > 1 && divisions < (int64_t{1} << 40) && bytes > kMinBlockSize * divisions) {
    const auto size = static_cast<uint64_t>(bytes);
    if (std::has_single_bit(size)) return bytes;
    const uint64_t floor = std::bit_floor(size);
    // power2_floor >> log2(divisions): torch requires divisions to be a power of two.
    const uint64_t step = floor >> (63 - std::countl_zero(static_cast<uint64_t>(divisions)));
    if (step == 0) return static_cast<int64_t>(floor << 1);
    const uint64_t down = size & ~(step - 1);
    return static_cast<int64_t>(down == size ? size : down + step);
  }
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

// get_allocation_size.
int64_t allocation_size(int64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

CachingAllocator::CachingAllocator(Options options)
    : options_(options),
      arena_(std::make_unique<std::pmr::unsynchronized_pool_resource>()),
      small_(true, arena_.get()),
      large_(false, arena_.get()),
      ids_(arena_.get()) {
  // Capacity in whole bytes; NaN, infinity and anything beyond 2^60 mean "never fails".
  const double cap = options_.capacity_bytes;
  capacity_ = (cap >= 0 && cap < units::kMaxBytes) ? static_cast<int64_t>(std::floor(cap))
              : cap < 0                              ? 0
                                                     : kUnlimited;
  max_split_ = options_.max_split_size > 0 ? options_.max_split_size : kUnlimited;
  // ExpandableSegment reserves address space for totalGlobalMem * 9/8.
  address_space_ = capacity_ == kUnlimited ? (int64_t{1} << 46) : capacity_ + capacity_ / 8;
}

CachingAllocator::~CachingAllocator() = default;

void CachingAllocator::reserve(size_t ids) { ids_.reserve(ids); }

int32_t CachingAllocator::new_block(int stream, int64_t size, bool small, int64_t addr) {
  int32_t b;
  if (!free_slots_.empty()) {
    b = free_slots_.back();
    free_slots_.pop_back();
  } else {
    b = static_cast<int32_t>(blocks_.size());
    blocks_.emplace_back();
  }
  blocks_[b] = Block{.addr = addr, .size = size, .stream = stream, .small = small, .in_use = true};
  return b;
}

void CachingAllocator::drop_block(int32_t b) {
  blocks_[b].in_use = false;
  free_slots_.push_back(b);
}

CachingAllocator::SizeKey CachingAllocator::size_key(int32_t b) const {
  const Block& k = blocks_[b];
  return {k.stream, k.size, k.addr, b};
}
CachingAllocator::AddrKey CachingAllocator::addr_key(int32_t b) const {
  const Block& k = blocks_[b];
  return {k.stream, k.addr, b};
}

// Block::splice: puts b between before and after.
void CachingAllocator::splice(int32_t b, int32_t before, int32_t after) {
  if (before >= 0) blocks_[before].next = b;
  blocks_[b].prev = before;
  if (after >= 0) blocks_[after].prev = b;
  blocks_[b].next = after;
}

void CachingAllocator::add_reserved(int64_t bytes) {
  if (bytes >= 0) increase(stats_.reserved_bytes, bytes);
  else decrease(stats_.reserved_bytes, -bytes);
}

// DeviceCachingAllocator::malloc: best fit in the pool; else a new segment; else release cached
// segments and retry (release_available_cached_blocks, then release_cached_blocks); else OOM.
bool CachingAllocator::malloc(int64_t id, int64_t bytes, int stream) {
  // NativeCachingAllocator::allocate refuses 1 EiB and more; negative sizes have no meaning.
  if (bytes < 0 || static_cast<double>(bytes) >= units::kMaxBytes) {
    ++stats_.invalid_calls;
    return false;
  }
  auto [it, inserted] = ids_.try_emplace(id, kZeroBytes);
  if (!inserted && it->second != kFailed) {
    ++stats_.invalid_calls;  // id still live
    return false;
  }
  it->second = kZeroBytes;
  if (bytes == 0) return true;  // allocate(0) hands out nullptr without the allocator

  Request r;
  r.stream = stream;
  r.size = round_size(bytes, options_.roundup_power2_divisions);
  r.alloc_size = allocation_size(r.size);
  r.pool = r.size <= kSmallSize ? &small_ : &large_;  // get_pool

  bool found = get_free_block(r);
  if (!found) found = alloc_block(r, false);
  if (!found) found = release_available_cached_blocks(r) && alloc_block(r, false);
  if (!found) {
    release_cached_blocks();
    found = alloc_block(r, true);
  }
  if (!found) {  // the OutOfMemoryError: nothing was allocated, cached segments stay released
    ++stats_.num_ooms;
    stats_.largest_failed_request = std::max(stats_.largest_failed_request, bytes);
    it->second = kFailed;
    return false;
  }
  it->second = alloc_found_block(r, bytes, should_split(r.block, r.size));
  return true;
}

// get_free_block: the smallest free block of the pool on the same stream with size >= request.
bool CachingAllocator::get_free_block(Request& r) {
  auto& set = r.pool->blocks;
  auto it = set.lower_bound(SizeKey{r.stream, r.size, std::numeric_limits<int64_t>::min(), -1});
  if (it == set.end() || it->stream != r.stream) return false;
  if (blocks_[it->block].segment >= 0) {
    // Best fit counts the unmapped range after a block as part of it: step to larger blocks while
    // their expandable size is smaller.
    auto expandable_size = [&](int32_t b) {
      const int32_t n = blocks_[b].next;
      return blocks_[b].size + (n >= 0 && !blocks_[n].mapped ? blocks_[n].size : 0);
    };
    auto next = std::next(it);
    while (blocks_[it->block].segment >= 0 && next != set.end() && next->stream == r.stream &&
           expandable_size(next->block) < expandable_size(it->block))
      it = next++;
  }
  // Do not return an oversize block for a request below max_split_size, nor one that wastes
  // kLargeBuffer or more for a request above it.
  if (r.size < max_split_ && it->size >= max_split_) return false;
  if (r.size >= max_split_ && it->size >= r.size + kLargeBuffer) return false;
  r.block = it->block;
  set.erase(it);
  return true;
}

// alloc_block: a new segment of alloc_size (cudaMalloc), or pages of the stream's expandable
// segment. num_alloc_retries counts the attempt after release_cached_blocks.
bool CachingAllocator::alloc_block(Request& r, bool is_retry) {
  if (is_retry) ++stats_.num_alloc_retries;
  if (options_.expandable_segments) {
    r.block = try_allocate_expandable_block(r.stream, *r.pool, r.size);
    return r.block >= 0;
  }
  if (!fits(r.alloc_size)) return false;  // cudaMalloc: cudaErrorMemoryAllocation
  r.block = new_block(r.stream, r.alloc_size, r.pool->small, next_addr_);
  next_addr_ += r.alloc_size;
  increase(stats_.segments, 1);
  add_reserved(r.alloc_size);
  ++stats_.num_device_alloc;
  return true;
}

// should_split: the small pool (and every pool with expandable segments) splits off a remainder
// of at least kMinBlockSize; the large pool only a remainder above kSmallSize, and only for a
// request below max_split_size.
bool CachingAllocator::should_split(int32_t b, int64_t size) const {
  const int64_t remaining = blocks_[b].size - size;
  if (blocks_[b].small || options_.expandable_segments) return remaining >= kMinBlockSize;
  return size < max_split_ && remaining > kSmallSize;
}

// alloc_found_block: the front of the block serves the request, the remainder goes back to the
// pool; inactive_split follows (expandable segments are left out of it, as in torch).
int32_t CachingAllocator::alloc_found_block(const Request& r, int64_t requested, bool split) {
  int32_t b = r.block;
  const bool already_split = is_split(b);
  const bool expandable = blocks_[b].segment >= 0;
  if (split) {
    const int32_t rest = b;
    b = new_block(r.stream, r.size, r.pool->small, blocks_[rest].addr);
    blocks_[b].segment = blocks_[rest].segment;
    splice(b, blocks_[rest].prev, rest);
    blocks_[rest].addr += r.size;
    blocks_[rest].size -= r.size;
    r.pool->blocks.insert(size_key(rest));
    if (!expandable) {
      if (already_split) {
        decrease(stats_.inactive_split_bytes, r.size);
      } else {
        increase(stats_.inactive_split_bytes, blocks_[rest].size);
        increase(stats_.inactive_split, 1);
      }
    }
  } else if (already_split && !expandable) {
    decrease(stats_.inactive_split_bytes, blocks_[b].size);
    decrease(stats_.inactive_split, 1);
  }
  Block& k = blocks_[b];
  k.allocated = true;
  k.requested = requested;
  increase(stats_.allocations, 1);
  increase(stats_.allocated_bytes, k.size);
  increase(stats_.requested_bytes, requested);
  return b;
}

// DeviceCachingAllocator::free, then free_block (no stream uses recorded, so no event defers it).
void CachingAllocator::free(int64_t id) {
  auto it = ids_.find(id);
  if (it == ids_.end()) {
    ++stats_.invalid_calls;
    return;
  }
  const int32_t b = it->second;
  ids_.erase(it);
  if (b < 0) return;  // zero bytes, or a malloc that failed
  blocks_[b].allocated = false;
  decrease(stats_.allocations, 1);
  decrease(stats_.allocated_bytes, blocks_[b].size);
  free_block(b);
}

// free_block: merge with free neighbours of the same segment (try_merge_blocks), back to the pool.
void CachingAllocator::free_block(int32_t b) {
  const int64_t requested = blocks_[b].requested;
  int64_t net_blocks = 0, net_bytes = 0;
  const int32_t candidates[2] = {blocks_[b].prev, blocks_[b].next};
  for (int32_t c : candidates) {
    if (const int64_t subsumed = try_merge_blocks(b, c); subsumed > 0) {
      net_blocks -= 1;
      net_bytes -= subsumed;
    }
  }
  Block& k = blocks_[b];
  pool_of(k).blocks.insert(size_key(b));
  if (is_split(b)) {
    net_blocks += 1;
    net_bytes += k.size;
  }
  if (k.segment < 0) {
    if (net_blocks > 0) increase(stats_.inactive_split, net_blocks);
    else decrease(stats_.inactive_split, -net_blocks);
    if (net_bytes > 0) increase(stats_.inactive_split_bytes, net_bytes);
    else decrease(stats_.inactive_split_bytes, -net_bytes);
  }
  k.requested = 0;
  decrease(stats_.requested_bytes, requested);
}

// try_merge_blocks: dst absorbs its neighbour src when src is free and both are mapped or both
// unmapped. dst must be in no set (its key changes). Returns the bytes absorbed.
int64_t CachingAllocator::try_merge_blocks(int32_t dst, int32_t src) {
  if (src < 0 || blocks_[src].allocated || blocks_[src].mapped != blocks_[dst].mapped) return 0;
  Pool& pool = pool_of(blocks_[src]);
  if (blocks_[src].mapped) pool.blocks.erase(size_key(src));
  else pool.unmapped.erase(addr_key(src));
  Block& d = blocks_[dst];
  const Block& s = blocks_[src];
  if (d.prev == src) {  // [src dst]
    d.addr = s.addr;
    d.prev = s.prev;
    if (d.prev >= 0) blocks_[d.prev].next = dst;
  } else {  // [dst src]
    d.next = s.next;
    if (d.next >= 0) blocks_[d.next].prev = dst;
  }
  const int64_t subsumed = s.size;
  d.size += subsumed;
  drop_block(src);
  return subsumed;
}

void CachingAllocator::reset_peaks() {  // resetPeakStats
  for (Stat* s : {&stats_.allocated_bytes, &stats_.requested_bytes, &stats_.reserved_bytes,
                  &stats_.allocations, &stats_.segments, &stats_.inactive_split,
                  &stats_.inactive_split_bytes})
    s->peak = s->current;
}

Stats replay(const std::vector<Event>& trace, const Options& options) {
  CachingAllocator a(options);
  a.reserve(trace.size() / 2 + 1);
  for (const Event& e : trace) {
    if (e.kind == Event::Kind::kAlloc) a.malloc(e.id, e.bytes, e.stream);
    else a.free(e.id);
  }
  return a.stats();
}

}  // namespace mist::allocator
