// A deterministic simulation of PyTorch's CUDA caching allocator (DeviceCachingAllocator in
// c10/cuda/CUDACachingAllocator.cpp), to predict the reserved memory of a training iteration
// (torch.cuda.max_memory_reserved) from its sequence of allocations and frees. No GPU is involved:
// segments get simulated addresses and "cudaMalloc" fails above Options::capacity_bytes.
//
// Source read: pytorch/pytorch, c10/cuda/CUDACachingAllocator.cpp at commit
// 001074d25084fdb87a799823e395a50f5ec044d3 (PyTorch 2.5 line: it has the IPC handles of expandable
// segments, and get_free_block still bounds oversize reuse by kLargeBuffer, not by 2.6's
// max_non_split_rounding_size, whose default is the same value), and CUDAAllocatorConfig.cpp
// (parseMaxSplitSize, parseRoundUpPower2Divisions). Each rule in the .cpp files names the torch
// function it comes from; docs/allocator.md lists them and what is left out (CUDA graph pools,
// record_stream and event-deferred frees, garbage_collection_threshold,
// set_per_process_memory_fraction).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <memory_resource>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace mist::allocator {

// Constants of CUDACachingAllocator.cpp (same names).
inline constexpr int64_t kMinBlockSize = 512;        // every size rounds to a multiple of it
inline constexpr int64_t kSmallSize = 1 << 20;       // largest "small" request: 1 MiB
inline constexpr int64_t kSmallBuffer = 2 << 20;     // small-pool segment: 2 MiB
inline constexpr int64_t kLargeBuffer = 20 << 20;    // segment of a 1-10 MiB request: 20 MiB
inline constexpr int64_t kMinLargeAlloc = 10 << 20;  // requests from here get their own segment
inline constexpr int64_t kRoundLarge = 2 << 20;      // ... rounded up to 2 MiB
inline constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();

struct Options {
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one growing segment per stream and pool,
  // mapped in pages of 2 MiB (small pool) or 20 MiB (large pool).
  bool expandable_segments = false;
  // Device memory the allocator can obtain: a cudaMalloc / page map that would take the reserved
  // bytes above it fails (cudaErrorMemoryAllocation). Infinity: never fails.
  double capacity_bytes = std::numeric_limits<double>::infinity();
  // max_split_size_mb, in bytes (torch takes whole MiB > 20). Blocks of at least this size are not
  // split, and serve only requests of at least this size that waste < 20 MiB. kUnlimited (or a
  // value <= 0): off.
  int64_t max_split_size = kUnlimited;
  // roundup_power2_divisions:N (one value for every size interval; torch wants a power of two).
  // 0 or 1: off.
  int64_t roundup_power2_divisions = 0;
};

// One of torch's statistics (c10::CachingAllocator::Stat), aggregate over both pools.
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
};

struct Stats {
  Stat allocated_bytes;       // sizes of live blocks (rounded requests, whole unsplit blocks)
  Stat requested_bytes;       // bytes the caller asked for
  Stat reserved_bytes;        // cudaMalloc'd segments plus mapped pages: max_memory_reserved
  Stat allocations;           // live allocations
  Stat segments;              // cudaMalloc'd segments (torch counts no expandable segment here)
  Stat inactive_split;        // free blocks of split segments (expandable segments excluded)
  Stat inactive_split_bytes;  // their bytes: memory that empty_cache cannot return
  int64_t num_device_alloc = 0;   // cudaMalloc calls, plus page-map calls of expandable segments
  int64_t num_device_free = 0;    // cudaFree calls, plus page-unmap calls
  int64_t num_alloc_retries = 0;  // mallocs that freed all cached segments and tried again
  int64_t num_ooms = 0;           // mallocs that failed (torch raises OutOfMemoryError)
  int64_t largest_failed_request = 0;  // bytes asked by the largest malloc that failed
  int64_t invalid_calls = 0;  // refused: size < 0 or >= 1 EiB, live id reused, unknown id freed
};

// The allocator's present state, computed on demand (O(blocks)).
struct State {
  int64_t reserved_bytes = 0;
  int64_t allocated_bytes = 0;
  int64_t cached_bytes = 0;          // reserved - allocated: free memory kept in the cache
  int64_t inactive_split_bytes = 0;  // the part of it in split segments (fragmentation)
  int64_t largest_free_block = 0;    // largest cached free block (torch's cacheInfo)
  int64_t free_blocks = 0;
  int64_t segments = 0;              // cudaMalloc'd segments
  int64_t expandable_segments = 0;   // live expandable segments (address ranges)
  int64_t live_ids = 0;              // ids allocated and not freed (zero-byte ones included)
};

// Rounds a request as round_size() does (roundup_power2_next_division when divisions > 1).
int64_t round_size(int64_t bytes, int64_t roundup_power2_divisions = 0);
// The segment cudaMalloc'd for a rounded request that no cached block serves
// (get_allocation_size): 2 MiB, 20 MiB, or the size rounded up to 2 MiB.
int64_t allocation_size(int64_t rounded_bytes);

class CachingAllocator {
 public:
  explicit CachingAllocator(Options options = {});
  CachingAllocator(CachingAllocator&&) = default;
  CachingAllocator& operator=(CachingAllocator&&) = delete;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator();

