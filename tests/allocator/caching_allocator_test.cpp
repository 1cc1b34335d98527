// The simulated CUDA caching allocator against numbers derived by hand from the rules of
// c10/cuda/CUDACachingAllocator.cpp (docs/allocator.md). Every test also checks the block lists,
// pools and statistics for consistency after each step.
#include "allocator/caching_allocator.hpp"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace mist::allocator {
namespace {

constexpr int64_t KiB = 1024;
constexpr int64_t MiB = 1024 * 1024;

// malloc that must succeed, then a consistency check.
void alloc(CachingAllocator& a, int64_t id, int64_t bytes, int stream = 0) {
  ASSERT_TRUE(a.malloc(id, bytes, stream)) << "id " << id << ", " << bytes << " B";
  ASSERT_EQ(a.check_consistency(), "");
}
void release(CachingAllocator& a, int64_t id) {
  a.free(id);
  ASSERT_EQ(a.check_consistency(), "");
}

TEST(CachingAllocatorRounding, RoundSizeAndSegmentSize) {
  EXPECT_EQ(round_size(0), 512);  // below kMinBlockSize -> 512
  EXPECT_EQ(round_size(1), 512);
  EXPECT_EQ(round_size(512), 512);
  EXPECT_EQ(round_size(513), 1024);  // next multiple of 512
  EXPECT_EQ(round_size(5 * MiB + 1), 5 * MiB + 512);
  // get_allocation_size: <= 1 MiB -> 2 MiB; < 10 MiB -> 20 MiB; else round up to 2 MiB.
  EXPECT_EQ(allocation_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(allocation_size(1 * MiB + 512), 20 * MiB);
  EXPECT_EQ(allocation_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(allocation_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(allocation_size(11 * MiB), 12 * MiB);
}

TEST(CachingAllocatorRounding, PowerOfTwoDivisions) {
  // 4 divisions between 4 MiB and 8 MiB are 1 MiB apart: 5 MiB + 1 -> 6 MiB.
  EXPECT_EQ(round_size(5 * MiB + 1, 4), 6 * MiB);
  EXPECT_EQ(round_size(4 * MiB, 4), 4 * MiB);  // a power of two stays
  EXPECT_EQ(round_size(6 * MiB, 4), 6 * MiB);  // on a division already
  // Only sizes above 512 * divisions = 2048 use it: 1500 -> 1536 (multiple of 512).
  EXPECT_EQ(round_size(1500, 4), 1536);
  EXPECT_EQ(round_size(5 * MiB + 1, 1), 5 * MiB + 512);  // 1 division: off
  CachingAllocator a({.roundup_power2_divisions = 4});
  alloc(a, 1, 5 * MiB + 1);
  EXPECT_EQ(a.stats().allocated_bytes.current, 6 * MiB);
}

TEST(CachingAllocatorRounding, AllocatedCountsRoundedRequestedCountsRaw) {
  CachingAllocator a;
  alloc(a, 1, 1);    // -> 512
  alloc(a, 2, 513);  // -> 1024
  EXPECT_EQ(a.stats().allocated_bytes.current, 512 + 1024);
  EXPECT_EQ(a.stats().requested_bytes.current, 1 + 513);
  EXPECT_EQ(a.stats().reserved_bytes.current, 2 * MiB);  // both in one small segment
  EXPECT_EQ(a.stats().segments.current, 1);
}

TEST(CachingAllocatorSmallPool, TwoMiBSegmentsPackSmallRequests) {
  CachingAllocator a;
  // 2048 requests of 1 KiB fill one 2 MiB segment exactly: each splits off the rest (>= 512 B)
  // until the last one takes the final 1 KiB whole.
  for (int64_t i = 0; i < 2048; ++i) ASSERT_TRUE(a.malloc(i, 1 * KiB));
  EXPECT_EQ(a.check_consistency(), "");
  EXPECT_EQ(a.stats().reserved_bytes.current, 2 * MiB);
  EXPECT_EQ(a.stats().num_device_alloc, 1);
  EXPECT_EQ(a.stats().inactive_split_bytes.current, 0);
  alloc(a, 2048, 1 * KiB);  // no room left: a second segment
  EXPECT_EQ(a.stats().reserved_bytes.current, 4 * MiB);
  EXPECT_EQ(a.stats().segments.current, 2);
}

TEST(CachingAllocatorSmallPool, OneMiBIsSmallOneMiBPlusOneIsLarge) {
  CachingAllocator a;
  alloc(a, 1, 1 * MiB);  // <= kSmallSize: small pool, 2 MiB segment
  alloc(a, 2, 1 * MiB);  // the other half of it
  EXPECT_EQ(a.stats().reserved_bytes.current, 2 * MiB);
  alloc(a, 3, 1 * MiB + 1);  // rounds to 1 MiB + 512 > kSmallSize: large pool, 20 MiB segment
  EXPECT_EQ(a.stats().reserved_bytes.current, 22 * MiB);
  EXPECT_EQ(a.stats().segments.current, 2);
}

TEST(CachingAllocatorLargePool, FiveMiBTakesTwentyMiBAndLaterRequestsReuseTheRemainder) {
  CachingAllocator a;
  alloc(a, 1, 5 * MiB);  // 1-10 MiB -> kLargeBuffer segment, remainder 15 MiB > 1 MiB: split
  EXPECT_EQ(a.stats().reserved_bytes.current, 20 * MiB);
  EXPECT_EQ(a.stats().allocated_bytes.current, 5 * MiB);
  EXPECT_EQ(a.stats().inactive_split_bytes.current, 15 * MiB);
  alloc(a, 2, 5 * MiB);  // best fit: the 15 MiB remainder, split again (10 MiB left)
  alloc(a, 3, 5 * MiB);  // 5 MiB left
  alloc(a, 4, 5 * MiB);  // takes the last 5 MiB exactly
  EXPECT_EQ(a.stats().reserved_bytes.current, 20 * MiB);
  EXPECT_EQ(a.stats().num_device_alloc, 1);
  EXPECT_EQ(a.stats().inactive_split_bytes.current, 0);
  alloc(a, 5, 5 * MiB);  // full: a second 20 MiB segment
  EXPECT_EQ(a.stats().reserved_bytes.current, 40 * MiB);
  EXPECT_EQ(a.stats().num_device_alloc, 2);
}

TEST(CachingAllocatorLargePool, ElevenMiBGetsTwelveMiBUnsplit) {
  CachingAllocator a;
  alloc(a, 1, 11 * MiB);  // >= 10 MiB: own segment rounded to 2 MiB = 12 MiB
  EXPECT_EQ(a.stats().reserved_bytes.current, 12 * MiB);
  // The 1 MiB remainder is not > kSmallSize: no split, the whole 12 MiB block is allocated.
  EXPECT_EQ(a.stats().allocated_bytes.current, 12 * MiB);
  EXPECT_EQ(a.stats().requested_bytes.current, 11 * MiB);
  EXPECT_EQ(a.state().free_blocks, 0);
}

TEST(CachingAllocatorLargePool, NoSplitWhenTheRemainderIsAtMostOneMiB) {
  CachingAllocator a;
  alloc(a, 1, 9 * MiB);  // 20 MiB segment, 11 MiB remainder: split
  release(a, 1);         // coalesces back into one 20 MiB block
  EXPECT_EQ(a.state().free_blocks, 1);
  alloc(a, 2, 19 * MiB + 512 * KiB);  // fits the 20 MiB block; remainder 0.5 MiB <= 1 MiB
  EXPECT_EQ(a.stats().allocated_bytes.current, 20 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, 20 * MiB);
  EXPECT_EQ(a.state().free_blocks, 0);
  release(a, 2);
  alloc(a, 3, 18 * MiB);  // remainder 2 MiB > 1 MiB: split
  EXPECT_EQ(a.stats().allocated_bytes.current, 18 * MiB);
  EXPECT_EQ(a.state().free_blocks, 1);
}

TEST(CachingAllocatorFree, NeighboursCoalesce) {
  CachingAllocator a;
  alloc(a, 1, 5 * MiB);  // [a 5][rest 15]          inactive split: 15 MiB, 1 block
  alloc(a, 2, 5 * MiB);  // [a 5][b 5][rest 10]      10 MiB
  alloc(a, 3, 5 * MiB);  // [a 5][b 5][c 5][rest 5]   5 MiB
  EXPECT_EQ(a.stats().inactive_split_bytes.current, 5 * MiB);
  release(a, 2);  // hole between a and c: 5 + 5 MiB in 2 blocks
  EXPECT_EQ(a.stats().inactive_split_bytes.current, 10 * MiB);
  EXPECT_EQ(a.stats().inactive_split.current, 2);
  release(a, 1);  // a merges with the hole: one 10 MiB block, plus the 5 MiB tail
  EXPECT_EQ(a.stats().inactive_split_bytes.current, 15 * MiB);
  EXPECT_EQ(a.stats().inactive_split.current, 2);
  EXPECT_EQ(a.state().largest_free_block, 10 * MiB);
  release(a, 3);  // c merges with both sides: the whole segment, unsplit
  EXPECT_EQ(a.stats().inactive_split_bytes.current, 0);
  EXPECT_EQ(a.stats().inactive_split.current, 0);
  EXPECT_EQ(a.state().free_blocks, 1);
  EXPECT_EQ(a.state().largest_free_block, 20 * MiB);
  alloc(a, 4, 20 * MiB);  // the coalesced block serves a request of the whole segment
  EXPECT_EQ(a.stats().num_device_alloc, 1);
}

TEST(CachingAllocatorStreams, FreeBlocksServeOnlyTheirStream) {
  CachingAllocator a;
  alloc(a, 1, 5 * MiB, /*stream=*/0);
  release(a, 1);
  alloc(a, 2, 5 * MiB, /*stream=*/1);  // stream 0's free segment is not reused: a new one
  EXPECT_EQ(a.stats().reserved_bytes.current, 40 * MiB);
  EXPECT_EQ(a.stats().segments.current, 2);
  alloc(a, 3, 5 * MiB, /*stream=*/0);  // stream 0 reuses its own
  EXPECT_EQ(a.stats().reserved_bytes.current, 40 * MiB);
  EXPECT_EQ(a.stats().num_device_alloc, 2);
}

TEST(CachingAllocatorFragmentation, HolesTooSmallForALargerRequest) {
  CachingAllocator a;
  for (int64_t id = 1; id <= 4; ++id) alloc(a, id, 5 * MiB);  // one 20 MiB segment, full
  release(a, 1);
  release(a, 3);  // two 5 MiB holes, not adjacent
  EXPECT_EQ(a.stats().inactive_split_bytes.current, 10 * MiB);
  alloc(a, 5, 8 * MiB);  // no hole fits: a new 20 MiB segment, 12 MiB remainder split off
  EXPECT_EQ(a.stats().reserved_bytes.current, 40 * MiB);
  EXPECT_EQ(a.stats().allocated_bytes.current, 18 * MiB);  // b, d and the 8 MiB
  EXPECT_EQ(a.state().cached_bytes, 22 * MiB);
  EXPECT_EQ(a.stats().inactive_split_bytes.current, 22 * MiB);  // all of it in split segments
  a.empty_cache();  // nothing is a whole free segment
  EXPECT_EQ(a.stats().reserved_bytes.current, 40 * MiB);
}

TEST(CachingAllocatorOom, ReleasingCachedSegmentsLetsTheRetrySucceed) {
  CachingAllocator a({.capacity_bytes = 40.0 * MiB});
  alloc(a, 1, 30 * MiB);  // 30 MiB segment
  release(a, 1);          // cached
  // 32 MiB: the cached 30 MiB is too small; 30 + 32 > 40 fails; max_split_size is off, so
  // release_available_cached_blocks does nothing; release_cached_blocks frees the 30 MiB and the
  // retry (counted) gets 32 MiB.
  alloc(a, 2, 32 * MiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().num_ooms, 0);
  EXPECT_EQ(a.stats().reserved_bytes.current, 32 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.peak, 32 * MiB);
  EXPECT_EQ(a.stats().num_device_alloc, 2);
  EXPECT_EQ(a.stats().num_device_free, 1);
}

TEST(CachingAllocatorOom, ReleaseAvailableFreesOversizeSegmentsLargestFirst) {
  CachingAllocator a({.capacity_bytes = 200.0 * MiB, .max_split_size = 64 * MiB});
  alloc(a, 1, 100 * MiB);
  alloc(a, 2, 80 * MiB);
  release(a, 1);
  release(a, 2);  // 180 MiB cached in two oversize (>= 64 MiB) segments
  // 120 MiB: no cached block fits; 180 + 120 > 200. No single oversize block >= 120 MiB, so
  // release_available_cached_blocks frees from the largest down (100, then 80) until >= 120 MiB,
  // and the first retry, not counted as one, succeeds.
  alloc(a, 3, 120 * MiB);
  EXPECT_EQ(a.stats().num_alloc_retries, 0);
  EXPECT_EQ(a.stats().num_device_free, 2);
  EXPECT_EQ(a.stats().reserved_bytes.current, 120 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.peak, 180 * MiB);
}

TEST(CachingAllocatorOom, TheSegmentSizeNotTheRequestDecides) {
  CachingAllocator a({.capacity_bytes = 40.0 * MiB});
  alloc(a, 1, 30 * MiB);
  // 2 MiB would fit in the 10 MiB left, but its segment is kLargeBuffer: 30 + 20 > 40 -> OOM.
  EXPECT_FALSE(a.malloc(2, 2 * MiB));
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().largest_failed_request, 2 * MiB);
  alloc(a, 3, 10 * MiB);  // >= kMinLargeAlloc: a segment of exactly 10 MiB fits
  EXPECT_EQ(a.stats().reserved_bytes.current, 40 * MiB);
}

TEST(CachingAllocatorOom, OomWhenNothingCanBeReleased) {
  CachingAllocator a({.capacity_bytes = 40.0 * MiB});
  alloc(a, 1, 30 * MiB);
  EXPECT_FALSE(a.malloc(2, 30 * MiB));  // 60 > 40; nothing cached; the retry fails too
  EXPECT_EQ(a.check_consistency(), "");
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().largest_failed_request, 30 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, 30 * MiB);
  EXPECT_EQ(a.stats().allocated_bytes.current, 30 * MiB);
  EXPECT_FALSE(a.malloc(3, 12 * MiB));  // 30 + 12 > 40
  EXPECT_EQ(a.stats().num_ooms, 2);
  EXPECT_EQ(a.stats().largest_failed_request, 30 * MiB);  // the largest, not the last
  release(a, 2);  // the failed id: a no-op, not an invalid call
  EXPECT_EQ(a.stats().invalid_calls, 0);
  release(a, 1);
  alloc(a, 2, 30 * MiB);  // the id can be used again; it reuses the cached 30 MiB segment
  EXPECT_EQ(a.stats().num_device_alloc, 1);
}

TEST(CachingAllocatorEmptyCache, ReleasesWholeFreeSegmentsOnly) {
  CachingAllocator a;
  alloc(a, 1, 5 * MiB);   // large segment 20 MiB
  alloc(a, 2, 5 * MiB);   // same segment
  alloc(a, 3, 1 * KiB);   // small segment 2 MiB
  release(a, 1);
  release(a, 3);
  a.empty_cache();  // the small segment is whole and free; the large one still holds b
  EXPECT_EQ(a.check_consistency(), "");
  EXPECT_EQ(a.stats().reserved_bytes.current, 20 * MiB);
  EXPECT_EQ(a.stats().num_device_free, 1);
  release(a, 2);
  a.empty_cache();
  EXPECT_EQ(a.check_consistency(), "");
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(a.stats().reserved_bytes.peak, 22 * MiB);
  EXPECT_EQ(a.stats().segments.current, 0);
  EXPECT_EQ(a.state().free_blocks, 0);
  a.reset_peaks();
  EXPECT_EQ(a.stats().reserved_bytes.peak, 0);
}

TEST(CachingAllocatorMaxSplitSize, OversizeBlocksServeOnlyCloseLargeRequests) {
  CachingAllocator a({.max_split_size = 64 * MiB});
  alloc(a, 1, 100 * MiB);
  release(a, 1);  // a cached oversize 100 MiB block
  alloc(a, 2, 30 * MiB);  // below max_split_size: may not take an oversize block -> new 30 MiB
  EXPECT_EQ(a.stats().reserved_bytes.current, 130 * MiB);
  alloc(a, 3, 70 * MiB);  // 100 >= 70 + 20: wastes too much -> new 70 MiB segment
  EXPECT_EQ(a.stats().reserved_bytes.current, 200 * MiB);
  alloc(a, 4, 90 * MiB);  // 100 < 90 + 20: takes it, unsplit (request >= max_split_size)
  EXPECT_EQ(a.stats().reserved_bytes.current, 200 * MiB);
  EXPECT_EQ(a.stats().allocated_bytes.current, (30 + 70 + 100) * MiB);
}

TEST(CachingAllocatorExpandable, MapsPagesAndSplitsEveryPool) {
  CachingAllocator a({.expandable_segments = true});
  alloc(a, 1, 11 * MiB);  // maps ceil(11 / 20) = 1 large page; splits (remainder >= 512 B)
  EXPECT_EQ(a.stats().reserved_bytes.current, 20 * MiB);
  EXPECT_EQ(a.stats().allocated_bytes.current, 11 * MiB);
  EXPECT_EQ(a.stats().segments.current, 0);  // torch counts no expandable segment
  alloc(a, 2, 1 * KiB);  // small pool: its own segment, one 2 MiB page
  EXPECT_EQ(a.stats().reserved_bytes.current, 22 * MiB);
  EXPECT_EQ(a.state().expandable_segments, 2);
  alloc(a, 3, 11 * MiB);  // the 9 MiB free tail plus one more page: grows the same segment
  EXPECT_EQ(a.stats().reserved_bytes.current, 42 * MiB);
  EXPECT_EQ(a.state().expandable_segments, 2);
  EXPECT_EQ(a.stats().num_device_alloc, 3);
}

TEST(CachingAllocatorExpandable, GrowingRequestsReserveFarLessThanClassic) {
  // Requests of 30, 32, ..., 50 MiB, each freed before the next: in the classic mode none fits a
  // cached segment (all smaller), so each gets its own: 30 + 32 + ... + 50 = 440 MiB. Expandable:
  // 30 MiB maps 2 pages (40 MiB); 32..40 reuse it; 42 extends it by a page to 60 MiB, which
  // serves the rest.
  std::vector<Event> trace;
  for (int64_t i = 0; i <= 10; ++i) {
    trace.push_back({Event::Kind::kAlloc, i, (30 + 2 * i) * MiB, 0});
    trace.push_back({Event::Kind::kFree, i, 0, 0});
  }
  const Stats classic = replay(trace);
  const Stats expandable = replay(trace, {.expandable_segments = true});
  EXPECT_EQ(classic.reserved_bytes.peak, 440 * MiB);
  EXPECT_EQ(classic.num_device_alloc, 11);
  EXPECT_EQ(expandable.reserved_bytes.peak, 60 * MiB);
  EXPECT_EQ(expandable.num_device_alloc, 2);
  EXPECT_EQ(classic.allocated_bytes.peak, expandable.allocated_bytes.peak);
}

TEST(CachingAllocatorExpandable, BestFitCountsTheUnmappedTailAsPartOfTheLastBlock) {
  CachingAllocator a({.expandable_segments = true});
  alloc(a, 1, 30 * MiB);  // maps [0, 40): x1 = [0, 30), free [30, 40)
  alloc(a, 2, 10 * MiB);  // x2 = [30, 40) exactly
  alloc(a, 3, 25 * MiB);  // maps [40, 80): x3 = [40, 65), free [65, 80)
  alloc(a, 4, 15 * MiB);  // x4 = [65, 80) exactly
  release(a, 4);          // B = [65, 80): 15 MiB, followed by the unmapped rest
  release(a, 1);          // A = [0, 30): 30 MiB, followed by x2
  EXPECT_EQ(a.stats().reserved_bytes.current, 80 * MiB);
  // 12 MiB: the smallest fit is B, but get_free_block sizes B with the unmapped range after it
  // (huge) and steps on to A, whose expandable size (30 MiB) is smaller: A is split, B kept.
  alloc(a, 5, 12 * MiB);
  // 25 MiB: free blocks are B (15) and A's rest [12, 30) (18): none fits, so B grows by one page
  // to [65, 100). (Taking B above would have left A whole for this request, at 80 MiB.)
  alloc(a, 6, 25 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, 100 * MiB);
  EXPECT_EQ(a.stats().num_device_alloc, 3);
}

TEST(CachingAllocatorExpandable, EmptyCacheUnmapsWholeFreePages) {
  CachingAllocator a({.expandable_segments = true});
  alloc(a, 1, 30 * MiB);  // maps [0, 40): a = [0, 30), free [30, 40)
  alloc(a, 2, 30 * MiB);  // free 10 MiB + one more page: b = [30, 60), unsplit
  EXPECT_EQ(a.stats().reserved_bytes.current, 60 * MiB);
  release(a, 1);   // free [0, 30)
  a.empty_cache();  // page [0, 20) lies inside it and is unmapped; [20, 30) stays mapped
  EXPECT_EQ(a.check_consistency(), "");
  EXPECT_EQ(a.stats().reserved_bytes.current, 40 * MiB);
  EXPECT_EQ(a.stats().num_device_free, 1);
  release(a, 2);   // merges into free [20, 60)
  a.empty_cache();  // pages [20, 60) unmapped; the segment is one unmapped range: dropped
  EXPECT_EQ(a.check_consistency(), "");
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(a.state().expandable_segments, 0);
}

TEST(CachingAllocatorExpandable, OomWhenNoPageCanBeMapped) {
  CachingAllocator a({.expandable_segments = true, .capacity_bytes = 40.0 * MiB});
  alloc(a, 1, 30 * MiB);  // 2 pages: 40 MiB, the whole capacity
  // 15 MiB: the 10 MiB free tail needs one more page, 60 > 40. Releasing unmaps nothing (no whole
  // page is free), so the retry fails too.
  EXPECT_FALSE(a.malloc(2, 15 * MiB));
  EXPECT_EQ(a.check_consistency(), "");
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().reserved_bytes.current, 40 * MiB);
  alloc(a, 3, 10 * MiB);  // the tail itself still serves a 10 MiB request
  EXPECT_EQ(a.stats().allocated_bytes.current, 40 * MiB);
}

TEST(CachingAllocatorBadUse, RefusedCallsChangeNothing) {
  CachingAllocator a;
  a.free(42);  // unknown id
  EXPECT_EQ(a.stats().invalid_calls, 1);
  EXPECT_FALSE(a.malloc(1, -5));  // negative size
  EXPECT_EQ(a.stats().invalid_calls, 2);
  EXPECT_FALSE(a.malloc(1, int64_t{1} << 60));  // 1 EiB: torch refuses it before allocating
  EXPECT_EQ(a.stats().invalid_calls, 3);
  alloc(a, 1, 5 * MiB);
  EXPECT_FALSE(a.malloc(1, 1 * KiB));  // id 1 is live
  EXPECT_EQ(a.stats().invalid_calls, 4);
  EXPECT_EQ(a.stats().allocated_bytes.current, 5 * MiB);
  EXPECT_EQ(a.stats().reserved_bytes.current, 20 * MiB);
  release(a, 1);
  a.free(1);  // double free
  EXPECT_EQ(a.stats().invalid_calls, 5);
  EXPECT_EQ(a.stats().num_ooms, 0);
  EXPECT_EQ(a.check_consistency(), "");
}

TEST(CachingAllocatorBadUse, ZeroBytesTakeNoMemory) {
  CachingAllocator a;
  alloc(a, 7, 0);  // torch hands out a null pointer: no block, no segment
  EXPECT_EQ(a.stats().reserved_bytes.current, 0);
  EXPECT_EQ(a.stats().allocations.current, 0);
  EXPECT_EQ(a.state().live_ids, 1);
  EXPECT_FALSE(a.malloc(7, 10));  // still live
  release(a, 7);
  EXPECT_EQ(a.stats().invalid_calls, 1);
  EXPECT_EQ(a.state().live_ids, 0);
}

// A reproducible mixed trace: small and large sizes, two streams, frees in another order.
std::vector<Event> mixed_trace(int64_t n, uint64_t seed) {
  std::vector<Event> trace;
  std::vector<int64_t> live;
  uint64_t x = seed;
  auto next = [&x] {  // 64-bit LCG (Knuth's MMIX constants)
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x >> 33;
  };
  for (int64_t id = 0; id < n; ++id) {
    const uint64_t kind = next() % 4;
    const int64_t bytes = kind == 0   ? static_cast<int64_t>(next() % (64 * KiB)) + 1
                          : kind == 1 ? static_cast<int64_t>(next() % (1 * MiB)) + 1
                          : kind == 2 ? static_cast<int64_t>(next() % (12 * MiB)) + 1
                                      : static_cast<int64_t>(next() % (96 * MiB)) + 1;
    trace.push_back({Event::Kind::kAlloc, id, bytes, static_cast<int>(next() % 2)});
    live.push_back(id);
    while (!live.empty() && next() % 2 == 0) {  // one free per malloc on average
      const size_t k = next() % live.size();
      trace.push_back({Event::Kind::kFree, live[k], 0, 0});
      live[k] = live.back();
      live.pop_back();
    }
  }
  for (int64_t id : live) trace.push_back({Event::Kind::kFree, id, 0, 0});
  return trace;
}

void expect_same(const Stats& x, const Stats& y) {
  for (auto s : {&Stats::allocated_bytes, &Stats::requested_bytes, &Stats::reserved_bytes,
                 &Stats::allocations, &Stats::segments, &Stats::inactive_split,
                 &Stats::inactive_split_bytes}) {
    EXPECT_EQ((x.*s).current, (y.*s).current);
    EXPECT_EQ((x.*s).peak, (y.*s).peak);
  }
  EXPECT_EQ(x.num_device_alloc, y.num_device_alloc);
  EXPECT_EQ(x.num_device_free, y.num_device_free);
  EXPECT_EQ(x.num_alloc_retries, y.num_alloc_retries);
  EXPECT_EQ(x.num_ooms, y.num_ooms);
  EXPECT_EQ(x.largest_failed_request, y.largest_failed_request);
  EXPECT_EQ(x.invalid_calls, y.invalid_calls);
}

TEST(CachingAllocatorReplay, DeterministicAndEqualToStepByStepCalls) {
  const auto trace = mixed_trace(3000, 7);
  const Options constrained{.capacity_bytes = 1.5 * 1024 * MiB, .max_split_size = 64 * MiB};
  for (const Options& o : {Options{}, Options{.expandable_segments = true}, constrained}) {
    const Stats first = replay(trace, o);
    expect_same(first, replay(trace, o));
    CachingAllocator a(o);
    for (size_t i = 0; i < trace.size(); ++i) {
      const Event& e = trace[i];
      if (e.kind == Event::Kind::kAlloc) a.malloc(e.id, e.bytes, e.stream);
      else a.free(e.id);
      if (i % 97 == 0) {
        ASSERT_EQ(a.check_consistency(), "") << "after event " << i;
      }
      if (i % 501 == 0) a.empty_cache();  // a different path than replay: compare below only once
    }
    ASSERT_EQ(a.check_consistency(), "");
    EXPECT_EQ(a.stats().allocated_bytes.current, 0);  // every id was freed
    EXPECT_EQ(a.stats().requested_bytes.current, 0);
    EXPECT_EQ(first.allocated_bytes.current, 0);
    EXPECT_EQ(first.invalid_calls, 0);
    EXPECT_GE(first.reserved_bytes.peak, first.allocated_bytes.peak);
    CachingAllocator b(o);
    for (const Event& e : trace) {
      if (e.kind == Event::Kind::kAlloc) b.malloc(e.id, e.bytes, e.stream);
      else b.free(e.id);
    }
    expect_same(first, b.stats());
    b.empty_cache();  // everything is free: every segment (every page) goes back
    EXPECT_EQ(b.check_consistency(), "");
    EXPECT_EQ(b.stats().reserved_bytes.current, 0);
    EXPECT_EQ(b.state().expandable_segments, 0);
  }
}

TEST(CachingAllocatorReplay, CapacityIsNeverExceededAndOomsAreCounted) {
  const auto trace = mixed_trace(3000, 11);
  const Stats free_run = replay(trace);
  for (bool expandable : {false, true}) {
    // Half the unconstrained peak: some mallocs must fail, the rest proceed consistently.
    const double cap = 0.5 * static_cast<double>(free_run.reserved_bytes.peak);
    CachingAllocator a({.expandable_segments = expandable, .capacity_bytes = cap});
    for (const Event& e : trace) {
      if (e.kind == Event::Kind::kAlloc) a.malloc(e.id, e.bytes, e.stream);
      else a.free(e.id);
    }
    EXPECT_EQ(a.check_consistency(), "");
    EXPECT_GT(a.stats().num_ooms, 0);
    EXPECT_GT(a.stats().largest_failed_request, 0);
    EXPECT_LE(static_cast<double>(a.stats().reserved_bytes.peak), cap);
    EXPECT_EQ(a.stats().invalid_calls, 0);  // frees of failed ids are no-ops
    EXPECT_EQ(a.stats().allocated_bytes.current, 0);
  }
}

TEST(CachingAllocatorReplay, HandlesALargeTrace) {
  const auto trace = mixed_trace(200000, 3);  // about 4e5 events
  const Stats s = replay(trace, {});
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_GT(s.reserved_bytes.peak, 0);
  const Stats e = replay(trace, {.expandable_segments = true});
  EXPECT_EQ(e.allocated_bytes.current, 0);
  EXPECT_EQ(e.requested_bytes.peak, s.requested_bytes.peak);
  // Expandable segments split every block down to its rounded request; the classic large pool
  // keeps remainders of at most 1 MiB inside the block, so it allocates at least as much.
  EXPECT_LE(e.allocated_bytes.peak, s.allocated_bytes.peak);
}

}  // namespace
}  // namespace mist::allocator
