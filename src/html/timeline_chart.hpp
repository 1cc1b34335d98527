// The simulated pipeline timeline: one row per stage with its forward and backward blocks per
// micro-batch on the compute stream, and a thinner row under it for its communication and copies.
#pragma once

#include <string>
#include <vector>

namespace mist::html {

enum class BlockKind { kForward, kBackward, kCommunication, kCopy };
const char* block_class(BlockKind k);  // "forward", "backward", "comm", "copy"

struct TimelineBlock {
  int stage = 0;
  BlockKind kind = BlockKind::kForward;
  std::string name;  // "F3", "B3.c1", "send F3", ...: inside the block when it fits, and its tooltip
  double start_s = 0, end_s = 0;
};

struct TimelineChart {
  std::string id = "timeline", title = "Simulated pipeline timeline of one iteration";
  int stages = 0;
  double makespan_s = 0;
  double window_s = 0;  // draws [0, window_s] only, blocks cut at its end (0: the whole makespan)
  std::vector<TimelineBlock> blocks;
  std::string note;  // under the chart: the schedule, micro-batches
};

// Blocks past this many are drawn without a tooltip each (the file stays small).
inline constexpr size_t kMaxTooltips = 4000;

// <svg id=ID>: a <rect class="block forward|backward|comm|copy"> per block, stage labels,
// a time axis in the unit that suits the makespan (µs, ms or s).
std::string timeline_svg(const TimelineChart& c);

}  // namespace mist::html