  // Allocates `bytes` for the caller's handle `id` on `stream`. False when out of memory (the
  // state stays consistent, num_ooms counts it, and a later free(id) is a no-op) or when refused
  // (negative or >= 1 EiB size, id already live: invalid_calls counts it, nothing changes).
  // A zero-byte request succeeds without memory, as torch hands out a null pointer for it.
  bool malloc(int64_t id, int64_t bytes, int stream = 0);
  // Returns id's block to its pool. An unknown id is ignored and counted in invalid_calls.
  void free(int64_t id);
  // torch.cuda.empty_cache(): releases every fully free segment (unmaps free pages when
  // expandable).
  void empty_cache();

  const Stats& stats() const { return stats_; }
  State state() const;
  void reset_peaks();  // torch.cuda.reset_peak_memory_stats(): every peak to its current value
  void reserve(size_t ids);  // optional: room for this many live ids, to spare rehashing
  // Empty when the block lists, pools and statistics agree; else the first broken invariant.
  std::string check_consistency() const;

 private:
  struct Block {
    int64_t addr = 0;
    int64_t size = 0;
    int64_t requested = 0;
    int32_t prev = -1, next = -1;  // neighbours in the segment
    int32_t segment = -1;          // expandable segment, -1 for a cudaMalloc'd one
    int stream = 0;
    bool small = false;            // pool
    bool allocated = false;
    bool mapped = true;            // false: address range of an expandable segment, no pages
    bool in_use = false;           // slot of blocks_ holds a block
  };
  struct SizeKey {  // BlockComparatorSize: (stream, size, address)
    int stream;
    int64_t size;
    int64_t addr;
    int32_t block;
    bool operator<(const SizeKey& o) const {
      return std::tie(stream, size, addr) < std::tie(o.stream, o.size, o.addr);
    }
  };
  struct AddrKey {  // BlockComparatorAddress: (stream, address)
    int stream;
    int64_t addr;
    int32_t block;
    bool operator<(const AddrKey& o) const {
      return std::tie(stream, addr) < std::tie(o.stream, o.addr);
    }
  };
  struct Pool {  // BlockPool
    Pool(bool is_small, std::pmr::memory_resource* r) : small(is_small), blocks(r), unmapped(r) {}
    bool small;
    std::pmr::set<SizeKey> blocks;    // free mapped blocks
    std::pmr::set<AddrKey> unmapped;  // address ranges of expandable segments without pages
  };
  struct Segment {  // ExpandableSegment
    int64_t base = 0;
    int64_t page = 0;  // segment_size_: kSmallBuffer or kLargeBuffer
    bool alive = false;
  };
  // Values of ids_ besides a block index.
  static constexpr int32_t kZeroBytes = -1;  // a live zero-byte allocation: no block
  static constexpr int32_t kFailed = -2;     // its malloc ran out of memory: free(id) is a no-op

  struct Request {  // AllocParams
    int stream;
    int64_t size;        // rounded
    int64_t alloc_size;  // get_allocation_size(size)
    Pool* pool;
    int32_t block = -1;
  };

  int32_t new_block(int stream, int64_t size, bool small, int64_t addr);
  void drop_block(int32_t b);
  Pool& pool_of(const Block& b) { return b.small ? small_ : large_; }
  SizeKey size_key(int32_t b) const;
  AddrKey addr_key(int32_t b) const;
  bool is_split(int32_t b) const { return blocks_[b].prev >= 0 || blocks_[b].next >= 0; }
  void splice(int32_t b, int32_t before, int32_t after);
  void add_reserved(int64_t bytes);
  bool fits(int64_t bytes) const { return bytes <= capacity_ - stats_.reserved_bytes.current; }

  bool get_free_block(Request& r);
  bool alloc_block(Request& r, bool is_retry);
  bool should_split(int32_t b, int64_t size) const;
  int32_t alloc_found_block(const Request& r, int64_t requested, bool split);
  void free_block(int32_t b);
  int64_t try_merge_blocks(int32_t dst, int32_t src);
  bool release_available_cached_blocks(const Request& r);
  void release_cached_blocks();
  void release_blocks(Pool& pool);
  void release_block(int32_t b);
  // Expandable segments (expandable_segments.cpp).
  int32_t find_expandable_block(int stream, Pool& pool, int64_t size);
  bool map_block(int32_t b, int64_t size);
  int32_t try_allocate_expandable_block(int stream, Pool& pool, int64_t size);
  void unmap_block(int32_t b);
  void release_expandable_segment(int32_t b);

  Options options_;
  int64_t capacity_;
  int64_t max_split_;
  int64_t address_space_;  // of one expandable segment: 9/8 of capacity, as torch sizes it
  int64_t next_addr_ = kRoundLarge;
  // Nodes of the sets and of the id map come from this arena and are reused after erase.
  std::unique_ptr<std::pmr::unsynchronized_pool_resource> arena_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_slots_;
  std::vector<Segment> segments_;
  std::vector<int32_t> scratch_;
  Pool small_, large_;
  std::pmr::unordered_map<int64_t, int32_t> ids_;  // id -> block, or kZeroBytes / kFailed
  Stats stats_;
};

struct Event {
  enum class Kind : uint8_t { kAlloc, kFree };
  Kind kind = Kind::kAlloc;
  int64_t id = 0;
  int64_t bytes = 0;  // kAlloc only
  int stream = 0;     // kAlloc only: a free goes back to the stream the block was allocated on
};

// Runs a trace on a fresh allocator and returns its statistics (peaks over the whole trace).
Stats replay(const std::vector<Event>& trace, const Options& options = {});

}  // namespace mist::allocator
